"""The deployment gate and the model probes on a spread of user-style policies (not the
built-in probes: ELU, SiLU, ReLU, GeLU, LeakyReLU trunks; Gaussian, softplus, value, softmax,
entropy and greedy argmax heads; fp16 compute; a normalizer folded in), exported IN THE TEST by
ms20 and ms210 (tests/model_fixtures/mypolicy), each file loaded and run by the test itself on
every serving stack (tests/model_fixtures/run_mindir.py: what the runtime really does), and
compared with what `auditor check` (default and --no-load) and a cycle say of it.

What must hold whatever the runtimes do: no file a serving runtime cannot load or run gets OK
from `check` in any mode; every such failure is named with its operator or version pair and a
remedy, by `check` and by the cycle; a file the runtime runs is never called incompatible,
unsupported or an error; --no-load never says OK. A cycle compares each serving stack with the
policy's own training network (its factory and checkpoint, PyNative on the exporting stack).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests.conftest import REPO
from tests.user_models import export_policies, policies_config, served_truth

pytestmark = pytest.mark.stacks

EXPORTERS = ("ms20", "ms210")


@pytest.fixture(scope="module")
def policies(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    d = tmp_path_factory.mktemp("policies")
    for exporter in EXPORTERS:
        export_policies(exporter, d / exporter)
    # Every kind mypolicy.nets builds (its KINDS), as each exporter wrote it.
    kinds = sorted(p.stem for p in (d / EXPORTERS[0]).glob("*.mindir"))
    assert len(kinds) >= 7 and kinds == sorted(p.stem for p in (d / EXPORTERS[1]).glob("*.mindir"))
    return {(e, k): d / e / f"{k}.mindir" for e in EXPORTERS for k in kinds}


@pytest.fixture(scope="module")
def truth(policies: dict[tuple[str, str], Path]) -> dict[tuple[str, str, str], dict]:
    """(exporter, kind, server) -> what the serving runtime did with the file, outside the auditor."""
    return served_truth(policies)


@pytest.fixture(scope="module")
def config(policies: dict[tuple[str, str], Path]) -> Path:
    """The stacks, and every policy as a [models.NAME] served by the three servers, its
    reference the training network."""
    return policies_config(policies, next(iter(policies.values())).parent.parent / "auditor.toml")


def check(config: Path, files: list[Path], *extra: str) -> dict[str, dict[str, dict]]:
    """`auditor check --json` on every file at once: file -> stack -> verdict."""
    args = ["--config", str(config), "--db", str(config.parent / "none.db"), "check", "--json", *extra]
    for f in files:
        args += ["--model", str(f)]
    result = CliRunner().invoke(cli, args)
    docs = json.loads(result.stdout)
    assert result.exit_code == max(d["exit_code"] for d in docs) == 1, (
        result.output
    )  # some file fails somewhere
    return {d["file"]: {v["stack"]: v for v in d["verdicts"]} for d in docs}


@pytest.fixture(scope="module")
def gate(config: Path, policies: dict[tuple[str, str], Path]) -> dict[str, dict[str, dict[str, dict]]]:
    files = list(policies.values())
    return {"load": check(config, files), "no-load": check(config, files, "--no-load")}


@pytest.fixture(scope="module")
def cycle(config: Path) -> dict:
    result = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "auditor"),
            "--config",
            str(config),
            "--db",
            str(config.parent / "h.db"),
            "audit",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    return {(r["probe"], r["infer"]): r for r in doc["results"]}


def named(text: str) -> bool:
    """A failure named as a user thinks of it: the operator, or the version pair, and a remedy."""
    return ("operator " in text or "another release" in text or "MindIR version" in text) and "remedy" in text


def test_the_spread_really_differs_between_runtimes(truth: dict) -> None:
    """The policies make the runtimes disagree (else the comparisons below prove little)."""
    works = {k for k, t in truth.items() if t["works"]}
    fails = set(truth) - works
    assert ("ms20", "fp16_mlp", "ms20-graph") in works and ("ms20", "greedy_argmax", "lite20") in works
    assert any(s == "ms210-graph" and e == "ms20" for e, _, s in fails)  # first-call failures
    assert any(s == "lite20" and e == "ms210" for e, _, s in fails)  # a MindIR version too new
    assert len(works) >= 20 and len(fails) >= 10


def test_check_says_ok_only_where_the_runtime_runs_the_file(
    truth: dict, gate: dict, policies: dict[tuple[str, str], Path]
) -> None:
    for (exporter, kind, server), t in truth.items():
        file = str(policies[(exporter, kind)])
        loaded, rules = gate["load"][file][server], gate["no-load"][file][server]
        said = f"{exporter}/{kind} on {server}: runtime {t}; check {loaded['status']}: {loaded['reason']}"
        assert rules["status"] != "ok", said  # never OK without a load
        if not t["works"]:
            assert loaded["status"] in ("incompatible", "unsupported"), said
            text = f"{loaded['reason']}\nremedy: {loaded['remedy']}"
            assert named(text), said
            assert rules["status"] in ("incompatible", "unsupported", "warning", "unchecked"), said
            continue
        assert loaded["status"] in ("ok", "warning"), said
        assert loaded["load"]["ok"] and len(loaded["load"]["outputs"]) == len(t["outputs"]), said
        assert [o["shape"] for o in loaded["load"]["outputs"]] == [shape for shape, _, _ in t["outputs"]]
        if loaded["status"] == "ok":
            assert loaded["evidence"] and "loaded the file and ran one seeded batch" in loaded["evidence"][0]
        if exporter == "ms20" and server == "ms210-graph":
            assert loaded["status"] == "warning" and "another release" in loaded["reason"], said


def test_no_load_says_what_it_knows_and_what_not(gate: dict, policies: dict[tuple[str, str], Path]) -> None:
    rules = gate["no-load"]
    # What rules alone know for sure is said as such: Lite 2.0 cannot read a 2.10 file.
    too_new = rules[str(policies[("ms210", "elu_gauss")])]["lite20"]
    assert too_new["status"] == "incompatible" and "MindIR version 3" in too_new["reason"]
    fine = rules[str(policies[("ms20", "elu_gauss")])]["ms20-graph"]
    assert fine["status"] == "unchecked" and "not loaded (--no-load)" in fine["reason"]
    assert any("covers every operator" in e for e in fine["evidence"])


def test_a_first_call_failure_is_told_from_a_load_failure(gate: dict, policies: dict, truth: dict) -> None:
    v = gate["load"][str(policies[("ms20", "fp16_mlp")])]["ms210-graph"]
    assert truth[("ms20", "fp16_mlp", "ms210-graph")]["phase"] == "run"
    assert v["load"]["phase"] == "run" and "loads it, then fails on the first call" in v["reason"]
    assert "Got null AbstractBasePtr" in v["reason"]
    assert any("Cross-major version compatibility" in line for line in v["load"]["log_lines"])
    assert "serve it with mindspore 2.0.x" in v["remedy"] and "export it with MindSpore 2.10.x" in v["remedy"]


def test_fp16_compute_on_lite_is_a_warning_with_the_measurement(gate: dict, policies: dict) -> None:
    v = gate["load"][str(policies[("ms20", "fp16_mlp")])]["lite20"]
    assert v["status"] == "warning" and v["load"]["ok"]
    assert "Cast differently" in v["reason"] and "CastAdd" in v["reason"]


def test_the_cycle_agrees_with_the_runtimes(truth: dict, cycle: dict) -> None:
    for (exporter, kind, server), t in truth.items():
        r = cycle[(f"{exporter}_{kind}", server)]
        said = f"{exporter}/{kind} on {server}: runtime {t}; cycle {r['status']}: {r['message']}"
        assert r["train"] == exporter and r["pair"] == f"{exporter}_{kind}:{exporter}->{server}"
        if t["works"]:
            assert r["status"] in ("consistent", "drift"), said
        else:
            assert r["status"] in ("incompatible", "unsupported"), said
            assert named(r["message"]), said


def test_the_training_network_is_the_reference(cycle: dict) -> None:
    """Same release, fp32: GraphCell gives exactly what the training network gives in PyNative."""
    r = cycle[("ms20_elu_gauss", "ms20-graph")]
    assert r["status"] == "consistent" and r["train_latency"]["p50_us"] > 0
    assert all(o["metrics"]["max_abs"] == 0.0 for o in r["outputs"])
    # The greedy head's int32 action agrees exactly on Lite.
    greedy = cycle[("ms20_greedy_argmax", "lite20")]
    assert greedy["status"] == "consistent" and greedy["outputs"][0]["metrics"]["max_abs"] == 0.0


def test_fp16_inside_is_said_and_judged_as_fp16(cycle: dict) -> None:
    r = cycle[("ms20_fp16_mlp", "ms20-graph")]
    assert r["artifact"]["info"]["compute_dtypes"] == ["float16"]
    # the element-wise thresholds (and the fresh process's rerun, held to 0)
    assert r["thresholds"]["output0"] == {"atol": 1e-3, "rtol": 1e-3, "infer_rerun_max_abs": 0.0}
    assert "computes in float16 inside" in r["message"] and "float16 thresholds" in r["message"]
    # PyNative fp16 and GraphCell differ by fp16 rounding, more than fp32's 1e-5 would allow.
    assert r["outputs"][0]["metrics"]["max_abs"] > 1e-5 and r["status"] == "consistent"
    assert "passes at atol" in r["message"]
    plain = cycle[("ms20_elu_gauss", "lite20")]
    assert plain["thresholds"]["output0"] == {"atol": 1e-5, "rtol": 1e-5, "infer_rerun_max_abs": 0.0}
    assert "float16" not in plain["message"]


def test_a_failure_an_audit_stored_is_known_without_a_load(
    cycle: dict, config: Path, policies: dict[tuple[str, str], Path]
) -> None:
    """The cycle above stored what ms210-graph did with ms20's fp16 policy: a check against the
    same database says it without loading the file."""
    file = policies[("ms20", "fp16_mlp")]
    args = ["--config", str(config), "--db", str(config.parent / "h.db"), "check", "--json"]
    result = CliRunner().invoke(cli, [*args, "--model", str(file), "--stack", "ms210-graph", "--no-load"])
    (v,) = json.loads(result.stdout)["verdicts"]
    assert result.exit_code == 1 and v["status"] == "incompatible", v
    assert "an audit of this very file" in v["reason"] and "stored INCOMPATIBLE" in v["reason"]


@pytest.mark.faults
def test_an_unreachable_stack_is_never_ok_and_names_what_an_audit_stored(
    cycle: dict, config: Path, policies: dict[tuple[str, str], Path], tmp_path: Path
) -> None:
    """lite20's interpreter gone: its last stored fingerprint says which runtime it is, and the
    cycle's result for this very file on that runtime is named as what is known; neither it nor
    the measured table makes a stack that was not reached OK (exit 1)."""
    broken = tmp_path / "auditor.toml"
    text = config.read_text().replace(
        '[stacks.lite20]\nrole = "infer"\nruntime = "mindspore-lite"\npython = ',
        '[stacks.lite20]\nrole = "infer"\nruntime = "mindspore-lite"\npython = "/nonexistent/python"\n# was ',
    )
    assert "/nonexistent/python" in text
    broken.write_text(text)
    args = [
        "--config",
        str(broken),
        "--db",
        str(config.parent / "h.db"),
        "check",
        "--json",
        "--stack",
        "lite20",
    ]
    # a file the cycle found consistent on lite20 (the ELU policy drifts there on the sweep)
    audited = CliRunner().invoke(cli, [*args, "--model", str(policies[("ms20", "greedy_argmax")])])
    (v,) = json.loads(audited.stdout)["verdicts"]
    assert audited.exit_code == 1 and v["status"] == "unchecked", v
    assert "not reached now, so not known to run this file" in v["reason"]
    assert "known: an audit loaded and ran this very file" in v["reason"]
    assert any("could not be reached" in u for u in v["unknown"])
    export_policies("ms20", tmp_path, ("leaky_entropy",), seed=5)
    unaudited = CliRunner().invoke(cli, [*args, "--model", str(tmp_path / "leaky_entropy.mindir")])
    (u,) = json.loads(unaudited.stdout)["verdicts"]
    # Never audited; Lite 2.0's measured table covers each of its operators, which is said.
    assert unaudited.exit_code == 1 and u["status"] == "unchecked", u
    assert "covers every operator" in u["reason"] and "an audit" not in u["reason"], u


def test_golden_record_from_the_training_network(cycle: dict, config: Path, tmp_path: Path) -> None:
    from auditor.compare.golden import read_golden

    out = tmp_path / "fp16.golden.npz"
    args = ["--config", str(config), "golden", "record", "ms20_fp16_mlp", "--train", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "recorded on ms20 by mypolicy.nets:build_actor (PyNative)" in result.output
    golden = read_golden(out)
    assert golden.meta["stack"] == "ms20" and golden.meta["reference"] == "mypolicy.nets:build_actor"
    assert golden.outputs[0].shape == (8, 4) and golden.outputs[0].dtype == np.float32
