"""The built-in alert sinks against real endpoints: an HTTP server on loopback (answering,
failing at first, hanging), scripts run by the exec sink, a JSON-lines file, the log."""

from __future__ import annotations

import json
import logging
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from auditor.plugins import sink_exec, sink_jsonl, sink_log, sink_webhook
from auditor.plugins.sink_webhook import WebhookError, WebhookSink

from auditor.config.load import parse
from auditor.config.tables import ConfigError
from auditor.extend.manager import Plugins

SECRET = "s3cr3t-token-value"


def event(kind: str = "opened", severity: str = "critical") -> dict:
    return {
        "schema": "auditor.alert/1",
        "event": kind,
        "alert": {
            "id": 7,
            "key": "ms210->lite20/ppo_policy/fp32/incompatible",
            "state": "resolved" if kind == "resolved" else "open",
            "kind": "incompatible",
            "severity": severity,
            "subject": "ms210->lite20",
            "message": "lite20 cannot load the MindIR exported by ms210",
            "details": {"probe": "ppo_policy"},
        },
        "run": {"id": 3, "status": "complete", "outcome": "incompatible"},
        "host": "h",
        "auditor_version": "0.1.0",
        "created_at": "2026-12-02T10:00:00Z",
    }


class Server:
    """A loopback HTTP server: ``fail_first`` answers 500 that many times, ``hang`` never answers."""

    def __init__(
        self,
        fail_first: int = 0,
        hang: bool = False,
        status: int = 200,
        trickle: float = 0.0,
        body_only: bool = False,
    ):
        """``trickle``: answer one byte every that many seconds (each read comes in time, the
        answer never does); ``body_only``: the headers at once, then the body trickles."""
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.fail_first, self.hang, self.status, self.trickle = fail_first, hang, status, trickle
        self.body_only = body_only
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((dict(self.headers), body))
                if outer.hang:
                    outer.release.wait(30)
                    return
                if outer.trickle:
                    answer = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000  # headers without end
                    if outer.body_only:
                        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                        self.wfile.flush()
                        answer = b"a" * 100_000
                    for byte in answer:
                        if outer.release.wait(outer.trickle):
                            return
                        try:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                        except OSError:  # the client gave up: what the test wants
                            return
                    return
                code = 500 if len(outer.requests) <= outer.fail_first else outer.status
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory():
    servers: list[Server] = []

    def make(**kwargs: object) -> Server:
        s = Server(**kwargs)  # type: ignore[arg-type]
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


# -- webhook -------------------------------------------------------------------------------


def test_webhook_posts_the_event_with_headers_and_secret(server_factory):
    server = server_factory()
    options = {
        "url": server.url,
        "headers": {"X-Team": "ml"},
        "secret_header": "Authorization",
        "secret": SECRET,
    }
    assert sink_webhook.validate(options) == []
    sink_webhook.create("ops", options).send(event())
    (headers, body) = server.requests[0]
    assert json.loads(body) == event()
    assert headers["Content-Type"] == "application/json"
    assert headers["Authorization"] == SECRET
    assert headers["X-Team"] == "ml"
    assert headers["X-Auditor-Event"] == "opened"


def test_webhook_retries_a_failing_server_with_backoff(server_factory):
    server = server_factory(fail_first=2)
    sleeps: list[float] = []
    sink = WebhookSink("ops", server.url, timeout=5, retries=3, backoff=0.5, sleep=sleeps.append)
    sink.send(event())
    assert len(server.requests) == 3  # two 500s, then 200
    assert sleeps == [0.5, 1.0]
    assert all(json.loads(body) == event() for _, body in server.requests)


def test_webhook_gives_up_after_the_retries_and_says_why(server_factory):
    server = server_factory(fail_first=100)
    sink = WebhookSink("ops", server.url, timeout=5, retries=2, backoff=0, sleep=lambda s: None)
    with pytest.raises(WebhookError, match=r"failed after 3 attempt\(s\): HTTP 500"):
        sink.send(event())
    assert len(server.requests) == 3


def test_webhook_does_not_retry_a_client_error(server_factory):
    server = server_factory(status=400)
    sink = WebhookSink("ops", server.url, retries=3, backoff=0, sleep=lambda s: None)
    with pytest.raises(WebhookError, match="HTTP 400"):
        sink.send(event())
    assert len(server.requests) == 1


