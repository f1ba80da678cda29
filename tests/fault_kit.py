"""The operator's fault tools, shared by tests/faults/test_faults_stacks.py and bench/soak.py: a
small real config (ms20 -> lite20, the cheapest pair), a worker fault injector, the kill -9
loop over real `auditor audit` processes, the daemon soak, and the checks after them
(integrity, no lost completed run, no leftover process or temporary directory).

Everything runs in its own TMPDIR, so leftovers are ours to count, not another test's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from auditor.common import tempdirs
from auditor.common.paths import stacks_dir
from auditor.stacks.worker import StackWorker
from tests.cli import auditor_argv

REPO = Path(__file__).resolve().parent.parent
OPS = ("hello", "fingerprint", "build", "run", "time", "export", "load")


def small_config(
    tmp: Path,
    interval: float | None = None,
    request_timeout: float = 30,
    start_timeout: float = 60,
    probes: tuple[str, ...] = ("ppo_policy",),
    ms20_env: str = "",
    name: str = "auditor.toml",
) -> Path:
    """One pair, one probe variant, few timings, no rollout: a real cycle in a few seconds."""
    stacks = stacks_dir()
    probe_list = ", ".join(f'"{p}"' for p in probes)
    schedule = f"\n[schedule]\ninterval = {interval}\nrun_on_start = true\n" if interval else ""
    text = f"""
