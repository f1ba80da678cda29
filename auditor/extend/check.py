"""What each plugin contributes, and whether the stack side of each plugin loads in a stack.

A probe's ``build_cell``, a collector and a runtime's worker class run inside the stacks'
workers, on the stack's own interpreter (Python 3.7 for MindSpore 2.0 / Lite 2.0). A module
that parses on 3.11 but not on 3.7 only fails there, in the middle of a cycle; ``check``
imports each of them in every configured stack's worker, started the way a cycle starts it
(on the stack's host, with the payload a cycle sends: the plugin's package registered without
running its ``__init__``), and reports the file and line.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.config.tables import Config
from auditor.extend.probe_spec import ProbeSpec, single_file_problem
from auditor.stacks.session import reach
from auditor.stacks.worker import WorkerError

if TYPE_CHECKING:
    from auditor.extend.manager import Plugins

KINDS = ("probes", "runtimes", "collectors", "rules", "comparators", "sinks", "commands")


def contributions(plugins: Plugins) -> dict[str, dict[str, list[str]]]:
    """Plugin name -> kind -> what it provides: probes as ``name (variants: a, b)``, runtimes
    as ``name (export|load)``, collectors as module names, rules, comparators, sink types,
    and the commands it adds."""
    import click

    out: dict[str, dict[str, list[str]]] = {}

    def add(plugin: str, kind: str, item: str) -> None:
        out.setdefault(plugin, {}).setdefault(kind, []).append(item)

    for plugin, modules in plugins.answers("auditor_probes"):
        for module in modules:
            try:
                spec = ProbeSpec.from_module(module)
            except Exception as exc:  # noqa: BLE001 - reported as it is, the listing goes on
                add(plugin, "probes", f"{module} (cannot load: {type(exc).__name__}: {exc})")
                continue
            add(plugin, "probes", f"{spec.name} (variants: {', '.join(spec.variants)})")
    for plugin, runtimes in plugins.answers("auditor_runtimes"):
        for r in runtimes:
            add(plugin, "runtimes", f"{getattr(r, 'name', r)} ({getattr(r, 'can', '?')})")
    for plugin, modules in plugins.answers("auditor_fingerprint_collectors"):
        for module in modules:
            add(plugin, "collectors", str(module))
    for hook, kind, key in (
        ("auditor_rules", "rules", "name"),
        ("auditor_comparators", "comparators", "name"),
        ("auditor_alert_sinks", "sinks", "type"),
    ):
        for plugin, items in plugins.answers(hook):
            for item in items:
                add(plugin, kind, str(getattr(item, key, item)))
    for impl in plugins.pm.hook.auditor_cli_commands.get_hookimpls():
        group = click.Group("auditor")
        try:
            impl.function(cli=group)
        except Exception as exc:  # noqa: BLE001 - Plugins.add_commands reports it
            add(impl.plugin_name, "commands", f"(raised {type(exc).__name__}: {exc})")
            continue
        for name in sorted(group.commands):
            add(impl.plugin_name, "commands", name)
    return out


def stack_modules(plugins: Plugins, builtins: bool = False) -> dict[str, list[str]]:
    """Plugin name -> the modules of its that a stack worker imports: probe modules (for
    ``build_cell``), collectors, and runtime worker classes' modules. Built-ins only with
    ``builtins`` (the test suite checks those on every stack)."""
    builtin = {i.name for i in plugins.infos if i.builtin}
    out: dict[str, list[str]] = {}
    for hook in ("auditor_probes", "auditor_fingerprint_collectors"):
        for plugin, modules in plugins.answers(hook):
            if builtins or plugin not in builtin:
                out.setdefault(plugin, []).extend(str(m) for m in modules)
    for plugin, runtimes in plugins.answers("auditor_runtimes"):
        if builtins or plugin not in builtin:
            out.setdefault(plugin, []).extend(
                str(r.worker_class).partition(":")[0] for r in runtimes if getattr(r, "worker_class", None)
            )
    return out


@dataclass
class ModuleCheck:
    plugin: str
    module: str
    stack: str
    python: str = ""
    error: str | None = None
    file: str | None = None
    line: int | None = None

    @property
    def where(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or self.module


@dataclass
class CheckReport:
    checks: list[ModuleCheck] = field(default_factory=list)
    stack_errors: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[ModuleCheck]:
        return [c for c in self.checks if c.error]

    def to_json(self) -> dict[str, Any]:
        return {
            "checks": [c.__dict__ for c in self.checks],
            "stack_errors": self.stack_errors,
        }


def check(plugins: Plugins, config: Config, builtins: bool = False) -> CheckReport:
    """Import the stack side of every plugin in every stack's worker, started the way a cycle
    starts it (``Reach``: on the stack's host, over its transport, with the payload a cycle
    would send), and report each module that fails, with file and line."""
    per_plugin = stack_modules(plugins, builtins)
    report = CheckReport()
    importable: list[str] = []
    owner: dict[str, str] = {}
    for plugin, modules in per_plugin.items():
        for module in modules:
            owner.setdefault(module, plugin)
            problem = single_file_problem(module)
            if problem is not None:
                report.checks.append(ModuleCheck(plugin, module, "*", error=problem))
            elif module not in importable:
                importable.append(module)
    if not importable:
        return report
    stacks = {n: s for n, s in config.stacks.items() if not config.fleet.is_remote(n)}
    to_reach = reach(config, plugins.runtimes(), importable)
    found: dict[str, list[ModuleCheck]] = {}

    def one(name: str) -> None:
        try:
            with to_reach.worker(name) as worker:
                python = str(worker.start().get("python", ""))
                answer = worker.request("import", modules=importable).result
        except WorkerError as exc:
            report.stack_errors[name] = exc.describe()
            return
        found[name] = [
            ModuleCheck(
                owner[r["module"]],
                r["module"],
                name,
                python,
                r["error"],
                _local(r["file"], to_reach.packages),
                r["line"],
            )
            for r in answer.get("results", [])
        ]

    size, tasks = to_reach.parallel({n: (lambda n=n: one(n)) for n in stacks})
    with to_reach, ThreadPoolExecutor(max_workers=max(1, size), thread_name_prefix="plugins-check") as pool:
        for future in [pool.submit(task) for task in tasks.values()]:
            future.result()
    for name in stacks:  # in the config's order, whatever order the workers finished in
        report.checks += found.get(name, [])
    return report


def _local(path: str | None, packages: list[tuple[str, str]]) -> str | None:
    """A file a worker on another host reported, as the file of this machine it came from
    (the payload unpacks package ``a.b`` into ``.../lib/a/b/``)."""
    if not path:
        return path
    for name, directory in sorted(packages, key=lambda p: -len(p[0])):
        marker = "/lib/" + name.replace(".", "/") + "/"
        if marker in path and not Path(path).is_relative_to(directory):
            return str(Path(directory) / path.split(marker, 1)[1])
    return path


def relative(path: str | None) -> str | None:
    """A path relative to the working directory when it is below it (shorter messages)."""
    if not path:
        return path
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path
