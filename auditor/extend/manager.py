"""Finding, loading and asking plugins.

Load order (later plugins cannot replace earlier names, they are reported as conflicts):
1. the built-ins, ``auditor.plugins.default_*``, through the same hooks as everyone else;
2. installed packages exposing the ``auditor`` entry-point group, sorted by name;
3. the ``[plugins] dirs`` of auditor.toml, in order; each ``*.py`` file and each package
   (a folder with ``__init__.py``) in a directory is one plugin.

A plugin that fails to import, implements a hook that does not exist, or whose hook raises
is recorded in ``problems`` and skipped; it never stops the auditor.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from auditor import __version__, hookspecs
from auditor.extend.probe_spec import ProbeSpec, single_file_problem
from auditor.runtime import RuntimeSpec

if TYPE_CHECKING:
    import click

    from auditor.config.tables import Config
    from auditor.stacks.session import Reach
    from auditor.stacks.warm import WarmPool

ENTRY_POINT_GROUP = "auditor"


def _cached(method: Callable[[Plugins], Any]) -> Any:
    """Ask a hook once per Plugins object, so its problems are reported once."""

    def wrapper(self: Plugins) -> Any:
        if method.__name__ not in self._cache:
            self._cache[method.__name__] = method(self)
        return self._cache[method.__name__]

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


BUILTINS = (
    "auditor.plugins.default_probes",
    "auditor.plugins.default_runtimes",
    "auditor.plugins.default_comparators",
    "auditor.plugins.default_sinks",
    "auditor.plugins.default_collectors",
    "auditor.plugins.default_rules",
)


@dataclass
class PluginInfo:
    name: str
    version: str
    source: str  # "built-in", "entry point (dist)" or the file/folder it was loaded from
    builtin: bool
    hooks: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "source": self.source,
            "builtin": self.builtin,
            "hooks": self.hooks,
            "error": self.error,
        }


class Plugins:
    """The loaded plugins and typed access to what their hooks return."""

    def __init__(
        self,
        dirs: Iterable[str | Path] = (),
        entry_points: bool = True,
        builtins: Iterable[str] = BUILTINS,
    ):
        dirs = [str(d) for d in dirs]
        self.dirs = dirs
        """The plugin directories, as given (a daemon's cycle process loads the same ones)."""
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        self.problems: list[str] = []
        self._cache: dict[str, Any] = {}
        for name in builtins:
            self._load(name, lambda name=name: importlib.import_module(name), "built-in", __version__, True)
        if entry_points:
            eps = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
            for ep in eps:
                dist = ep.dist.name if ep.dist else "?"
                version = ep.dist.version if ep.dist else "?"
                self._load(ep.name, ep.load, f"entry point ({dist})", version, False)
        for d in dirs:
            self._load_dir(Path(d))

    # -- loading ---------------------------------------------------------------------------
    def _load(
        self, name: str, load: Callable[[], Any], source: str, version: str | None, builtin: bool
    ) -> None:
        info = PluginInfo(name, version or "-", source, builtin)
        self.infos.append(info)
        try:
            plugin = load()
        except BaseException as exc:  # a plugin's import may raise anything, SystemExit included
            if isinstance(exc, KeyboardInterrupt):
                raise
            info.error = f"cannot import: {type(exc).__name__}: {exc}"
            self.problems.append(f"plugin {name} ({source}): {info.error}")
            return
        if version is None:
            info.version = str(getattr(plugin, "__version__", "-"))
        if self.pm.is_registered(plugin):
            info.error = "already loaded under another name"
            self.problems.append(f"plugin {name} ({source}): {info.error}")
            return
        try:
            self.pm.register(plugin, name=name)
        except (pluggy.PluginValidationError, ValueError) as exc:
            info.error = f"invalid: {exc}"
            self.problems.append(f"plugin {name} ({source}): {info.error}")
            return
        unknown = [
            hook.name
            for hook in self.pm.get_hookcallers(plugin) or []
            if not hook.has_spec() and hook.name.startswith("auditor_")
        ]
        if unknown:
            self.pm.unregister(plugin)
            info.error = f"implements unknown hook(s): {', '.join(sorted(unknown))}"
            self.problems.append(f"plugin {name} ({source}): {info.error}")
            return
        info.hooks = sorted(h.name for h in self.pm.get_hookcallers(plugin) or [])

    def _load_dir(self, directory: Path) -> None:
        if not directory.is_dir():
            self.problems.append(f"plugin directory {directory}: not a directory")
            return
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
        for entry in sorted(directory.iterdir()):
            if entry.name.startswith((".", "_")):
                continue
            if entry.suffix == ".py" and entry.is_file():
                module_name = entry.stem
            elif entry.is_dir() and (entry / "__init__.py").is_file():
                module_name = entry.name
            else:
                continue
            load = lambda m=module_name, e=entry: _import_from(m, e)  # noqa: E731
            self._load(module_name, load, str(entry), None, False)

    # -- asking ----------------------------------------------------------------------------
    def _each(self, hook: str, **kwargs: Any) -> Iterable[tuple[str, Any]]:
        """Call one hook plugin by plugin, so a hook that raises costs only its plugin."""
        caller = getattr(self.pm.hook, hook)
        for impl in caller.get_hookimpls():  # registration order (pluggy calls them LIFO)
            try:
                answer = impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception as exc:
                self.problems.append(
                    f"plugin {impl.plugin_name}: {hook} raised {type(exc).__name__}: {exc}\n"
                    + traceback.format_exc(limit=3)
                )
                continue
            if answer is not None:
                yield impl.plugin_name, answer

    def answers(self, hook: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """(plugin name, answer) of every plugin implementing ``hook``, in load order; asked
        once per hook (``auditor plugins`` shows who contributes what)."""
        key = f"answers:{hook}"
        if key not in self._cache:
            self._cache[key] = list(self._each(hook, **kwargs))
        return self._cache[key]

    def _named(self, hook: str, key: Callable[[Any], str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        owner: dict[str, str] = {}
        for plugin, answer in self._each(hook):
            for item in answer:
                try:
                    name = key(item)
                except Exception as exc:
                    self.problems.append(f"plugin {plugin}: {hook} returned an unusable {item!r}: {exc}")
                    continue
                if name in found:
                    self.problems.append(
                        f"plugin {plugin}: {hook}: {name!r} is already provided by {owner[name]}; skipped"
                    )
                    continue
                found[name], owner[name] = item, plugin
        return found

    @_cached
    def probes(self) -> dict[str, ProbeSpec]:
        specs: dict[str, ProbeSpec] = {}
        for plugin, modules in self._each("auditor_probes"):
            for module in modules:
                try:
                    spec = ProbeSpec.from_module(module)
                except Exception as exc:
                    self.problems.append(f"plugin {plugin}: probe {module}: {type(exc).__name__}: {exc}")
                    continue
                if spec.name in specs:
                    self.problems.append(
                        f"plugin {plugin}: probe {spec.name!r} is already provided by "
                        f"{specs[spec.name].module}"
                    )
                    continue
                lone = single_file_problem(spec.module)
                if lone is not None:  # it loads here, but its build_cell cannot run in a worker
                    self.problems.append(f"plugin {plugin}: probe {spec.name!r}: {lone}")
                specs[spec.name] = spec
        return specs

    def builtin_probes(self) -> frozenset[str]:
        """The probes shipped with the auditor (``probes/``): their findings are about the
        auditor's own probes, not the user's models ([alerts] on, category "probes")."""
        return frozenset(n for n, spec in self.probes().items() if spec.module.startswith("auditor.probes."))

    @_cached
    def runtimes(self) -> dict[str, RuntimeSpec]:
        return self._named("auditor_runtimes", lambda r: r.name)

    @_cached
    def fingerprint_collectors(self) -> list[str]:
        seen: list[str] = []
        for _, modules in self._each("auditor_fingerprint_collectors"):
            seen.extend(m for m in modules if m not in seen)
        return seen

    @_cached
    def rules(self) -> dict[str, Any]:
        return self._named("auditor_rules", lambda r: r.name)

    @_cached
    def comparators(self) -> dict[str, Any]:
        return self._named("auditor_comparators", lambda c: c.name)

    @_cached
    def alert_sinks(self) -> dict[str, Any]:
        return self._named("auditor_alert_sinks", lambda s: s.type)

    def add_commands(self, cli: click.Group) -> None:
        list(self._each("auditor_cli_commands", cli=cli))

    def reach(self, config: Config, warm: WarmPool | None = None) -> Reach:
        """How to reach the config's stacks with these plugins' runtimes, probes and collectors
        (auditor.stacks.session): every command that talks to a stack opens it through this.
        ``warm``: zygotes another owner keeps (the daemon's); else the Reach's own."""
        # Imported here: the stacks' side (the worker protocol, numpy) is for the commands that
        # reach a stack; the daemon, which loads plugins but never opens a worker, stays light.
        from auditor.stacks.session import reach

        return reach(
            config,
            self.runtimes(),
            [spec.module for spec in self.probes().values()],
            self.fingerprint_collectors(),
            warm,
        )


def one_line(problem: str) -> str:
    """A plugin problem in one line: its message, and where the plugin's code raised when a
    traceback follows it (the whole traceback is for whoever reads ``problems``)."""
    head, _, rest = problem.strip().partition("\n")
    frames = re.findall(r'File "([^"]+)", line (\d+)', rest)
    return head + (f" (at {frames[-1][0]}:{frames[-1][1]})" if frames else "")


def _import_from(name: str, path: Path) -> ModuleType:
    """Import a directory plugin, refusing to pick up an unrelated module of the same name."""
    module = importlib.import_module(name)
    where = Path(getattr(module, "__file__", "") or "").resolve()
    if where != path.resolve() and path.resolve() not in where.parents:
        raise ImportError(f"the name {name!r} is already taken by {where}; rename the plugin")
    return module


def builtin_probes() -> dict[str, ProbeSpec]:
    """The probes the built-in plugin registers (no entry points, no plugin directories)."""
    return Plugins(entry_points=False).probes()
