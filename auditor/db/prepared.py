"""Statements built and compiled once per shape, executed with only their values bound.

A short history listing (the newest 50 results) takes SQLite a third of a millisecond; going
through SQLAlchemy's usual path cost about four times that again on every call: building the
Select, computing its cache key (a walk of the whole statement tree), and passing every value
of every row through the column types' Python processors. Here a statement is built once per
*shape* (which filters are set, and how many alternatives each has), compiled once per
database dialect, and each call only binds its values and runs the SQL through the
connection (so errors, events and transactions are SQLAlchemy's as usual).

Rows come back as the columns' types make them (times as ``datetime``, damaged values as
None and noted, see ``auditor.db.columns``): a value whose driver type the column's
processor leaves unchanged (a ``str`` in a text column, a ``float`` in a number column) is
not passed through it; everything else is, so the rows are identical to the usual path's.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from itertools import chain
from typing import Any

from sqlalchemy import Connection, Select
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

_ANY = object()
"""``keep`` entry of a column without a result processor: every value passes unchanged."""


class Prepared:
    """One statement compiled for one dialect, with what it takes to bind and read it."""

    def __init__(self, stmt: Select, dialect: Dialect) -> None:
        self.stmt = stmt
        compiled = stmt.compile(dialect=dialect)
        # Parameters rendered only at execution time (expanding IN, literal LIMIT on some
        # databases) need SQLAlchemy's own path: such a statement is executed the usual way.
        self.direct = not (compiled.post_compile_params or compiled.literal_execute_params)
        self.sql = str(compiled)
        self.order: tuple[str, ...] | None = (
            tuple(compiled.positiontup or ()) if compiled.positional else None
        )
        binds = compiled.binds
        self.bind_processors: dict[str, Callable[[Any], Any]] = {}
        for name, bind in binds.items():
            proc = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if proc is not None:
                self.bind_processors[name] = proc
        self.required = frozenset(name for name, bind in binds.items() if bind.required)
        constants = {name: bind.effective_value for name, bind in binds.items() if not bind.required}
        self.constants = self._processed(constants)
        self.dialect = dialect
        self.types = [column.type for column in stmt.selected_columns]
        self._readers: dict[tuple[Any, ...], _Reader] = {}

    def _processed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        procs = self.bind_processors
        return {k: (procs[k](v) if k in procs and v is not None else v) for k, v in values.items()}

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        missing = self.required - values.keys()
        if missing:
            raise KeyError(f"no value for parameter(s) {', '.join(sorted(missing))}")
        params = {**self.constants, **self._processed(values)}
        return params if self.order is None else tuple(params[name] for name in self.order)

    def rows(self, conn: Connection, values: Mapping[str, Any], stream: bool = False) -> Iterator[tuple]:
        """The statement's rows for ``values``, converted as the column types convert them;
        ``stream``: fetched in batches (a server-side cursor where the database has one)."""
        return chain.from_iterable(self.batches(conn, values, stream))

    def batches(self, conn: Connection, values: Mapping[str, Any], stream: bool = False) -> Iterator[list]:
        """``rows`` a batch at a time."""
        # A server-side cursor where the database has them (PostgreSQL); SQLite's cursor steps
        # through the result as it is read anyway. (Options given per statement: the
        # connection's execution_options() would change the caller's connection.)
        options = {"yield_per": 2000} if stream and self.dialect.supports_server_side_cursors else {}
        if not self.direct:
            result: Any = conn.execute(self.stmt, dict(values), execution_options=options)
            try:
                for batch in result.partitions(2000):
                    yield [tuple(row) for row in batch]
            finally:
                result.close()
            return
        result = conn.exec_driver_sql(
            self.sql,
            self.parameters(values),  # type: ignore[arg-type]
            execution_options=options,
        )
        try:
            # the driver's type of each column (PostgreSQL's choose the processors)
            coltypes = tuple(d[1] for d in result.cursor.description or ())
            reader = self._readers.get(coltypes)
            if reader is None:
                reader = self._readers[coltypes] = _Reader(self.types, self.dialect, coltypes)
            effective = result.context.execution_options
            if any(effective.get(o) for o in ("yield_per", "stream_results", "max_row_buffer")):
                # SQLAlchemy buffers rows of such a result (the first ones at once): read through it
                for batch in result.partitions(2000):
                    yield reader.convert(batch)
                return
            # Otherwise straight from the driver's cursor (SQLAlchemy's row objects would only
            # be taken apart again); its errors are raised as SQLAlchemy's, as on its own path.
            cursor, dbapi_error = result.cursor, self.dialect.loaded_dbapi.Error
            try:
                if not stream:
                    yield reader.convert(cursor.fetchall())
                    return
                while batch := cursor.fetchmany(2000):
                    yield reader.convert(batch)
            except dbapi_error as exc:
                raise DBAPIError.instance(self.sql, None, exc, dbapi_error, dialect=self.dialect) from exc
        finally:
            result.close()


class _Reader:
    """Converts driver rows of one statement as its column types would."""

    def __init__(self, types: list[Any], dialect: Dialect, coltypes: tuple[Any, ...]) -> None:
        coltypes = coltypes if len(coltypes) == len(types) else (None,) * len(types)
        impls = [t.dialect_impl(dialect) for t in types]
        self.processors = [
            impl.result_processor(dialect, code) for impl, code in zip(impls, coltypes, strict=True)
        ]
        self.keep = [
            _ANY if proc is None else frozenset(_passthrough(impl, dialect, code))
            for impl, proc, code in zip(impls, self.processors, coltypes, strict=True)
        ]
        self.column_processors = [
            _column_processor(impl, proc, dialect, code)
            for impl, proc, code in zip(impls, self.processors, coltypes, strict=True)
        ]

    def convert(self, rows: Any) -> list[tuple]:
        """Driver rows as the columns' result processors make them. Column by column: a
        column whose values are all of types its processor returns unchanged (checked over
        the whole batch at once) is not passed through it; any other column is, whole."""
        if not rows:
            return []
        columns = list(zip(*rows, strict=True))
        changed = False
        for i, (keep, process) in enumerate(zip(self.keep, self.column_processors, strict=True)):
            if keep is _ANY or set(map(type, columns[i])) <= keep:  # type: ignore[operator]
                continue
            columns[i] = process(columns[i])
            changed = True
        return list(zip(*columns, strict=True)) if changed else [tuple(row) for row in rows]


def _column_processor(impl: Any, proc: Any, dialect: Dialect, coltype: Any) -> Callable[[tuple], tuple]:
    """A whole column through ``proc`` (the type's result processor), or through the type's
    own column processor where it has one (the same values, fewer Python calls)."""
    own = getattr(impl, "column_processor", None)
    if own is not None:
        return own(dialect, coltype)
    return lambda column: tuple(map(proc, column))


def _passthrough(impl: Any, dialect: Dialect, coltype: Any) -> tuple[type, ...]:
    """Driver value types that ``impl``'s result processor returns unchanged (None always)."""
    known = getattr(impl, "passthrough", None)
    return (type(None), *(known(dialect, coltype) if known is not None else ()))


_LOCK = threading.Lock()
_CACHE: weakref.WeakKeyDictionary[Dialect, OrderedDict[Hashable, Prepared]] = weakref.WeakKeyDictionary()
_PER_DIALECT = 512
"""Shapes kept per dialect: each filter's number of alternatives makes a shape, so the
number of shapes is bounded only by what users type; the least recently used go first."""


def prepared(conn: Connection, key: Hashable, build: Callable[[], Select]) -> Prepared:
    """The statement ``build()`` makes for ``key``, compiled for ``conn``'s dialect, built at
    most once per key and dialect (``key`` must say everything the statement depends on)."""
    dialect = conn.dialect
    with _LOCK:
        per = _CACHE.get(dialect)
        if per is None:
            per = _CACHE[dialect] = OrderedDict()
        found = per.get(key)
        if found is not None:
            per.move_to_end(key)
            return found
    made = Prepared(build(), dialect)
    with _LOCK:
        per[key] = made
        while len(per) > _PER_DIALECT:
            per.popitem(last=False)
    return made


__all__ = ["Prepared", "prepared"]
