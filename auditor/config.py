"""auditor.toml: one schema drives validation, defaults and error messages.

Every problem in a config file is reported at once, each with its key path
(``stacks.lite20.runtime: unknown runtime 'lite' (known: ...)``), so a user fixes a
broken file in one pass instead of one error per run.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from auditor.compare import Tolerance
from auditor.paths import default_db_url

# The built-in runtimes -> what each can do in a pair: "export" (train side) or "load" (infer
# side). Plugins add more; the CLI passes the full map to parse().
RUNTIMES = {
    "mindspore": "export",
    "mindspore-graph": "load",
    "mindspore-lite": "load",
}
ROLES = ("train", "infer")
DEVICE_RE = re.compile(r"^(cpu|(ascend|gpu):\d+)$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ConfigError(Exception):
    """A config file that cannot be used; ``errors`` lists every problem with its key path."""

    def __init__(self, source: str, errors: list[str]):
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: {len(errors)} problem(s)\n" + "\n".join(f"  {e}" for e in errors))


@dataclass(frozen=True)
class StackConfig:
    name: str
    role: str
    runtime: str
    python: str
    device: str = "cpu"
    host: str = "local"
    ascend_root: str = "/usr/local/Ascend"
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeConfig:
    name: str
    thresholds: Tolerance = Tolerance()
    outputs: dict[str, Tolerance] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)

    def tolerance_for(self, output: str) -> Tolerance:
        return self.outputs.get(output, self.thresholds)


@dataclass(frozen=True)
class PairConfig:
    train: str
    infer: str
    probes: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.train}->{self.infer}"


@dataclass(frozen=True)
class WorkerConfig:
    start_timeout: float = 120.0
    request_timeout: float = 120.0
    parallel: int = 2


@dataclass(frozen=True)
class LatencyConfig:
    warmup: int = 5
    iterations: int = 50


@dataclass(frozen=True)
class Config:
    source: str
    db_url: str
    stacks: dict[str, StackConfig]
    pairs: tuple[PairConfig, ...]
    probes: dict[str, ProbeConfig]
    worker: WorkerConfig = WorkerConfig()
    latency: LatencyConfig = LatencyConfig()
    plugin_dirs: tuple[str, ...] = ()

    def probe(self, name: str) -> ProbeConfig:
        return self.probes.get(name, ProbeConfig(name))


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _expand_vars(value: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        if value.startswith("${", i):
            depth, j = 0, i + 1
            while j < len(value):
                depth += {"{": 1, "}": -1}.get(value[j], 0)
                if depth == 0:
                    break
                j += 1
            if j >= len(value):  # unterminated: keep as written
                out.append(value[i:])
                break
            name, sep, default = value[i + 2 : j].partition(":-")
            if env.get(name):
                out.append(env[name])
            elif sep:
                out.append(_expand_vars(default, env))
            i = j + 1
        elif value[i] == "$" and (m := _NAME_RE.match(value, i + 1)):
            out.append(env.get(m.group(0), ""))
            i = m.end()
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def expand(value: str, env: Mapping[str, str] | None = None) -> str:
    """Expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` (defaults may nest), then a leading ``~``.

    One pass: the value of a variable is used as it is, never expanded again.
    """
    return os.path.expanduser(_expand_vars(value, os.environ if env is None else env))


class _Checker:
    """Collects errors with their key paths while reading a parsed TOML document."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def table(self, doc: dict, key: str, path: str, allowed: set[str] | None = None) -> dict:
        value = doc.get(key, {})
        if not isinstance(value, dict):
            self.error(path, f"must be a table, not {type(value).__name__}")
            return {}
        if allowed is not None:
            for unknown in sorted(set(value) - allowed):
                self.error(
                    f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(allowed))})"
                )
        return value

    def get(
        self,
        doc: dict,
        key: str,
        path: str,
        kind: type | tuple[type, ...],
        default: Any = None,
        required: bool = False,
    ) -> Any:
        if key not in doc:
            if required:
                self.error(path, "is required")
            return default
        value = doc[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            names = " or ".join(k.__name__ for k in kinds)
            self.error(path, f"must be {names}, not {type(value).__name__} {value!r}")
            return default
        return value

    def positive(self, doc: dict, key: str, path: str, kind: type, default: Any) -> Any:
        value = self.get(doc, key, path, (int, float) if kind is float else kind, default)
        if value is not None and value <= 0:
            self.error(path, f"must be greater than 0, not {value!r}")
            return default
        return kind(value)


def _thresholds(c: _Checker, doc: dict, path: str, base: Tolerance) -> Tolerance:
    values = {}
    for name in ("atol", "rtol"):
        value = c.get(doc, name, f"{path}.{name}", (int, float), getattr(base, name))
        if not value >= 0:  # also catches NaN
            c.error(f"{path}.{name}", f"must be a number 0 or more, not {value!r}")
            value = getattr(base, name)
        values[name] = float(value)
    return Tolerance(**values)


SECTIONS = ("storage", "worker", "latency", "plugins", "stacks", "pairs", "probes")


def parse(
    doc: dict,
    source: str = "<config>",
    known_probes: Mapping[str, Iterable[str]] | None = None,
    runtimes: Mapping[str, str] | None = None,
) -> Config:
    """Validate a parsed TOML document; raise ConfigError listing every problem.

    known_probes maps each probe name to its parameter names (a plain set of names skips
    the parameter check); None skips probe checks altogether. runtimes maps each runtime
    name to "export" or "load" (default: the built-in runtimes).
    """
    known_runtimes = runtimes if runtimes is not None else RUNTIMES
    c = _Checker()
    for unknown in sorted(set(doc) - set(SECTIONS)):
        c.error(unknown, f"unknown section (expected {', '.join(SECTIONS)})")

    plugins = c.table(doc, "plugins", "plugins", {"dirs"})
    plugin_dirs = []
    for i, d in enumerate(c.get(plugins, "dirs", "plugins.dirs", list, [])):
        if isinstance(d, str):
            plugin_dirs.append(_relative_to(source, expand(d)))
        else:
            c.error(f"plugins.dirs[{i}]", f"must be a directory path, not {type(d).__name__}")

    storage = c.table(doc, "storage", "storage", {"url"})
    url = expand(c.get(storage, "url", "storage.url", str, "")) or default_db_url()

    w = c.table(doc, "worker", "worker", {"start_timeout", "request_timeout", "parallel"})
    worker = WorkerConfig(
        start_timeout=c.positive(
            w, "start_timeout", "worker.start_timeout", float, WorkerConfig.start_timeout
        ),
        request_timeout=c.positive(
            w, "request_timeout", "worker.request_timeout", float, WorkerConfig.request_timeout
        ),
        parallel=c.positive(w, "parallel", "worker.parallel", int, WorkerConfig.parallel),
    )
    lat = c.table(doc, "latency", "latency", {"warmup", "iterations"})
    warmup = c.get(lat, "warmup", "latency.warmup", int, LatencyConfig.warmup)
    if warmup < 0:
        c.error("latency.warmup", f"must be 0 or more, not {warmup}")
    latency = LatencyConfig(
        warmup=max(0, warmup),
        iterations=c.positive(lat, "iterations", "latency.iterations", int, LatencyConfig.iterations),
    )

    stacks: dict[str, StackConfig] = {}
    stack_keys = {"role", "runtime", "python", "device", "host", "ascend_root", "env"}
    for name, s in c.table(doc, "stacks", "stacks").items():
        path = f"stacks.{name}"
        if not isinstance(s, dict):
            c.error(path, "must be a table")
            continue
        if not NAME_RE.match(name):
            c.error(path, "stack names use letters, digits, '.', '_' and '-'")
        for unknown in sorted(set(s) - stack_keys):
            c.error(f"{path}.{unknown}", f"unknown key (expected one of: {', '.join(sorted(stack_keys))})")
        role = c.get(s, "role", f"{path}.role", str, required=True)
        if role is not None and role not in ROLES:
            c.error(f"{path}.role", f"must be 'train' or 'infer', not {role!r}")
        runtime = c.get(s, "runtime", f"{path}.runtime", str, required=True)
        if runtime is not None and runtime not in known_runtimes:
            c.error(
                f"{path}.runtime",
                f"unknown runtime {runtime!r} (known: {', '.join(sorted(known_runtimes))})",
            )
        elif runtime and role in ROLES:
            needed = "export" if role == "train" else "load"
            if known_runtimes[runtime] != needed:
                what = "build and export probes" if role == "train" else "load exported MindIR"
                c.error(f"{path}.runtime", f"runtime {runtime!r} cannot {what}, which a {role} stack must do")
        python = c.get(s, "python", f"{path}.python", str, required=True)
        device = c.get(s, "device", f"{path}.device", str, "cpu")
        if not DEVICE_RE.match(device):
            c.error(f"{path}.device", f"must be 'cpu', 'ascend:N' or 'gpu:N', not {device!r}")
        env = c.get(s, "env", f"{path}.env", dict, {})
        for k, v in env.items():
            if not isinstance(v, str):
                c.error(f"{path}.env.{k}", f"must be a string, not {type(v).__name__}")
        if role in ROLES and runtime in known_runtimes and python:
            stacks[name] = StackConfig(
                name=name,
                role=role,
                runtime=runtime,
                python=expand(python),
                device=device,
                host=c.get(s, "host", f"{path}.host", str, "local"),
                ascend_root=expand(c.get(s, "ascend_root", f"{path}.ascend_root", str, "/usr/local/Ascend")),
                env={k: expand(v) for k, v in env.items() if isinstance(v, str)},
            )

    probes: dict[str, ProbeConfig] = {}
    for name, p in c.table(doc, "probes", "probes").items():
        path = f"probes.{name}"
        if not isinstance(p, dict):
            c.error(path, "must be a table")
            continue
        if known_probes is not None and name not in known_probes:
            c.error(path, f"unknown probe (known: {', '.join(sorted(known_probes))})")
        for unknown in sorted(set(p) - {"atol", "rtol", "outputs", "params"}):
            c.error(f"{path}.{unknown}", "unknown key (expected one of: atol, outputs, params, rtol)")
        base = _thresholds(c, p, path, Tolerance())
        outputs = {}
        for out, t in c.get(p, "outputs", f"{path}.outputs", dict, {}).items():
            if isinstance(t, dict):
                outputs[out] = _thresholds(c, t, f"{path}.outputs.{out}", base)
            else:
                c.error(f"{path}.outputs.{out}", "must be a table with atol and/or rtol")
        params = c.get(p, "params", f"{path}.params", dict, {})
        if isinstance(known_probes, Mapping) and name in known_probes:
            allowed = set(known_probes[name])
            for unknown in sorted(set(params) - allowed):
                c.error(
                    f"{path}.params.{unknown}",
                    f"probe {name} has no such parameter (known: {', '.join(sorted(allowed))})",
                )
        probes[name] = ProbeConfig(name, base, outputs, dict(params))

    pairs: list[PairConfig] = []
    raw_pairs = doc.get("pairs", [])
    if not isinstance(raw_pairs, list):
        c.error("pairs", "must be an array of tables ([[pairs]])")
        raw_pairs = []
    if not raw_pairs:
        c.error("pairs", "no pairs configured: add at least one [[pairs]] with train, infer and probes")
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(raw_pairs):
        path = f"pairs[{i}]"
        if not isinstance(p, dict):
            c.error(path, "must be a table")
            continue
        for unknown in sorted(set(p) - {"train", "infer", "probes"}):
            c.error(f"{path}.{unknown}", "unknown key (expected one of: infer, probes, train)")
        train = c.get(p, "train", f"{path}.train", str, required=True)
        infer = c.get(p, "infer", f"{path}.infer", str, required=True)
        for side, role in ((train, "train"), (infer, "infer")):
            if side is None:
                continue
            raw = doc.get("stacks", {}).get(side) if isinstance(doc.get("stacks"), dict) else None
            if raw is None:
                c.error(f"{path}.{role}", f"no stack named {side!r} in [stacks]")
            elif isinstance(raw, dict) and raw.get("role") in ROLES and raw.get("role") != role:
                c.error(f"{path}.{role}", f"stack {side!r} has role {raw.get('role')!r}, not {role!r}")
        names = c.get(p, "probes", f"{path}.probes", list, [])
        if not names:
            c.error(f"{path}.probes", "list at least one probe")
        for j, n in enumerate(names):
            if not isinstance(n, str):
                c.error(f"{path}.probes[{j}]", "must be a probe name")
            elif known_probes is not None and n not in known_probes:
                c.error(
                    f"{path}.probes[{j}]", f"unknown probe {n!r} (known: {', '.join(sorted(known_probes))})"
                )
        if train and infer:
            if (train, infer) in seen:
                c.error(path, f"pair {train} -> {infer} is listed twice")
            seen.add((train, infer))
            pairs.append(PairConfig(train, infer, tuple(n for n in names if isinstance(n, str))))

    if c.errors:
        raise ConfigError(source, c.errors)
    return Config(
        source=source,
        db_url=url,
        stacks=stacks,
        pairs=tuple(pairs),
        probes=probes,
        worker=worker,
        latency=latency,
        plugin_dirs=tuple(plugin_dirs),
    )


def _relative_to(source: str, path: str) -> str:
    """Relative paths in a config file are relative to the file's folder."""
    if os.path.isabs(path) or source.startswith("<"):
        return path
    return str(Path(source).resolve().parent / path)


def read_document(path: str | Path) -> dict:
    """The parsed TOML of a config file, or ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), ["file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"cannot read: {exc}"]) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    return doc


def plugin_dirs(doc: dict, source: str) -> list[str]:
    """``[plugins] dirs`` read before validation, which needs the plugins' probes and runtimes;
    malformed entries are left for parse() to report."""
    section = doc.get("plugins")
    dirs = section.get("dirs") if isinstance(section, dict) else None
    if not isinstance(dirs, list):
        return []
    return [_relative_to(source, expand(d)) for d in dirs if isinstance(d, str)]


def load(
    path: str | Path,
    known_probes: Mapping[str, Iterable[str]] | None = None,
    runtimes: Mapping[str, str] | None = None,
) -> Config:
    return parse(read_document(path), str(path), known_probes, runtimes)
