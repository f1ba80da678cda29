"""`auditor config check` fails on what cannot work, not only on what is misspelled: each case
of a config that is right key by key and still leaves an audit with nothing to stand on, and
nothing created by the check. (``--hosts``, which starts the stacks, is in
tests/fleet/test_parity_stacks.py, on this machine and over ssh.)"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.compare.golden import write_golden
from auditor.worker.mindir import read_info
from tests.unit.worker.test_mindir import PRIMS, model, policy_graph

PYTHON = sys.executable  # an interpreter that exists: the checks here start no stack

STACKS = textwrap.dedent(
    f"""
    [stacks.t]
    role = "train"
    runtime = "mindspore"
    python = "{PYTHON}"
    [stacks.i]
    role = "infer"
    runtime = "mindspore-lite"
    python = "{PYTHON}"
    [[pairs]]
    train = "t"
    infer = "i"
    probes = ["ppo_policy"]
    """
)
"""A train and an infer stack on an interpreter that exists, and their pair."""


def write(tmp_path: Path, body: str, stacks: str | None = None) -> Path:
    stacks = stacks or STACKS
    path = tmp_path / "auditor.toml"
    path.write_text(textwrap.dedent(body) + stacks)
    return path


def config_check(path: Path, *options: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--config", str(path), "config", "check", *options])
    assert "Traceback" not in result.output + result.stderr
    return result.exit_code, result.stdout, result.stderr


def minimal_mindir() -> bytes:
    """A MindIR as the wire format has it: ir_version, producer, model_version and an empty
    graph (field 7), enough for the reader to call it readable."""

    def field(number: int, data: bytes) -> bytes:
        return bytes([number << 3 | 2, len(data)]) + data

    data = field(1, b"0.1.1") + field(2, b"MindSpore") + field(5, b"2.0.0") + field(7, b"")
    assert read_info(data).readable, read_info(data).reason
    return data


def test_a_clean_config_exits_0(tmp_path):
    code, out, err = config_check(write(tmp_path, f'[storage]\nurl = "sqlite:///{tmp_path}/h.db"\n'))
    assert code == 0, err
    assert ": ok (2 stacks, 1 pair)" in out and "not there yet: the first audit creates it" in out
    assert not (tmp_path / "h.db").exists()


def test_missing_and_wrong_interpreters(tmp_path):
    not_exec = tmp_path / "python-not-executable"
    not_exec.write_text("#!/bin/sh\n")
    not_exec.chmod(0o644)
    stacks = f"""
        [stacks.t]
        role = "train"
        runtime = "mindspore"
        python = "{tmp_path}/no/such/python"
        [stacks.i]
        role = "infer"
        runtime = "mindspore-lite"
        python = "{not_exec}"
        [stacks.d]
        role = "infer"
        runtime = "mindspore-lite"
        python = "{tmp_path}"
        [[pairs]]
        train = "t"
        infer = "i"
        probes = ["ppo_policy"]
        """
    code, _, err = config_check(write(tmp_path, "", textwrap.dedent(stacks)))
    assert code == 1
    assert f"stacks.t.python: {tmp_path}/no/such/python: no such file" in err
    assert f"stacks.i.python: {not_exec}: not executable" in err
    assert f"stacks.d.python: {tmp_path}: not a file" in err


def test_model_files_globs_goldens_and_recorded_inputs(tmp_path):
    (tmp_path / "model.mindir").write_bytes(minimal_mindir())
    (tmp_path / "junk.mindir").write_text("not a model")
    (tmp_path / "served").mkdir()
    lite = 'runtime = "mindspore-lite"\n'
    watched = f'"{tmp_path}/served/*.mindir", "{tmp_path}/junk.mindir", "{tmp_path}/gone.mindir"'
    stacks = STACKS.replace(lite, f"{lite}models = [{watched}]\n", 1) + textwrap.dedent(f"""
        [stacks.i2]
        role = "infer"
        runtime = "mindspore-lite"
        python = "{PYTHON}"
        [models.missing]
        path = "nowhere/policy.mindir"
        golden = "nowhere/policy.golden.npz"
        [models.recorded]
        path = "model.mindir"
        reference = "i"
        stacks = ["i2"]
        [[models.recorded.inputs]]
        name = "obs"
        shape = [4, 3]
        npz = "missing-observations.npz"
        """)
    code, _, err = config_check(write(tmp_path, "", stacks))
    assert code == 1, err
    lines = [line.strip() for line in err.splitlines()]
    assert f"problem: stacks.i.models: {tmp_path}/served/*.mindir: no file matches" in lines
    assert any(
        line.startswith(f"problem: stacks.i.models: {tmp_path}/junk.mindir: not a MindIR") for line in lines
    )
    assert f"problem: stacks.i.models: {tmp_path}/gone.mindir: {tmp_path}/gone.mindir: no such file" in lines
    assert f"problem: models.missing.path: {tmp_path}/nowhere/policy.mindir: no such file" in lines
    assert any(
        line.startswith("problem: models.missing.golden:") and "no such golden file" in line for line in lines
    )
    assert any(
        line.startswith("problem: models.recorded.inputs:")
        and "missing-observations.npz: no such file" in line
        for line in lines
    )
    assert not (tmp_path / "nowhere").exists()


def test_a_reference_stack_that_cannot_load_is_a_config_error(tmp_path):
    (tmp_path / "model.mindir").write_bytes(minimal_mindir())
    code, _, err = config_check(write(tmp_path, '[models.p]\npath = "model.mindir"\nreference = "t"\n'))
    assert code == 2
    assert "models.p.reference: t runs mindspore, a train runtime that does not load a MindIR" in err


@pytest.mark.parametrize(
    "url", ["/var/lib/auditor/history.db", "history.db", "postgresql://a@h:port/x", "postgress://a@h/x"]
)
def test_a_storage_url_that_is_not_a_url(tmp_path, url):
    code, _, err = config_check(write(tmp_path, f'[storage]\nurl = "{url}"\n'))
    assert code == 2
    assert "storage.url: not a database URL" in err and "sqlite:////absolute/path/history.db" in err


def test_a_training_network_config_check_can_see_is_missing_is_a_config_error(tmp_path):
    """#54: a missing checkpoint and a train.path without the factory's package passed config
    check and failed the audit."""
    (tmp_path / "model.mindir").write_bytes(minimal_mindir())
    (tmp_path / "src").mkdir()
    body = (
        '[models.p]\npath = "model.mindir"\n'
        'train = { factory = "mypolicy.nets:build", checkpoint = "actor.ckpt", stack = "t", path = "src" }\n'
    )
    code, _, err = config_check(write(tmp_path, body))
    assert code == 1, err  # the config is valid; what it names is not there
    assert f"models.p.train.checkpoint: {tmp_path / 'actor.ckpt'}: no such file" in err
    assert f"models.p.train.path: train.path {tmp_path / 'src'} holds no package 'mypolicy'" in err


def test_a_misspelt_database_scheme_is_named_by_config_check(tmp_path):
    """#54: `postgress://` passed config check and failed the audit."""
    code, _, err = config_check(write(tmp_path, '[storage]\nurl = "postgress://auditor@db/history"\n'))
    assert code == 2
    assert "storage.url: not a database URL the history can use: 'postgress://auditor@db/history'" in err
    assert "no database 'postgress'" in err


