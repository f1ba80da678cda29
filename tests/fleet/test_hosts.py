"""The auditor's own logic for remote hosts, without stacks or sshd: the [hosts] section,
the ssh argv, what a failed ssh means, the worker-code zip, the per-host parallel limit."""

from __future__ import annotations

import contextlib
import io
import shlex
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from auditor.config.load import parse
from auditor.config.tables import ConfigError, HostConfig, StackConfig
from auditor.stacks import payload
from auditor.stacks.hosts import per_host_limits
from auditor.stacks.launch import worker_packages
from auditor.stacks.transport import explain, remote_argv

STACK = {"role": "train", "runtime": "mindspore", "python": "/opt/ms/bin/python"}
INFER = {"role": "infer", "runtime": "mindspore-lite", "python": "/opt/lite/bin/python"}
PAIRS = [{"train": "s", "infer": "i", "probes": ["ppo_policy"]}]


def _parse(hosts: object, host: str = "a") -> object:
    doc = {"stacks": {"s": {**STACK, "host": host}, "i": INFER}, "hosts": hosts, "pairs": PAIRS}
    return parse(doc, "t.toml")


def test_ssh_and_command_hosts_parse() -> None:
    config = _parse(
        {
            "a": {
                "ssh": "ops@train-01",
                "port": 2222,
                "identity_file": "/etc/auditor/id_ed25519",
                "options": ["UserKnownHostsFile=/etc/auditor/known_hosts"],
                "connect_timeout": 3,
                "parallel": 4,
            },
            "box": {"command": ["docker", "exec", "-i", "infer"]},
        }
    )
    a, box = config.hosts["a"], config.hosts["box"]
    assert (a.transport, a.ssh, a.port, a.parallel, a.connect_timeout) == (
        "ssh",
        "ops@train-01",
        2222,
        4,
        3.0,
    )
    assert box.transport == "command" and box.command == ("docker", "exec", "-i", "infer")
    assert config.stacks["s"].host == "a"


def test_shipped_style_config_without_hosts_stays_local() -> None:
    config = parse({"stacks": {"s": STACK, "i": INFER}, "pairs": PAIRS}, "t.toml")
    assert config.hosts == {} and config.stacks["s"].host == "local"


