"""Alert sink ``webhook``: an HTTP POST of the alert event's JSON (``Content-Type:
application/json``; the payload is documented in ``auditor.alerts.engine`` and docs/alerts.md).

    [alerts.sinks.ops]
    type = "webhook"
    url = "https://hooks.example.com/auditor"
    timeout = 10                       # seconds per attempt, the whole answer included
    retries = 3                        # further attempts after a failed one, in this notification
    backoff = 1.0                      # seconds before the first retry; doubles each time
    headers = { "X-Team" = "ml-platform" }
    secret_header = "Authorization"    # optional: a header carrying a secret ...
    secret_env = "AUDITOR_WEBHOOK_TOKEN"   # ... read from this environment variable (preferred)
    # secret = "Bearer ..."            # ... or written here (keep the file private)

Each attempt has an overall deadline, ``timeout``: connecting, sending and reading the whole
answer (a server that trickles its answer a byte at a time is cut off there, not read for
ever). Connection errors, timeouts, HTTP 408, 429 and 5xx are retried with backoff; other 4xx
answers are not (the request itself is wrong). After the last retry the event stays
pending and is sent again at the next notification. The secret's value never appears in
logs or errors: they name the header, not its value, and any echo of it is masked.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from auditor import __version__
from auditor.alerts.sinks import SinkType, option_problems

RETRYABLE_STATUS = {408, 429}


class WebhookError(Exception):
    pass


class WebhookSink:
    def __init__(
        self,
        name: str,
        url: str,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 1.0,
        headers: dict[str, str] | None = None,
        secret_header: str | None = None,
        secret: str | None = None,
        sleep: Any = time.sleep,
    ):
        self.name = name
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.headers = dict(headers or {})
        self.secret_header = secret_header
        self._secret = secret
        self._sleep = sleep

    def __repr__(self) -> str:  # never the secret
        return f"WebhookSink({self.name!r}, {_redact_url(self.url)!r})"

    def send(self, event: dict[str, Any]) -> None:
        self.post(json.dumps(event).encode(), str(event.get("event", "")))

    def post(self, body: bytes, event: str) -> None:
        """POST ``body`` (JSON) with the deadline, retries and secret header above; ``event``:
        the ``X-Auditor-Event`` header. Raises WebhookError once every attempt failed."""
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"auditor/{__version__}",
            "X-Auditor-Event": event,
            **self.headers,
        }
        if self.secret_header and self._secret is not None:
            headers[self.secret_header] = self._secret
        where = _redact_url(self.url)
        errors: list[str] = []
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            deadline = _Deadline(self.timeout)
            try:
                with deadline, deadline.opener().open(request, timeout=self.timeout) as response:
                    response.read(65536)
                if deadline.expired:
                    raise TimeoutError("cut off at the deadline")
                return
            except urllib.error.HTTPError as exc:
                errors.append(f"HTTP {exc.code} {exc.reason}")
                exc.close()
                if exc.code < 500 and exc.code not in RETRYABLE_STATUS:
                    break
            except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                if deadline.expired or isinstance(reason, TimeoutError) or "timed out" in str(reason):
                    # the socket's timeout and the deadline are the same seconds: one words both
                    errors.append(f"no complete answer within {self.timeout:g} s")
                else:
                    errors.append(str(reason))
        attempts = len(errors)
        summary = "; ".join(dict.fromkeys(errors))  # same error on every attempt: say it once
        raise WebhookError(self._mask(f"POST {where} failed after {attempts} attempt(s): {summary}"))

    def _mask(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return text


class _Deadline:
    """One attempt's overall deadline. The socket timeout bounds each read, not the answer: a
    server that sends a byte every few seconds keeps a read going for ever. The sockets the
    attempt opens are recorded as they connect (through urllib's own handlers, so proxies work
    as before), and at the deadline they are shut down: the read in progress ends at once. The
    socket itself, not its connection: once the headers are in, urllib takes the socket from
    the connection (the response reads the body through its own reference)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _watched(self, base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        deadline = self

        class Watched(base):  # type: ignore[misc, valid-type]
            def connect(self) -> None:
                super().connect()
                with deadline._lock:
                    deadline._sockets.append(self.sock)
                    expired = deadline.expired
                if expired:
                    deadline._expire()

        return Watched

    def opener(self) -> urllib.request.OpenerDirector:
        deadline = self

        class Http(urllib.request.HTTPHandler):
            def http_open(self, req: urllib.request.Request) -> Any:
                return self.do_open(deadline._watched(http.client.HTTPConnection), req)

        class Https(urllib.request.HTTPSHandler):
            def https_open(self, req: urllib.request.Request) -> Any:
                return self.do_open(
                    deadline._watched(http.client.HTTPSConnection), req, context=self._context
                )

        return urllib.request.build_opener(Http, Https)


def _redact_url(url: str) -> str:
    """The URL without user:password (the query string may hold a token too: dropped)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def validate(options: dict[str, Any]) -> list[str]:
    problems = option_problems(
        options,
        {
            "url": str,
            "timeout": (int, float),
            "retries": int,
            "backoff": (int, float),
            "headers": dict,
            "secret_header": str,
            "secret": str,
            "secret_env": str,
        },
        required=("url",),
    )
    url = options.get("url")
    if isinstance(url, str):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"url: must be an http:// or https:// URL, not {_redact_url(url)!r}")
        elif parts.username is not None or parts.password is not None:
            problems.append(
                "url: user:password@ in the URL is not supported; send credentials with secret_header "
                '(e.g. "Authorization") and secret_env'
            )
    for key, minimum in (("timeout", 0.0), ("retries", 0), ("backoff", 0.0)):
        value = options.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if key == "timeout" and not value > 0:
                problems.append(f"timeout: must be greater than 0, not {value!r}")
            elif not value >= minimum:
                problems.append(f"{key}: must be 0 or more, not {value!r}")
    headers = options.get("headers")
    for key, value in headers.items() if isinstance(headers, dict) else ():
        if not isinstance(value, str):
            problems.append(f"headers.{key}: must be a string, not {type(value).__name__}")
    has_header = "secret_header" in options
    sources = [k for k in ("secret", "secret_env") if k in options]
    if has_header and len(sources) != 1:
        problems.append("secret_header: set exactly one of secret or secret_env with it")
    if sources and not has_header:
        problems.append(f"{sources[0]}: needs secret_header, the header that carries it")
    env = options.get("secret_env")
    if isinstance(env, str) and not os.environ.get(env):
        problems.append(f"secret_env: the environment variable {env} is not set or empty")
    return problems


def create(name: str, options: dict[str, Any]) -> WebhookSink:
    secret = options.get("secret")
    if "secret_env" in options:
        secret = os.environ.get(options["secret_env"])
    return WebhookSink(
        name,
        options["url"],
        timeout=float(options.get("timeout", 10.0)),
        retries=int(options.get("retries", 3)),
        backoff=float(options.get("backoff", 1.0)),
        headers=dict(options.get("headers") or {}),
        secret_header=options.get("secret_header"),
        secret=secret,
    )


SINK_TYPE = SinkType("webhook", "HTTP POST of the alert event's JSON, with retries", validate, create)
