"""Which of a host's installed CANN packages a stack's runtime uses, as its fingerprint says.

A host often holds several (a toolkit and an nnae, a new toolkit beside an older nnrt, a user's
own install that ``ASCEND_HOME_PATH`` points at), and judging the wrong one gives a wrong
"compatible". The ``cann`` collector decides it in the stack (``cann.choice``, one entry per
installed framework: the package, the basis, what was tried; see
``auditor.plugins.collectors._cann_lookup``); this module reads that choice for the rules and
the CLI, so they all name the same package with the same release, and say "probably" where
the choice is the auditor's inference rather than the framework's own lookup or an
environment variable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The runtime's package (``runtime.runtime_package``, or a built-in runtime's name) -> the
# framework whose choice applies (the keys of ``cann.choice`` and of the framework section).
FRAMEWORKS = {
    "mindspore": "mindspore",
    "mindspore-graph": "mindspore",
    "mindspore-lite": "mindspore_lite",
}
NAMES = {"mindspore": "MindSpore", "mindspore_lite": "MindSpore Lite"}
BASES = {
    "lookup": "its own lookup order",
    "environment": "the environment",
    "inference": "the auditor's inference",
}


@dataclass(frozen=True)
class CannChoice:
    """The package a framework would load (None: none), how that was decided, and the others."""

    framework: str
    package: dict[str, Any] | None
    basis: str
    how: str
    probable: bool = False
    source: str | None = None
    tried: list[str] = field(default_factory=list)
    checked: dict[str, Any] | None = None
    libraries: dict[str, Any] | None = None
    others: list[dict[str, Any]] = field(default_factory=list)

    @property
    def release(self) -> str | None:
        return (self.package or {}).get("version")

    @property
    def compiler(self) -> str | None:
        return (self.package or {}).get("compiler_version")

    @property
    def found(self) -> bool:
        """The framework's own paths (its lookup, its variable, the loader's path) lead to it."""
        return self.package is not None and not self.probable

    @property
    def uses(self) -> str:
        """'uses' or 'probably uses', as the basis allows."""
        return "probably uses" if self.probable else "uses"

    @property
    def name(self) -> str:
        return NAMES.get(self.framework, self.framework)

    def basis_words(self) -> str:
        words = BASES.get(self.basis, self.basis)
        return f"{words} (${self.source})" if self.basis == "environment" and self.source else words


def describe(package: dict[str, Any]) -> str:
    """'nnae 6.3.RC1 (compiler 6.3.0.1.100)' for a person: the release as the package's own
    component files say (``cann.packages``), the same everywhere."""
    words = f"{package.get('name')} {package.get('version') or '(release unknown)'}"
    if package.get("compiler_version"):
        words += f" (compiler {package['compiler_version']})"
    elif package.get("compiler_error"):
        words += " (compiler version unreadable)"
    return words


def installed(cann: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in cann.get("packages") or [] if isinstance(p, dict)]


def distinct(packages: list[dict[str, Any]], shown: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The packages other than ``shown``, each install once: an entry that is a link into
    another (the collector's ``links_into``) is the install it links to."""

    def install(p: dict[str, Any]) -> Any:
        return p.get("links_into") or p.get("id") or p.get("home")

    taken = {install(shown)} if shown else set()
    out = []
    for p in packages:
        if p is shown or (shown and p.get("home") == shown.get("home")) or install(p) in taken:
            continue
        taken.add(install(p))
        out.append(p)
    return out


def _by_id(packages: list[dict[str, Any]], key: Any) -> dict[str, Any] | None:
    if key is None:
        return None
    return next((p for p in packages if p.get("id") == key), None)


def for_framework(cann: dict[str, Any], framework: str) -> CannChoice | None:
    """The choice the fingerprint records for ``framework`` (``mindspore``, ``mindspore_lite``);
    None when the fingerprint records none (the framework is not installed, or the fingerprint
    was taken before choices were)."""
    entry = (cann.get("choice") or {}).get(framework)
    if not isinstance(entry, dict):
        return None
    packages = installed(cann)
    package = _by_id(packages, entry.get("package"))
    return CannChoice(
        framework,
        package,
        str(entry.get("basis") or "inference"),
        str(entry.get("how") or ""),
        bool(entry.get("probable")),
        entry.get("source"),
        list(entry.get("tried") or []),
        _by_id(packages, entry.get("checked")),
        _by_id(packages, entry.get("libraries")),
        [p for p in packages if p is not package],
    )


def framework_of(ctx: Any, stack: str) -> str | None:
    """The framework a stack's runtime is (``mindspore``, ``mindspore_lite``), or None."""
    package = ctx.section(stack, "runtime").get("runtime_package")
    if package in FRAMEWORKS:
        return FRAMEWORKS[package]
    config = ctx.stacks.get(stack)
    return FRAMEWORKS.get(config.runtime) if config is not None else None


def for_runtime(ctx: Any, stack: str) -> CannChoice | None:
    """The CANN the stack's runtime would load (None: unknown; its runtime uses no CANN, or
    its fingerprint records no choice)."""
    framework = framework_of(ctx, stack)
    return for_framework(ctx.section(stack, "cann"), framework) if framework else None


def summary(document: dict[str, Any], runtime_package: str | None) -> list[tuple[str, str]]:
    """``auditor fingerprint``'s CANN rows: the package the stack's runtime would load, its
    release and compiler from its own files, and the basis; the legacy toolkit fields for a
    fingerprint without a choice."""
    cann = document.get("cann")
    if not isinstance(cann, dict) or "error" in cann:
        return [("CANN", "?")]
    framework = FRAMEWORKS.get(str(runtime_package))
    choice = for_framework(cann, framework) if framework else None
    if choice is None:
        toolkit = cann.get("toolkit") or {}
        parts = [
            cann.get("version") or "?",
            cann.get("layout") and f"[{cann['layout']}]",
            f"compiler {cann.get('compiler_version') or '?'}",
            toolkit.get("innerversion"),
        ]
        rows = [("CANN", "  ".join(str(p) for p in parts if p))]
    elif choice.package is None:
        rows = [("CANN", f"none found for {choice.name}"), ("", choice.how)]
    else:
        p = choice.package
        parts = [
            f"{p.get('name')} {p.get('version') or '?'}",
            f"compiler {p.get('compiler_version') or '-'}",
            p.get("innerversion"),
            f"at {p.get('home')}",
        ]
        rows = [
            ("CANN", "  ".join(str(x) for x in parts if x)),
            ("", f"{choice.name} {choice.uses} it, by {choice.basis_words()}"),
        ]
    packages = installed(cann)
    if choice is not None:
        shown = choice.package
    else:
        shown = next((p for p in packages if p.get("home") == cann.get("home")), {"home": cann.get("home")})
    others = [describe(p) for p in distinct(packages, shown)]
    if others:
        rows.append(("", "also installed: " + ", ".join(others)))
    return rows
