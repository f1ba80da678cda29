"""The field types of auditor.toml's schema and how a pydantic ValidationError becomes the
auditor's ``key.path: message`` lines.

Each type states its kind, finiteness and range once; the same declaration validates, writes
the error message (with the allowed range) and appears in the exported JSON Schema. The types
are strict: ``"5"`` is not a number and ``true`` is not 1, because a TOML file that says so is
almost certainly a mistake.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

from pydantic import PlainValidator, TypeAdapter, ValidationError, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError

MAX_BATCH = 65536
"""The largest batch size a probe or latency run may use: beyond it one input of a wide probe no
longer fits in memory on the hosts the auditor runs on."""
MAX_SEED = 2**32 - 1
"""numpy's RandomState takes seeds up to 2**32 - 1."""
DAY = 86400.0

_TOML_KINDS = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    dict: "table",
    list: "array",
    tuple: "array",
}


def show(value: Any) -> str:
    """A value as the user wrote it, with its TOML kind, short enough for one line."""
    kind = _TOML_KINDS.get(type(value), type(value).__name__)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}"


def _num(x: float) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return str(x) if isinstance(x, int) else f"{x:g}"


def _fail(message: str) -> PydanticCustomError:
    # The message goes through the context: braces in it are not read as a template.
    return PydanticCustomError("auditor", "{message}", {"message": message})


def span(lo: float | None, hi: float | None, lo_open: bool = False, unit: str = "") -> str:
    """The allowed range in words: " from 1 to 64", " greater than 0", " 0 or more"."""
    u = f" {unit}" if unit else ""
    if lo_open:
        low = f"greater than {_num(lo)}{u}" if lo is not None else ""
        return f" {low}" + (f" and at most {_num(hi)}{u}" if hi is not None else "")
    if lo is not None and hi is not None:
        return f" from {_num(lo)}{u} to {_num(hi)}{u}"
    if lo is not None:
        return f" {_num(lo)}{u} or more"
    if hi is not None:
        return f" at most {_num(hi)}{u}"
    return ""


def _bounds(lo: float | None, hi: float | None, lo_open: bool) -> dict[str, float]:
    js: dict[str, float] = {}
    if lo is not None:
        js["exclusiveMinimum" if lo_open else "minimum"] = lo
    if hi is not None:
        js["maximum"] = hi
    return js


def _in_range(v: float, lo: float | None, hi: float | None, lo_open: bool) -> bool:
    if lo is not None and (v <= lo if lo_open else v < lo):
        return False
    return hi is None or v <= hi


def Int(lo: int | None = None, hi: int | None = None) -> Any:  # noqa: N802 (a type factory)
    """A whole number (not a bool, not a string) in [lo, hi]."""
    what = f"a whole number{span(lo, hi)}"

    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _fail(f"must be {what}, not {show(v)}")
        if not _in_range(v, lo, hi, False):
            raise _fail(f"must be {what}, not {v}")
        return v

    return Annotated[
        int, PlainValidator(check), WithJsonSchema({"type": "integer", **_bounds(lo, hi, False)})
    ]


def Float(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Any:  # noqa: N802
    """A finite number (an integer is fine, a bool or string is not) in the range."""
    what = f"a finite number{span(lo, hi, lo_open)}"

    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _fail(f"must be {what}, not {show(v)}")
        if not math.isfinite(v) or not _in_range(v, lo, hi, lo_open):
            raise _fail(f"must be {what}, not {v!r}")
        return float(v)

    return Annotated[
        float, PlainValidator(check), WithJsonSchema({"type": "number", **_bounds(lo, hi, lo_open)})
    ]


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?\s*[smhd]\s*)+$"


