"""Column types that read a damaged value as missing instead of failing the whole query.

A history row with a timestamp that is not one, or JSON that does not parse (a hand edit,
a bad restore, another tool), must not make ``runs``, ``show`` or ``history`` end in a
traceback: the value reads as None, the rest of the row and of the history is shown, and
``unreadable()`` lists what was skipped so the command can say so.
"""

from __future__ import annotations

import math
import threading
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Integer, String, Text
from sqlalchemy.types import TypeDecorator

_MAX = 20
_lock = threading.Lock()
_seen: list[str] = []
_count = 0


def _note(what: str, value: Any, exc: Exception) -> None:
    global _count
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    with _lock:
        _count += 1
        line = f"a stored {what} is unreadable and is shown as missing: {text} ({type(exc).__name__})"
        if len(_seen) < _MAX and line not in _seen:
            _seen.append(line)


def unreadable(reset: bool = False) -> tuple[list[str], int]:
    """(distinct problems, at most 20; how many values in all) read as missing so far."""
    global _count
    with _lock:
        out = (list(_seen), _count)
        if reset:
            _seen.clear()
            _count = 0
    return out


class _Tolerant(TypeDecorator):
    what = "value"
    native: tuple[type, ...] = ()
    """Python types that ``coerce`` returns unchanged."""
    inner_keeps_native = False
    """The dialect's own processor (if any) also returns ``native`` values unchanged."""

    def coerce(self, value: Any) -> Any:
        """A value of another type than the column's (SQLite stores anything anywhere)."""
        return value

    def column_processor(self, dialect: Any, coltype: Any) -> Any:
        """What ``result_processor`` does to each value of a column, for a whole column at
        once: the dialect's own processor over every value, and only if one fails or returns
        a value that ``coerce`` would change, the tolerant processor value by value."""
        process = self.result_processor(dialect, coltype)
        impl = self.dialect_impl(dialect)
        inner = super(_Tolerant, impl).result_processor(dialect, coltype)
        if inner is None:
            return lambda column: tuple(map(process, column))
        fine = {*self.native, type(None)}

        def column_process(column: tuple) -> tuple:
            try:
                out = tuple(map(inner, column))
            except (ValueError, TypeError, OverflowError):
                return tuple(map(process, column))
            return out if set(map(type, out)) <= fine else tuple(map(process, column))

        return column_process

    def passthrough(self, dialect: Any, coltype: Any) -> tuple[type, ...]:
        """Driver value types that the result processor returns unchanged, so that a reader
        that checks the type may skip the call (auditor.db.prepared)."""
        impl = self.dialect_impl(dialect)
        inner = super(_Tolerant, impl).result_processor(dialect, coltype)
        return self.native if inner is None or self.inner_keeps_native else ()

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        inner = super().result_processor(dialect, coltype)
        what, coerce = self.what, self.coerce

        def process(value: Any) -> Any:
            if value is None:
                return None
            try:
                return coerce(inner(value) if inner is not None else value)
            except (ValueError, TypeError, OverflowError) as exc:
                _note(what, value, exc)
                return None

        return process


class TolerantDateTime(_Tolerant):
    impl = DateTime
    cache_ok = True
    what = "timestamp"
    native = (datetime,)

    def coerce(self, value: Any) -> Any:
        if not isinstance(value, datetime):
            raise TypeError(f"not a timestamp: {type(value).__name__}")
        return value


class TolerantJSON(_Tolerant):
    """Every JSON column of the history holds an object (a dict)."""

    impl = JSON
    cache_ok = True
    what = "JSON document"

    def coerce(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"not a JSON object: {type(value).__name__}")
        return value

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        """Strict JSON on the way in: a non-finite float becomes "inf", "-inf" or "nan" (as
        ``--json`` says them). JSON has no Infinity: PostgreSQL refuses the token, and SQLite
        keeps it as text that json_valid() rejects (the health check would call the
        history damaged)."""
        return _finite(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


class TolerantString(_Tolerant):
    impl = String
    cache_ok = True
    what = "text"
    native = (str,)

    def coerce(self, value: Any) -> Any:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode("utf-8", "replace")
        return value if isinstance(value, str) else str(value)


class TolerantText(TolerantString):
    impl = Text
    cache_ok = True


class TolerantInteger(_Tolerant):
    impl = Integer
    cache_ok = True
    what = "integer"
    native = (int,)

    def coerce(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"not an integer: {type(value).__name__}")
        return value


class TolerantFloat(_Tolerant):
    impl = Float
    cache_ok = True
    what = "number"
    native = (float,)
    inner_keeps_native = True  # float(x) / to_float(x) of a float is that float

    def coerce(self, value: Any) -> Any:
        if isinstance(value, bytes | str):
            raise TypeError(f"not a number: {type(value).__name__}")
        return float(value)


__all__ = [
    "TolerantDateTime",
    "TolerantFloat",
    "TolerantInteger",
    "TolerantJSON",
    "TolerantString",
    "TolerantText",
    "unreadable",
]
