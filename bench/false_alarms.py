"""False alarms of the default config over many clean cycles (#51): the shipped auditor.toml
audited again and again on the reference stacks with nothing changed between cycles, its
history kept, its alerts evaluated after each cycle as `auditor audit` does.

A clean config's known state (the demo's incompatible pair, its float16 drift, ...) opens its
alerts within the first ``[alerts] open_after`` runs and then holds still. What counts as a
false alarm, and must stay 0:

- an alert opened after the first cycles that settled the known state (``--settle``, default 3);
- an alert resolved (a cause that comes and goes on noise);
- a cycle whose statuses (each pair, probe or model, variant: its status) differ from the
  first cycle's.

Resumable: ``--db PATH`` keeps the history, and a later run continues it and counts over every
cycle stored there, so 1,000 cycles (about 19 h here at 68 s a cycle) can be run in parts.

    .venv/bin/python bench/false_alarms.py --db soak.db --cycles 1000
    .venv/bin/python bench/false_alarms.py --quick        # 2 cycles (the CI smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AUDIT = ("audit", "--alerts", "--json")


def audit(config: Path, db: Path) -> tuple[float, dict]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "auditor", "--config", str(config), "--db", str(db), *AUDIT],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=3600,
    )
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        sys.exit(f"auditor audit failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout)


def statuses(doc: dict) -> dict[str, str]:
    out = {f"{r['pair']} {r['probe']} [{r['variant']}]": r["status"] for r in doc["results"]}
    out.update(
        {f"{r['pair']} rollout {r['probe']} [{r['variant']}]": r["status"] for r in doc.get("rollouts", [])}
    )
    return out


def alarms(db: Path, settle: int) -> tuple[int, int, int, int, int, list[str]]:
    """(runs, alerts opened while settling, opened after, resolved, pending that never opened
    (a finding seen once, not paged: near misses), what the false and near ones say)."""
    with sqlite3.connect(db) as conn:
        runs = [r[0] for r in conn.execute("select id from runs where status = 'complete' order by id")]
        rows = conn.execute(
            "select opened_run_id, resolved_run_id, kind, subject, message, notifications, state "
            "from alerts order by id"
        ).fetchall()
    settled = set(runs[:settle])
    paged = [r for r in rows if r[6] != "pending" or r[5]]  # an alert that opened (was sent)
    near = [r for r in rows if r not in paged]
    early = [r for r in paged if r[0] in settled or r[0] is None]
    late = [r for r in paged if r[0] is not None and r[0] not in settled]
    resolved = [r for r in paged if r[1] is not None]
    said = [f"opened in run {r[0]}: {r[2]} {r[3]}: {r[4][:100]}" for r in late]
    said += [f"resolved in run {r[1]}: {r[2]} {r[3]}: {r[4][:100]}" for r in resolved]
    said += [f"pending from run {r[0]}, never opened: {r[2]} {r[3]}: {r[4][:100]}" for r in near]
    return len(runs), len(early), len(late), len(resolved), len(near), said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20, help="cycles to run now (default 20)")
    parser.add_argument("--db", type=Path, help="the history to keep and continue (default: a temporary one)")
    parser.add_argument(
        "--settle", type=int, default=3, help="cycles the known state may take to open its alerts"
    )
    parser.add_argument("--config", type=Path, default=REPO / "auditor.toml")
    parser.add_argument("--quick", action="store_true", help="2 cycles (the CI smoke test)")
    args = parser.parse_args()
    cycles = 2 if args.quick else args.cycles
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "soak.db"
        state = db.with_suffix(".statuses.json")
        first = json.loads(state.read_text()) if state.is_file() else None
        changed = 0
        walls = []
        for i in range(cycles):
            wall, doc = audit(args.config, db)
            walls.append(wall)
            now = statuses(doc)
            if first is None:
                first = now
                state.write_text(json.dumps(first))
            moved = sorted(k for k in set(first) | set(now) if first.get(k) != now.get(k))
            changed += bool(moved)
            print(
                f"cycle {i + 1}/{cycles}: {wall:5.1f} s, run {doc.get('run_id')}, "
                f"{sum(v == 'consistent' for v in now.values())} consistent of {len(now)}"
                + (f"; statuses moved: {', '.join(moved[:4])}" if moved else ""),
                flush=True,
            )
        runs, early, late, resolved, near, said = alarms(db, args.settle)
    load = os.getloadavg()[0]
    print()
    print(f"the default config, {runs} clean cycles in the history (load average {load:.1f})")
    if walls:
        print(f"  cycle wall time        median {sorted(walls)[len(walls) // 2]:.1f} s")
    print(f"  alerts opened settling {early} (the known state, within the first {args.settle} cycles)")
    print(f"  false alarms           {late + resolved} (opened later: {late}, resolved: {resolved})")
    print(f"  near misses            {near} (a finding seen in one run, pending, never opened)")
    print(f"  cycles with statuses other than the first's: {changed} of {cycles} run now")
    for line in said[:20]:
        print(f"    {line}")
    goal = runs >= 1000 and late + resolved == 0 and changed == 0
    print(
        f"goal (>= 1000 clean cycles, 0 false alarms): {'met' if goal else 'not met'} ({runs} cycles so far)"
    )
    sys.exit(1 if late + resolved or changed else 0)


if __name__ == "__main__":
    main()