def test_webhook_times_out_on_a_hanging_server(server_factory):
    server = server_factory(hang=True)
    sink = WebhookSink("ops", server.url, timeout=0.5, retries=1, backoff=0, sleep=lambda s: None)
    with pytest.raises(WebhookError, match=r"no complete answer within 0.5 s"):
        sink.send(event())
    assert len(server.requests) == 2  # two attempts that each reached their deadline, not a hang


@pytest.mark.faults
def test_webhook_gives_up_on_a_server_that_trickles_its_answer(server_factory):
    """A server that answers one byte every 0.3 s: each read arrives within the 1 s timeout,
    the answer never completes. Each attempt has an overall deadline (the sink's timeout), so
    the sink gives up after its attempts instead of reading forever (a daemon stopped auditing)."""
    server = server_factory(trickle=0.3)
    sink = WebhookSink("ops", server.url, timeout=1.0, retries=1, backoff=0, sleep=lambda s: None)
    done: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(done, lambda: sink.send(event())), daemon=True)
    thread.start()
    thread.join(60)  # far beyond two attempts of 1 s: reaching it means a read without end
    assert not thread.is_alive(), "the sink is still reading the trickle"
    [error] = done
    assert isinstance(error, WebhookError) and "no complete answer within 1 s" in str(error)
    assert len(server.requests) == 2


@pytest.mark.faults
def test_webhook_gives_up_on_a_body_that_trickles_after_the_headers(server_factory):
    """#54: the headers at once, then one byte of the body every 0.3 s. urllib drops its
    reference to the socket once the headers are in, so a deadline that shut the connection's
    socket had nothing to shut: one cycle took 75 s at a 20 s interval, and no delivery
    failure was recorded. Each attempt ends at its deadline here too."""
    server = server_factory(trickle=0.3, body_only=True)
    sink = WebhookSink("ops", server.url, timeout=1.0, retries=1, backoff=0, sleep=lambda s: None)
    done: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(done, lambda: sink.send(event())), daemon=True)
    thread.start()
    thread.join(60)  # two deadlines of 1 s, not the body's 30,000 s
    assert not thread.is_alive(), "the sink is still reading the trickling body"
    [error] = done
    assert isinstance(error, WebhookError) and "no complete answer within 1 s" in str(error), error
    assert len(server.requests) == 2


def _catch(into: list[BaseException], call) -> None:
    try:
        call()
    except BaseException as exc:
        into.append(exc)


def test_webhook_connection_refused(server_factory):
    server = server_factory()
    url = server.url
    server.close()
    sink = WebhookSink("ops", url, timeout=2, retries=1, backoff=0, sleep=lambda s: None)
    with pytest.raises(WebhookError, match="refused"):
        sink.send(event())


def test_webhook_secret_never_in_errors_or_logs(server_factory, caplog, monkeypatch):
    """The secret comes from the environment; the server fails; nothing logged or raised
    holds the secret, though the server did receive it."""
    caplog.set_level(logging.DEBUG)
    server = server_factory(fail_first=100)
    monkeypatch.setenv("HOOK_TOKEN", SECRET)
    options = {
        "url": f"{server.url}?token={SECRET}",
        "secret_header": "X-Token",
        "secret_env": "HOOK_TOKEN",
        "retries": 0,
    }
    assert sink_webhook.validate(options) == []
    sink = sink_webhook.create("ops", options)
    with pytest.raises(WebhookError) as err:
        sink.send(event())
    assert server.requests[0][0]["X-Token"] == SECRET
    assert SECRET not in str(err.value) and SECRET not in repr(sink)
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, ["url: is required"]),
        ({"url": "ftp://x/y"}, ["url: must be an http:// or https:// URL, not 'ftp://x/y'"]),
        ({"url": "http://h/", "timeout": 0}, ["timeout: must be greater than 0, not 0"]),
        ({"url": "http://h/", "retries": -1}, ["retries: must be 0 or more, not -1"]),
        ({"url": "http://h/", "retries": True}, ["retries: must be int, not bool True"]),
        ({"url": "http://h/", "secret": "x"}, ["secret: needs secret_header, the header that carries it"]),
        (
            {"url": "http://h/", "secret_header": "A"},
            ["secret_header: set exactly one of secret or secret_env with it"],
        ),
        (
            {"url": "http://h/", "secret_header": "A", "secret_env": "AUDITOR_TEST_UNSET_VAR"},
            ["secret_env: the environment variable AUDITOR_TEST_UNSET_VAR is not set or empty"],
        ),
        ({"url": "http://h/", "headers": {"A": 1}}, ["headers.A: must be a string, not int"]),
        (
            {"url": f"https://u:{SECRET}@h/"},
            [
                "url: user:password@ in the URL is not supported; send credentials "
                'with secret_header (e.g. "Authorization") and secret_env'
            ],
        ),
        (
            {"url": "http://h/", "bogus": 1},
            [
                "bogus: unknown option (expected one of: backoff, headers, "
                "retries, secret, secret_env, secret_header, timeout, url, min_severity)"
            ],
        ),
    ],
)
def test_webhook_validation(options, expected):
    assert sink_webhook.validate(options) == expected