def parse_duration(value: Any) -> float | None:
    """Seconds from a number or a string with units ("90s", "15m", "1h30m", "2d"); None if neither."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.replace(" ", "")
        parts = _DURATION_RE.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            return float(sum(float(n) * _UNITS[u] for n, u in parts))
    return None


def _seconds(x: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if x >= size and x % size == 0:
            return f"{_num(int(x // size))}{unit}"
    return f"{_num(x)}s"


def Duration(lo: float = 0.0, hi: float = 365 * DAY, lo_open: bool = False) -> Any:  # noqa: N802
    """Seconds, written as a number or as a string with units: "90s", "15m", "1h30m", "2d"."""
    rng = f"greater than {_seconds(lo)} and at most" if lo_open else f"from {_seconds(lo)} to"
    what = f'a duration {rng} {_seconds(hi)} (seconds, or a string like "90s", "15m", "1h30m")'

    def check(v: Any) -> float:
        seconds = parse_duration(v)
        if seconds is None or not math.isfinite(seconds) or not _in_range(seconds, lo, hi, lo_open):
            raise _fail(f"must be {what}, not {v!r}")
        return seconds

    schema = {
        "anyOf": [
            {"type": "number", **_bounds(lo, hi, lo_open)},
            {"type": "string", "pattern": DURATION_PATTERN},
        ]
    }
    return Annotated[float, PlainValidator(check), WithJsonSchema(schema)]


def Text(  # noqa: N802
    nonempty: bool = False,
    pattern: str | None = None,
    what: str = "",
    expand: Callable[[str, ValidationInfo], str] | None = None,
) -> Any:
    """A string; ``nonempty`` rejects "" (after expansion), ``pattern`` must match it whole
    (``what`` says in words what it must be), ``expand`` rewrites it ($VAR, ~, relative paths)."""
    regex = re.compile(pattern) if pattern else None

    def check(v: Any, info: ValidationInfo) -> str:
        if not isinstance(v, str):
            raise _fail(f"must be {what or 'a string'}, not {show(v)}")
        try:
            out = expand(v, info) if expand is not None else v
        except ValueError as exc:  # an unset variable: tables.UnsetVariable
            raise _fail(str(exc)) from None
        if nonempty and not out.strip():
            said = f" ({v!r} expands to {out!r})" if out != v else ""
            raise _fail(f"must be {what or 'a non-empty string'}, not an empty string{said}")
        if regex is not None and not regex.fullmatch(out):
            raise _fail(f"must be {what or 'a string matching ' + pattern}, not {v!r}")
        return out

    js: dict[str, Any] = {"type": "string"}
    if nonempty:
        js["minLength"] = 1
    if pattern and expand is None:
        js["pattern"] = f"^(?:{pattern})$"
    if what:
        js["description"] = f"Must be {what}."
    return Annotated[str, PlainValidator(check), WithJsonSchema(js)]


def Choice(*values: str) -> Any:  # noqa: N802
    """One of a fixed set of strings."""
    known = ", ".join(values)

    def check(v: Any) -> str:
        if v not in values or not isinstance(v, str):
            raise _fail(f"must be one of {known}, not {show(v) if not isinstance(v, str) else repr(v)}")
        return v

    return Annotated[str, PlainValidator(check), WithJsonSchema({"type": "string", "enum": list(values)})]


def Numbers(lo: float = -1e30, hi: float = 1e30) -> Any:  # noqa: N802
    """A finite number or a list of them (one per element of what it applies to): a tuple."""
    what = f"a finite number{span(lo, hi)} or a list of them"

    def check(v: Any) -> tuple[float, ...]:
        values = list(v) if isinstance(v, (list, tuple)) else [v]
        for x in values:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise _fail(f"must be {what}, not {show(v)}")
            if not _in_range(x, lo, hi, False):
                raise _fail(f"must be {what}, not {x!r}")
        if not values:
            raise _fail(f"must be {what}, not an empty list")
        return tuple(float(x) for x in values)

    number = {"type": "number", **_bounds(lo, hi, False)}
    schema = {"anyOf": [number, {"type": "array", "items": number, "minItems": 1}]}
    return Annotated[tuple, PlainValidator(check), WithJsonSchema(schema)]


def _check_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _fail(f"must be true or false, not {show(v)}")
    return v


Bool = Annotated[bool, PlainValidator(_check_bool), WithJsonSchema({"type": "boolean"})]

_SCALAR_JS = {"type": ["number", "string", "boolean"]}


def _check_scalar(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        raise _fail(f"must be a finite number, string or boolean, not {v!r}")
    if not isinstance(v, (int, float, str, bool)):
        raise _fail(f"must be a number, string or boolean, not {show(v)}")
    return v


Scalar = Annotated[Any, PlainValidator(_check_scalar), WithJsonSchema(_SCALAR_JS)]
"""A comparator or sink option value: a finite number, a string or a boolean."""


# -- probe parameters: a JSON-Schema subset the probe modules declare as plain dicts ----------


def param_type(spec: Mapping[str, Any]) -> Any:
    """The field type of one probe parameter from its declaration in the probe's ``PARAMS``:
    ``{"type": "integer", "minimum": 1, "maximum": 65536}``, ``{"type": "number", ...}``,
    ``{"type": "string", "enum": [...]}``, ``{"type": "boolean"}`` or
    ``{"type": "array", "items": {...}, "minItems": 1, "maxItems": 16}``."""
    kind = spec.get("type")
    if kind == "integer":
        return Int(spec.get("minimum"), spec.get("maximum"))
    if kind == "number":
        if "exclusiveMinimum" in spec:
            return Float(spec["exclusiveMinimum"], spec.get("maximum"), lo_open=True)
        return Float(spec.get("minimum"), spec.get("maximum"))
    if kind == "string":
        return Choice(*spec["enum"]) if "enum" in spec else Text()
    if kind == "boolean":
        return Bool
    if kind == "array":
        item = param_type(spec.get("items", {}))
        return Annotated[list[item], _Items(spec.get("minItems"), spec.get("maxItems"))]  # type: ignore[valid-type]
    return Annotated[Any, PlainValidator(lambda v: v)]


@dataclasses.dataclass(frozen=True)
class _Items:
    """minItems/maxItems of an array parameter, as pydantic length constraints."""

    min_items: int | None
    max_items: int | None

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        if self.min_items is not None:
            schema["min_length"] = self.min_items
        if self.max_items is not None:
            schema["max_length"] = self.max_items
        return schema


def infer_param_spec(default: Any) -> dict[str, Any]:
    """A parameter declaration from its default, for probes that do not declare ``PARAMS``:
    the type only (a plugin probe's ``batch = "5"`` is still rejected)."""
    if isinstance(default, bool):
        return {"type": "boolean"}
    if isinstance(default, int):
        return {"type": "integer"}
    if isinstance(default, float):
        return {"type": "number"}
    if isinstance(default, str):
        return {"type": "string"}
    if isinstance(default, (list, tuple)):
        items = infer_param_spec(default[0]) if default else {}
        return {"type": "array", "items": items}
    return {}


_PARAM_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def check_param(spec: Mapping[str, Any], value: Any, path: str) -> list[str]:
    """Problems of one probe parameter value against its declaration, as ``path: message``."""
    key = repr(sorted(spec.items()))
    adapter = _PARAM_ADAPTERS.get(key)
    if adapter is None:
        adapter = _PARAM_ADAPTERS[key] = TypeAdapter(param_type(spec))
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        return messages(exc, path, None)
    return []


# -- ValidationError -> "key.path: message" ---------------------------------------------------


def join(prefix: str, loc: Iterable[Any]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if len(args) == 1 else tp
            if len(args) != 1:
                return tp
        else:
            return tp


def fields_of(cls: Any) -> dict[str, Any]:
    """The TOML keys of a schema class (fields filled from the table's key are not keys)."""
    fields = getattr(cls, "__pydantic_fields__", None) or {}
    return {
        name: f
        for name, f in fields.items()
        if not (isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("x-not-a-key"))
    }


def class_at(root: Any, loc: Iterable[Any]) -> Any:
    """The schema class validating the value at ``loc`` under ``root`` (None if not a class)."""
    tp = root
    pending = list(loc)
    while pending:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        part = pending.pop(0)
        if origin in (dict, Mapping):
            tp = typing.get_args(tp)[1]
        elif origin in (list, tuple):
            tp = typing.get_args(tp)[0]
        elif hasattr(tp, "__pydantic_fields__") and part in tp.__pydantic_fields__:
            tp = tp.__pydantic_fields__[part].annotation
        else:
            return None
    return _unwrap(tp)


_TABLE_ERRORS = {"dataclass_type", "dataclass_exact_type", "model_type", "model_attributes_type", "dict_type"}
_EXTRA_ERRORS = {"extra_forbidden", "unexpected_keyword_argument"}


def messages(exc: ValidationError, prefix: str, root: Any) -> list[str]:
    """One ``path: message`` line per problem, in the auditor's words."""
    out = []
    for e in exc.errors(include_url=False):
        loc, kind, value = e["loc"], e["type"], e.get("input")
        ctx = e.get("ctx") or {}
        path = join(prefix, loc)
        if kind == "auditor":
            message = str(ctx.get("message", e["msg"]))
        elif kind == "missing" or kind == "missing_argument":
            message = "is required"
        elif kind in _EXTRA_ERRORS:
            keys = sorted(fields_of(class_at(root, loc[:-1])))
            message = f"unknown key (expected one of: {', '.join(keys)})" if keys else "unknown key"
        elif kind in _TABLE_ERRORS:
            message = f"must be a table, not {show(value)}"
        elif kind in ("list_type", "tuple_type", "set_type"):
            message = f"must be an array, not {show(value)}"
        elif kind == "too_short":
            message = f"must list at least {ctx.get('min_length')} item(s)"
        elif kind == "too_long":
            message = f"must list at most {ctx.get('max_length')} item(s), not {ctx.get('actual_length')}"
        elif kind == "string_type":
            message = f"must be a string, not {show(value)}"
        else:
            message = e["msg"]
        line = f"{path}: {message}" if path else message
        if line not in out:
            out.append(line)
    return out


def validate(root: Any, value: Any, prefix: str, errors: list[str], context: dict[str, Any]) -> Any:
    """``value`` validated as ``root``, or None with its problems added to ``errors``."""
    adapter = _ADAPTERS.get(root)
    if adapter is None:
        adapter = _ADAPTERS[root] = TypeAdapter(root)
    try:
        return adapter.validate_python(value, context=context)
    except ValidationError as exc:
        errors.extend(messages(exc, prefix, root))
        return None


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}
