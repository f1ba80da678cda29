"""The daemon's setup child (``python -m auditor.cli.daemon_setup``): reads the config and checks
the history database as ``auditor`` commands do, and answers with a ``DaemonSetup`` or a
``SetupFailure`` (auditor.daemon.setup), so that the daemon itself never loads the plugins,
numpy or SQLAlchemy. One request on stdin, one pickled reply on stdout; what a library prints
goes to stderr."""

from __future__ import annotations

import logging
import os
import pickle
import sys

from auditor.alerts.engine import AlertEngine, build_sinks
from auditor.cli.context import Context
from auditor.common.redact import redact_text
from auditor.config.tables import ConfigError
from auditor.daemon.setup import _HEAD, DaemonSetup, RuntimeInfo, SetupFailure, write_frame
from auditor.extend.manager import one_line
from auditor.history.store import Store, StoreError


class _Said(logging.Handler):
    """What the setup logs (a sink that cannot be built, say): handed to the daemon to log."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(redact_text(record.getMessage()))


def setup(config_path: str | None, db: str | None) -> DaemonSetup | SetupFailure:
    said = _Said()
    logging.getLogger().addHandler(said)
    context = Context(config_path, db)
    try:
        config = context.load_config()
    except ConfigError as exc:
        errors = tuple(redact_text(e) for e in exc.errors)
        lines = (f"auditor: config {exc.source} is not usable:", *(f"  {e}" for e in errors))
        return SetupFailure(lines, 2, tuple(_problems(context)), str(exc.source), errors)
    plugins = context.plugins()
    url = context.db_url(config)
    try:
        store = Store.open(url, config.auditor_id)
    except StoreError as exc:
        return SetupFailure((f"auditor: cannot start: {exc}",), 1, tuple(_problems(context)))
    try:
        sinks = build_sinks(config.alerts, plugins.alert_sinks())
        alerts = AlertEngine(store.engine, config.alerts, sinks, auditor_id=store.auditor_id)
        open_alerts = alerts.open_counts()
        return DaemonSetup(
            config,
            url,
            store.display_url,
            store.auditor_id,
            list(plugins.dirs),
            {n: RuntimeInfo(r.worker_class, r.cold) for n, r in plugins.runtimes().items()},
            open_alerts,
            [*_problems(context), *said.lines],
        )
    except StoreError as exc:
        return SetupFailure((f"auditor: cannot start: {exc}",), 1, tuple(_problems(context)))
    finally:
        store.close()


def _problems(context: Context) -> list[str]:
    plugins = context._plugins  # only those already loaded: a config that failed may have none
    return [one_line(p) for p in plugins.problems] if plugins is not None else []


def main() -> int:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the reply
    stdin = sys.stdin.buffer
    head = stdin.read(_HEAD.size)
    (n,) = _HEAD.unpack(head)
    request = pickle.loads(stdin.read(n))  # our own parent: trusted
    try:
        reply = setup(request.get("config_path"), request.get("db"))
    except Exception as exc:  # a bug: said in one line, not a traceback in the daemon's log
        reply = SetupFailure((f"auditor: reading the config failed: {type(exc).__name__}: {exc}",), 1)
    write_frame(out, reply)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
