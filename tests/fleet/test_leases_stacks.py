"""Two auditor processes on the real stacks and the test PostgreSQL server sharing six serving
hosts ([leases]): they split the hosts, each host audited once; an auditor killed while it
works on a host loses that host to the other by expiry, and the other audits it within the
same slot. The hosts are the ``command`` transport behind a wrapper that stalls the worker
start of the auditor whose environment says ``STALL=1``, so the kill lands mid-host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.fault_kit import auditor, private_tmp, small_config

pytestmark = pytest.mark.stacks

HOSTS = [f"infer-{i}" for i in range(1, 7)]
WRAPPER = 'if [ -n "$STALL" ]; then sleep 60; fi; exec "$@"'


def configs(tmp: Path) -> dict[str, Path]:
    """One config per auditor (they differ in their auditor_id only)."""
    base = small_config(tmp, request_timeout=60, start_timeout=90).read_text()
    group = (
        '[groups.infer]\nhosts = ["infer-[1:6]"]\n'
        f"command = {json.dumps(['env', 'INFER_HOST={host}', 'sh', '-c', WRAPPER, 'sh'])}\n"
    )
    base = base.replace("[stacks.lite20]\n", '[stacks.lite20]\ngroup = "infer"\n')
    base += "[telemetry]\nenabled = false\n[leases]\nenabled = true\nclaim = 2\nexpire = 10\n"
    out = {}
    for who in ("a", "b"):
        path = tmp / f"{who}.toml"
        path.write_text(group + base.replace("[storage]\n", f'[storage]\nauditor_id = "{who}"\n'))
        out[who] = path
    return out


def start(cfg: Path, url: str, slot: str, tmp: Path, **env: str) -> subprocess.Popen:
    report = tmp / f"{cfg.stem}-{slot}.json"
    argv = auditor(cfg, url, "audit", "--slot", slot, "--json-file", str(report))  # type: ignore[arg-type]
    return subprocess.Popen(
        argv,
        env={**private_tmp(tmp), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its workers in its group: killed with it, as a dead machine's
    )


def leases(url: str, slot: str) -> dict[str, tuple]:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT host, auditor_id, served_at, done_at, run_id FROM host_leases WHERE slot = :s"),
                {"s": f"fleet:{slot}"},
            ).all()
    finally:
        engine.dispose()
    return {r[0]: tuple(r[1:]) for r in rows}


def stored_selection(url: str, run_id: int) -> dict:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            found = conn.execute(text("SELECT selection FROM runs WHERE id = :i"), {"i": run_id}).scalar_one()
    finally:
        engine.dispose()
    return found if isinstance(found, dict) else json.loads(found)


def holding(url: str, slot: str, who: str, process: subprocess.Popen, polls: int = 600) -> bool:
    """Whether ``who`` comes to hold a lease of the slot while its process lives (polled)."""
    for _ in range(polls):
        if any(r[0] == who for r in leases(url, slot).values()):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.2)
    return False


def audited(doc: dict) -> list[str]:
    """The serving hosts a run's results are about."""
    return sorted(r["infer"].split("@")[1] for r in doc["results"] if "@" in r["infer"])


@pytest.fixture(scope="module")
def setup(stacks: Path, tmp_path_factory: pytest.TempPathFactory, postgres) -> dict:
    tmp = tmp_path_factory.mktemp("leases")
    url = postgres.create_database(f"leases_{os.getpid()}")
    return {"tmp": tmp, "url": url, "cfg": configs(tmp)}


def test_two_auditors_split_the_hosts_each_audited_once(setup: dict) -> None:
    tmp, url, cfg = setup["tmp"], setup["url"], setup["cfg"]
    runs = {who: start(cfg[who], url, "split", tmp) for who in ("a", "b")}
    said = {who: p.communicate(timeout=600) for who, p in runs.items()}
    for who, p in runs.items():
        assert p.returncode in (0, 1), said[who][1][-3000:]
        assert "Traceback" not in said[who][1], said[who][1]
    docs = {who: json.loads((tmp / f"{who}-split.json").read_text()) for who in runs}
    mine = {who: docs[who]["leases"]["mine"] for who in docs}
    # no host twice, none left out; both took part
    assert sorted(mine["a"] + mine["b"]) == HOSTS and mine["a"] and mine["b"], mine
    for who, other in (("a", "b"), ("b", "a")):
        assert audited(docs[who]) == sorted(mine[who])  # results for its own hosts only
        assert docs[who]["leases"]["others"] == {other: mine[other]}
        assert all(r["status"] == "consistent" for r in docs[who]["results"]), docs[who]["results"]
    # each run is stored as narrowed to its own hosts: it resolves no alert about the others'
    for who, doc in docs.items():
        scope = stored_selection(url, doc["run_id"])
        assert sorted(scope["stacks"]) == sorted(["ms20"] + [f"lite20@{h}" for h in mine[who]]), scope
        assert scope["selectors"] == {"slot": ["fleet:split"]}
    rows = leases(url, "split")
    assert set(rows) == set(HOSTS)
    assert all(r[2] is not None and r[3] == docs[r[0]]["run_id"] for r in rows.values()), rows


def test_an_auditor_killed_mid_host_loses_its_hosts_to_the_other_by_expiry(setup: dict) -> None:
    tmp, url, cfg = setup["tmp"], setup["url"], setup["cfg"]
    doomed = start(cfg["b"], url, "kill", tmp, STALL="1")  # its workers never start
    assert holding(url, "kill", "b", doomed), doomed.communicate()
    held = sorted(h for h, r in leases(url, "kill").items() if r[0] == "b")
    survivor = start(cfg["a"], url, "kill", tmp)
    assert holding(url, "kill", "a", survivor), survivor.communicate()
    os.killpg(doomed.pid, signal.SIGKILL)  # b dies with its leases held, nothing handed back
    doomed.communicate()
    out, err = survivor.communicate(timeout=600)
    assert survivor.returncode in (0, 1), err[-3000:]
    doc = json.loads((tmp / "a-kill.json").read_text())
    # a waited for b's hosts, took them over once their leases expired, and audited them
    assert sorted(doc["leases"]["mine"]) == HOSTS and set(held) <= set(doc["leases"]["mine"]), doc["leases"]
    assert doc["leases"]["unaudited"] == {} and audited(doc) == HOSTS
    assert all(r["status"] == "consistent" for r in doc["results"]), doc["results"]
    rows = leases(url, "kill")
    assert {r[0] for r in rows.values()} == {"a"} and {r[3] for r in rows.values()} == {doc["run_id"]}
    assert "ms20 → lite20 on 6 hosts" in out, out
