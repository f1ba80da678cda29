"""Hostile files where the auditor expects a model, a golden or recorded inputs: a FIFO, a
device, a symlink loop, a directory, a file larger than the cap, goldens with text, complex
or pickled arrays and meta of the wrong types, recorded inputs that are not numbers.

The rule: each fails its own model (or command) with the file and the problem, at once
(nothing hangs, nothing is read whole), with no traceback; `check` exits 2; in a cycle the
run is stored complete and the good model's result is kept; the deployed-model watch names
each bad served file inside the Python 3.7 worker that reads it. The fuzz test throws
damaged goldens at the reader (AUDITOR_FUZZ_EXAMPLES sets how many; bench/soak.py runs the
soak size).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from auditor.compare.golden import GoldenError, read_golden, write_golden
from auditor.config.user_models import InputSpec, ModelConfig
from auditor.policy.model_file import ModelInputError, model_inputs
from auditor.worker.mindir import MindIRInfo, TensorInfo
from tests.cli import auditor
from tests.conftest import DEFAULT_CONFIG
from tests.fault_kit import hostile_goldens, hostile_inputs, hostile_paths
from tests.fuzz_settings import fuzz_settings
from tests.user_models import export_user_policy

TIMEOUT = 120  # a hung read would exceed it; nothing here should take more than seconds


def test_check_and_golden_record_refuse_each_hostile_model_at_once(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    for path, said in hostile_paths(tmp_path).values():
        done = auditor(
            "--config", str(DEFAULT_CONFIG), "--db", str(db), "check", "--model", str(path), timeout=TIMEOUT
        )
        assert done.returncode == 2, (path, done.returncode, done.stdout, done.stderr)
        assert done.stderr == f"auditor: {path}: {said}\n" or (
            done.stderr.startswith(f"auditor: {path}: ") and said in done.stderr
        ), done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        out = tmp_path / "g.npz"
        done = auditor(
            "--config", str(DEFAULT_CONFIG), "--db", str(db), "golden", "record", str(path),
            "--stack", "lite20", "--out", str(out), timeout=TIMEOUT,
        )  # fmt: skip
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert not out.exists()


def test_every_hostile_golden_and_input_file_is_named_with_its_problem(tmp_path: Path) -> None:
    for path, said in hostile_goldens(tmp_path).values():
        with pytest.raises(GoldenError) as err:
            read_golden(path)
        assert str(err.value).startswith(f"{path}: ") and said in str(err.value)
    info = MindIRInfo("0" * 64, 1, True, inputs=(TensorInfo("obs", (1, 11), "float32"),))
    for path, said in hostile_inputs(tmp_path).values():
        spec = InputSpec("obs", (1, 11), generator="npz", npz=str(path))
        with pytest.raises(ModelInputError) as err:
            model_inputs(ModelConfig("m", "/m.mindir", ("lite20",), inputs=(spec,)), info)
        assert f"models.m.inputs[0] (obs): {path}" in str(err.value) and said in str(err.value)


def _good_golden(path: Path) -> bytes:
    x = np.linspace(-1, 1, 22, dtype=np.float32).reshape(2, 11)
    write_golden(path, [x], [x[:, :4], x[:, :2] > 0], ["obs"], ["logits", "mask"], model_sha256="ab", seed=1)
    return path.read_bytes()


@fuzz_settings(40)
@given(
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_damaged_goldens_are_refused_or_read_never_raise_anything_else(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, int]], cut: int | None
) -> None:
    d = tmp_path_factory.mktemp("fuzz-golden")
    data = bytearray(_good_golden(d / "good.npz"))
    for pos, value in edits:
        data[pos % len(data)] = value
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    (d / "bad.npz").write_bytes(bytes(data))
    try:
        golden = read_golden(d / "bad.npz")
    except GoldenError as exc:
        assert str(exc).startswith(str(d / "bad.npz"))
        return
    for a in [*golden.inputs, *golden.outputs]:  # what is read is what the cycle can compute with
        assert a.dtype.kind in "biuf"
        np.asarray(a, np.float64)


# -- in a real cycle, with the deployed-model watch reading served files in the 3.7 worker ------------


@pytest.mark.stacks
def test_a_cycle_with_hostile_files_keeps_the_good_model_and_the_run(stacks: Path, tmp_path: Path) -> None:
    d = tmp_path
    export_user_policy("ms20", d / "b1.mindir", batch=1)
    paths = hostile_paths(d)
    goldens = hostile_goldens(d, inputs_like=np.zeros((1, 11), np.float32))
    inputs = hostile_inputs(d)
    tables = [
        '[models.good]\npath = "b1.mindir"\nstacks = ["lite20"]\nreference = "ms210-graph"\n',
    ]
    expected: dict[str, tuple[Path, str]] = {}
    for name, (path, said) in paths.items():
        tables.append(f'[models.m_{name}]\npath = "{path}"\nstacks = ["lite20"]\nreference = "ms210-graph"\n')
        expected[f"m_{name}:ms210-graph->lite20"] = (path, said)
    for name, (path, said) in goldens.items():
        tables.append(f'[models.g_{name}]\npath = "b1.mindir"\nstacks = ["lite20"]\ngolden = "{path}"\n')
        expected[f"g_{name}:golden->lite20"] = (path, said)
    for name, (path, said) in inputs.items():
        tables.append(
            f'[models.i_{name}]\npath = "b1.mindir"\nstacks = ["lite20"]\nreference = "ms210-graph"\n'
            f'[[models.i_{name}.inputs]]\nname = "obs"\nshape = [1, 11]\nnpz = "{path}"\n'
        )
        expected[f"i_{name}:ms210-graph->lite20"] = (path, said)
    served = [str(d / "b1.mindir"), *(str(p) for p, _ in paths.values())]
    text = DEFAULT_CONFIG.read_text().split("# --- pairs")[0]
    text = text.replace("[rollout]\nenabled = true", "[rollout]\nenabled = false")
    text = text.replace("[stacks.lite20]\n", f"[stacks.lite20]\nmodels = {json.dumps(served)}\n", 1)
    config = d / "auditor.toml"
    config.write_text(text + "\n" + "\n".join(tables))
    done = auditor("--config", str(config), "--db", str(d / "history.db"), "audit", "--json", timeout=TIMEOUT)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    doc = json.loads(done.stdout)
    results = {r["pair"]: r for r in doc["results"]}
    assert results["good:ms210-graph->lite20"]["status"] == "consistent"
    for pair, (path, said) in expected.items():
        message = results[pair]["message"]
        # nothing of that model ran: unchecked (not an error of a runtime), saying which file and why
        assert results[pair]["status"] == "unchecked", (pair, results[pair])
        assert f"{path}: " in message and said in message, (pair, message, said)
    # the run is stored complete, with every result
    shown = auditor("--db", str(d / "history.db"), "show", "latest", "--format", "json", timeout=TIMEOUT)
    stored = json.loads(shown.stdout)
    assert stored["run"]["status"] == "complete", stored["run"]
    assert len(stored["results"]) == len(expected) + 1
    # the deployed-model watch, in lite20's Python 3.7 worker: the good file read, each bad one named
    fingerprint = doc["stacks"]["lite20"]["fingerprint"]["models"]
    assert list(fingerprint["files"]) == [str(d / "b1.mindir")]
    for path, said in paths.values():
        assert fingerprint["unknown"][str(path)].startswith(f"{path}: {said}")
