"""What does driving stacks over SSH cost, and does a fleet of inference hosts scale?

Starts OpenSSH servers on 127.0.0.1 (as the tests do: tests/sshd.py; needs root and
openssh-server) and runs real cycles through the reference stacks:

1. Remote overhead: the same cycle (ms20 -> lite20) with both stacks local, then with ms20
   on one loopback host and lite20 on another, alternating, ``--rounds`` times each, for two
   cycles: (1a) the pair as the shipped auditor.toml runs it (its three probes, every variant,
   the extra batch sizes, the rollout), the cycle a deployment runs and the one the goal is
   judged on; (1b) a small cycle of one probe's fp32 variant, where the fixed cost of reaching
   two hosts (below) weighs most, shown so that the fixed cost stays visible. Prints
   the median wall time of each and their ratio (goal <= 1.1), and the p50 latencies each
   side reported, remote / local (goal within +-10%: the timing happens inside the worker,
   so the transport must not leak into it; every p50 moves by tens of percent either way with the
   load of a shared machine, so each side's figures are also pooled, round by round, into one
   geometric mean with its 95% interval: a leak would move them all one way). Also the
   median of the rounds' own ratios (less sensitive to a load that changes during the run),
   and the fixed cost of reaching a host measured apart: the ssh master, then one session
   (sshd starts the remote user's shell, which reads its rc files: here root's ~/.bashrc
   runs `pyenv init`). Every worker is one session, so that cost is on the critical path of
   a remote train stack once per cycle.
2. Fleet scaling: one train stack and 1, 2, 4, 8 infer hosts (one lite20 stack each, each on
   its own sshd), with the parallel limit raised: ``[worker] parallel`` (the limit of each
   host that sets none of its own) is the host count, and the bench prints the limits and the
   pool size the cycle used. The host counts are run in turn, ``--rounds`` times, in
   alternating order; prints the median cycle time per host count and its ratio to one host
   (goal: 8 hosts <= 2.5x one host on a 2-core machine).

Both parts print the load average: on a shared machine the figures are only as good as it.
The timeline (on by default, off with --quick or --no-timeline) prints where the time went (each step of the
cycle, bench/phase_timeline.py) for the last local and remote cycle and the largest fleet.

usage: .venv/bin/python bench/remote_hosts.py [--quick] [--rounds N] [--fleet 1,2,4,8|none]
                                              [--no-timeline]
--quick: one round, the small cycle only (1), fleet 1,2,4.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_stats import geomean_interval  # noqa: E402
from phase_timeline import Timeline  # noqa: E402

from auditor.config.load import parse  # noqa: E402
from auditor.cycle.cycle import Cycle  # noqa: E402
from auditor.extend.manager import builtin_probes  # noqa: E402
from auditor.stacks.hosts import per_host_limits  # noqa: E402
from auditor.stacks.transport import Connections, remote_argv  # noqa: E402
from tests.conftest import stack_python  # noqa: E402
from tests.sshd import make_sshd, unavailable  # noqa: E402


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _stack(name: str, runtime: str, role: str, host: str = "local") -> dict:
    return {"role": role, "runtime": runtime, "python": str(stack_python(name)), "host": host}


def _config(base: dict, stacks: dict, hosts: dict, pairs: list, probe: str | None, parallel: int):
    """The shipped config with these stacks, hosts and pairs; with ``probe``, cut down to that
    probe's fp32 variant without rollouts or extra batch sizes (a small cycle), else the
    pairs run what the shipped config runs."""
    doc = copy.deepcopy(base)
    doc.update(stacks=stacks, hosts=hosts, pairs=pairs)
    if probe is not None:
        doc["rollout"] = {**doc.get("rollout", {}), "enabled": False}
        doc["latency"] = {**doc.get("latency", {}), "batches": []}
        doc.setdefault("probes", {}).setdefault(probe, {})["variants"] = ["fp32"]
    doc.setdefault("worker", {})["parallel"] = parallel
    return parse(doc, "bench")


def _shipped_pair(base: dict, train: str, infer: str) -> dict:
    for pair in base.get("pairs", []):
        if pair.get("train") == train and pair.get("infer") == infer:
            return dict(pair)
    raise SystemExit(f"auditor.toml has no {train} -> {infer} pair")


def _run(config, timeline: Timeline | None = None) -> tuple[float, object]:
    if timeline is not None:
        timeline.reset()
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


def overhead(
    base: dict, servers: list, rounds: int, probe: str | None, timeline: Timeline | None, part: str
) -> None:
    """``probe`` None: the pair as the shipped config runs it (every probe, variant, batch size
    and the rollout), the cycle a deployment runs; else the small one-probe cycle, where the
    fixed cost of reaching the hosts weighs most."""
    a, b = servers[0], servers[1]
    pair = [
        _shipped_pair(base, "ms20", "lite20")
        if probe is None
        else {"train": "ms20", "infer": "lite20", "probes": [probe]}
    ]
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
    timelines: dict[str, str] = {}
    for i in range(rounds):
        for name, config in (
            (("local", local), ("remote", remote))
            if i % 2 == 0
            else (
                ("remote", remote),
                ("local", local),
            )
        ):
            seconds, result = _run(config, timeline)
            if timeline is not None:
                timelines[name] = timeline.render(f"a {name} cycle ({seconds:.2f} s)")
            times[name].append(seconds)
            p50[name].append(_p50s(result))
    lt, rt = statistics.median(times["local"]), statistics.median(times["remote"])
    what = (
        "the shipped config's pair (" + ", ".join(pair[0]["probes"]) + "; every variant, batch size, rollout)"
        if probe is None
        else f"probe {probe} (fp32 only, no rollout or extra batch sizes)"
    )
    print(f"{part}. Remote overhead: ms20 -> lite20, {what}, {rounds} round(s) each, alternating")
    print(
        f"   cycle wall time   local {lt:7.2f} s   over loopback ssh {rt:7.2f} s   ratio {rt / lt:5.2f}x"
        f"   (goal <= 1.10x; {_load()})"
    )
    pairs = list(zip(times["local"], times["remote"], strict=True))
    print(
        "   each round, local / remote s: "
        + "  ".join(f"{a:.2f}/{b:.2f}" for a, b in pairs)
        + f"   median of the rounds' ratios {statistics.median(b / a for a, b in pairs):5.2f}x"
    )
    print("   " + _fixed_cost(remote.hosts["hostA"]))
    ratios: dict[str, list[float]] = {"train": [], "infer": []}
    for key in p50["local"][0]:
        for side, idx in (("train", 0), ("infer", 1)):
            lv = statistics.median(d[key][idx] for d in p50["local"])
            rv = statistics.median(d[key][idx] for d in p50["remote"])
            ratios[side] += [
                rem[key][idx] / loc[key][idx] for loc, rem in zip(p50["local"], p50["remote"], strict=True)
            ]
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
    print(_pooled(ratios))
    for text in timelines.values():
        print(text)


def _pooled(ratios: dict[str, list[float]]) -> str:
    """Every p50 of a side, remote / local, round by round, pooled: a transport that leaked into
    the timing would move them all one way, while the load of a shared machine moves each one
    up or down by tens of percent at random. The geometric mean estimates the systematic part,
    with its 95% interval (2 standard errors of the mean of the logs)."""
    lines = []
    for side, values in ratios.items():
        if len(values) < 2:
            continue
        mean, lo, hi = geomean_interval(values)
        verdict = "ok" if abs(mean - 1) <= 0.10 else "outside"
        lines.append(
            f"   p50 {side}, all figures pooled ({len(values)} remote/local pairs): geometric mean "
            f"{mean - 1:+6.1%}, 95% interval {lo - 1:+.1%} to {hi - 1:+.1%}"
            f"   (goal within +-10%: {verdict})"
        )
    return "\n".join(lines)


def _fixed_cost(host, sessions: int = 5) -> str:
    """What reaching a host costs before any worker code runs: the master connection, then
    each session (sshd starts the remote user's shell, which reads its rc files)."""
    connections = Connections()
    try:
        started = time.perf_counter()
        control = connections.ensure(host)
        master = time.perf_counter() - started
        took = []
        for _ in range(sessions):
            started = time.perf_counter()
            subprocess.run(remote_argv(host, ["true"], control), stdin=subprocess.DEVNULL, check=True)
            took.append(time.perf_counter() - started)
    finally:
        connections.shutdown()
    return (
        f"fixed cost of a host here: ssh master {master * 1000:.0f} ms, then each session "
        f"(sshd, the remote user's shell and its rc files, `true`) {statistics.median(took) * 1000:.0f} ms"
    )


def fleet(
    base: dict, tmp: Path, counts: list[int], probe: str, rounds: int, timeline: Timeline | None
) -> None:
    servers = [make_sshd(tmp, f"infer{i}") for i in range(max(counts))]
    try:
        print(
            f"2. Fleet scaling: ms20 (local) -> lite20 on N loopback hosts, probe {probe}, "
            f"{rounds} round(s), host counts in alternating order"
        )
        configs = {}
        for n in counts:
            stacks = {"ms20": _stack("ms20", "mindspore", "train")}
            hosts = {}
            for i in range(n):
                stacks[f"lite20-{i}"] = _stack("lite20", "mindspore-lite", "infer", f"infer{i}")
                hosts[f"infer{i}"] = servers[i].host_table()
            pairs = [{"train": "ms20", "infer": f"lite20-{i}", "probes": [probe]} for i in range(n)]
            # The parallel limit raised: each host may run as many workers as there are hosts.
            configs[n] = _config(base, stacks, hosts, pairs, probe, max(2, n))
        for n, config in configs.items():
            size, _ = per_host_limits(
                dict.fromkeys(config.stacks), config.stacks, config.hosts, config.worker.parallel
            )
            limits = sorted({(config.hosts[h].parallel or config.worker.parallel) for h in config.hosts})
            print(
                f"   {n} host(s): [worker] parallel = {config.worker.parallel}, per-host limit(s) {limits}, "
                f"one stack per host: up to {size} workers at once"
            )
        times: dict[int, list[float]] = {n: [] for n in counts}
        for r in range(rounds):
            for n in counts if r % 2 == 0 else list(reversed(counts)):
                last = timeline is not None and n == max(counts) and r == rounds - 1
                seconds, _ = _run(configs[n], timeline if last else None)
                times[n].append(seconds)
                if last:
                    text = timeline.render(f"the {n}-host cycle ({seconds:.2f} s)")
        first = statistics.median(times[counts[0]])
        for n in counts:
            m = statistics.median(times[n])
            each = " ".join(f"{x:.2f}" for x in times[n])
            goal = "   (goal <= 2.50x)" if n == max(counts) and n >= 8 else ""
            print(f"   {n} host(s)  cycle {m:7.2f} s   {m / first:5.2f}x one host   (rounds: {each}){goal}")
        print(f"   {_load()}")
        if timeline is not None:
            print(text)
    finally:
        for s in servers:
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round, a small probe, fleet 1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fleet", default="1,2,4,8")
    ap.add_argument("--no-timeline", action="store_true", help="do not print where the time went")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # figures as they come, also into a file
    reason = unavailable()
    if reason:
        raise SystemExit(f"bench/remote_hosts.py: {reason}")
    rounds = 1 if args.quick else args.rounds
    counts = [1, 2, 4] if args.quick else [int(x) for x in args.fleet.split(",") if x.strip().isdigit()]
    probe = "obs_normalizer" if args.quick else "ppo_policy"
    base = tomllib.loads((REPO / "auditor.toml").read_text())
    with contextlib.ExitStack() as stack:
        timeline = None if args.quick or args.no_timeline else stack.enter_context(Timeline())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-hosts-"))
        servers = [make_sshd(Path(tmp), "hostA"), make_sshd(Path(tmp), "hostB")]
        try:
            if not args.quick:  # the cycle a deployment runs: the goal is judged on it
                overhead(base, servers, rounds, None, None, "1a")
            overhead(base, servers, rounds, probe, timeline, "1" if args.quick else "1b")
        finally:
            for s in servers:
                s.stop()
        if counts:
            fleet(base, Path(tmp), counts, probe, rounds, timeline)


if __name__ == "__main__":
    main()
