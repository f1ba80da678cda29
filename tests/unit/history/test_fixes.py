"""What `auditor fix` keeps in the history and who reads it: `history --fixes`, the cycle's
"fixed export" line (auditor.cycle.fix_hints) and the gate's earlier audit of the very file
(no stack runs here)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import text

from auditor.cli.main import cli
from auditor.config.load import parse
from auditor.cycle import fix_hints
from auditor.extend.manager import Plugins
from auditor.gate.preflight import _read_history
from auditor.history import fixes
from auditor.history.store import Store
from auditor.results import Artifact, ProbeResult

CONFIG = {
    "stacks": {
        "ms20": {"role": "train", "runtime": "mindspore", "python": "/s/ms20/bin/python"},
        "lite20": {"role": "infer", "runtime": "mindspore-lite", "python": "/s/lite/bin/python"},
    },
    "pairs": [{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
}
PROBES = Plugins(entry_points=False).probes()


def stored(
    name: str = "ppo_policy", variant: str = "fp16", found: bool = True, sha: str = "ab" * 32
) -> fixes.StoredFix:
    summary = {
        "cells": ["head", ""] if found else None,
        "change": ["from mindspore import dtype as mstype", "net.to_float(mstype.float32)"],
        "served": {"host": "local", "device": "cpu", "runtime": "mindspore-lite", "converted": False},
    }
    return fixes.StoredFix(
        0, None, "probe", name, variant, "ms20", "lite20", "mindspore-lite", "2.0.0", found,
        sha if found else None, "consistent" if found else None, 6, summary,
    )  # fmt: skip


def result(variant: str, status: str = "drift", probe: str = "ppo_policy") -> ProbeResult:
    return ProbeResult("ms20->lite20", "ms20", "lite20", probe, "2", variant, status, "",
                       artifact=Artifact("cd" * 32, "mindir", 10, {}))  # fmt: skip


def test_a_stored_fix_is_read_by_file_by_policy_and_listed(history_db: Path) -> None:
    store = Store.open(f"sqlite:///{history_db}")
    try:
        first = fixes.record(store.engine, stored())
        nothing = fixes.record(store.engine, stored(variant="tanh-fp16", found=False))
        with store.engine.connect() as conn:
            (by_file,) = fixes.for_file(conn, "ab" * 32)
            latest = fixes.latest_found(
                conn,
                [("ppo_policy", "fp16", "ms20", "lite20"), ("ppo_policy", "tanh-fp16", "ms20", "lite20")],
            )
            listed = fixes.listing(conn)
        assert by_file.id == first and by_file.cells == ["head", ""] and by_file.found
        assert list(latest) == [
            ("ppo_policy", "fp16", "ms20", "lite20")
        ]  # a fix that found nothing is no fix
        assert [x.id for x in listed] == [nothing, first]
        served = fixes.as_served(by_file)
        assert served is not None and served.fix == first and served.status == "consistent"
        assert (served.runtime_package, served.runtime_version, served.host) == (
            "mindspore-lite",
            "2.0.0",
            "local",
        )
        assert fixes.as_served(listed[0]) is None
    finally:
        store.close()


def test_the_cycle_names_the_command_or_the_fix_found(history_db: Path) -> None:
    config = parse(json.loads(json.dumps(CONFIG)), "/etc/auditor/auditor.toml")
    store = Store.open(f"sqlite:///{history_db}")
    try:
        fixes.record(store.engine, stored())
        got = fix_hints.hint(
            [result("fp16"), result("tanh-fp16"), result("fp32"), result("fp16", "consistent")],
            config,
            PROBES,
            store,
        )
    finally:
        store.close()
    assert got[0].fix is not None and got[0].fix["available"]["cells"] == ["head", ""]
    assert got[1].fix == {
        "command": "auditor fix ppo_policy --stack lite20 --train ms20 --variant tanh-fp16",
        "available": None,
    }
    assert got[2].fix is None  # a float32 variant's drift is not float16 rounding
    assert got[3].fix is None  # nothing to fix
    # the drift finding's what-to-do says it too
    assert fix_hints.action(got[0]) == {
        "action": "serve the fixed export of auditor fix 1 (auditor history --fixes)"
    }
    assert (
        fix_hints.action(got[1])["action"].endswith("--variant tanh-fp16") and fix_hints.action(got[2]) == {}
    )


def test_history_lists_the_fixes(history_db: Path) -> None:
    store = Store.open(f"sqlite:///{history_db}")
    fixes.record(store.engine, stored())
    store.close()
    runner = CliRunner()
    table = runner.invoke(cli, ["--db", str(history_db), "history", "--fixes"])
    assert table.exit_code == 0, table.output
    (row,) = table.output.splitlines()[1:]
    assert (
        "ppo_policy [fp16]" in row and "ms20->lite20" in row and "head, (own ops)" in row and " yes " in row
    )
    doc = json.loads(runner.invoke(cli, ["--db", str(history_db), "history", "--fixes", "--json"]).output)
    assert doc[0]["sha256"] == "ab" * 32 and doc[0]["cells"] == ["head", ""]
    empty = runner.invoke(cli, ["--db", str(history_db), "history", "--fixes", "--probe", "obs_normalizer"])
    assert empty.exit_code == 0 and "no fixes stored" in empty.output


def test_the_gate_reads_the_rest_of_a_history_without_the_fixes_table(history_db: Path) -> None:
    """A database the check cannot migrate (read-only, from before fixes were kept): earlier
    results and learned limits still count, and the note says what was not read."""
    store = Store.open(f"sqlite:///{history_db}")
    try:
        with store.engine.begin() as conn:
            conn.execute(text("DROP TABLE fixes"))
        got = _read_history(store, "ab" * 32)
    finally:
        store.close()
    assert (
        got.note.startswith("fixes not read (")
        and "earlier audits of the file by auditor fix unused" in got.note
    )
    assert got.served == [] and isinstance(got.maxima, dict)
