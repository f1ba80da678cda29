"""Fake ``npu-smi`` programs that answer the telemetry views with published outputs
(tests/ascend_fixtures/telemetry/, sources in its SOURCES.md), for hosts of several cards.

A host is a mapping NPU id -> ``Card``: the text each ``-t`` view prints, or how the card
fails (npu-smi's own message on stdout and its exit status, DCMI code & 0xFF). A busy or
failing card that no published output shows is ``derive()``d from a verbatim one: only the
named keys' values change, the layout stays the published one.

    path = write_npu_smi(tmp / "npu-smi", HOSTS["910b-8"]())   # an executable shell script
"""

from __future__ import annotations

import re
import shlex
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "ascend_fixtures" / "telemetry"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def derive(text: str, changes: Mapping[str, str]) -> str:
    """``text`` with the value of each key in ``changes`` replaced, padding and indentation
    kept (the first line with that key; KeyError when a key is not in the text)."""
    out = text
    for key, value in changes.items():
        pattern = re.compile(r"^(\s*" + re.escape(key) + r"\s*:\s?)(.*?)$", re.M)
        if not pattern.search(out):
            raise KeyError(f"{key!r} is not in the output")
        out = pattern.sub(lambda m, v=value: m.group(1) + v, out, count=1)
    return out


@dataclass
class Card:
    """What npu-smi prints for one NPU: ``views`` maps a ``-t`` view to its text; a view not in
    it prints npu-smi's "not supported" line. ``fails`` (stdout, exit status): every view of
    this card fails so."""

    views: dict[str, str] = field(default_factory=dict)
    fails: tuple[str, int] | None = None


@dataclass
class Host:
    listing: str
    """``npu-smi info -l``."""
    cards: dict[int, Card]
    listing_status: int = 0


DCMI_8005 = (fixture("errors/dcmi_init_failed_-8005.stdout"), 187)


def idle_910b() -> Card:
    """An Atlas A2 card as published (npu-smi 25.5.1: AI Core 0 %, HBM 5 %, 103.5 W, 39 °C),
    with the 910's ECC view and the 950's one-block health view (no 910B output of those two
    is published)."""
    return Card(
        {
            "power": fixture("910B/info_t_power_25.5.1_IT21HMDC.txt"),
            "temp": fixture("910B/info_t_temp_25.5.1_IT21HMDC.txt"),
            "usages": fixture("910B/info_t_usages_25.5.1_IT21HMDC.txt"),
            "ecc": fixture("910A/info_t_ecc_doc.txt"),
            "health": fixture("950/info_t_health.txt"),
        }
    )


def busy_910b() -> Card:
    """Derived from ``idle_910b``: serving hard and running hot, two uncorrectable HBM errors
    and a Warning (values changed: power, temperature, HBM and AI Core/CPU use, HBM double-bit
    count, health with an error code)."""
    card = idle_910b()
    card.views["power"] = derive(card.views["power"], {"NPU Real-time Power(W)": "312.4"})
    card.views["temp"] = derive(card.views["temp"], {"NPU Temperature (C)": "91"})
    card.views["usages"] = derive(
        card.views["usages"],
        {"HBM Usage Rate(%)": "93", "Aicore Usage Rate(%)": "87", "Aicpu Usage Rate(%)": "12"},
    )
    card.views["ecc"] = derive(card.views["ecc"], {"HBM Double Bit Error Count": "2"})
    card.views["health"] = derive(
        card.views["health"],
        {"Health": "Warning", "Error Code": "80E18005", "Error Information": "HBM multi-bit ECC error"},
    )
    return card


def host_910b_8(busy: tuple[int, ...] = (6,), failing: tuple[int, ...] = (7,)) -> Host:
    """Eight Atlas A2 cards (the published 8-card ``-l``): idle ones as published, ``busy``
    ones hot and erring, ``failing`` ones answering every view with ``dcmi module initialize
    failed. ret is -8005`` (exit status 187)."""
    cards = {}
    for npu in range(8):
        if npu in failing:
            cards[npu] = Card(fails=DCMI_8005)
        else:
            cards[npu] = busy_910b() if npu in busy else idle_910b()
    return Host(fixture("910B/info_l_25.5.1_8cards.txt"), cards)


def host_310b() -> Host:
    """An Atlas 200I A2 (310B SoC): every view as published, MCU blocks included."""
    views = ("power", "temp", "usages", "health")
    return Host(fixture("310B/info_l.txt"), {0: Card({v: fixture(f"310B/info_t_{v}.txt") for v in views})})


def host_950() -> Host:
    """An Atlas 350 (950) card as documented: one block per view, no ``Chip ID``."""
    views = ("power", "temp", "usages", "ecc", "health", "memory")
    return Host(fixture("950/info_l.txt"), {0: Card({v: fixture(f"950/info_t_{v}.txt") for v in views})})


def host_310p_duo() -> Host:
    """One Atlas 300I Duo (two chips, ``Chip ID`` after each block), usages only."""
    listing = "".join(
        f"\t{k:<30} : {v}\n" for k, v in (("Total Count", 1), ("", ""), ("NPU ID", 1), ("Chip Count", 2))
    )
    listing = listing.replace("\t                               : \n", "\n")  # the blank line after the count
    return Host(listing, {1: Card({"usages": fixture("310P3_duo/info_t_usages_gpustack_dedented.txt")})})


def host_without_cards() -> Host:
    return Host(fixture("errors/no_card.stdout_fromsource"), {})


HOSTS: dict[str, Callable[[], Host]] = {
    "910b-8": host_910b_8,
    "310b": host_310b,
    "950": host_950,
    "310p-duo": host_310p_duo,
    "no-card": host_without_cards,
}


def write_npu_smi(path: Path, host: Host) -> Path:
    """An executable shell script that answers ``info -l`` and ``info -t VIEW -i N`` as ``host``."""
    q = shlex.quote
    cases = [f'  "info -l") printf %s {q(host.listing)}; exit {host.listing_status} ;;\n']
    for npu, card in sorted(host.cards.items()):
        if card.fails is not None:
            text, status = card.fails
            cases.append(f'  "info -t "*" -i {npu}") printf %s {q(text)}; exit {status} ;;\n')
            continue
        for view, text in card.views.items():
            cases.append(f'  "info -t {view} -i {npu}") printf %s {q(text)} ;;\n')
        cases.append(
            f'  "info -t "*" -i {npu}") echo "This device does not support querying ${{3}}."; exit 0 ;;\n'
        )
    cases.append('  *) echo "Command or option is not found."; exit 2 ;;\n')
    script = '#!/bin/sh\n# fake npu-smi (tests/npu_fakes.py)\ncase "$*" in\n' + "".join(cases) + "esac\n"
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
