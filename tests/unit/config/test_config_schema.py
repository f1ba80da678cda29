"""The declarative config schema: absurd numbers, empty strings, unknown envs and variants,
probe parameters and schedules that never fire are rejected by `auditor config check` (the
loader daemon start and reload use too), each with its key path and the allowed range."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.context import Context
from auditor.cli.main import cli
from auditor.config.load import parse
from auditor.config.tables import SECTIONS, ConfigError, Document
from tests.conftest import REPO
from tests.unit.fingerprint.test_fingerprint_cli import to_toml

NUMBERS = (float("nan"), float("inf"), float("-inf"), 1e300, -1)


def config_file(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "auditor.toml"
    path.write_text(to_toml(doc))
    return path


def problems(tmp_path: Path, doc: dict) -> list[str]:
    """The problems the CLI's loader (config check, daemon start and reload) finds."""
    with pytest.raises(ConfigError) as info:
        Context(str(config_file(tmp_path, doc)), None).load_config()
    return info.value.errors


def paths(errors: list[str]) -> list[str]:
    return [e.partition(": ")[0] for e in errors]


# Every duration, timeout, jitter, interval, count and retention key.
NUMERIC_KEYS = [
    ("storage", "keep_days"),
    ("worker", "start_timeout"),
    ("worker", "request_timeout"),
    ("worker", "parallel"),
    ("latency", "warmup"),
    ("latency", "iterations"),
    ("latency", "regression_factor"),
    ("latency", "regression_window"),
    ("latency", "regression_min_runs"),
    ("rollout", "steps"),
    ("rollout", "action_atol"),
    ("rollout", "return_atol"),
    ("schedule", "interval"),
    ("schedule", "jitter"),
    ("schedule", "misfire_grace"),
    ("alerts", "cooldown"),
    ("alerts", "max_attempts"),
    ("prometheus", "port"),
    ("daemon", "stop_timeout"),
]


@pytest.mark.parametrize(("section", "key"), NUMERIC_KEYS)
def test_non_finite_absurd_and_negative_numbers_are_rejected(doc, tmp_path, section, key):
    for value in NUMBERS:
        bad = copy.deepcopy(doc)
        bad.setdefault(section, {})[key] = value
        if section == "schedule":
            bad["schedule"].pop("cron", None)
        errors = problems(tmp_path, bad)
        assert paths(errors) == [f"{section}.{key}"], (value, errors)
        message = errors[0]
        assert " from " in message or " or more" in message or "greater than" in message, message


def test_stack_numbers_and_empty_python(doc, tmp_path):
    doc["stacks"]["ms20"]["npu_smi_timeout"] = float("nan")
    doc["stacks"]["ms210"]["npu_smi_timeout"] = 1e300
    doc["stacks"]["lite20"]["python"] = ""
    errors = problems(tmp_path, doc)
    assert sorted(paths(errors)) == [
        "stacks.lite20.python",
        "stacks.ms20.npu_smi_timeout",
        "stacks.ms210.npu_smi_timeout",
    ], errors
    assert "not an empty string" in errors[paths(errors).index("stacks.lite20.python")]


@pytest.mark.faults
def test_python_naming_an_unset_variable_is_rejected_with_the_variable(doc, tmp_path, monkeypatch):
    """Not a silent '' that turns ${STACKS}/ms20/bin/python into /ms20/bin/python."""
    monkeypatch.delenv("AUDITOR_UNSET_X", raising=False)
    doc["stacks"]["lite20"]["python"] = "${AUDITOR_UNSET_X}/lite20/bin/python"
    doc["stacks"]["lite20"]["env"] = {"A": "$AUDITOR_UNSET_X", "B": "${AUDITOR_UNSET_X:-}"}
    errors = problems(tmp_path, doc)
    assert sorted(paths(errors)) == ["stacks.lite20.env.A", "stacks.lite20.python"], errors
    assert errors[paths(errors).index("stacks.lite20.python")] == (
        "stacks.lite20.python: '${AUDITOR_UNSET_X}/lite20/bin/python' uses ${AUDITOR_UNSET_X}, which is not "
        "set in the auditor's environment; set it, or give a default: ${AUDITOR_UNSET_X:-default} "
        "(${AUDITOR_UNSET_X:-} for an empty one)"
    )
    doc["stacks"]["lite20"]["env"] = {}
    doc["stacks"]["lite20"]["python"] = "${AUDITOR_UNSET_X:-}"
    (empty,) = problems(tmp_path, doc)
    assert "not an empty string ('${AUDITOR_UNSET_X:-}' expands to '')" in empty


