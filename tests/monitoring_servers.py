"""A real Prometheus and a real Alertmanager (Debian's prometheus and prometheus-alertmanager
packages, installed by scripts/setup) started on 127.0.0.1 for one test, in its own directory,
and stopped with it. Tests reach them through their HTTP APIs only."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.sshd import free_port

PROMETHEUS, ALERTMANAGER, PROMTOOL = "prometheus", "prometheus-alertmanager", "promtool"


def missing(*binaries: str) -> str | None:
    """Why these programs cannot be run here, or None (for tests.requires.require)."""
    gone = [b for b in binaries if shutil.which(b) is None]
    return (
        f"{', '.join(gone)} not on PATH (apt-get install prometheus prometheus-alertmanager)"
        if gone
        else None
    )


def http(url: str, body: Any = None, method: str | None = None, timeout: float = 10.0) -> Any:
    """GET (or POST ``body`` as JSON) and the decoded JSON answer (None for an empty one)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw) if raw.strip() else None


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def said(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _start(
    program: str, folder: Path, config: str, storage: str, *flags: str, deadline: float = 60.0
) -> Server:
    """``program`` with ``config`` written to ``folder``, its data there (``storage``: the flag
    naming that folder), listening on a free loopback port; returned once ``/-/ready`` says so."""
    folder.mkdir(parents=True, exist_ok=True)
    name = Path(program).name
    (folder / f"{name}.yml").write_text(config)
    port = free_port()
    argv = [
        program,
        f"--config.file={folder / f'{name}.yml'}",
        f"{storage}={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        *flags,
    ]
    url, log = f"http://127.0.0.1:{port}", folder / f"{name}.log"
    out = log.open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    server = Server(proc, url, log)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}: {server.said()}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"{name} not ready within {deadline:g} s: {server.said()}")


def start_alertmanager(folder: Path, config: str) -> Server:
    """An Alertmanager with ``config`` (YAML), its data in ``folder``, no cluster."""
    return _start(ALERTMANAGER, folder, config, "--storage.path", "--cluster.listen-address=")


def start_prometheus(folder: Path, config: str) -> Server:
    """A Prometheus with ``config`` (YAML), its TSDB in ``folder``."""
    return _start(PROMETHEUS, folder, config, "--storage.tsdb.path")