[storage]
keep_days = 0
[worker]
start_timeout = {start_timeout}
request_timeout = {request_timeout}
parallel = 2
[latency]
warmup = 1
iterations = 3
batches = []
[rollout]
enabled = false
[daemon]
state_dir = "{tmp / "state"}"
stop_timeout = 0
[stacks.ms20]
role = "train"
runtime = "mindspore"
python = "{stacks / "ms20" / "bin" / "python"}"
npu_smi_timeout = 1
env = {{ {ms20_env} }}
[stacks.lite20]
role = "infer"
runtime = "mindspore-lite"
python = "{stacks / "lite20" / "bin" / "python"}"
npu_smi_timeout = 1
[[pairs]]
train = "ms20"
infer = "lite20"
probes = [{probe_list}]
[probes.ppo_policy]
variants = ["fp32"]
params = {{ batch = 16, seed = 0 }}
[probes.obs_normalizer]
variants = ["fp32"]
{schedule}"""
    path = tmp / name
    path.write_text(text)
    return path


def lite20_elsewhere(config: Path, tables: str, where: str) -> None:
    """``config`` (a small_config) with ``tables`` first (a [hosts.X] or [groups.X]) and its
    lite20 stack reached through them (``where``: ``host = "X"`` or ``group = "X"``)."""
    text = config.read_text()
    lite = text.split("[stacks.lite20]\n", 1)[1].split("[[pairs]]", 1)[0]
    config.write_text(tables + text.replace(f"[stacks.lite20]\n{lite}", f"[stacks.lite20]\n{where}\n{lite}"))


def private_tmp(tmp: Path) -> dict[str, str]:
    """The environment of an auditor whose temporary directories go under ``tmp/tmp``."""
    (tmp / "tmp").mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp / "tmp")}


def auditor(cfg: Path, db: Path, *args: str) -> list[str]:
    """The argv of an auditor on this config and database, for Popen."""
    return auditor_argv("--config", str(cfg), "--db", str(db), *args)


# -- hostile files ---------------------------------------------------------------------------------


def hostile_paths(d: Path) -> dict[str, tuple[Path, str]]:
    """Paths that are not usable model files, each with the problem the auditor must name: a
    FIFO (an open that never returns), a device (a read that never ends), a directory, a
    symlink loop, a dangling link, and a sparse file larger than the default 2 GiB cap."""
    d = d / "hostile"
    d.mkdir(exist_ok=True)
    os.mkfifo(d / "fifo.mindir")
    (d / "dir.mindir").mkdir()
    os.symlink(d / "loop-b.mindir", d / "loop-a.mindir")
    os.symlink(d / "loop-a.mindir", d / "loop-b.mindir")
    os.symlink(d / "gone.mindir", d / "dangling.mindir")
    with (d / "huge.mindir").open("wb") as f:
        f.truncate(3 * 1024**3)
    return {
        "fifo": (d / "fifo.mindir", "is a FIFO (named pipe), not a regular file"),
        "device": (Path("/dev/zero"), "is a character device, not a regular file"),
        "directory": (d / "dir.mindir", "is a directory, not a regular file"),
        "loop": (d / "loop-a.mindir", "is a symlink loop"),
        "dangling": (d / "dangling.mindir", "no such file"),
        "huge": (d / "huge.mindir", "is 3.0 GiB, more than the 2.0 GiB the auditor reads"),
    }


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    return path


def hostile_goldens(d: Path, inputs_like: np.ndarray | None = None) -> dict[str, tuple[Path, str]]:
    """Golden files that must each fail their model with the named problem: text, complex and
    pickled outputs, meta of the wrong types, a FIFO and a device in place of the file."""
    d = d / "goldens"
    d.mkdir(exist_ok=True)
    x = inputs_like if inputs_like is not None else np.zeros((1, 11), np.float32)
    meta = {"format": "auditor-golden", "version": 1}

    def golden(name: str, outputs: np.ndarray, **overrides: object) -> Path:
        return _npz(d / name, input_0=x, output_0=outputs, meta=np.array(json.dumps({**meta, **overrides})))

    os.mkfifo(d / "fifo.npz")
    pickled = d / "pickled.npz"
    buf = io.BytesIO()
    np.savez(buf, input_0=x, output_0=np.array([object()]), meta=np.array(json.dumps(meta)))
    pickled.write_bytes(buf.getvalue())
    return {
        "text": (golden("text.npz", np.array(["left", "right"])), "array 'output_0' holds text"),
        "complex": (golden("complex.npz", np.ones((1, 4), np.complex64)), "holds complex numbers"),
        "names5": (
            golden("names5.npz", np.ones((1, 4), np.float32), output_names=5),
            "meta output_names must be a list of names (strings), not int 5",
        ),
        "sha": (
            golden("sha.npz", np.ones((1, 4), np.float32), model_sha256=["x"]),
            "meta model_sha256 must be a str",
        ),
        "pickled": (pickled, "holds Python objects (pickles are never loaded)"),
        "fifo": (d / "fifo.npz", "is a FIFO (named pipe), not a regular file"),
        "device": (Path("/dev/zero"), "is a character device, not a regular file"),
    }


def hostile_inputs(d: Path) -> dict[str, tuple[Path, str]]:
    """Recorded-input .npz files that must each fail their model with the named problem."""
    d = d / "inputs"
    d.mkdir(exist_ok=True)
    os.mkfifo(d / "fifo.npz")
    (d / "notzip.npz").write_text("obs = [1, 2, 3]\n")
    return {
        "text": (_npz(d / "text.npz", obs=np.full((1, 11), "x")), "array 'obs' holds text"),
        "complex": (_npz(d / "complex.npz", obs=np.ones((1, 11), np.complex128)), "holds complex numbers"),
        "fifo": (d / "fifo.npz", "is a FIFO (named pipe), not a regular file"),
        "notzip": (d / "notzip.npz", "not a readable .npz"),
    }


# -- worker faults --------------------------------------------------------------------------------


@contextlib.contextmanager
def worker_fault(
    op: str, signum: int = signal.SIGKILL, stack: str | None = None, delay: float = 0.02, after: bool = False
) -> Iterator[list[str]]:
    """Send ``signum`` to a worker's process group while it serves its first ``op`` request
    (of ``stack``, if given): the real process dies or stops mid-request, as when the OOM
    killer or an operator strikes. Yields the list of faults injected ("stack:op")."""
    original = StackWorker.request
    fired: list[str] = []
    lock = threading.Lock()

    def request(self: StackWorker, o: str, timeout: float | None = None, **payload):  # type: ignore[no-untyped-def]
        with lock:
            hit = o == op and not fired and (stack is None or self.stack.name == stack)
            if hit:
                fired.append(f"{self.stack.name}:{o}")
        if hit and after:
            reply = original(self, o, timeout=timeout, **payload)
            assert self.proc is not None
            os.killpg(self.proc.pid, signum)
            wait_until(lambda: self.proc.poll() is not None, 10, 0.02)
            return reply
        if hit and self.proc is not None:
            # Stopped first, so the request is surely in flight when the signal lands, however
            # fast the worker would have answered it.
            pid = self.proc.pid
            os.killpg(pid, signal.SIGSTOP)
            if signum != signal.SIGSTOP:

                def strike() -> None:
                    time.sleep(delay)
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signum)

                threading.Thread(target=strike, daemon=True).start()
        return original(self, o, timeout=timeout, **payload)

    StackWorker.request = request  # type: ignore[method-assign]
    try:
        yield fired
    finally:
        StackWorker.request = original  # type: ignore[method-assign]


# -- checks ---------------------------------------------------------------------------------------


def read_only(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def complete_runs(db: Path) -> dict[int, tuple]:
    """Each complete run with what it stored: the part that must never change or go."""
    if not db.exists():
        return {}
    with contextlib.closing(read_only(db)) as conn:
        rows = conn.execute(
            "SELECT r.id, r.outcome, r.finished_at,"
            " (SELECT count(*) FROM probe_results p WHERE p.run_id = r.id),"
            " (SELECT count(*) FROM findings f WHERE f.run_id = r.id),"
            " (SELECT count(*) FROM run_stacks s WHERE s.run_id = r.id)"
            " FROM runs r WHERE r.status = 'complete'"
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def statuses(db: Path) -> dict[str, int]:
    with contextlib.closing(read_only(db)) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())


def integrity(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return "; ".join(r[0] for r in conn.execute("PRAGMA integrity_check").fetchall())


def leftovers(tmp_root: Path) -> tuple[list[Path], list[int]]:
    """Temporary directories and processes (by working directory) left under ``tmp_root``."""
    dirs = sorted(p for p in tmp_root.glob("auditor-*") if p.is_dir())
    return dirs, tempdirs.processes_in(tmp_root)


def stop(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM the daemon (if it runs) and wait for it; SIGKILL after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


# -- the kill -9 loop -----------------------------------------------------------------------------


@dataclass
class KillFigures:
    trials: int = 0
    killed: int = 0
    finished: int = 0
    tracebacks: int = 0
    lost_runs: int = 0
    integrity_failures: int = 0
    left_running: int = 0
    leftover_dirs: int = 0
    leftover_processes: int = 0
    complete_runs: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"kill-9: {self.trials} trials, {self.killed} auditors killed (faults injected), "
            f"{self.finished} finished first; tracebacks {self.tracebacks}, lost runs {self.lost_runs}, "
            f"integrity failures {self.integrity_failures}, runs left running {self.left_running}, "
            f"leftover dirs {self.leftover_dirs}, leftover processes {self.leftover_processes}; "
            f"{self.complete_runs} complete runs kept"
        )

    @property
    def clean(self) -> bool:
        return not (
            self.tracebacks
            or self.lost_runs
            or self.integrity_failures
            or self.left_running
            or self.leftover_dirs
            or self.leftover_processes
        )


def kill9_trials(
    tmp: Path, trials: int, seed: int = 0, echo: Callable[[str], None] = lambda _: None
) -> KillFigures:
    """Start real `auditor audit` processes and SIGKILL each at a random point of its cycle
    (start-up, fingerprints, build, export, load, storing); check after each that every
    complete run is intact and the file is sound, and at the end (after one more audit,
    which reaps what the killed ones left) that nothing is left behind."""
    rng = random.Random(seed)
    cfg, db = small_config(tmp), tmp / "history.db"
    env = private_tmp(tmp)
    figures = KillFigures()

    def audit() -> tuple[subprocess.Popen[str], float]:
        return subprocess.Popen(
            auditor(cfg, db, "audit"),
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ), time.monotonic()

    proc, t0 = audit()
    _, err = proc.communicate(timeout=600)
    span = time.monotonic() - t0
    figures.tracebacks += err.count("Traceback")
    if proc.returncode not in (0, 1):
        figures.notes.append(f"first audit exited {proc.returncode}: {err[-500:]}")
    for i in range(trials):
        before = complete_runs(db)
        proc, t0 = audit()
        # Anywhere from start-up to past the end (storing included): a trial that finishes
        # first is fine, and teaches how long a cycle takes on this (possibly busy) machine.
        delay = rng.uniform(0.0, span * 1.3)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.kill()
        _, err = proc.communicate(timeout=600)
        figures.trials += 1
        if proc.returncode == -signal.SIGKILL:
            figures.killed += 1
        else:
            figures.finished += 1
            span = max(span, time.monotonic() - t0)
            if proc.returncode not in (0, 1):
                figures.notes.append(f"trial {i}: exit {proc.returncode}: {err[-300:]}")
        figures.tracebacks += err.count("Traceback")
        after = complete_runs(db)
        lost = [r for r, row in before.items() if after.get(r) != row]
        figures.lost_runs += len(lost)
        if db.exists() and (check := integrity(db)) != "ok":
            figures.integrity_failures += 1
            figures.notes.append(f"trial {i}: integrity_check: {check[:300]}")
        echo(
            f"  trial {i + 1:>3}/{trials}: kill at {delay:5.2f} s -> "
            f"{'killed' if proc.returncode == -signal.SIGKILL else f'exit {proc.returncode}'}; "
            f"complete runs {len(after)}, lost {len(lost)}"
        )
    # One more audit: it reaps the killed ones' directories and workers, and marks their runs.
    proc, _ = audit()
    _, err = proc.communicate(timeout=600)
    figures.tracebacks += err.count("Traceback")
    figures.complete_runs = len(complete_runs(db))
    figures.left_running = statuses(db).get("running", 0)
    dirs, procs = leftovers(tmp / "tmp")
    wait_until(lambda: not leftovers(tmp / "tmp")[1], 10)
    dirs, procs = leftovers(tmp / "tmp")
    figures.leftover_dirs, figures.leftover_processes = len(dirs), len(procs)
    if dirs or procs:
        figures.notes.append(f"left: {[d.name for d in dirs]} pids {procs}")
    return figures


# -- the daemon soak -------------------------------------------------------------------------------


def proc_sample(pid: int) -> dict[str, float]:
    """RSS (MiB), open fds, threads and live child processes of ``pid``, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    children = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children += int(stat[1]) == pid and stat[0] != "Z"
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": int(fields["Threads"]),
        "children": children,
    }