def test_unknown_gymnasium_env_and_rollout_variant(doc, tmp_path):
    doc["rollout"].update(env="Pendulum-v9", variant="fp8")
    errors = problems(tmp_path, doc)
    by_path = dict(e.split(": ", 1) for e in errors)
    assert sorted(by_path) == ["rollout.env", "rollout.variant"], errors
    assert "Pendulum-v1" in by_path["rollout.env"]  # the close match is suggested
    assert "'fp8'" in by_path["rollout.variant"] and "tanh-fp16" in by_path["rollout.variant"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (-1, "must be a whole number from 1 to 65536, not -1"),
        ("5", "must be a whole number from 1 to 65536, not string '5'"),
        (True, "must be a whole number from 1 to 65536, not boolean True"),
        (10**12, "must be a whole number from 1 to 65536, not 1000000000000"),
        (2.0, "must be a whole number from 1 to 65536, not float 2.0"),
    ],
)
def test_probe_batch_is_validated_like_every_key(doc, tmp_path, value, expected):
    doc["probes"]["ppo_policy"]["params"]["batch"] = value
    assert problems(tmp_path, doc) == [f"probes.ppo_policy.params.batch: {expected}"]


def test_probe_params_types_and_ranges(doc, tmp_path):
    doc["probes"]["ppo_policy"]["params"].update(seed=-1, hidden=[64, 0], obs_dim=1.5)
    doc["probes"]["obs_normalizer"]["params"] = {"clip": float("inf")}
    doc["probes"]["action_sampler"]["params"] = {"batch": 10**7}
    errors = problems(tmp_path, doc)
    assert sorted(paths(errors)) == [
        "probes.action_sampler.params.batch",
        "probes.obs_normalizer.params.clip",
        "probes.ppo_policy.params.hidden[1]",
        "probes.ppo_policy.params.obs_dim",
        "probes.ppo_policy.params.seed",
    ], errors
    assert "probes.ppo_policy.params.seed: must be a whole number from 0 to 4294967295, not -1" in errors


def test_plugin_probe_without_params_gets_its_defaults_types():
    doc = {
        "stacks": {
            "tr": {"role": "train", "runtime": "mindspore", "python": "/p"},
            "inf": {"role": "infer", "runtime": "mindspore-lite", "python": "/p"},
        },
        "pairs": [{"train": "tr", "infer": "inf", "probes": ["mine"]}],
        "probes": {"mine": {"params": {"batch": "5", "scale": 2, "name": 3}}},
    }
    with pytest.raises(ConfigError) as info:
        parse(doc, known_probes={"mine": {"batch": 4, "scale": 1.0, "name": "x"}})
    assert sorted(paths(info.value.errors)) == ["probes.mine.params.batch", "probes.mine.params.name"]


def test_a_probe_contradicting_its_own_params_is_refused():
    import types

    from auditor.extend.probe_spec import ProbeSpec

    mod = types.ModuleType("bad_probe")
    mod.__dict__.update(
        NAME="bad",
        VERSION="1",
        INPUTS=("x",),
        OUTPUTS=("y",),
        DEFAULT_PARAMS={"batch": 0},
        PARAMS={"batch": {"type": "integer", "minimum": 1}},
        make_weights=None,
        make_inputs=None,
        build_cell=None,
    )
    with pytest.raises(TypeError, match=r"DEFAULT_PARAMS\['batch'\]: must be a whole number 1 or more"):
        ProbeSpec.from_module(mod)