def test_a_secret_in_the_config_is_not_echoed_by_validation():
    problems = sink_webhook.validate(
        {"url": "http://h/", "secret": SECRET, "secret_header": "A", "secret_env": "X"}
    )
    assert problems and not any(SECRET in p for p in problems)


# -- exec ----------------------------------------------------------------------------------


def script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_exec_gets_the_event_on_stdin_and_in_its_environment(tmp_path):
    out = tmp_path / "got.json"
    cmd = script(
        tmp_path,
        "hook.sh",
        f'cat > {out}\necho "$AUDITOR_ALERT_EVENT $AUDITOR_ALERT_KEY '
        f'$AUDITOR_ALERT_SEVERITY $EXTRA" > {out}.env\n',
    )
    options = {"command": [cmd], "env": {"EXTRA": "yes"}}
    assert sink_exec.validate(options) == []
    sink_exec.create("pager", options).send(event())
    assert json.loads(out.read_text()) == event()
    assert (tmp_path / "got.json.env").read_text().split() == [
        "opened",
        "ms210->lite20/ppo_policy/fp32/incompatible",
        "critical",
        "yes",
    ]


def test_exec_command_as_a_string_is_split_like_a_shell(tmp_path):
    out = tmp_path / "args"
    cmd = script(tmp_path, "args.sh", f'printf "%s|" "$@" > {out}\ncat > /dev/null\n')
    sink_exec.create("x", {"command": f"{cmd} --team 'ml platform'"}).send(event())
    assert out.read_text() == "--team|ml platform|"


def test_exec_failure_carries_the_exit_status_and_stderr(tmp_path):
    cmd = script(tmp_path, "fail.sh", 'cat > /dev/null\necho "queue full" >&2\nexit 3\n')
    with pytest.raises(RuntimeError, match="exited with status 3: queue full"):
        sink_exec.create("x", {"command": [cmd]}).send(event())


def test_exec_timeout_kills_the_command_and_what_it_started(tmp_path):
    pidfile = tmp_path / "child.pid"
    cmd = script(tmp_path, "hang.sh", f"sleep 60 &\necho $! > {pidfile}\nwait\n")
    with pytest.raises(TimeoutError, match="did not finish within 0.5 s"):
        sink_exec.create("x", {"command": [cmd], "timeout": 0.5}).send(event())
    child = int(pidfile.read_text())
    assert _ends(child), f"{child} (what the command started) outlived the kill"


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may linger where pid 1 does not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ends(pid: int, polls: int = 200) -> bool:
    """Whether ``pid`` ends while it is watched (polled every 50 ms, 200 times): a kill already
    sent lands a moment later, and reading at once would race it."""
    for _ in range(polls):
        if not _running(pid):
            return True
        time.sleep(0.05)
    return not _running(pid)


def test_exec_validation(tmp_path):
    assert sink_exec.validate({}) == ["command: is required"]
    assert sink_exec.validate({"command": []}) == [
        "command: must be a non-empty list of strings (the program, then its arguments)"
    ]
    assert sink_exec.validate({"command": ["/nonexistent/hook"]}) == [
        "command: '/nonexistent/hook' is not an executable file or a program on PATH"
    ]
    assert sink_exec.validate({"command": "true", "timeout": 0}) == ["timeout: must be greater than 0, not 0"]
    assert sink_exec.validate({"command": "true", "env": {"A": 1}}) == ["env.A: must be a string, not int"]