def resting_sample(pid: int, window: float = 0.6) -> dict[str, float]:
    """The daemon between cycles: the sample with the fewest descriptors over ``window`` s.
    Right after a cycle is stored its child may have exited unreaped, its pipes still open, or
    the next cycle (1 s schedule) may be starting; a leak raises even the least of them."""
    best = proc_sample(pid)
    end = time.monotonic() + window
    while time.monotonic() < end:
        time.sleep(0.1)
        with contextlib.suppress(OSError):
            now = proc_sample(pid)
            if (now["fds"], now["children"]) < (best["fds"], best["children"]):
                best = now
    return best


def slope(values: list[float]) -> float:
    """Least-squares change per cycle."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den


@dataclass
class SoakFigures:
    cycles: int = 0
    samples: list[dict[str, float]] = field(default_factory=list)
    tracebacks: int = 0
    exit_status: int | None = None
    leftover_dirs: int = 0
    leftover_processes: int = 0
    aborted: int = 0

    def slopes(self, skip: int = 2) -> dict[str, float]:
        """Per cycle, after ``skip`` warm-up cycles, over the samples taken between cycles (a
        sample that caught the next cycle starting, children > 0, would be noise)."""
        rows = self.samples[skip:] if len(self.samples) > skip + 1 else self.samples
        rows = [r for r in rows if not r["children"]] or rows
        return {k: slope([r[k] for r in rows]) for k in ("rss_mib", "fds", "threads", "children", "db_kib")}

    def line(self) -> str:
        s = " ".join(f"{k} {v:+.3g}/cycle" for k, v in self.slopes().items())
        return (
            f"daemon soak: {self.cycles} cycles, tracebacks {self.tracebacks}, aborted runs {self.aborted}, "
            f"exit {self.exit_status}, leftover dirs {self.leftover_dirs}, leftover processes "
            f"{self.leftover_processes}; slopes after the first 2 cycles: {s}"
        )


def daemon_soak(
    tmp: Path, cycles: int = 0, seconds: float = 0.0, echo: Callable[[str], None] = lambda _: None
) -> SoakFigures:
    """Run `auditor daemon` on a 1-second schedule (cycles back to back) until ``cycles``
    cycles completed or ``seconds`` passed; sample the daemon after each stored cycle."""
    cfg, db = small_config(tmp, interval=1), tmp / "soak.db"
    env = private_tmp(tmp)
    log = tmp / "daemon.log"
    figures = SoakFigures()
    with log.open("w") as err:
        proc = subprocess.Popen(
            auditor(cfg, db, "daemon"), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    start, seen = time.monotonic(), 0
    echo("  cycle   rss MiB   fds  threads  children   db KiB")
    try:
        while proc.poll() is None:
            if (cycles and figures.cycles >= cycles) or (seconds and time.monotonic() - start >= seconds):
                break
            try:
                done = len(complete_runs(db))
            except sqlite3.OperationalError:  # the daemon is still creating the schema
                done = 0
            if done > seen:
                seen = done
                sample = resting_sample(proc.pid)
                sample["db_kib"] = sum(p.stat().st_size for p in tmp.glob("soak.db*")) / 1024
                figures.samples.append(sample)
                figures.cycles = done
                echo(
                    f"  {done:>5}  {sample['rss_mib']:8.1f}  {sample['fds']:4.0f}  {sample['threads']:7.0f}"
                    f"  {sample['children']:8.0f}  {sample['db_kib']:7.0f}"
                )
            time.sleep(0.2)
    finally:
        stop(proc, 120)
    figures.exit_status = proc.returncode
    figures.tracebacks = log.read_text().count("Traceback")
    figures.aborted = statuses(db).get("aborted", 0) if db.exists() else 0
    wait_until(lambda: not leftovers(tmp / "tmp")[1], 10)
    dirs, procs = leftovers(tmp / "tmp")
    figures.leftover_dirs, figures.leftover_processes = len(dirs), len(procs)
    return figures


# -- ssh leftovers across daemon cycles and SIGKILLs -------------------------------------------------


def with_ssh_host(cfg: Path, server: Any, stack: str = "ms20") -> Path:
    """Move ``stack`` of a small_config onto the ssh "host" ``server`` (tests/sshd.py)."""
    table = server.host_table()
    hosts = (
        "[hosts.remote]\n"
        f'ssh = "{table["ssh"]}"\nport = {table["port"]}\nidentity_file = "{table["identity_file"]}"\n'
        f"options = {json.dumps(table['options'])}\nconnect_timeout = 5\n"
    )
    text = cfg.read_text().replace(f"[stacks.{stack}]\n", f'{hosts}[stacks.{stack}]\nhost = "remote"\n', 1)
    cfg.write_text(text)
    return cfg


def cycle_children(daemon: int) -> list[int]:
    """The daemon's live cycle child processes (auditor/daemon/cycle_child.py)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            ours = int(stat[1]) == daemon and stat[0] != "Z"
            if ours and b"auditor.daemon.cycle_child" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def ssh_processes(under: Path) -> list[int]:
    """ssh clients (masters and sessions) whose control socket is under ``under``."""
    needle = f"ControlPath={under}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