def test_a_database_that_cannot_be_created_or_opened(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = config_check(write(tmp_path, f'[storage]\nurl = "sqlite:///{blocker}/sub/h.db"\n'))
    assert (
        code == 1
        and f"storage.url: {blocker}/sub/h.db: cannot be created, {blocker} is not a directory" in err
    )
    # --connect opens what is there: an unreachable server is a problem, the check creates nothing
    path = write(tmp_path, '[storage]\nurl = "postgresql://auditor:pw@127.0.0.1:1/history"\n')
    code, out, err = config_check(path)
    assert code == 0 and "(not opened: --connect opens it)" in out and ":pw@" not in out
    code, _, err = config_check(path, "--connect")
    assert code == 1 and "storage.url:" in err and "Connection refused" in err and ":pw@" not in err
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is not a database" * 100)
    code, _, err = config_check(write(tmp_path, f'[storage]\nurl = "sqlite:///{damaged}"\n'), "--connect")
    assert code == 1 and "storage.url:" in err


@pytest.mark.faults
def test_typo_in_the_database_path_is_a_problem_and_creates_no_directory(tmp_path, monkeypatch):
    typo = tmp_path / "typo" / "deeper"
    for options in ((), ("--connect",)):
        code, _, err = config_check(write(tmp_path, f'[storage]\nurl = "sqlite:///{typo}/h.db"\n'), *options)
        assert code == 1 and f"its directory {typo} does not exist" in err, err
        assert not (tmp_path / "typo").exists()
    # The default location's directories are the auditor's own: made by the first audit, named.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("AUDITOR_DB_URL", raising=False)
    code, out, _ = config_check(write(tmp_path, ""))
    made = tmp_path / "state"
    assert code == 0 and f"the first audit creates it and the directories {made}, {made / 'auditor'})" in out
    assert not made.exists()


def test_a_plugin_that_did_not_import_fails_the_check(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "broken_rules_plugin.py").write_text("import not_installed_anywhere\n")
    code, _, err = config_check(write(tmp_path, f'[plugins]\ndirs = ["{plugins}"]\n'))
    assert code == 1
    assert (
        "problem: plugins: plugin broken_rules_plugin" in err
        and "ModuleNotFoundError: No module named 'not_installed_anywhere'" in err
    )
    sys.modules.pop("broken_rules_plugin", None)


def test_stacks_on_other_hosts_are_said_to_be_unchecked_without_hosts(tmp_path):
    stacks = f"""
        [hosts.far]
        command = ["sh", "-c", "exec \\"$@\\"", "sh"]
        [stacks.t]
        role = "train"
        runtime = "mindspore"
        python = "/opt/on/that/host/python"
        host = "far"
        [stacks.i]
        role = "infer"
        runtime = "mindspore-lite"
        python = "{PYTHON}"
        [[pairs]]
        train = "t"
        infer = "i"
        probes = ["ppo_policy"]
        """
    code, out, err = config_check(write(tmp_path, "", textwrap.dedent(stacks)))
    assert code == 0, err
    assert "not checked: stack t: its interpreter on host far (config check --hosts starts it there)" in out
    assert os.path.exists(PYTHON)


@pytest.mark.faults
def test_a_golden_that_does_not_fit_its_model_is_a_problem(tmp_path):
    """The file takes obs [-1, 3] float32; a golden recorded for another model is named."""
    (tmp_path / "policy.mindir").write_bytes(model(policy_graph(), PRIMS))
    out = [np.zeros((4, 2), np.float32)]
    write_golden(tmp_path / "good.npz", [np.zeros((4, 3), np.float32)], out, ["obs"], ["a"])
    write_golden(tmp_path / "wide.npz", [np.zeros((4, 5), np.float32)], out, ["obs"], ["a"])
    write_golden(tmp_path / "f64.npz", [np.zeros((4, 3), np.float64)], out, ["obs"], ["a"])
    for golden, said in (
        ("wide.npz", "input_0 is [4, 5] float32, "),
        ("f64.npz", "input_0 is [4, 3] float64, "),
    ):
        text = f'[models.p]\npath = "policy.mindir"\nstacks = ["i"]\ngolden = "{golden}"\n'
        code, _, err = config_check(write(tmp_path, text))
        assert code == 1 and "problem: models.p.golden: does not fit the model:" in err, err
        assert said in err and "input obs is [-1, 3] float32" in err, err
    code, _, err = config_check(
        write(tmp_path, '[models.p]\npath = "policy.mindir"\nstacks = ["i"]\ngolden = "good.npz"\n')
    )
    assert "models.p.golden" not in err, err


def test_a_golden_recorded_for_another_file_is_a_problem(tmp_path):
    """#54: a retrained model held to its old golden passed config check, then its audit blamed
    the stacks for the retraining. The golden's model_sha256 against the file's own."""
    data = model(policy_graph(), PRIMS)
    (tmp_path / "policy.mindir").write_bytes(data)
    mine, other = hashlib.sha256(data).hexdigest(), hashlib.sha256(b"the file before retraining").hexdigest()
    args = ([np.zeros((4, 3), np.float32)], [np.zeros((4, 2), np.float32)], ["obs"], ["a"])
    write_golden(tmp_path / "old.npz", *args, model_sha256=other)
    write_golden(tmp_path / "new.npz", *args, model_sha256=mine)
    text = '[models.p]\npath = "policy.mindir"\nstacks = ["i"]\ngolden = "{}"\n'
    code, _, err = config_check(write(tmp_path, text.format("old.npz")))
    assert code == 1, err
    said = f"problem: models.p.golden: the golden was recorded for another file (sha256 {other[:12]}; "
    assert said + f"this one is {mine[:12]}): " in err, err
    assert "record it again: auditor golden record p" in err, err
    code, _, err = config_check(write(tmp_path, text.format("new.npz")))
    assert "models.p.golden" not in err, err


def test_config_check_json_says_what_the_text_says(tmp_path):
    """#54: config check had no --json. The same facts for a program: stacks, pairs, the
    database, what was not checked, and each problem on its key."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = write(tmp_path, f'[storage]\nurl = "sqlite:///{blocker}/sub/h.db"\n')
    code, out, err = config_check(path, "--json")
    assert code == 1 and out.startswith("{"), err
    doc = json.loads(out)
    assert doc["ok"] is False and doc["config"] == str(path)
    assert set(doc["stacks"]) == {"t", "i"} and doc["stacks"]["t"]["role"] == "train"
    assert doc["pairs"] == [{"train": "t", "infer": "i"}] and doc["models"] == {}
    assert [p["key"] for p in doc["problems"]] == ["storage.url"]
    text_code, _, text_err = config_check(path)
    assert text_code == code
    assert [f"{p['key']}: {p['message']}" for p in doc["problems"]] == [
        line.removeprefix("  problem: ") for line in text_err.splitlines() if line.startswith("  problem: ")
    ]


def test_config_check_lists_the_watched_model_files(tmp_path):
    """#54: config check (and --hosts) read the watched models but never listed them."""
    served = tmp_path / "served.mindir"
    served.write_bytes(minimal_mindir())
    stacks = STACKS.replace(
        'runtime = "mindspore-lite"\n', f'runtime = "mindspore-lite"\nmodels = ["{tmp_path}/*.mindir"]\n'
    )
    path = write(tmp_path, "", stacks)
    code, out, err = config_check(path)
    digest = hashlib.sha256(minimal_mindir()).hexdigest()[:12]
    [line] = [line for line in out.splitlines() if line.startswith("  watched by stack i: ")]
    assert line.startswith(f"  watched by stack i: {served}  sha256 {digest}  0.0 MB  MindIR"), line
    code, out, _ = config_check(path, "--json")
    assert json.loads(out)["watched"]["i"][str(served)]["sha256"].startswith(digest)
