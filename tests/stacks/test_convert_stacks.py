"""What is really served: real MindSpore Lite 2.0 conversions of real ms20 exports, audited end
to end (auditor.policy.convert): ``general`` to a .ms, ``weight_fp16`` on and off, a converter
config file, failing conversions with the converter's own words, a model converted before it is
served, and a served converted file against a fresh conversion of its source."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.cycle.audit_run import AuditRun
from auditor.db import schema as m
from auditor.extend.manager import Plugins
from auditor.history.store import Store
from auditor.report.text import render_text
from auditor.results import CONSISTENT, DRIFT, ERROR
from tests.cli import auditor
from tests.configs import build, narrow

pytestmark = pytest.mark.stacks

# Lite stacks that differ only in the conversion their deployment runs (one worker each)
VARIANTS = {
    "lite20": None,
    "lite20-ms": {"optimize": "general"},
    "lite20-fp16": {"optimize": "general", "weight_fp16": True},
    "lite20-cfg": {"optimize": "general", "config_file": "converter.cfg"},
    "lite20-badcfg": {"config_file": "bad.cfg"},
    "lite20-mindir": {"save_type": "mindir"},
    "lite20-shape": {"input_shape": {"observation": [1, 3]}},  # the export's input is named h
}


def config(doc: dict, tmp_path: Path, probes=("ppo_policy",), extra=None):
    (tmp_path / "converter.cfg").write_text(
        "# measured: same graph as optimize = none\n[registry]\ndisable_fusion=on\n"
    )
    (tmp_path / "bad.cfg").write_text("[registry]\nno_such_key=1\n")
    lite = doc["stacks"]["lite20"]
    doc = narrow(
        doc,
        stacks={
            "ms20": doc["stacks"]["ms20"],
            **{name: lite | ({"convert": convert} if convert else {}) for name, convert in VARIANTS.items()},
        },
        pairs=[{"train": "ms20", "infer": name, "probes": list(probes)} for name in VARIANTS],
        probe_tables={"ppo_policy": {"variants": ["fp32"]}},
        rollout={"enabled": False},
        latency={"batches": [], "iterations": 5},
        telemetry={"enabled": False},
        storage={"url": f"sqlite:///{tmp_path / 'history.db'}"},
        drop=["models"],
    )
    if extra:
        extra(doc)
    path = tmp_path / "auditor.toml"  # relative config_file paths are relative to it
    return build(doc, source=str(path))


@pytest.fixture(scope="module")
def converted(stacks, tmp_path_factory, default_doc):
    tmp = tmp_path_factory.mktemp("convert")
    cfg = config(default_doc, tmp)
    store = Store.open(cfg.db_url)
    result = AuditRun(cfg, Plugins(entry_points=False), store).run()
    yield cfg, result, store, tmp
    store.close()


def by_infer(result):
    return {r.infer: r for r in result.results}


def metrics(r) -> dict[str, dict[str, float]]:
    return {c.output: c.metrics for c in r.outputs}


def test_general_conversion_is_recorded_and_computes_what_unconverted_lite_computes(converted):
    _, result, store, _ = converted
    r = by_infer(result)
    plain, ms = r["lite20"], r["lite20-ms"]
    assert plain.conversion is None
    info = ms.conversion.info
    assert ms.conversion.kind == "lite-ms" and info["format"] == "ms"
    assert info["options"] == {
        "optimize": "general",
        "weight_fp16": False,
        "input_shape": {},
        "input_data_type": "float32",
        "output_data_type": "float32",
        "save_type": "ms",
    }
    assert info["converter"] == {
        "package": "mindspore-lite",
        "version": "2.0.0",
        "commit": "87e30858f9e2ade0cfbe884031944a220c06e9cf",
    }
    assert info["source_sha256"] == ms.artifact.sha256  # converted from the pair's own export
    # measured: a general .ms of this fp32 policy computes bitwise what Lite computes unconverted
    assert metrics(ms) == metrics(plain) and ms.status == plain.status
    # stored: the result points at the converted artifact, kept with its bytes and its options
    with store.engine.connect() as conn:
        row = conn.execute(
            select(m.ProbeResultRow.converted_sha256, m.Artifact.info, m.ArtifactBlob.data)
            .join(m.Artifact, m.Artifact.sha256 == m.ProbeResultRow.converted_sha256)
            .join(m.ArtifactBlob, m.ArtifactBlob.digest == m.Artifact.blob_digest)
            .where(m.ProbeResultRow.run_id == result.run_id, m.ProbeResultRow.pair == "ms20->lite20-ms")
        ).one()
    assert row.converted_sha256 == ms.conversion.sha256 == hashlib.sha256(row.data).hexdigest()
    assert row.data[4:8] == b"MSL2" and row.info["options"]["optimize"] == "general"
    assert "served as converted by MindSpore Lite 2.0.0: ms" in render_text(result)


def test_weight_fp16_shows_its_real_effect(converted):
    _, result, _, _ = converted
    r = by_infer(result)
    fp16, plain = r["lite20-fp16"], r["lite20"]
    assert fp16.conversion.info["options"]["weight_fp16"] is True
    assert fp16.conversion.size < r["lite20-ms"].conversion.size  # float32 constants stored as float16
    assert fp16.status == DRIFT
    got = metrics(fp16)
    # inputs-dependent outputs: fp16 rounding of the weights, ~1e-4 relative (measured 2.2e-4)
    assert (
        1e-5 < got["mean"]["max_rel"] < 1e-3
        and got["mean"]["max_rel"] > 10 * metrics(plain)["mean"]["max_rel"]
    )
    # the constant-folded std is garbage in a weight_fp16 .ms (two fp16 values read as one float32)
    assert got["std"]["max_abs"] > 0.1 and not next(c for c in fp16.outputs if c.output == "std").passed
    assert "std" in fp16.message


def test_a_converter_config_file_is_applied_and_recorded(converted):
    _, result, _, tmp = converted
    cfg = by_infer(result)["lite20-cfg"]
    info = cfg.conversion.info
    assert info["config_file"] == str(tmp / "converter.cfg")
    assert info["config_sha256"] == hashlib.sha256((tmp / "converter.cfg").read_bytes()).hexdigest()
    # [registry] disable_fusion=on: another graph than general's, same numbers to within float32
    assert cfg.conversion.sha256 != by_infer(result)["lite20-ms"].conversion.sha256
    assert cfg.status in (CONSISTENT, DRIFT) and cfg.outputs


def test_what_the_converter_ignores_silently_is_said(converted):
    _, result, _, _ = converted
    shaped = by_infer(result)["lite20-shape"]
    # measured: Lite 2.0 converts without a word, the input keeps its exported shape
    assert shaped.conversion.info["ignored_input_shape"] == ["observation"]
    assert shaped.conversion.sha256 == by_infer(result)["lite20-ms"].conversion.sha256
    assert "input_shape names no input of the model, the converter ignored it: observation" in render_text(
        result
    )


def test_failing_conversions_are_results_with_the_converters_words(converted):
    _, result, _, _ = converted
    r = by_infer(result)
    bad = r["lite20-badcfg"]
    assert bad.status == ERROR and bad.conversion is None
    assert "MindSpore Lite converter (ms, optimize general, config bad.cfg)" in bad.message
    assert "Invalid input param by user" in bad.message
    assert "`no_such_key` is not supported in [registry]" in bad.message
    mindir = r["lite20-mindir"]
    assert mindir.status == ERROR and "Common error code" in mindir.message
    assert "is not in param dict" in mindir.message  # measured: a folded output cannot be saved as MINDIR
    assert {f.key for f in result.findings} >= {"ms20->lite20-badcfg/ppo_policy/fp32/error"}
    # the other pairs are not affected, and the worker survived both failures
    assert r["lite20-ms"].status == r["lite20"].status


def stored(db_url: str, sha256: str) -> bytes:
    store = Store.open(db_url)
    try:
        with Session(store.engine) as s:
            return s.get(m.Artifact, sha256).data
    finally:
        store.close()


def test_a_model_converted_before_it_is_served_and_a_served_file_against_its_source(
    stacks, default_doc, tmp_path, converted
):
    first_cfg, first, _, _ = converted
    r = by_infer(first)
    export = tmp_path / "policy.mindir"
    export.write_bytes(stored(first_cfg.db_url, r["lite20"].artifact.sha256))
    served_file = tmp_path / "policy.ms"  # what the deployment converted (general), on the host
    served_file.write_bytes(stored(first_cfg.db_url, r["lite20-ms"].conversion.sha256))

    def extra(doc: dict) -> None:
        doc["pairs"] = [{"train": "ms20", "infer": "lite20", "probes": ["obs_normalizer"]}]
        doc["models"] = {
            "policy": {
                "path": str(export),
                "reference": "lite20",  # unconverted Lite as the reference
                "output_names": ["mean", "std", "logp", "action"],
                "stacks": ["lite20-fp16"],
                "convert": {"optimize": "general", "weight_fp16": True},
            }
        }
        doc["stacks"]["lite20-ms"]["convert"]["served"] = {str(served_file): str(export)}
        doc["stacks"]["lite20-ms"]["models"] = [str(served_file)]

    cfg = config(default_doc, tmp_path, probes=("obs_normalizer",), extra=extra)
    result = AuditRun(cfg, Plugins(entry_points=False), None).run()
    model = next(x for x in result.results if x.probe == "policy")
    assert model.pair == "policy:lite20->lite20-fp16" and model.conversion.info["options"]["weight_fp16"]
    assert model.status == DRIFT and "std:" in model.message, (
        model.message
    )  # garbage std, against Lite itself
    served = next(x for x in result.results if x.variant == "served-conversion")
    assert served.status == CONSISTENT and served.pair == "lite20-ms:served", served.message
    assert "byte for byte" in served.message

    # the deployment re-converted with weight_fp16 while the config still says general: caught
    served_file.chmod(0o600)
    served_file.write_bytes(stored(first_cfg.db_url, r["lite20-fp16"].conversion.sha256))
    result = AuditRun(cfg, Plugins(entry_points=False), None).run()
    served = next(x for x in result.results if x.variant == "served-conversion")
    assert served.status == DRIFT and "is not what converting" in served.message
    assert "output1:" in served.message  # std


def test_check_convert_in_the_gate(stacks, converted, tmp_path):
    import subprocess

    from tests.conftest import REPO

    first_cfg, first, _, _ = converted
    export = tmp_path / "policy.mindir"
    export.write_bytes(stored(first_cfg.db_url, by_infer(first)["lite20"].artifact.sha256))
    text = (REPO / "auditor.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(text + '\n[stacks.lite20.convert]\noptimize = "general"\n')
    fp16 = tmp_path / "fp16.toml"
    fp16.write_text(text + '\n[stacks.lite20.convert]\noptimize = "general"\nweight_fp16 = true\n')
    bad = tmp_path / "bad.toml"
    bad.write_text(text + '\n[stacks.lite20.convert]\nsave_type = "mindir"\n')

    def check(config: Path, *more: str) -> subprocess.CompletedProcess[str]:
        return auditor("--config", str(config), "check", "--model", str(export), "--stack", "lite20", *more)

    ok = check(good, "--convert")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "conversion: ok" in ok.stdout and "(ms, optimize general)" in ok.stdout
    assert "by MindSpore Lite 2.0.0: ms" in ok.stdout and "load: ok" in ok.stdout
    # weight_fp16 folds std into garbage (test_weight_fp16_shows_its_real_effect): the gate runs
    # what the deployment's conversion makes, sees it, and does not say OK
    garbage = check(fp16, "--convert")
    assert garbage.returncode == 1 and "conversion: ok" in garbage.stdout, garbage.stdout
    assert "(ms, optimize general, weight_fp16)" in garbage.stdout and "NOT all finite" in garbage.stdout
    failed = check(bad, "--convert")
    assert failed.returncode == 1
    assert "the conversion failed: MindSpore Lite converter (mindir, optimize general)" in failed.stdout
    assert "is not in param dict" in failed.stdout and "load: not attempted" in failed.stdout
    plain = check(good)  # without --convert the gate loads the export as it is
    assert plain.returncode == 0 and "conversion:" not in plain.stdout
