"""What each plugin contributes, and whether the stack side of each plugin loads in a stack.

A probe's ``build_cell``, a collector and a runtime's worker class run inside the stacks'
workers, on the stack's own interpreter (Python 3.7 for MindSpore 2.0 / Lite 2.0). A module
that parses on 3.11 but not on 3.7 only fails there, in the middle of a cycle; ``check``
imports each of them in every configured stack's interpreter, the way the worker does (the
plugin's package registered without running its ``__init__``), and reports the file and line.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.extend.probe_spec import ProbeSpec, single_file_problem
from auditor.stacks.worker import worker_packages
from auditor.worker.bootstrap import REGISTER

if TYPE_CHECKING:
    from auditor.config.tables import StackConfig
    from auditor.extend.manager import Plugins

KINDS = ("probes", "runtimes", "collectors", "rules", "comparators", "sinks", "commands")

# Run with the stack's interpreter (Python 3.7 compatible): register the packages as the
# worker's bootstrap does, import each module, report what failed and where.
CHECK_SOURCE = (
    REGISTER
    + r"""
import importlib, traceback
out = []
for name in spec["modules"]:
    entry = {"module": name, "error": None, "file": None, "line": None}
    try:
        importlib.import_module(name)
    except SyntaxError as exc:
        entry.update(error="SyntaxError: %s" % exc.msg, file=exc.filename, line=exc.lineno)
    except BaseException as exc:
        frames = traceback.extract_tb(sys.exc_info()[2])
        if frames:
            entry.update(file=frames[-1].filename, line=frames[-1].lineno)
        entry["error"] = "%s: %s" % (type(exc).__name__, exc)
    out.append(entry)
sys.stdout.write("\n" + json.dumps({"python": sys.version.split()[0], "results": out}) + "\n")
"""
)


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


def check(
    plugins: Plugins, stacks: dict[str, StackConfig], timeout: float = 120.0, builtins: bool = False
) -> CheckReport:
    """Import the stack side of every plugin in every stack's interpreter (one short process
    per stack, no runtime started) and report each module that fails, with file and line."""

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
    payload = json.dumps({"packages": worker_packages(importable), "modules": importable})
    for name, stack in stacks.items():
        if stack.host not in ("", "local"):
            report.stack_errors[name] = f"host {stack.host}: only local stacks are checked"
            continue
        try:
            proc = subprocess.run(
                [stack.python, "-c", CHECK_SOURCE, payload],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=_stack_env(stack),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            report.stack_errors[name] = f"cannot run {stack.python}: {exc}"
            continue
        try:
            answer = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            report.stack_errors[name] = f"{stack.python} exited {proc.returncode}: " + " | ".join(tail)
            continue
        for r in answer["results"]:
            report.checks.append(
                ModuleCheck(
                    owner[r["module"]], r["module"], name, answer["python"], r["error"], r["file"], r["line"]
                )
            )
    return report


def _stack_env(stack: StackConfig) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    env.update(stack.env)
    return env


def relative(path: str | None) -> str | None:
    """A path relative to the working directory when it is below it (shorter messages)."""
    if not path:
        return path
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path