@dataclass
class SshLeftovers:
    cycles: int = 0
    kills: int = 0
    aborted: int = 0
    most_ssh_dirs: int = 0
    tracebacks: int = 0
    exit_status: int | None = None
    leftover_dirs: list[str] = field(default_factory=list)
    leftover_processes: list[int] = field(default_factory=list)
    remote_dirs: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"ssh leftovers: {self.cycles} complete daemon cycles with an ssh host, {self.kills} cycle "
            f"processes SIGKILLed ({self.aborted} runs aborted); at most {self.most_ssh_dirs} auditor-ssh-* "
            f"dir(s) at once; at the end: {len(self.leftover_dirs)} dirs and {len(self.leftover_processes)} "
            f"processes left here, {len(self.remote_dirs)} dirs on the host; tracebacks {self.tracebacks}, "
            f"daemon exit {self.exit_status}"
        )

    @property
    def clean(self) -> bool:
        return not (
            self.leftover_dirs
            or self.leftover_processes
            or self.remote_dirs
            or self.tracebacks
            or self.exit_status != 0
        )


def ssh_daemon_soak(
    tmp: Path, server: Any, remote_tmp: Path, cycles: int, kills: int, seed: int = 0,
    echo: Callable[[str], None] = lambda _: None,
) -> SshLeftovers:  # fmt: skip
    """`auditor daemon` on a 1-second schedule with ms20 on the ssh host ``server`` (whose
    sessions keep their temporary files in ``remote_tmp``), until ``cycles`` runs are complete;
    ``kills`` of its cycle processes are SIGKILLed at random points of a cycle, spread over the
    first 90% of the cycles. Then the daemon is stopped (SIGTERM) and what is left is counted:
    temporary directories (auditor-*, auditor-ssh-* among them) and processes here, ssh
    clients of this auditor, worker directories on the host."""
    rng = random.Random(seed)
    env = private_tmp(tmp)
    root = tmp / "tmp"
    assert len(str(root)) <= tempdirs.SOCKET_ROOT_MAX, f"{root}: too long for the ssh sockets to live there"
    cfg = with_ssh_host(small_config(tmp, interval=1), server)
    db, log = tmp / "soak.db", tmp / "daemon.log"
    every = max(1, int(cycles * 0.9) // max(1, kills))
    figures = SshLeftovers()
    with log.open("w") as err:
        proc = subprocess.Popen(
            auditor(cfg, db, "daemon"), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    span, started, seen_child, delay = 5.0, None, None, 0.0
    try:
        while proc.poll() is None and figures.cycles < cycles:
            with contextlib.suppress(sqlite3.OperationalError):
                done = len(complete_runs(db))
                if done > figures.cycles:
                    figures.cycles = done
                    echo(f"  cycle {done:>4}: {figures.kills} killed, ssh dirs now {len(_ssh_dirs(root))}")
            figures.most_ssh_dirs = max(figures.most_ssh_dirs, len(_ssh_dirs(root)))
            children = cycle_children(proc.pid)
            if children and children[0] != seen_child:
                seen_child, started = children[0], time.monotonic()
                delay = rng.uniform(0, span)  # anywhere in the cycle: start-up, workers, storing
            elif not children and started is not None:
                span = max(span * 0.8, time.monotonic() - started)  # how long a cycle takes here
                started = None
            due = figures.kills < kills and figures.cycles >= every * (figures.kills + 1) - every // 2
            if due and children and started is not None and time.monotonic() - started >= delay:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(children[0], signal.SIGKILL)
                    figures.kills += 1
                    echo(f"  SIGKILL cycle process {children[0]} after {time.monotonic() - started:.1f} s")
                started = None
            time.sleep(0.1)
    finally:
        stop(proc, 180)
    figures.exit_status = proc.returncode
    figures.tracebacks = log.read_text().count("Traceback")
    figures.aborted = statuses(db).get("aborted", 0) if db.exists() else 0
    wait_until(lambda: not leftovers(root)[1] and not ssh_processes(root), 30)
    dirs, procs = leftovers(root)
    figures.leftover_dirs = [d.name for d in dirs]
    figures.leftover_processes = sorted({*procs, *ssh_processes(root)})
    wait_until(lambda: not list(remote_tmp.glob("auditor-w-*")), 30)
    figures.remote_dirs = [d.name for d in remote_tmp.glob("auditor-w-*")]
    return figures


def _ssh_dirs(root: Path) -> list[Path]:
    return list(root.glob("auditor-ssh-*"))


# -- PostgreSQL stopped and restarted under the daemon --------------------------------------------


@dataclass
class OutageFigures:
    before: int = 0
    """Complete runs before the first outage."""
    interrupted: int | None = None
    """The run whose cycle was under way when the server stopped."""
    interrupted_status: str = ""
    interrupted_note: str = ""
    skipped: int = 0
    """Cycles skipped while the server was down between cycles."""
    after: int = 0
    tracebacks: int = 0
    continued_lines: int = 0
    """Log lines that continue a message (a message said in more than one line)."""
    exit_status: int | None = None
    log: str = ""

    def line(self) -> str:
        return (
            f"postgres outage: {self.before} complete run(s) before; stopped during run {self.interrupted} "
            f"(then {self.interrupted_status}: {self.interrupted_note!r}); stopped between cycles: "
            f"{self.skipped} cycle(s) skipped; {self.after} complete after; tracebacks {self.tracebacks}, "
            f"continued log lines {self.continued_lines}, daemon exit {self.exit_status}"
        )


def postgres_outage(tmp: Path, server: Any, url: str, delay: float = 0.5) -> OutageFigures:
    """`auditor daemon` on PostgreSQL (``url``) on a 1-second schedule, its server stopped
    twice and started again:

    1. ``delay`` seconds into a cycle, until that cycle's process has said how it ended (the
       history it reads and the results it writes are gone meanwhile);
    2. right after a cycle, until a cycle has been skipped for want of the database.

    Cycles complete again after each; the daemon runs throughout."""
    env = private_tmp(tmp)
    cfg = small_config(tmp, interval=1)
    cfg.write_text(cfg.read_text().replace("[storage]\n", f'[storage]\nurl = "{url}"\n', 1))
    log = tmp / "daemon.log"
    figures = OutageFigures()
    database = url.rsplit("/", 1)[1].split("?")[0]

    def sql(statement: str) -> list[tuple]:
        return server.sql(statement, database)

    def complete() -> int:
        return sql("SELECT count(*) FROM runs WHERE status = 'complete'")[0][0]

    def said_since(mark: int, *words: str) -> bool:
        text = log.read_text()[mark:]
        return any(w in text for w in words)

    with log.open("w") as err:
        proc = subprocess.Popen(
            auditor_argv("--config", str(cfg), "daemon"),
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        assert wait_until(lambda: _safe(complete) >= 1, 600, 0.5), log.read_text()[-3000:]
        figures.before = complete()
        top = sql("SELECT max(id) FROM runs")[0][0]
        running = f"SELECT max(id) FROM runs WHERE status = 'running' AND id > {top}"
        assert wait_until(lambda: _safe(lambda: sql(running)[0][0] or 0), 600, 0.05), log.read_text()[-3000:]
        figures.interrupted = sql(running)[0][0]
        time.sleep(delay)
        mark = len(log.read_text())
        server.halt()
        ended = (f"cycle of run {figures.interrupted} did not", f"cycle done: run {figures.interrupted} ")
        assert wait_until(lambda: said_since(mark, *ended), 600, 0.2), log.read_text()[-3000:]
        server.resume()
        # The next cycle writes the interrupted run's abort, then completes.
        assert wait_until(lambda: _safe(complete) >= figures.before + 1, 600, 0.5), log.read_text()[-3000:]
        figures.interrupted_status, figures.interrupted_note = sql(
            f"SELECT status, coalesce(note, '') FROM runs WHERE id = {figures.interrupted}"
        )[0]
        stored = complete()
        mark = len(log.read_text())
        server.halt()
        assert wait_until(lambda: said_since(mark, "cycle skipped"), 300, 0.2), log.read_text()[-3000:]
        figures.skipped = log.read_text()[mark:].count("cycle skipped")
        server.resume()
        assert wait_until(lambda: _safe(complete) > stored, 600, 0.5), log.read_text()[-3000:]
        figures.after = complete()
        assert proc.poll() is None, "the daemon ended during an outage"
    finally:
        stop(proc, 180)
        running_again(server)
    figures.exit_status = proc.returncode
    figures.log = log.read_text()
    figures.tracebacks = figures.log.count("Traceback")
    figures.continued_lines = sum(1 for line in figures.log.splitlines() if line[:1].isspace())
    return figures


def running_again(server: Any) -> None:
    """Start ``server`` again if a failed test left it stopped (the session shares it)."""
    with contextlib.suppress(Exception):
        server.sql("SELECT 1")
        return
    server.resume()


def audit_with_outage(tmp: Path, server: Any, url: str, delay: float = 0.5) -> tuple[int, str, str]:
    """`auditor audit` on PostgreSQL (``url``), the server stopped ``delay`` seconds into the
    cycle and started again once the command has ended: (exit status, stderr, the run's
    status afterwards)."""
    cfg = small_config(tmp)
    cfg.write_text(cfg.read_text().replace("[storage]\n", f'[storage]\nurl = "{url}"\n', 1))
    database = url.rsplit("/", 1)[1].split("?")[0]
    running = "SELECT max(id) FROM runs WHERE status = 'running'"
    proc = subprocess.Popen(
        auditor_argv("--config", str(cfg), "audit"),
        cwd=REPO, env=private_tmp(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: _safe(lambda: server.sql(running, database)[0][0] or 0), 300, 0.05)
        run_id = server.sql(running, database)[0][0]
        time.sleep(delay)
        server.halt()
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        running_again(server)
    status = server.sql(f"SELECT status FROM runs WHERE id = {run_id}", database)[0][0]
    return proc.returncode, err, status


def _safe(fn: Callable[[], int]) -> int:
    try:
        return fn()
    except Exception:  # the schema is being created, or the server is down
        return 0