@pytest.mark.parametrize("cron", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"])
def test_a_schedule_that_never_fires_is_refused(doc, tmp_path, cron):
    doc["schedule"] = {"cron": cron, "timezone": "UTC"}
    errors = problems(tmp_path, doc)
    assert paths(errors) == ["schedule.cron"], errors
    assert "never fires" in errors[0]


def test_a_cron_that_fires_is_accepted(doc, tmp_path):
    doc["schedule"] = {"cron": "0 0 29 2 *", "timezone": "UTC"}  # leap days only: it fires
    config = Context(str(config_file(tmp_path, doc)), None).load_config()
    assert config.schedule.cron == "0 0 29 2 *" and config.schedule.interval is None


def test_config_check_reports_every_problem_with_exit_2(doc, tmp_path):
    doc["worker"]["start_timeout"] = float("nan")
    doc["latency"]["batches"] = [1, 10**9]
    doc["probes"]["ppo_policy"]["params"]["batch"] = True
    path = config_file(tmp_path, doc)
    result = CliRunner().invoke(cli, ["--config", str(path), "config", "check"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for where in ("worker.start_timeout", "latency.batches[1]", "probes.ppo_policy.params.batch"):
        assert f"  {where}: must be" in result.output


# -- generate and schema -------------------------------------------------------------------------


def test_config_schema_is_json_schema_of_every_section(tmp_path):
    result = CliRunner().invoke(cli, ["config", "schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert set(schema["properties"]) == set(SECTIONS)
    assert schema["additionalProperties"] is False
    worker = schema["$defs"]["WorkerConfig"]["properties"]
    assert worker["parallel"]["minimum"] == 1 and worker["parallel"]["maximum"] == 64
    assert "description" in worker["parallel"]
    stack = schema["$defs"]["StackConfig"]
    assert "name" not in stack["properties"] and "name" not in stack.get("required", [])
    # python is required unless source = "db" (a train stack of another auditor): checked in parse
    assert set(stack["required"]) == {"role", "runtime"}
    # the probes' parameters are in it, so editors check [probes.P.params]
    params = schema["properties"]["probes"]["properties"]["ppo_policy"]["properties"]["params"]
    assert params["properties"]["batch"] == {"type": "integer", "minimum": 1, "maximum": 65536}


def test_the_schema_checks_the_shipped_config():
    import tomllib

    import jsonschema  # a test dependency (pyproject's [test] extra)

    schema = json.loads(CliRunner().invoke(cli, ["config", "schema"]).output)
    doc = tomllib.loads((REPO / "auditor.toml").read_text())
    jsonschema.validate(doc, schema)
    doc["worker"]["parallel"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


def test_config_generate_writes_a_commented_file_that_loads(tmp_path, monkeypatch):
    result = CliRunner().invoke(cli, ["config", "generate"])
    assert result.exit_code == 0, result.output
    text = result.output
    for name in SECTIONS:
        assert f"[{name}]" in text or f"[{name}." in text or f"[[{name}]]" in text, name
    assert "# Stacks driven at the same time." in text
    assert "parallel = 2" in text
    monkeypatch.setenv("AUDITOR_STACKS_DIR", str(tmp_path))
    path = tmp_path / "generated.toml"
    path.write_text(text)
    config = Context(str(path), None).load_config()
    assert config.worker.parallel == 2 and config.pairs


def test_document_defaults_are_the_config_defaults():
    from auditor.config.tables import Config

    defaults = Document()
    for name in ("worker", "latency", "rollout", "schedule", "prometheus", "daemon", "secrets", "files"):
        assert getattr(defaults, name) == getattr(Config, name), name


# -- the daemon uses the same loader -----------------------------------------------------------------


def test_daemon_start_refuses_a_schedule_that_never_fires(doc, tmp_path):
    doc["schedule"] = {"cron": "0 0 31 2 *"}
    doc["daemon"]["state_dir"] = str(tmp_path / "state")
    path = config_file(tmp_path, doc)
    result = CliRunner().invoke(cli, ["--config", str(path), "daemon"])
    assert result.exit_code == 2, result.output
    assert "schedule.cron: '0 0 31 2 *' never fires" in result.output
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_daemon_reload_keeps_running_on_a_config_the_loader_refuses(doc, tmp_path, caplog):
    """A SIGHUP reads the config again in the setup child (auditor.daemon.setup): the loader's
    problems, each with its key, are logged and the daemon keeps its config."""
    import logging

    from auditor.daemon.main import Daemon
    from auditor.daemon.setup import load_setup

    caplog.set_level(logging.INFO)
    doc["storage"]["url"] = f"sqlite:///{tmp_path / 'h.db'}"
    doc["daemon"]["state_dir"] = str(tmp_path / "state")
    path = config_file(tmp_path, doc)
    setup = load_setup(str(path), None)
    daemon = Daemon(setup, lambda: load_setup(str(path), None))
    bad = copy.deepcopy(doc)
    bad["schedule"] = {"cron": "0 0 30 2 *", "jitter": float("nan")}
    bad["probes"]["ppo_policy"]["params"]["batch"] = -1
    path.write_text(to_toml(bad))
    assert not daemon.reload()
    assert daemon._setup is setup
    for where in ("schedule.cron", "schedule.jitter", "probes.ppo_policy.params.batch"):
        assert where in caplog.text
