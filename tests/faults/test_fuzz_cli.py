"""Property: whatever the command line says, the read commands answer or fail with a usage
message (exit 0, 1 or 2), never a traceback. Arguments are drawn around the edges: huge and
negative numbers, non-ASCII digits, ancient and far-future times, unknown names.
AUDITOR_FUZZ_EXAMPLES=1000 runs 1000 examples per test."""

from __future__ import annotations

import shutil
from datetime import datetime

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from auditor.cli.main import cli
from auditor.history.store import Store
from tests.fuzz_settings import fuzz_settings
from tests.history_fixtures import generate_history


@pytest.fixture(scope="module")
def db(tmp_path_factory, history_template):
    path = tmp_path_factory.mktemp("fuzzcli") / "history.db"
    shutil.copyfile(history_template, path)
    store = Store.open(f"sqlite:///{path}")
    generate_history(store.engine, 30, start=datetime(2026, 3, 1), seed=3, abort_rate=0.05, error_rate=0.05)
    store.engine.dispose()
    return path


INTS = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.sampled_from(["0", "-1", "1", "9" * 30, "1e9", "0x10", "١٢", "²", "٣", " 5", "5 ", ""]),
)
WHENS = st.one_of(
    st.sampled_from(
        [
            "now",
            "7d",
            "99999999999999999999d",
            "1e9d",
            "0001-01-01",
            "0001-01-01T00:00+14:00",
            "9999-12-31T23:59:59-05:00",
            "1900-01-01",
            "2026-03-01",
            "2026-02-30",
            "last tuesday",
            "١d",
            "",
        ]
    ),
    st.datetimes().map(lambda d: d.isoformat()),
    st.text(max_size=12),
)
NAMES = st.one_of(
    st.sampled_from(["ms20->lite20", "ms20", "lite20", "ppo_policy", "fp32", "max_abs", "mean", "nope", ""]),
    st.text(max_size=12),
)
STATUSES = st.one_of(
    st.sampled_from(["consistent", "drift", "unsupported", "incompatible", "error", "fine"]),
    st.text(max_size=8),
)
FILTERS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["--pair", "--probe", "--variant", "--output", "--stack"]), NAMES),
        st.tuples(st.just("--status"), STATUSES),
        st.tuples(st.sampled_from(["--since", "--until"]), WHENS),
    ),
    max_size=4,
).map(lambda pairs: [x for p in pairs for x in p])

COMMANDS = st.one_of(
    st.tuples(st.just(["history"]), FILTERS, st.lists(st.tuples(st.just("--limit"), INTS), max_size=1)),
    st.tuples(
        st.just(["history", "--format", "json"]),
        FILTERS,
        st.lists(st.tuples(st.just("--metric"), NAMES), max_size=2),
    ),
    st.tuples(
        st.just(["trend"]),
        FILTERS,
        st.lists(st.tuples(st.sampled_from(["--metric", "--limit", "--width"]), INTS | NAMES), max_size=3),
    ),
    st.tuples(
        st.just(["show"]),
        st.lists(
            st.one_of(INTS, st.sampled_from(["latest", "latest~1", "latest~" + "9" * 30])),
            min_size=1,
            max_size=1,
        ),
        st.just([]),
    ),
    st.tuples(st.just(["runs"]), st.just([]), st.lists(st.tuples(st.just("--limit"), INTS), max_size=1)),
    st.tuples(
        st.just(["db", "prune", "--dry-run"]),
        st.just([]),
        st.lists(st.tuples(st.just("--keep-days"), INTS), max_size=1),
    ),
    st.tuples(st.just(["alerts"]), st.just([]), st.lists(st.tuples(st.just("--limit"), INTS), max_size=1)),
    st.tuples(
        st.just(["drift"]),
        st.lists(NAMES, min_size=1, max_size=1),
        st.lists(st.tuples(st.just("--limit"), INTS), max_size=1),
    ),
).map(lambda c: [*c[0], *c[1], *[x for p in c[2] for x in (p if isinstance(p, tuple) else (p,))]])


@fuzz_settings(80)
@given(COMMANDS)
def test_read_commands_answer_or_fail_cleanly(db, args):
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"auditor {' '.join(args)!r} raised {result.exception!r}") from result.exception
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    assert "Traceback" not in result.output
