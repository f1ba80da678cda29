"""``auditor config schema`` and ``auditor config generate``: the JSON Schema and a commented
auditor.toml, both from the one schema in auditor.config.load (and the probes' declared parameters),
so the documentation of a key cannot drift from its validation."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from auditor.config.fields import fields_of
from auditor.config.tables import Document, HostConfig, ModelTable, PairConfig, ProbeTable, StackConfig


def _strip_table_keys(schema: dict[str, Any]) -> None:
    """Fields filled from a table's key (a stack's name) or its other keys (a sink's options)
    are not keys of the file: drop them, and let a table with options take any other key."""
    for definition in schema.get("$defs", {}).values():
        props = definition.get("properties", {})
        for name in [n for n, p in props.items() if isinstance(p, dict) and p.get("x-not-a-key")]:
            del props[name]
            if name in definition.get("required", []):
                definition["required"].remove(name)
            if name == "options":
                definition["additionalProperties"] = True
        if "required" in definition and not definition["required"]:
            del definition["required"]


def json_schema(param_schemas: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON Schema of auditor.toml; with the probes' parameter declarations, each known
    probe's ``params`` table is checked too."""
    schema = Document.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    _strip_table_keys(schema)
    if param_schemas:
        probes = schema["properties"]["probes"]
        probes["properties"] = {}
        for name, params in sorted(param_schemas.items()):
            probes["properties"][name] = {
                "allOf": [{"$ref": "#/$defs/ProbeTable"}],
                "properties": {
                    "params": {
                        "type": "object",
                        "properties": {k: dict(v) for k, v in params.items()},
                        "additionalProperties": False,
                    }
                },
            }
    return schema


@functools.cache
def _definitions() -> dict[str, Any]:
    return json_schema()["$defs"]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _g(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _range(prop: Mapping[str, Any]) -> str:
    for option in prop.get("anyOf", [prop]):
        if "minimum" in option or "exclusiveMinimum" in option or "maximum" in option:
            low = option.get("minimum", option.get("exclusiveMinimum"))
            op = ">" if "exclusiveMinimum" in option else ">="
            high = f", <= {_g(option['maximum'])}" if "maximum" in option else ""
            unit = " s" if any(o.get("type") == "string" for o in prop.get("anyOf", [])) else ""
            return f" [{op} {_g(low)}{high}{unit}]" if low is not None else f" [<= {_g(option['maximum'])}]"
    if "enum" in prop:
        return f" [{' | '.join(prop['enum'])}]"
    return ""


def _comment(text: str | None, out: list[str]) -> None:
    for line in (text or "").strip().splitlines():
        out.append(f"# {line.strip()}".rstrip())


def _table(cls: Any, header: str, out: list[str], values: Mapping[str, Any] | None = None) -> None:
    """A table of a section class: each key's description, range and default; keys without a
    default (None) are shown commented out."""
    props = _definitions()[cls.__name__]["properties"]
    out.append(header)
    for name, info in fields_of(cls).items():
        default = (values or {}).get(name, info.get_default(call_default_factory=True))
        if isinstance(default, dict):
            continue  # tables of their own (sinks, per-output thresholds), shown where they apply
        _comment((info.description or "") + _range(props.get(name, {})), out)
        if default is None or default == {}:
            out.append(f"# {name} = ...")
        else:
            out.append(f"{name} = {_value(default)}")
    out.append("")


def generate(probes: Mapping[str, Any] | None = None) -> str:
    """A commented auditor.toml with every key, its description, range and default, example
    stacks and a pair running every known probe (``probes``: name -> ProbeSpec)."""
    out = [
        "# auditor.toml written by `auditor config generate`: every key with its description,",
        "# allowed range and default (`auditor config schema` gives the same as JSON Schema).",
        "# Values may use $VAR, ${VAR} and ${VAR:-default}; a leading ~ is the home directory.",
        "# A variable that is unset or empty and has no default is an error, never an empty string.",
        "",
    ]
    names = sorted(probes or {"ppo_policy": None})
    for section, field in Document.model_fields.items():
        cls = field.annotation
        if section == "stacks":
            out.append("# --- stacks: one runtime environment each " + "-" * 50)
            _comment(StackConfig.__doc__, out)
            python = "${AUDITOR_STACKS_DIR:-~/.cache/auditor/stacks}/%s/bin/python"
            for stack, role, runtime in (
                ("ms20", "train", "mindspore"),
                ("lite20", "infer", "mindspore-lite"),
            ):
                example = {"role": role, "runtime": runtime, "python": python % stack}
                _table(StackConfig, f"[stacks.{stack}]", out, example)
        elif section in ("hosts", "models"):
            # Optional tables keyed by name: an example, commented out, so the file still loads.
            cls, name, example = {
                "hosts": (HostConfig, "infer-01", {"ssh": "auditor@infer-01", "command": None}),
                "models": (ModelTable, "policy", {"path": "policy.mindir", "golden": "policy.golden.npz"}),
            }[section]
            _comment(field.description, out)
            _comment(cls.__doc__, out)
            table: list[str] = []
            _table(cls, f"[{section}.{name}]", table, example)
            out += [line if line.startswith("#") or not line else f"# {line}" for line in table]
        elif section == "groups":
            # A group takes any [hosts.NAME] key; an example, commented out (auditor.config.groups).
            _comment(field.description, out)
            out += [
                "# [groups.infer]",
                '# hosts = ["infer-[01:12]", "10.0.0.5"]',
                '# ssh = "auditor@{host}"',
                "",
            ]
        elif section == "pairs":
            _comment(PairConfig.__doc__, out)
            out += ["[[pairs]]", 'train = "ms20"', 'infer = "lite20"', f"probes = {_value(names)}", ""]
        elif section == "probes":
            for name in names:
                _table(ProbeTable, f"[probes.{name}]", out, {})
                spec = (probes or {}).get(name)
                if spec is not None and spec.default_params:
                    out.append(f"[probes.{name}.params]")
                    out.append("# Parameter overrides; the defaults are shown.")
                    for key, default in spec.default_params.items():
                        declared = spec.param_schema.get(key, {})
                        out.append(f"# {key} = {_value(default)}{_range(declared)}".rstrip())
                    out.append("")
        else:
            _comment(field.description, out)
            _table(cls, f"[{section}]", out)
            if section == "alerts":
                out += [
                    "# A sink per table: type (log, jsonl, webhook, exec, or a plugin's),",
                    "# min_severity and the type's options (docs/plugins.md).",
                    "# [alerts.sinks.journal]",
                    '# type = "log"',
                    '# min_severity = "warning"',
                    "",
                ]
    return "\n".join(out).rstrip() + "\n"


def reference_page(probes: Mapping[str, Any] | None = None) -> str:
    """docs/reference.md: the commented auditor.toml of ``generate``, one section per table, so
    the configuration reference is the schema's own words (scripts/config-reference writes it;
    a test holds the page to it)."""
    out = [
        "# Configuration reference",
        "",
        "Every key of `auditor.toml`, with its description, allowed range and default, written from",
        "the schema the config is validated against (`scripts/config-reference`; a test fails when",
        "this page is out of date). `auditor config generate` prints the same as one file, with the",
        "probes of your installed plugins; `auditor config schema` gives it as JSON Schema.",
        "",
    ]
    chunks = [c for c in generate(probes).split("\n\n") if c.strip()]
    intro, *tables = chunks
    out += ["```toml", intro, "```", ""]
    for chunk in tables:
        lines = chunk.splitlines()
        header = next((ln.lstrip("# ") for ln in lines if ln.lstrip("# ").startswith("[")), None)
        if header is None:
            out += ["```toml", chunk, "```", ""]
            continue
        out += [f"## `{header}`", "", "```toml", chunk, "```", ""]
    return "\n".join(out).rstrip("\n") + "\n"
