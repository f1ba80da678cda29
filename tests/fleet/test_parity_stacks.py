"""Parity: every command that talks to a stack gives the same answer whether the stacks are on
this machine, behind a real OpenSSH server (tests/sshd.py), or behind the ``command``
transport (an argv prefix, here ``sh -c 'exec "$@"'``). One small config, three variants that
differ only in ``[hosts]`` and each stack's ``host``; each command runs as a user runs it
(``python -m auditor``), and the answers are compared with the host fields left out.

The config has what a remote host used to lose: the deployed-model watch (``[stacks.lite20]
models``, read in lite20's worker with the MindIR reader), a model probe (``[models.policy]``,
a LayerNorm policy exported by the real ms20, with a reference stack), a pair with the PPO
probe, and the example plugin's stack side for ``plugins --check``. The stacks' interpreters
have numpy and their framework and nothing of the auditor: on ssh and command hosts every
module comes in the payload."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests import cli
from tests.conftest import REPO, stack_python
from tests.requires import require
from tests.sshd import make_sshd, unavailable
from tests.user_models import export_user_policy

pytestmark = pytest.mark.stacks

VARIANTS = ("local", "ssh", "command")
HOST_FIELDS = {"connection", "environment"}
"""Fingerprint sections that say where a stack was reached from (the ssh session's environment
is not the auditor's): everything else must be equal."""


def auditor(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """tests.cli.auditor with only the config named here: no AUDITOR_CONFIG or AUDITOR_DB_URL."""
    return cli.auditor(*args, env={"AUDITOR_CONFIG": None, "AUDITOR_DB_URL": None}, timeout=timeout)


def config_text(variant: str, base: Path, sshd) -> str:
    hosts, where = "", ""
    if variant == "ssh":
        t = sshd.host_table()
        options = ", ".join(json.dumps(o) for o in t["options"])
        hosts = (
            f'[hosts.box]\nssh = "{t["ssh"]}"\nport = {t["port"]}\nidentity_file = "{t["identity_file"]}"\n'
            f"options = [{options}]\n"
        )
        where = 'host = "box"\n'
    elif variant == "command":
        hosts = '[hosts.box]\ncommand = ["sh", "-c", "exec \\"$@\\"", "sh"]\n'
        where = 'host = "box"\n'
    return f"""{hosts}
[storage]
url = "sqlite:///{base / variant / "history.db"}"

[stacks.ms20]
role = "train"
runtime = "mindspore"
python = "{stack_python("ms20")}"
{where}
[stacks.ms20g]
role = "infer"
runtime = "mindspore-graph"
python = "{stack_python("ms20")}"
{where}
[stacks.lite20]
role = "infer"
runtime = "mindspore-lite"
python = "{stack_python("lite20")}"
models = ["{base / "served"}/*.mindir"]
{where}
[[pairs]]
train = "ms20"
infer = "lite20"
probes = ["ppo_policy"]

[probes.ppo_policy]
variants = ["fp32"]
params = {{ batch = 8 }}

[models.policy]
path = "{base / "served" / "policy.mindir"}"
reference = "ms20g"
stacks = ["lite20"]

[latency]
batches = []
warmup = 1
iterations = 5

[rollout]
enabled = false

[schedule]
interval = "1d"
run_on_start = true

[daemon]
state_dir = "{base / variant / "state"}"
stop_timeout = 0
"""


@pytest.fixture(scope="module")
def setup(stacks, tmp_path_factory):
    require("sshd", unavailable)
    base = tmp_path_factory.mktemp("parity")
    (base / "served").mkdir()
    export_user_policy("ms20", base / "served" / "policy.mindir")
    sshd = make_sshd(base / "sshd", "box")
    configs = {}
    for variant in VARIANTS:
        (base / variant).mkdir()
        configs[variant] = base / variant / "auditor.toml"
        configs[variant].write_text(config_text(variant, base, sshd))
    yield base, configs
    sshd.stop()


_answers: dict[tuple[str, str], object] = {}


def answer(setup, variant: str, command: str):
    """Each command's answer per variant, run once for all the tests below."""
    key = (variant, command)
    if key not in _answers:
        base, configs = setup
        _answers[key] = COMMANDS[command](configs[variant], base / variant)
    return _answers[key]


def _json_run(config: Path, *args: str) -> tuple[int, object, str]:
    done = auditor("--config", str(config), *args)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        said = f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        pytest.fail(f"{' '.join(args)}: not JSON (exit {done.returncode}):\n{said}")
    return done.returncode, doc, done.stderr


def _audit(config: Path, _dir: Path):
    return _json_run(config, "audit", "--json")


def _fingerprint(config: Path, _dir: Path):
    return _json_run(config, "fingerprint", "--json")


def _check(config: Path, _dir: Path):
    model = config.parent.parent / "served" / "policy.mindir"
    return _json_run(
        config, "check", "--model", str(model), "--stack", "lite20", "--stack", "ms20g", "--load", "--json"
    )


def _golden(config: Path, where: Path):
    out = where / "policy.golden.npz"
    done = auditor(
        "--config", str(config), "golden", "record", "policy", "--stack", "ms20g", "--out", str(out)
    )
    assert "Traceback" not in done.stderr
    with np.load(out, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "meta"}
    return done.returncode, arrays, done.stderr


def _hosts(config: Path, _dir: Path):
    return _json_run(config, "hosts", "check", "--json")


def _plugins(config: Path, _dir: Path):
    return _json_run(config, "plugins", "--check", "--all", "--json")


def _config_check(config: Path, _dir: Path):
    done = auditor("--config", str(config), "config", "check", "--hosts")
    assert "Traceback" not in done.stderr
    return done.returncode, done.stdout, done.stderr


def _daemon(config: Path, where: Path):
    """`auditor daemon`, until its first cycle (run_on_start) is stored; then SIGTERM."""
    log = where / "daemon.log"
    db = where / "history.db"
    with log.open("w") as err:
        proc = subprocess.Popen(
            cli.auditor_argv("--config", str(config), "daemon"),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            if db.exists():
                with sqlite3.connect(db) as c:
                    done = c.execute(
                        "SELECT id FROM runs WHERE status = 'complete' AND note IS NULL ORDER BY id DESC"
                    ).fetchall()
                if len(done) >= 2:  # the audit's run, then the daemon's
                    break
            time.sleep(1)
        else:
            pytest.fail("no cycle from the daemon:\n" + log.read_text()[-3000:])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    code, doc, err = _json_run(config, "show", "latest", "--format", "json")
    return code, doc, log.read_text()


COMMANDS = {
    "audit": _audit,
    "fingerprint": _fingerprint,
    "check": _check,
    "golden": _golden,
    "hosts": _hosts,
    "plugins": _plugins,
    "config": _config_check,
    "daemon": _daemon,
}


# -- what is compared ----------------------------------------------------------------------------


def _result_view(r: dict) -> tuple:
    outputs = tuple(
        (
            o["output"],
            o["passed"],
            tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in o["metrics"].items())),
        )
        for o in r.get("outputs", [])
    )
    return (r["pair"], r["probe"], r["variant"], r["status"], outputs)


def _findings_view(doc: dict) -> set[tuple]:
    return {(f["kind"], f["severity"], f["subject"], f["key"]) for f in doc["findings"]}


@pytest.mark.parametrize("variant", VARIANTS[1:])
def test_audit(setup, variant):
    code, doc, err = answer(setup, "local", "audit")
    other_code, other, other_err = answer(setup, variant, "audit")
    assert (other_code, other["outcome"], other["statuses"]) == (code, doc["outcome"], doc["statuses"]), (
        other_err
    )
    assert sorted(map(_result_view, other["results"])) == sorted(map(_result_view, doc["results"]))
    assert _findings_view(other) == _findings_view(doc)
    assert other["unchecked"] == doc["unchecked"] == []
    # what a remote host used to lose: the watch and the model probe ran there too
    watched = other["stacks"]["lite20"]["fingerprint"]["models"]
    assert list(watched["files"]) == [str(setup[0] / "served" / "policy.mindir")] and watched["unknown"] == {}
    assert any(r["probe"] == "policy" and r["status"] != "error" for r in other["results"])
    assert {s["host"] for s in other["stacks"].values()} == {"box"} and doc["stacks"]["ms20"][
        "host"
    ] == "local"


@pytest.mark.parametrize("variant", VARIANTS[1:])
def test_fingerprint(setup, variant):
    code, doc, _ = answer(setup, "local", "fingerprint")
    other_code, other, err = answer(setup, variant, "fingerprint")
    assert other_code == code == 0, err
    for stack, fp in doc.items():
        theirs = other[stack]
        assert {k: v for k, v in theirs.items() if k not in HOST_FIELDS} == {
            k: v for k, v in fp.items() if k not in HOST_FIELDS
        }, stack
        assert theirs["connection"]["host"] == "box"


@pytest.mark.parametrize("variant", VARIANTS[1:])
def test_check(setup, variant):
    code, doc, _ = answer(setup, "local", "check")
    other_code, other, err = answer(setup, variant, "check")

    def view(d: dict) -> list:
        return sorted(
            (
                v["stack"],
                v["status"],
                # each variant audited into its own history, maybe in another minute
                STORED_AT.sub("run N on DATE", v["reason"]),
                (v.get("load") or {}).get("ok"),
                str((v.get("load") or {}).get("outputs")),
            )
            for v in d["verdicts"]
        )

    assert other_code == code and view(other) == view(doc), (err, view(other), view(doc))


STORED_AT = re.compile(r"run \d+ on \d{4}-\d\d-\d\d \d\d:\d\d")
"""Where a verdict cites a stored audit: its run id and time."""


@pytest.mark.parametrize("variant", VARIANTS[1:])
def test_golden_record(setup, variant):
    code, arrays, _ = answer(setup, "local", "golden")
    other_code, other, err = answer(setup, variant, "golden")
    assert other_code == code == 0, err
    assert sorted(other) == sorted(arrays)
    for k in arrays:
        np.testing.assert_array_equal(other[k], arrays[k])


@pytest.mark.parametrize("variant", VARIANTS)
def test_hosts_check(setup, variant):
    code, doc, err = answer(setup, variant, "hosts")
    assert code == 0, err
    stacks = sorted((s["stack"], s["ok"], s["runtime"]) for h in doc for s in h["stacks"])
    assert stacks == [
        ("lite20", True, "mindspore-lite 2.0.0"),
        ("ms20", True, "mindspore 2.0.0"),
        ("ms20g", True, "mindspore 2.0.0"),
    ]


@pytest.mark.parametrize("variant", VARIANTS[1:])
def test_plugins_check(setup, variant):
    code, doc, _ = answer(setup, "local", "plugins")
    other_code, other, err = answer(setup, variant, "plugins")

    def view(d: dict) -> list:
        return sorted((c["module"], c["stack"], c["python"], c["error"]) for c in d["check"]["checks"])

    assert other["check"]["stack_errors"] == doc["check"]["stack_errors"] == {}
    assert other_code == code == 0 and view(other) == view(doc), err
    modules = {c["module"] for c in doc["check"]["checks"]}
    assert {"auditor_discrete_policy.policy", "auditor.plugins.collectors.models"} <= modules


@pytest.mark.parametrize("variant", VARIANTS)
def test_config_check_hosts(setup, variant):
    code, out, err = answer(setup, variant, "config")
    assert code == 0, out + err
    assert out.count("(Python 3.7.") == 3 and "not checked" not in out


@pytest.mark.parametrize("variant", VARIANTS[1:])
def test_daemon_cycle(setup, variant):
    answer(setup, "local", "audit"), answer(setup, variant, "audit")  # the daemon's run comes second
    _, doc, _ = answer(setup, "local", "daemon")
    _, other, log = answer(setup, variant, "daemon")

    def view(d: dict) -> tuple:
        return (
            d["run"]["outcome"],
            sorted((r["pair"], r["probe"], r["variant"], r["status"]) for r in d["results"]),
        )

    assert view(other) == view(doc), log[-3000:]
    assert view(doc)[0] == answer(setup, "local", "audit")[1]["outcome"]