@pytest.mark.parametrize(
    ("hosts", "host", "expected"),
    [
        ({"a": {"ssh": "x", "command": ["y"]}}, "a", "hosts.a: set either ssh or command, not both"),
        ({"a": {}}, "a", 'hosts.a: set ssh = "user@server" or command = [argv prefix]'),
        (
            {"a": {"ssh": "x", "port": 70000}},
            "a",
            "hosts.a.port: must be a whole number from 1 to 65535, not 70000",
        ),
        ({"a": {"ssh": "x", "user": "y"}}, "a", "hosts.a.user: unknown key"),
        ({"a": {"ssh": "x y"}}, "a", "hosts.a.ssh: must be [user@]server without spaces"),
        (
            {"a": {"ssh": "x", "options": ["-v"]}},
            "a",
            "hosts.a.options[0]: must be an ssh option 'Name=value'",
        ),
        ({"a": {"command": []}}, "a", "hosts.a.command: must name the program to run"),
        (
            {"a": {"command": ["x"], "port": 22}},
            "a",
            "hosts.a: port, identity_file and options belong to ssh",
        ),
        ({"local": {"ssh": "x"}}, "local", "hosts.local: 'local' is the auditor's own machine"),
        ({"a": {"ssh": "x"}}, "b", "stacks.s.host: no [hosts.b] table (known hosts: a)"),
        (
            {"a": {"ssh": "x", "connect_timeout": 0}},
            "a",
            "hosts.a.connect_timeout: must be a duration greater than 0s",
        ),
        (
            {"a": {"ssh": "x", "parallel": 0}},
            "a",
            "hosts.a.parallel: must be a whole number from 1 to 1024, not 0",
        ),
    ],
)
def test_bad_hosts_are_named_with_their_key_path(hosts: dict, host: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(hosts, host)
    assert any(e.startswith(expected) for e in err.value.errors), err.value.errors


@pytest.mark.faults
def test_ssh_argv_is_batch_shared_and_quotes_the_remote_command(tmp_path) -> None:
    """The host's own options (an identity file, a SetEnv that carries a token) go to a file in
    the private control directory, not on ssh's command line, which every user of the machine
    can read (#54: both showed in `ps`)."""
    secret = "SetEnv=API_TOKEN=s3cr3t-value"
    host = HostConfig("a", ssh="ops@h", port=2222, identity_file="/k", options=("Compression=yes", secret))
    words = ["env", "GLOG_v=2", "/opt/py thon", "-c", "print('x; y')", '{"a": [1]}']
    private = tmp_path / "auditor-ssh-x"
    private.mkdir(mode=0o700)
    argv = remote_argv(host, words, str(private / "a"))
    assert argv[0] == "ssh"
    joined = " ".join(argv)
    for part in ("BatchMode=yes", "ConnectTimeout=10", f"ControlPath={private / 'a'}", "ControlMaster=no"):
        assert part in joined
    assert argv[argv.index("-p") + 1] == "2222"
    assert "/k" not in argv and "s3cr3t" not in joined and "Compression=yes" not in argv
    config = Path(argv[argv.index("-F") + 1])
    assert config.parent == private and config.stat().st_mode & 0o777 == 0o600
    lines = config.read_text().splitlines()
    assert lines[1:] == [
        'IdentityFile "/k"',
        "IdentitiesOnly yes",
        "Compression=yes",
        secret,
        "Include ~/.ssh/config",
        "Include /etc/ssh/ssh_config",
    ]
    assert argv[-3:-1] == ["ops@h", "--"]
    assert shlex.split(argv[-1]) == words  # the remote shell gets back exactly these words
    # without a control directory (no master), the options stay on the command line
    legacy = remote_argv(host, words, str(tmp_path / "nowhere" / "a"))
    assert legacy[legacy.index("-i") + 1] == "/k" and "Compression=yes" in legacy and "-F" not in legacy


def test_command_argv_is_the_prefix_then_the_words() -> None:
    host = HostConfig("box", command=("kubectl", "exec", "-i", "pod", "--"))
    assert remote_argv(host, ["python", "-c", "x"]) == [
        "kubectl",
        "exec",
        "-i",
        "pod",
        "--",
        "python",
        "-c",
        "x",
    ]
    assert remote_argv(None, ["python"]) == ["python"]


SSH = HostConfig("trainer", ssh="ops@10.0.0.5", port=2222)


@pytest.mark.parametrize(
    ("stderr", "words"),
    [
        ("ops@10.0.0.5: Permission denied (publickey).", "authentication failed"),
        ("Host key verification failed.", "host key is not known"),
        (
            "@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@\nHost key verification failed.",
            "host key CHANGED",
        ),
        ("ssh: connect to host 10.0.0.5 port 2222: Connection refused", "connection was refused"),
        ("ssh: connect to host 10.0.0.5 port 2222: Connection timed out", "no answer before ConnectTimeout"),
        ("ssh: Could not resolve hostname nowhere: Name or service not known", "does not resolve"),
        ("ssh: connect to host 10.0.0.5 port 2222: No route to host", "no route"),
    ],
)
def test_ssh_failures_say_which_host_and_what_to_do(stderr: str, words: str) -> None:
    message = explain(SSH, 255, stderr)
    assert message is not None
    assert message.startswith("host trainer (ssh ops@10.0.0.5 port 2222): ")
    assert words in message
    assert stderr.splitlines()[-1] in message  # ssh's own words, as the tail


def test_other_statuses() -> None:
    missing = explain(SSH, 127, "env: '/opt/py/bin/python': No such file or directory", "/opt/py/bin/python")
    assert missing and "interpreter /opt/py/bin/python is not found there" in missing
    assert "connection was lost" in (explain(SSH, 255, "", connected=True) or "")
    assert explain(SSH, 1, "Traceback ...") is None  # the worker itself failed: not the transport
    assert explain(SSH, 0, "") is None


def test_payload_is_deterministic_cached_and_holds_the_worker_code() -> None:
    packages = worker_packages(["auditor.probes.ppo_policy", "auditor.plugins.collectors.models"])
    first = payload.build(packages)
    assert payload.build(packages) is first  # cached while no file changes
    names = zipfile.ZipFile(io.BytesIO(first.data)).namelist()
    assert "auditor/worker/main.py" in names and "auditor/worker/runtimes.py" in names
    assert "auditor/probes/ppo_policy.py" in names and "auditor/plugins/collectors/models.py" in names
    # what the entries import, and nothing else: the MindIR reader because the models collector
    # reads with it; not the other collectors, not the auditor's 3.11-only plugins
    assert "auditor/worker/mindir.py" in names and "auditor/plugins/collectors/host.py" not in names
    assert not any(n.startswith("auditor/plugins/default_") or n.endswith("remote_boot.py") for n in names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert len(set(names)) == len(names)
    payload._cache.clear()
    assert payload.build(packages).sha256 == first.sha256  # same files, same bytes


def test_per_host_limit_runs_hosts_side_by_side_and_caps_each() -> None:
    stacks = {f"s{i}": StackConfig(f"s{i}", "infer", "x", "/p", host=f"h{i % 3}") for i in range(9)}
    hosts = {"h1": HostConfig("h1", ssh="x"), "h2": HostConfig("h2", ssh="y", parallel=1)}
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    lock = threading.Lock()
    gate = threading.Barrier(5, timeout=30)  # h0 and h1 run 2 each, h2 one: 5 at once

    def task(name: str):
        host = stacks[name].host

        def run() -> str:
            with lock:
                running[host] = running.get(host, 0) + 1
                peak[host] = max(peak.get(host, 0), running[host])
            with contextlib.suppress(threading.BrokenBarrierError):
                gate.wait()
                gate.abort()  # tripped by the first five: the others need not wait for a fifth
            with lock:
                running[host] -= 1
            return name

        return run

    size, wrapped = per_host_limits({n: task(n) for n in stacks}, stacks, hosts, parallel=2)
    assert size == 5
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=size) as pool:
        done = [f.result() for f in [pool.submit(fn) for fn in wrapped.values()]]
    assert sorted(done) == sorted(stacks)
    assert peak == {"h0": 2, "h1": 2, "h2": 1}


def test_max_hosts_caps_the_hosts_in_flight_not_their_stacks() -> None:
    """[worker] max_hosts = 2 over six hosts of two stacks each: never more than two hosts at
    once, and a host's second stack runs beside its first without a second host slot."""
    stacks = {f"s{i}": StackConfig(f"s{i}", "infer", "x", "/p", host=f"h{i // 2}") for i in range(12)}
    running: dict[str, int] = {}
    peak_hosts = [0]
    peak_stacks: dict[str, int] = {}
    lock = threading.Lock()
    gate = threading.Barrier(4, timeout=30)  # two hosts, both stacks of each, at once

    def task(name: str):
        host = stacks[name].host

        def run() -> str:
            with lock:
                running[host] = running.get(host, 0) + 1
                peak_stacks[host] = max(peak_stacks.get(host, 0), running[host])
                peak_hosts[0] = max(peak_hosts[0], sum(1 for n in running.values() if n))
            with contextlib.suppress(threading.BrokenBarrierError):
                gate.wait()
                gate.abort()
            with lock:
                running[host] -= 1
            return name

        return run

    size, wrapped = per_host_limits({n: task(n) for n in stacks}, stacks, {}, parallel=2, max_hosts=2)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=size) as pool:
        done = [f.result() for f in [pool.submit(fn) for fn in wrapped.values()]]
    assert sorted(done) == sorted(stacks)
    assert peak_hosts[0] == 2, peak_hosts
    assert max(peak_stacks.values()) == 2  # the barrier of four was met: two hosts, two stacks each


