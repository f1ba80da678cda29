"""Another revision of the auditor beside this checkout, for benches that measure a change side by
side: the revision's files (``git archive``) assembled as an installed package would be
(``probes/``, ``plugins/`` and ``migrations/`` inside ``auditor/``) in a folder that, first on
``PYTHONPATH``, is what ``python -m auditor`` imports. The same interpreter and libraries run
both sides; only the auditor's code differs.

Runs of A (this checkout) and B (the revision) are paired and taken in turn, A B B A A B ...,
so that a load that comes and goes falls on both; each side's figures are the medians of its
runs, the ratio is the geometric mean of the pairs' (auditor's bench_stats), and the machine's
load average over the runs is printed with them.
"""

from __future__ import annotations

import io
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from bench_stats import geomean_interval  # noqa: E402

INSIDE = {"probes": "probes", "plugins": "plugins", "migrations": "migrations"}


def stage(rev: str, into: Path) -> Path:
    """The auditor at ``rev`` as a package folder for PYTHONPATH (its commit's files only)."""
    raw = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True).stdout
    src = into / "src"
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        tar.extractall(src, filter="data")
    pkg = into / "pkg"
    shutil.copytree(src / "auditor", pkg / "auditor")
    for folder, name in INSIDE.items():
        shutil.copytree(src / folder, pkg / "auditor" / name)
    return pkg


def short(rev: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class Run:
    wall: float
    cpu: float
    """CPU seconds of the command and everything it started (workers, zygotes, environments)."""
    code: int


@dataclass
class Side:
    name: str
    env: dict[str, str]
    runs: list[Run] = field(default_factory=list)

    def median(self, what: str) -> float:
        return statistics.median(getattr(r, what) for r in self.runs)


def auditor_env(pkg: Path | None) -> dict[str, str]:
    """The environment of a side: this checkout's auditor (None), or the staged revision's."""
    env = dict(os.environ)
    if pkg is not None:
        env["PYTHONPATH"] = str(pkg) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def timed(argv: Sequence[str], env: dict[str, str], cwd: Path) -> Run:
    """One command, its wall time and the CPU of it and its children (each run's own figures:
    the commands run one at a time, so the children's counters grow by this one's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr[-3000:])
    return Run(wall, cpu, proc.returncode)


def paired(sides: tuple[Side, Side], pairs: int, run: Callable[[Side, int], Run]) -> float:
    """``pairs`` runs of each side, A B then B A in turn; the load average over them."""
    load0 = os.getloadavg()[0]
    for i in range(pairs):
        order = sides if i % 2 == 0 else sides[::-1]
        for side in order:
            side.runs.append(run(side, i))
    return (load0 + os.getloadavg()[0]) / 2


def report(title: str, sides: tuple[Side, Side], load: float) -> list[str]:
    """The two sides' medians and the paired ratios' geometric mean with its interval."""
    a, b = sides
    lines = [
        f"{title}: {len(a.runs)} pairs, taken in turn; load average {load:.2f} on {os.cpu_count()} cores"
    ]
    lines.append(f"  {'':<14}{'wall s (median)':>16}{'CPU s (median)':>16}")
    for s in sides:
        lines.append(f"  {s.name:<14}{s.median('wall'):>16.2f}{s.median('cpu'):>16.2f}")
    for what in ("wall", "cpu"):
        ratios = [
            x / y
            for x, y in zip(
                (getattr(r, what) for r in a.runs), (getattr(r, what) for r in b.runs), strict=True
            )
            if y > 0
        ]
        g, lo, hi = geomean_interval(ratios)
        lines.append(f"  ratio {a.name} / {b.name} {what}: {g:.3f} (95% interval {lo:.3f} .. {hi:.3f})")
    return lines


def saved_files(root: Path) -> dict[str, Path]:
    """The .npz files ``audit --save-outputs`` wrote under ``root``, by their place in it."""
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*.npz"))}


def same_bits(a: Path, b: Path) -> bool:
    """Two saved sides hold bitwise the same outputs (dtype, shape and bytes of each)."""
    import numpy as np

    with np.load(a, allow_pickle=False) as x, np.load(b, allow_pickle=False) as y:
        outs = [k for k in x.files if k.startswith("output")]
        if outs != [k for k in y.files if k.startswith("output")]:
            return False
        return all(
            x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and x[k].tobytes() == y[k].tobytes()
            for k in outs
        )


def bitwise(a_roots: Sequence[Path], b_roots: Sequence[Path]) -> list[str]:
    """Every side's outputs that repeated on B (bitwise the same in each of B's runs) against A's:
    the same bits, or named. What did not repeat on B is counted, not compared."""
    b_files = [saved_files(r) for r in b_roots]
    a_files = [saved_files(r) for r in a_roots]
    names = sorted(set(b_files[0]))
    repeated = [n for n in names if all(n in f and same_bits(b_files[0][n], f[n]) for f in b_files[1:])]
    differ = [n for n in repeated if not all(n in f and same_bits(b_files[0][n], f[n]) for f in a_files)]
    lines = [
        f"  saved sides: {len(names)} on B, {len(repeated)} repeated bitwise across B's runs, "
        f"{len(repeated) - len(differ)} of those bitwise the same on A"
    ]
    lines += [f"    differs on A: {n}" for n in differ[:10]]
    missing = sorted(set(names) - set(a_files[0]))
    lines += [f"    not saved on A: {n}" for n in missing[:10]]
    return lines


def audits_side_by_side(
    rev: str, config: str, pairs: int, args: Sequence[str] = (), title: str = ""
) -> list[str]:
    """``auditor audit`` on ``config`` by this checkout (A) and by ``rev`` (B), ``pairs`` runs
    each in turn, every side's outputs saved: the medians, the paired ratio, and every saved
    output that repeated on B compared bitwise with A's."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="auditor-ab-") as tmp:
        pkg = stage(rev, Path(tmp) / "rev")
        sides = (Side("A (this checkout)", auditor_env(None)), Side(f"B ({short(rev)})", auditor_env(pkg)))
        saved: dict[str, list[Path]] = {s.name: [] for s in sides}

        def run(side: Side, i: int) -> Run:
            out = Path(tmp) / f"{'a' if side is sides[0] else 'b'}{i}"
            out.mkdir()
            argv = [sys.executable, "-m", "auditor", "--config", config, "--db", str(out / "h.db"), "audit"]
            done = timed([*argv, *args, "--save-outputs", str(out / "saved")], side.env, REPO)
            saved[side.name].append(out / "saved")
            return done

        load = paired(sides, pairs, run)
        lines = report(title or f"auditor audit on {config}", sides, load)
        return lines + bitwise(saved[sides[0].name], saved[sides[1].name])
