"""What the deployment gate says next to what the runtimes do, on a spread of user-style policies.

Exports mypolicy's seven policies (tests/model_fixtures/mypolicy: ELU/SiLU/ReLU/GeLU/LeakyReLU
trunks; Gaussian, value, greedy argmax, softmax with a folded normalizer, softplus and entropy
heads; one computing in fp16) with ms20 and ms210, then for each file and serving stack
(lite20, ms210-graph, ms20-graph) prints:

- what the runtime really did, outside the auditor (tests/model_fixtures/run_mindir.py loads and
  runs the file the way a serving system does): ``ok``, ``load-fails``, ``run-fails``;
- `auditor check` (the default: a load and one seeded run) and `auditor check --no-load`;
- the status of a full audit cycle's model probe, the training network (PyNative on the
  exporting stack) as the reference;

and counts the verdicts that would let a file through that the runtime cannot run (must be 0).

usage: .venv/bin/python bench/gate_matrix.py [--no-cycle] [--quick]   (--quick: two policies,
elu_gauss and fp16_mlp, from each exporter)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.user_models import SERVERS, export_policies, policies_config, served_truth  # noqa: E402

AUDITOR = str(Path(sys.executable).with_name("auditor"))
EXPORTERS = ("ms20", "ms210")
QUICK = ("elu_gauss", "fp16_mlp")
"""--quick: a policy every runtime of its release runs, and one computing in fp16 inside."""


def check(config: Path, files: list[Path], *extra: str) -> dict[str, dict[str, dict]]:
    argv = [AUDITOR, "--config", str(config), "--db", str(config.parent / "none.db"), "check", "--json"]
    for f in files:
        argv += ["--model", str(f)]
    proc = subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=3600)
    if proc.returncode not in (0, 1):
        sys.exit(f"check {' '.join(extra)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    docs = json.loads(proc.stdout)
    return {d["file"]: {v["stack"]: v for v in d["verdicts"]} for d in docs}


def cycle(config: Path) -> dict[tuple[str, str], dict]:
    argv = [AUDITOR, "--config", str(config), "--db", str(config.parent / "h.db"), "audit", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if proc.returncode not in (0, 1):
        sys.exit(f"audit failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {(r["probe"], r["infer"]): r for r in json.loads(proc.stdout)["results"]}


def runtime_did(t: dict) -> str:
    if t["works"]:
        return "ok"
    return {"load": "load-fails", "run": "run-fails"}.get(t["phase"], t["phase"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-cycle", action="store_true", help="check only, no audit cycle")
    parser.add_argument("--quick", action="store_true", help="two policies per exporter")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        folder = Path(tmp)
        for exporter in EXPORTERS:
            export_policies(exporter, folder / exporter, QUICK if args.quick else ())
        kinds = sorted(p.stem for p in (folder / EXPORTERS[0]).glob("*.mindir"))
        policies = {(e, k): folder / e / f"{k}.mindir" for e in EXPORTERS for k in kinds}
        truth = served_truth(policies)
        config = policies_config(policies, folder / "auditor.toml")
        files = list(policies.values())
        timings = {}
        started = time.perf_counter()
        loaded = check(config, files)
        timings["check"] = time.perf_counter() - started
        started = time.perf_counter()
        rules = check(config, files, "--no-load")
        timings["check --no-load"] = time.perf_counter() - started
        cycled: dict[tuple[str, str], dict] = {}
        if not args.no_cycle:
            started = time.perf_counter()
            cycled = cycle(config)
            timings["audit"] = time.perf_counter() - started
    head = f"{'file':<26} {'stack':<12} {'runtime did':<11} {'check':<13} {'--no-load':<13} {'cycle':<13}"
    print(head)
    print("-" * len(head))
    let_through = {"check": 0, "--no-load": 0}
    for (exporter, kind), path in policies.items():
        for server in SERVERS:
            t = truth[(exporter, kind, server)]
            a, b = loaded[str(path)][server]["status"], rules[str(path)][server]["status"]
            c = cycled.get((f"{exporter}_{kind}", server), {}).get("status", "-")
            did = runtime_did(t)
            if did != "ok":
                let_through["check"] += a == "ok"
                let_through["--no-load"] += b == "ok"
            print(f"{exporter + '/' + kind:<26} {server:<12} {did:<11} {a:<13} {b:<13} {c:<13}")
    cells = len(policies) * len(SERVERS)
    failing = sum(1 for t in truth.values() if not t["works"])
    print(f"\n{cells} file/stack cells, {failing} the runtime cannot run")
    for mode, n in let_through.items():
        print(f"OK given by `{mode}` to a file the runtime cannot run: {n}")
    oks = sum(1 for d in rules.values() for v in d.values() if v["status"] == "ok")
    print(f"OK given by --no-load at all: {oks}")
    for label, seconds in timings.items():
        print(f"{label}: {seconds:.1f} s wall for {len(files)} files")


if __name__ == "__main__":
    main()
