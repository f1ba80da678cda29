"""What does driving stacks over SSH cost, and does a fleet of inference hosts scale?

Starts OpenSSH servers on 127.0.0.1 (as the tests do: tests/sshd.py; needs root and
openssh-server) and runs real cycles through the reference stacks:

1. Remote overhead: the same cycle (ms20 -> lite20) with both stacks local, then with ms20
   on one loopback host and lite20 on another, alternating, ``--rounds`` times each. Prints
   the median wall time of each and their ratio (goal <= 1.1), and the p50 latencies each
   side reported, remote / local (goal within +-10%: the timing happens inside the worker,
   so the transport must not leak into it).
2. Fleet scaling: one train stack and 1, 2, 4, 8 infer hosts (one lite20 stack each, each on
   its own sshd), with the parallel limit per host; prints the cycle time per host count and
   its ratio to one host (goal: 8 hosts <= 2.5x one host on a 2-core machine).

usage: .venv/bin/python bench/remote_hosts.py [--quick] [--rounds N] [--fleet 1,2,4,8|none]
--quick: one round, a small probe, fleet 1,2,4.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from auditor.config import parse  # noqa: E402
from auditor.cycle import Cycle  # noqa: E402
from auditor.probe import builtin_probes  # noqa: E402
from tests.conftest import stack_python  # noqa: E402
from tests.sshd import make_sshd, unavailable  # noqa: E402


def _stack(name: str, runtime: str, role: str, host: str = "local") -> dict:
    return {"role": role, "runtime": runtime, "python": str(stack_python(name)), "host": host}


def _config(base: dict, stacks: dict, hosts: dict, pairs: list, probe: str, parallel: int):
    doc = copy.deepcopy(base)
    doc.update(stacks=stacks, hosts=hosts, pairs=pairs)
    doc["rollout"] = {**doc.get("rollout", {}), "enabled": False}
    doc["latency"] = {**doc.get("latency", {}), "batches": []}
    doc.setdefault("worker", {})["parallel"] = parallel
    doc.setdefault("probes", {}).setdefault(probe, {})["variants"] = ["fp32"]
    return parse(doc, "bench")


def _run(config) -> tuple[float, object]:
    started = time.perf_counter()
    result = Cycle(config, builtin_probes()).run()
    bad = [r for r in result.results if r.status == "error"]
    if bad:
        raise SystemExit(f"cycle failed: {bad[0].message}")
    return time.perf_counter() - started, result


def _p50_line(side: str, key: str, lv: float, rv: float, lr: list[float], rr: list[float]) -> str:
    """One p50 figure, remote vs local, with the goal, every round's values and the best
    round's difference: the p50s of a PyNative runtime on a shared 2-core machine move by 2x
    from one cycle to the next with the others' load (load only ever adds time, so the fastest
    round of each side is the least disturbed comparison), and a median of a few rounds
    moves by tens of percent either way. Compared during a cycle, a local and a remote worker
    of a stack run alike: same threads, Cpus_allowed, nice, a session (CPU autogroup) of their
    own; their environments differ only in what ssh sets or drops (LANG, PYTHONUNBUFFERED,
    SSH_*, USER), and ms20's `time` alternated between two live workers, one of each, gave
    remote/local 0.95 over 24 requests."""
    verdict = "ok" if abs(rv / lv - 1) <= 0.10 else "outside"
    return (
        f"   p50 {side:<5} {key:<22} local {lv:9.1f} us   remote {rv:9.1f} us   {rv / lv - 1:+6.1%}"
        f"   best round {min(rr) / min(lr) - 1:+6.1%}   (goal within +-10%: {verdict})\n"
        f"      each round, local: {' '.join(f'{x:.0f}' for x in lr)}"
        f"   remote: {' '.join(f'{x:.0f}' for x in rr)}"
    )


def _p50s(result) -> dict[str, tuple[float, float]]:
    return {
        f"{r.probe}[{r.variant}]": (r.train_latency.p50_us, r.infer_latency.p50_us)
        for r in result.results
        if r.train_latency and r.infer_latency
    }


def overhead(base: dict, servers: list, rounds: int, probe: str) -> None:
    a, b = servers[0], servers[1]
    pair = [{"train": "ms20", "infer": "lite20", "probes": [probe]}]
    local = _config(
        base,
        {"ms20": _stack("ms20", "mindspore", "train"), "lite20": _stack("lite20", "mindspore-lite", "infer")},
        {},
        pair,
        probe,
        2,
    )
    remote = _config(
        base,
        {
            "ms20": _stack("ms20", "mindspore", "train", "hostA"),
            "lite20": _stack("lite20", "mindspore-lite", "infer", "hostB"),
        },
        {"hostA": a.host_table(), "hostB": b.host_table()},
        pair,
        probe,
        2,
    )
    times: dict[str, list[float]] = {"local": [], "remote": []}
    p50: dict[str, list[dict]] = {"local": [], "remote": []}
    for i in range(rounds):
        for name, config in (
            (("local", local), ("remote", remote))
            if i % 2 == 0
            else (
                ("remote", remote),
                ("local", local),
            )
        ):
            seconds, result = _run(config)
            times[name].append(seconds)
            p50[name].append(_p50s(result))
    lt, rt = statistics.median(times["local"]), statistics.median(times["remote"])
    print("1. Remote overhead: ms20 -> lite20, probe", probe, f"({rounds} round(s) each, alternating)")
    print(f"   cycle wall time   local {lt:7.2f} s   over loopback ssh {rt:7.2f} s   ratio {rt / lt:5.2f}x")
    for key in p50["local"][0]:
        for side, idx in (("train", 0), ("infer", 1)):
            lv = statistics.median(d[key][idx] for d in p50["local"])
            rv = statistics.median(d[key][idx] for d in p50["remote"])
            print(
                _p50_line(
                    side,
                    key,
                    lv,
                    rv,
                    [d[key][idx] for d in p50["local"]],
                    [d[key][idx] for d in p50["remote"]],
                )
            )


def fleet(base: dict, tmp: Path, counts: list[int], probe: str) -> None:
    servers = [make_sshd(tmp, f"infer{i}") for i in range(max(counts))]
    try:
        print(f"2. Fleet scaling: ms20 (local) -> lite20 on N loopback hosts, probe {probe}, 2 per host")
        first = None
        for n in counts:
            stacks = {"ms20": _stack("ms20", "mindspore", "train")}
            hosts = {}
            for i in range(n):
                stacks[f"lite20-{i}"] = _stack("lite20", "mindspore-lite", "infer", f"infer{i}")
                hosts[f"infer{i}"] = servers[i].host_table()
            pairs = [{"train": "ms20", "infer": f"lite20-{i}", "probes": [probe]} for i in range(n)]
            seconds, _ = _run(_config(base, stacks, hosts, pairs, probe, 2))
            first = first or seconds
            print(f"   {n} host(s)  cycle {seconds:7.2f} s   {seconds / first:5.2f}x one host")
    finally:
        for s in servers:
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round, a small probe, fleet 1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fleet", default="1,2,4,8")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # figures as they come, also into a file
    reason = unavailable()
    if reason:
        raise SystemExit(f"bench/remote_hosts.py: {reason}")
    rounds = 1 if args.quick else args.rounds
    counts = [1, 2, 4] if args.quick else [int(x) for x in args.fleet.split(",") if x.strip().isdigit()]
    probe = "obs_normalizer" if args.quick else "ppo_policy"
    base = tomllib.loads((REPO / "auditor.toml").read_text())
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp:
        servers = [make_sshd(Path(tmp), "hostA"), make_sshd(Path(tmp), "hostB")]
        try:
            overhead(base, servers, rounds, probe)
        finally:
            for s in servers:
                s.stop()
        if counts:
            fleet(base, Path(tmp), counts, probe)


if __name__ == "__main__":
    main()
