"""What every ``auditor`` command shares: the Context (config, plugins, history database),
exit statuses and how a command fails. The command modules import this; ``auditor.cli.main``
imports them, so imports go one way."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from auditor.cli.exits import EXIT_USAGE
from auditor.common.paths import default_db_url
from auditor.common.redact import redact_text
from auditor.config.tables import Config, ConfigError

if TYPE_CHECKING:
    from auditor.extend.manager import Plugins
    from auditor.history.store import Store

# The config's loader (the database URL rules: SQLAlchemy), the plugins (numpy with the probes)
# and the rollout's environment check are imported by the methods that need them: the command
# line starts without them, and `auditor daemon`, which reads its config in a child
# (auditor.daemon.setup), never loads them at all.

MAX_LIMIT = 10**9
"""--limit beyond this is a typo: no history holds that many rows, and SQL integers overflow."""


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``auditor: MESSAGE`` on stderr and exit (2, a usage or input error, by default)."""
    click.echo(f"auditor: {redact_text(message)}", err=True)
    sys.exit(code)


def config_candidates() -> list[Path]:
    """Where the config is looked for when --config is not given, in order."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path("auditor.toml"), Path(xdg) / "auditor" / "auditor.toml", Path("/etc/auditor/auditor.toml")]


def db_url(value: str) -> str:
    """--db takes an SQLAlchemy URL or a file path (for SQLite)."""
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


class Context:
    """The state of one command line: --config, --db, and what is loaded from them lazily."""

    def __init__(self, config_path: str | None, db: str | None):
        self.config_path = config_path
        self.db = db
        self._plugins: Plugins | None = None
        self._said = 0

    def find_config(self, required: bool = True) -> str | None:
        path = self.config_path or os.environ.get("AUDITOR_CONFIG")
        if path is None:
            found = [p for p in config_candidates() if p.is_file()]
            if not found:
                if not required:
                    return None
                fail(
                    "no config file: pass --config, set AUDITOR_CONFIG, or create one of "
                    + ", ".join(str(p) for p in config_candidates())
                )
            path = str(found[0])
        return path

    def plugins(self, dirs: list[str] | None = None) -> Plugins:
        """The plugins: built-ins, entry points, and the config's plugin directories."""
        from auditor.config.load import plugin_dirs, read_document
        from auditor.extend.manager import Plugins

        if self._plugins is None:
            if dirs is None:
                path = self.find_config(required=False)
                dirs = []
                if path is not None:
                    with contextlib.suppress(ConfigError):  # reported by whoever needs the config
                        dirs = plugin_dirs(read_document(path), path)
            self._plugins = Plugins(dirs)
            self._said = 0
            self.say_plugin_problems()
        return self._plugins

    def say_plugin_problems(self) -> None:
        """Print the plugin problems not printed yet: loading a plugin reports its import
        errors, asking it for its probes (when the config is read) reports a probe module's."""
        if self._plugins is None:
            return
        from auditor.extend.manager import one_line

        for problem in self._plugins.problems[self._said :]:
            click.echo(f"auditor: warning: {one_line(problem)}", err=True)
        self._said = len(self._plugins.problems)

    def load_config(self) -> Config:
        """The config, or ConfigError listing every problem (the daemon's reload keeps the old
        config then, instead of exiting)."""
        from auditor.config.load import parse, plugin_dirs, read_document
        from auditor.policy.env_process import env_problem

        path = self.find_config()
        assert path is not None
        doc = read_document(path)
        plugins = self.plugins(plugin_dirs(doc, path))
        plugins.probes(), plugins.runtimes(), plugins.alert_sinks()  # their problems said before parse's
        self.say_plugin_problems()
        return parse(
            doc,
            path,
            known_probes={n: p.default_params for n, p in plugins.probes().items()},
            runtimes=plugins.runtimes(),
            probe_variants={n: p.variants for n, p in plugins.probes().items()},
            param_schemas={n: p.param_schema for n, p in plugins.probes().items()},
            sink_types={n: t.validate for n, t in plugins.alert_sinks().items()},
            env_problem=env_problem,
        )

    def config(self) -> Config:
        try:
            return self.load_config()
        except ConfigError as exc:
            self.say_plugin_problems()  # an "unknown probe" is often a plugin that did not import
            click.echo(f"auditor: config {exc.source} is not usable:", err=True)
            for e in exc.errors:
                click.echo(f"  {redact_text(e)}", err=True)
            sys.exit(EXIT_USAGE)

    def db_url(self, config: Config | None = None) -> str:
        """--db, else $AUDITOR_DB_URL, else the config's [storage] url, else the default file."""
        from auditor.db import url as urls

        if self.db:
            return db_url(self.db)
        if urls.from_environment():
            return db_url(urls.from_environment() or "")
        if config is not None:
            return config.db_url
        return default_db_url()

    def store(
        self, migrate: bool = True, code: int = EXIT_USAGE, read: bool = False, create: bool | None = None
    ) -> Store:
        """The history database of --db, else of the config's [storage] url (the config is
        only read then); a database that cannot be opened ends the command with ``code``.
        ``read``: a command that only reads reads what it can of a database that cannot be
        migrated (read-only, damaged), after a warning. ``create`` (default: a command that
        migrates and does not only read): an SQLite file that does not exist is made; else
        its absence ends the command and nothing is created."""
        from auditor.db import url as urls
        from auditor.history.store import Store, StoreError

        if create is None:
            create = migrate and not read
        url = self.db_url(None if self.db or urls.from_environment() else self.config())
        try:
            return Store.open(url, create=create) if migrate else Store(url, create=create)
        except StoreError as exc:
            if not read or not exc.reached:
                fail(str(exc), code)
            click.echo(f"auditor: warning: {exc}; reading it as it is", err=True)
        try:
            return Store(url, create=False)
        except StoreError as exc:
            fail(str(exc), code)
