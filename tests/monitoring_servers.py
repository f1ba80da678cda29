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


def _start(argv: list[str], url: str, log: Path, what: str, deadline: float = 60.0) -> Server:
    out = log.open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    server = Server(proc, url, log)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {server.said()}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"{what} not ready within {deadline:g} s: {server.said()}")


def start_alertmanager(folder: Path, config: str) -> Server:
    """An Alertmanager with ``config`` (YAML), its data in ``folder``, no cluster."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alertmanager.yml").write_text(config)
    port = free_port()
    argv = [
        ALERTMANAGER,
        f"--config.file={folder / 'alertmanager.yml'}",
        f"--storage.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    return _start(argv, f"http://127.0.0.1:{port}", folder / "alertmanager.log", "alertmanager")


def start_prometheus(folder: Path, config: str) -> Server:
    """A Prometheus with ``config`` (YAML; rule files relative to ``folder``), its TSDB there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prometheus.yml").write_text(config)
    port = free_port()
    argv = [
        PROMETHEUS,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return _start(argv, f"http://127.0.0.1:{port}", folder / "prometheus.log", "prometheus")
