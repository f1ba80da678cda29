"""A group of 12 hosts on the real stacks, some of them down: the report stays one screen (a
cause adds one line however many members it hits) and says each cause once, with ``{host}``
and the hosts as ranges; ``fingerprint --group`` says the members alike once.

The hosts are the ``command`` transport behind a wrapper that fails, as ssh does for a host
that refuses connections, for the hosts named in ``$DOWN``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fault_kit import auditor, private_tmp, small_config

pytestmark = pytest.mark.stacks

HOSTS = [f"infer-{i:02d}" for i in range(1, 13)]
WRAPPER = (
    'case " $DOWN " in *" $INFER_HOST "*) echo "ssh: connect to host $INFER_HOST port 22: '
    'Connection refused" >&2; exit 255;; esac; exec "$@"'
)


@pytest.fixture(scope="module")
def fleet(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("failing")
    base = small_config(tmp, request_timeout=30, start_timeout=60).read_text()
    group = (
        '[groups.infer]\nhosts = ["infer-[01:12]"]\n'
        f"command = {json.dumps(['env', 'INFER_HOST={host}', 'sh', '-c', WRAPPER, 'sh'])}\n"
    )
    base = base.replace("[stacks.lite20]\n", '[stacks.lite20]\ngroup = "infer"\n')
    cfg = tmp / "fleet.toml"
    cfg.write_text(group + base + "[telemetry]\nenabled = true\n")
    return {"tmp": tmp, "cfg": cfg}


def run(fleet: dict, down: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    tmp, cfg = fleet["tmp"], fleet["cfg"]
    env = {**private_tmp(tmp), "DOWN": " ".join(down)}
    return subprocess.run(
        auditor(cfg, tmp / "history.db", *args), env=env, capture_output=True, text=True, timeout=600
    )


def audit(fleet: dict, down: list[str], name: str) -> tuple[list[str], dict]:
    report = fleet["tmp"] / f"{name}.json"
    done = run(fleet, down, "audit", "--json-file", str(report))
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.stdout.splitlines(), json.loads(report.read_text())


def test_a_cause_adds_a_line_however_many_members_it_hits(fleet: dict) -> None:
    up, _ = audit(fleet, [], "up")
    two, two_doc = audit(fleet, ["infer-04", "infer-09"], "two")
    every, every_doc = audit(fleet, HOSTS, "every")
    assert len(two) <= len(up) + 6, "\n".join(two)
    assert len(every) <= max(15, len(up) + 1), "\n".join(every)
    # one finding for the cause, with {host}, where it holds first, the hosts as ranges
    for doc, where in ((two_doc, "lite20 on infer-[04,09]: "), (every_doc, "lite20 on infer-[01:12]: ")):
        (down,) = [f for f in doc["findings"] if f["kind"] == "stack-unavailable"]
        assert down["message"].startswith(where) and "{host}" in down["message"], down["message"]
        assert "Connection refused" in down["message"]  # what the host's ssh said, on the first line
    (down,) = [f for f in every_doc["findings"] if f["kind"] == "stack-unavailable"]
    assert sorted(w["subject"] for w in down["details"]["where"]) == [f"lite20@{h}" for h in HOSTS]
    text = "\n".join(two)
    assert "lite20 on infer-[04,09] (mindspore-lite)  UNAVAILABLE [" in text  # the stack line points at it
    assert "ms20 → lite20 on infer-[04,09]  ERROR" in text and "lite20@infer-09" not in text
    # the outcome counts each stack and result once, not the merged finding again
    assert "2 error" not in text.splitlines()[-1] and "4 error" in text.splitlines()[-1]


def test_fingerprint_of_a_group_says_members_alike_once(fleet: dict) -> None:
    folded = run(fleet, ["infer-04"], "fingerprint", "--group", "infer")
    every = run(fleet, ["infer-04"], "fingerprint", "--group", "infer", "--members")
    assert folded.returncode == every.returncode == 1  # a member not collected
    assert "lite20 on infer-[01:03,05:12]" in folded.stdout and "[11 members alike" in folded.stdout
    assert "lite20@infer-04" in folded.stdout and "NOT COLLECTED" in folded.stdout
    assert len(folded.stdout.splitlines()) * 4 < len(every.stdout.splitlines())
    assert all(f"lite20@{h}  (infer" in every.stdout for h in HOSTS)
