"""Planted secrets, in every form the auditor meets them, must appear nowhere it shows or
keeps anything: not in `ps` (any process of this machine, where the ssh "host" also runs),
not in a command's output or log, not in the daemon's log, not in the history database, not
in the report, not on the Prometheus endpoint.

The forms: a PostgreSQL URL's password as userinfo and as query parameters (``password``,
``sslpassword``); a stack's secret-named environment values and a secret option inside one,
on a stack reached over ssh (tests/sshd.py) and on a local one. The server trusts every
local connection, so the planted passwords are carried everywhere without being needed.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests import postgres_server
from tests.cli import auditor, auditor_argv
from tests.conftest import REPO
from tests.fault_kit import private_tmp, small_config, wait_until
from tests.requires import require
from tests.sshd import free_port, make_sshd, unavailable

pytestmark = pytest.mark.stacks


def planted() -> dict[str, str]:
    """One unique value per form (so a hit names the form that leaked)."""
    return {
        form: f"{form}-{secrets.token_hex(6)}" for form in ("userinfo", "query", "sslquery", "env", "opt")
    }


class PsWatch:
    """Reads every process's command line (what `ps -ef` shows to every user) every 20 ms
    while it runs, and keeps each one that holds a planted secret."""

    def __init__(self, needles: dict[str, str]):
        self.needles = needles
        self.hits: dict[str, str] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                for form, secret in self.needles.items():
                    if secret in cmdline:
                        self.hits[form] = cmdline[:300]
            self.samples += 1
            time.sleep(0.02)

    def __enter__(self) -> PsWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def leaks(text: str, needles: dict[str, str]) -> dict[str, str]:
    """The forms whose secret appears in ``text`` (plain, or hex as bytea rows print)."""
    found = {}
    for form, secret in needles.items():
        for shown in (secret, secret.encode().hex()):
            at = text.find(shown)
            if at >= 0:
                found[form] = text[max(0, at - 120) : at + 60]
    return found


def database_text(server: postgres_server.Server, database: str) -> str:
    """Every row of every table, as PostgreSQL prints it."""
    tables = server.sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'", database
    )
    rows = []
    for (table,) in tables:
        rows += [r[0] for r in server.sql(f'SELECT t::text FROM "{table}" t', database)]
    assert len(rows) > 20, "the run stored little: the check would prove nothing"
    return "\n".join(rows)


@pytest.fixture(scope="module")
def host(stacks, tmp_path_factory):
    require("sshd", unavailable)
    server = make_sshd(tmp_path_factory.mktemp("secrets-sshd"), "secret-host")
    yield server
    server.stop()


def config_with_secrets(tmp: Path, host, url: str, needles: dict[str, str], prometheus_port: int) -> Path:
    """ms20 (train) on the ssh host, lite20 (infer) here; both with planted env secrets."""
    env = f'MS_API_TOKEN = "{needles["env"]}", MS_DEV_OPTIONS = "--jit=1 --password={needles["opt"]}"'
    path = small_config(tmp, interval=3600, ms20_env=env)
    text = path.read_text()
    table = host.host_table()
    hosts = (
        "[hosts.remote]\n"
        f'ssh = "{table["ssh"]}"\nport = {table["port"]}\nidentity_file = "{table["identity_file"]}"\n'
        f"options = {json.dumps(table['options'])}\nconnect_timeout = 5\n"
    )
    text = text.replace("[stacks.ms20]\n", f'{hosts}[stacks.ms20]\nhost = "remote"\n', 1)
    text = text.replace(
        "[stacks.lite20]\n", f"[stacks.lite20]\nenv = {{ {env.replace('MS_API', 'MS_LOCAL_API')} }}\n", 1
    )
    text = text.replace("[storage]\n", f'[storage]\nurl = "{url}"\n', 1)
    text += f"\n[prometheus]\nenabled = true\nport = {prometheus_port}\n"
    path.write_text(text)
    return path


def test_no_planted_secret_appears_anywhere(host, postgres, tmp_path: Path) -> None:
    needles = planted()
    database = f"secrets_{os.getpid()}"
    postgres.create_database(database)
    url = (
        f"postgresql://{postgres.user}:{needles['userinfo']}@127.0.0.1:{postgres.port}/{database}"
        f"?password={needles['query']}&sslpassword={needles['sslquery']}&sslmode=disable"
    )
    port = free_port()
    cfg = config_with_secrets(tmp_path, host, url, needles, port)
    env = private_tmp(tmp_path)
    shown: dict[str, str] = {}

    with PsWatch(needles) as ps:
        done = auditor("--config", str(cfg), "config", "check", env=env)
        shown["config check"] = done.stdout + done.stderr
        assert done.returncode == 0, shown["config check"]
        done = auditor("--config", str(cfg), "audit", "--json", env=env)
        shown["audit --json"] = done.stdout + done.stderr
        assert done.returncode in (0, 1), done.stderr[-3000:]
        report = json.loads(done.stdout)
        assert report["stacks"]["ms20"]["fingerprint"]["connection"]["host"] == "remote"
        environment = report["stacks"]["ms20"]["fingerprint"]["environment"]
        assert environment["MS_API_TOKEN"] == "<redacted>", environment  # it reached the remote worker
        assert environment["MS_DEV_OPTIONS"] == "--jit=1 --password=<redacted>", environment
        done = auditor("--config", str(cfg), "audit", "--no-store", env=env)
        shown["audit"] = done.stdout + done.stderr
        for args in (
            ["runs"],
            ["show", "latest"],
            ["history"],
            ["db", "check"],
            ["db", "current"],
            ["db", "upgrade"],
        ):
            done = auditor("--config", str(cfg), *args, env=env)
            shown[" ".join(args)] = done.stdout + done.stderr
            assert done.returncode in (0, 1), (args, shown[" ".join(args)])
        html = tmp_path / "report.html"
        done = auditor("--config", str(cfg), "report", "--out", str(html), env=env)
        shown["report"] = done.stdout + done.stderr + html.read_text()
        # the daemon: its start log, a cycle in its child, its Prometheus endpoint
        log = tmp_path / "daemon.log"
        with log.open("w") as err:
            daemon = subprocess.Popen(
                auditor_argv("--config", str(cfg), "daemon"),
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            assert wait_until(lambda: "cycle done" in log.read_text(), 600, 0.5), log.read_text()[-3000:]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                shown["prometheus"] = r.read().decode()
            assert "auditor_" in shown["prometheus"]
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=120)
        shown["daemon log"] = log.read_text()
        assert "auditor daemon started" in shown["daemon log"]
    assert ps.samples > 100 and not ps.hits, ps.hits
    # errors that name the database: a server that is not there
    gone = url.replace(f":{postgres.port}/", f":{free_port()}/")
    for args in (["runs"], ["db", "upgrade"], ["db", "check"], ["audit"]):
        done = auditor("--config", str(cfg), *args, env={**env, "AUDITOR_DB_URL": gone}, timeout=300)
        shown[f"unreachable: {' '.join(args)}"] = done.stdout + done.stderr
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    shown["database"] = database_text(postgres, database)
    found = {where: leaks(text, needles) for where, text in shown.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    # and what is shown still says where the history is
    assert f"127.0.0.1:{postgres.port}/{database}" in shown["config check"]
    assert "password=***" in shown["config check"] and "sslpassword=***" in shown["config check"]