@pytest.mark.faults
def test_with_done_a_host_holds_its_slot_until_what_it_opened_is_closed() -> None:
    """#54: hosts check, fingerprint and config check --hosts kept every host's warm worker open
    to the end: 6 of 6 hosts at once under max_hosts = 3. With ``done`` (which ends them), a
    host is open from its first task until done ran for it, and never more than max_hosts hosts
    are open; a host of three stacks at parallel 2 keeps its one slot throughout (its third
    stack waits for its own host, not for another's), and the stacks come back grouped by host
    whatever their order in the config."""
    stacks = {f"s{i}": StackConfig(f"s{i}", "infer", "x", "/p", host=f"h{i % 6}") for i in range(18)}
    lock = threading.Lock()
    opened: set[str] = set()
    peak = [0]
    closed: dict[str, list[str]] = {}
    ended: dict[str, int] = {}

    def task(name: str):
        host = stacks[name].host

        def run() -> str:
            with lock:
                assert host not in closed, f"{name} ran after its host was closed"
                opened.add(host)  # a warm worker starts there, and stays until done
                peak[0] = max(peak[0], len(opened))
                ended[host] = ended.get(host, 0)
            time.sleep(0.01)
            with lock:
                ended[host] += 1
            return name

        return run

    def done(host: str, names: list[str]) -> None:
        with lock:
            assert ended[host] == 3, (host, ended)  # only once its last task has ended
            opened.discard(host)
            closed[host] = names

    size, wrapped = per_host_limits(
        {n: task(n) for n in stacks}, stacks, {}, parallel=2, max_hosts=3, done=done
    )
    assert list(wrapped) == [f"s{i + 6 * k}" for i in range(6) for k in range(3)]  # grouped by host
    with ThreadPoolExecutor(max_workers=size) as pool:
        results = [f.result(timeout=60) for f in [pool.submit(fn) for fn in wrapped.values()]]
    assert sorted(results) == sorted(stacks)
    assert peak[0] == 3, peak  # three hosts at once: the cap, reached
    assert closed == {f"h{i}": [f"s{i}", f"s{i + 6}", f"s{i + 12}"] for i in range(6)}
