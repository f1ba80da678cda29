"""Property: whatever auditor.toml holds, loading it is a clear error or a config, never a
traceback. Documents are the shipped config with random keys set to random TOML values
(nan, inf, huge and negative numbers, empty and non-ASCII strings, dates, arrays, tables),
plus random TOML text. AUDITOR_FUZZ_EXAMPLES=1000 runs 1000 examples per test."""

from __future__ import annotations

import copy
import datetime as dt
import tomllib
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from auditor.config.load import load, parse
from auditor.config.tables import SECTIONS, Config, ConfigError
from auditor.extend.manager import Plugins
from tests.conftest import DEFAULT_CONFIG
from tests.fuzz_settings import fuzz_settings

PLUGINS = Plugins(entry_points=False)
KWARGS: dict[str, Any] = {
    "known_probes": {n: p.default_params for n, p in PLUGINS.probes().items()},
    "runtimes": PLUGINS.runtimes(),
    "probe_variants": {n: p.variants for n, p in PLUGINS.probes().items()},
    "sink_types": {n: t.validate for n, t in PLUGINS.alert_sinks().items()},
    "param_schemas": {n: p.param_schema for n, p in PLUGINS.probes().items()},
}
BASE = tomllib.loads(DEFAULT_CONFIG.read_text())

NUMBERS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 2**31, 10**18, 65537]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e300, -0.0, 5e-324]),
)
STRINGS = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            " ",
            "5",
            "true",
            "1h30m",
            "-1s",
            "0 0 31 2 *",
            "*/5 * * * *",
            "UTC",
            "Mars/Olympus",
            "$UNSET",
            "${A:-~}",
            "~",
            "١٢",
            "fp16",
            "Pendulum-v1",
            "log",
            "\x00",
            "../x",
            "cpu",
            "gpu:0",
        ]
    ),
)
SCALARS = st.one_of(
    NUMBERS,
    STRINGS,
    st.booleans(),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)),
    st.dates(),
    st.times(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(STRINGS, inner, max_size=4)),
    max_leaves=8,
)


def _key_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _key_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _key_paths(v, (*prefix, i))
    return out


PATHS = _key_paths(BASE) + [(s,) for s in SECTIONS] + [(s, "bogus") for s in SECTIONS]


def _set(doc: Any, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        if isinstance(doc, dict):
            doc = doc.setdefault(part, {})
        elif isinstance(doc, list) and isinstance(part, int) and part < len(doc):
            doc = doc[part]
        else:
            return
        if not isinstance(doc, dict | list):
            return
    last = path[-1]
    if isinstance(doc, dict) or isinstance(doc, list) and isinstance(last, int) and last < len(doc):
        doc[last] = value


def _delete(doc: Any, path: tuple) -> None:
    for part in path[:-1]:
        doc = doc.get(part) if isinstance(doc, dict) else None
    if isinstance(doc, dict):
        doc.pop(path[-1], None)


def check(doc: Any) -> None:
    """The property: a Config, or a ConfigError of "key.path: message" lines."""
    try:
        config = parse(doc, "<fuzz>", **KWARGS)
    except ConfigError as exc:
        assert exc.errors, "a ConfigError lists its problems"
        for line in exc.errors:
            assert isinstance(line, str) and line.strip(), exc.errors
            assert "Traceback" not in line
            assert ": " in line, line  # every problem names its key path
    else:
        assert isinstance(config, Config)


MUTATIONS = st.lists(
    st.tuples(st.sampled_from(PATHS), st.one_of(VALUES, st.just(KeyError))), min_size=1, max_size=6
)


@fuzz_settings(150)
@given(MUTATIONS)
def test_mutated_config_is_a_clear_error_or_a_config(mutations):
    doc = copy.deepcopy(BASE)
    for path, value in mutations:
        if value is KeyError:
            _delete(doc, path)
        else:
            _set(doc, path, value)
    check(doc)


@fuzz_settings(100)
@given(st.dictionaries(st.sampled_from([*SECTIONS, "x"]), VALUES, max_size=6))
def test_random_document_is_a_clear_error_or_a_config(doc):
    check(doc)


TOML_LINES = st.one_of(
    st.sampled_from(
        [
            "[storage]",
            "[worker]",
            "[[pairs]]",
            "[stacks.a]",
            "[probes.ppo_policy.params]",
            "[schedule]",
            'role = "train"',
            'runtime = "mindspore"',
            'python = ""',
            "batch = -1",
            "batch = nan",
            "interval = inf",
            'cron = "0 0 31 2 *"',
            "parallel = 1e300",
            "keep_days = 99999999999",
            'train = "a"',
            'probes = ["ppo_policy"]',
            "seed = 1979-05-27T07:32:00Z",
            "x = [1, [2]]",
        ]
    ),
    st.text(max_size=30),
)


@fuzz_settings(100)
@given(st.lists(TOML_LINES, max_size=12))
def test_random_toml_text_is_a_clear_error_or_a_config(tmp_path_factory, lines):
    path = Path(tmp_path_factory.mktemp("fuzz")) / "auditor.toml"
    path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    try:
        load(path, **KWARGS)
    except ConfigError as exc:
        assert exc.errors and all(isinstance(e, str) for e in exc.errors)
