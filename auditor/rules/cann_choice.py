"""Which of the CANN packages installed on a host a stack's runtime actually uses.

A host often holds several (a toolkit and an nnae, or a new toolkit beside an older nnrt), and
judging the wrong one gives a wrong "compatible". The fingerprint's ``cann.packages`` lists
them all; this module picks the one that counts:

- MindSpore checks (and loads) the CANN its own ``AscendEnvChecker`` finds, as read from the
  installed checker by the framework collector (``mindspore.cann_lookup``): 2.0 tries fixed
  paths (``nnae/latest``, then ``ascend-toolkit/latest``, then ``latest``: the first whose
  ``compiler/version.info`` exists); later releases read ``$ASCEND_HOME_PATH`` from the
  stack's environment.
- MindSpore Lite (inference) runs on nnrt where one is installed, else on the toolkit/nnae.

Fixed paths name ``/usr/local/Ascend``; they are matched below the stack's ``ascend_root``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_ROOT = "/usr/local/Ascend/"
COMPILER_FILE = "/compiler/version.info"
# Where set_env.sh points ASCEND_HOME_PATH when a stack's environment does not say.
TOOLKIT_ORDER = ("ascend-toolkit", "cann", "latest", "nnae")


@dataclass(frozen=True)
class CannChoice:
    """The package a stack uses (None: none it would find), how that was decided, and the others."""

    package: dict[str, Any] | None
    how: str
    others: list[dict[str, Any]] = field(default_factory=list)

    @property
    def release(self) -> str | None:
        return (self.package or {}).get("version")

    @property
    def compiler(self) -> str | None:
        return (self.package or {}).get("compiler_version")


def describe(package: dict[str, Any]) -> str:
    """'nnae 6.3.RC1 (compiler 6.3.0.1.100)' for a person."""
    words = f"{package.get('name')} {package.get('version') or '(release unknown)'}"
    if package.get("compiler_version"):
        words += f" (compiler {package['compiler_version']})"
    elif package.get("compiler_error"):
        words += " (compiler version unreadable)"
    return words


def _relative(path: str) -> str:
    """'/usr/local/Ascend/nnae/latest/compiler/version.info' -> 'nnae/latest'."""
    rel = path[len(DEFAULT_ROOT) :] if path.startswith(DEFAULT_ROOT) else path.lstrip("/")
    return rel[: -len(COMPILER_FILE)] if rel.endswith(COMPILER_FILE) else rel


def _result(package: dict[str, Any] | None, how: str, all_: list[dict[str, Any]]) -> CannChoice:
    return CannChoice(package, how, [p for p in all_ if p is not package])


def _first_toolkit(installed: list[dict[str, Any]]) -> dict[str, Any] | None:
    for name in TOOLKIT_ORDER:
        for p in installed:
            if p.get("name") == name:
                return p
    return None


def for_mindspore(cann: dict[str, Any], lookup: dict[str, Any] | None) -> CannChoice | None:
    """The CANN MindSpore's own check reads; None when the fingerprint predates ``packages``."""
    installed = [p for p in cann.get("packages") or [] if isinstance(p, dict)]
    if "packages" not in cann:
        return None
    if isinstance(lookup, dict) and lookup.get("env"):
        variable = lookup["env"]
        home = cann.get("env_home") or {}
        if home.get("variable") == variable and home.get("path"):
            match = next((p for p in installed if p.get("name") == home.get("package")), None)
            if match is not None:
                return _result(match, f"MindSpore reads ${variable} = {home['path']}", installed)
            return _result(None, f"${variable} = {home['path']} is not a CANN install", installed)
        guess = _first_toolkit(installed)
        if guess is None:
            return _result(None, f"${variable} is not set and no toolkit is installed", installed)
        return _result(
            guess,
            f"${variable} is not set in the stack's environment; assuming {guess['home']}, where "
            "the toolkit's set_env.sh points it",
            installed,
        )
    if isinstance(lookup, dict) and lookup.get("paths"):
        tried = []
        for path in lookup["paths"]:
            rel = _relative(path)
            tried.append(rel)
            match = next(
                (p for p in installed if p.get("relative") == rel and p.get("compiler_present")), None
            )
            if match is not None:
                return _result(
                    match,
                    f"MindSpore tries {', '.join(_relative(p) for p in lookup['paths'])}: "
                    f"{rel} is the first present",
                    installed,
                )
        return _result(None, f"none of {', '.join(tried)} has compiler/version.info", installed)
    guess = _first_toolkit(installed)
    return _result(guess, "MindSpore's lookup is unknown; assuming the toolkit", installed)


def for_runtime(ctx: Any, stack: str) -> CannChoice | None:
    """The CANN the stack's runtime loads (None: the fingerprint predates ``packages``)."""
    cann = ctx.section(stack, "cann")
    if "packages" not in cann:
        return None
    installed = [p for p in cann.get("packages") or [] if isinstance(p, dict)]
    config = ctx.stacks.get(stack)
    runtime = config.runtime if config is not None else str(ctx.section(stack, "runtime").get("runtime"))
    if runtime == "mindspore-lite":
        nnrt = next((p for p in installed if p.get("name") == "nnrt"), None)
        if nnrt is not None:
            return _result(nnrt, "MindSpore Lite runs on nnrt", installed)
        home = cann.get("env_home") or {}
        match = next((p for p in installed if p.get("name") == home.get("package")), None)
        if match is not None:
            return _result(match, f"MindSpore Lite: no nnrt; ${home.get('variable')} names it", installed)
        guess = _first_toolkit(installed)
        return _result(guess, "MindSpore Lite: no nnrt, the toolkit", installed)
    ms = ctx.section(stack, "framework").get("mindspore")
    lookup = ms.get("cann_lookup") if isinstance(ms, dict) else None
    return for_mindspore(cann, lookup)