# -- jsonl and log -------------------------------------------------------------------------


def test_jsonl_appends_one_line_per_event(tmp_path):
    path = tmp_path / "sub" / "alerts.jsonl"
    sink = sink_jsonl.create("file", {"path": str(path)})
    sink.send(event("opened"))
    sink.send(event("resolved"))
    lines = path.read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["opened", "resolved"]


def test_jsonl_validation(monkeypatch, tmp_path):
    assert sink_jsonl.validate({}) == ["path: is required"]
    assert sink_jsonl.validate({"path": "relative.jsonl"}) == [
        "path: must be an absolute path, not 'relative.jsonl'"
    ]
    monkeypatch.setenv("ALERT_DIR", str(tmp_path))
    assert sink_jsonl.validate({"path": "$ALERT_DIR/a.jsonl"}) == []
    assert sink_jsonl.create("f", {"path": "$ALERT_DIR/a.jsonl"}).path == tmp_path / "a.jsonl"


def test_log_sink_level_follows_severity(caplog):
    caplog.set_level(logging.INFO, logger="auditor.alerts")
    sink = sink_log.create("log", {})
    sink.send(event("opened", "critical"))
    sink.send(event("reminder", "warning"))
    sink.send(event("resolved", "critical"))
    levels = [(r.levelname, r.getMessage().split(" [")[0]) for r in caplog.records]
    assert levels == [("CRITICAL", "alert opened"), ("WARNING", "alert reminder"), ("INFO", "alert resolved")]
    assert "ms210->lite20/ppo_policy/fp32/incompatible" in caplog.records[0].getMessage()


# -- registration and config ---------------------------------------------------------------


def test_builtin_sink_types_are_registered_through_the_hook():
    types = Plugins(entry_points=False).alert_sinks()
    assert {"log", "jsonl", "webhook", "exec"} <= set(types)
    assert types["webhook"].validate is sink_webhook.validate


def _doc(sinks: dict) -> dict:
    return {
        "stacks": {
            "tr": {"role": "train", "runtime": "mindspore", "python": "/opt/tr/bin/python"},
            "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/opt/inf/bin/python"},
        },
        "pairs": [{"train": "tr", "infer": "inf", "probes": ["ppo_policy"]}],
        "alerts": {"sinks": sinks},
    }


def test_config_reports_sink_problems_with_key_paths():
    types = {n: t.validate for n, t in Plugins(entry_points=False).alert_sinks().items()}
    with pytest.raises(ConfigError) as err:
        parse(
            _doc(
                {
                    "ops": {"type": "webhook", "url": "ftp://x", "timeout": "soon"},
                    "page": {"type": "pager"},
                    "file": {"type": "jsonl", "min_severity": "loud"},
                    "notatable": 3,
                }
            ),
            sink_types=types,
        )
    assert sorted(err.value.errors) == sorted(
        [
            "alerts.sinks.ops.timeout: must be number, not str 'soon'",
            "alerts.sinks.ops.url: must be an http:// or https:// URL, not 'ftp://x'",
            "alerts.sinks.page.type: unknown sink type 'pager' "
            "(known: alertmanager, exec, jsonl, log, webhook)",
            "alerts.sinks.file.min_severity: must be one of info, warning, error, critical, not 'loud'",
            "alerts.sinks.file.path: is required",
            "alerts.sinks.notatable: must be a table with type = ... and the sink's options",
        ]
    )


def test_config_keeps_sink_options():
    types = {n: t.validate for n, t in Plugins(entry_points=False).alert_sinks().items()}
    cfg = parse(
        _doc({"ops": {"type": "webhook", "url": "https://h/x", "retries": 1, "min_severity": "error"}}),
        sink_types=types,
    )
    sink = cfg.alerts.sinks["ops"]
    assert (sink.type, sink.min_severity, sink.options) == (
        "webhook",
        "error",
        {"url": "https://h/x", "retries": 1},
    )
