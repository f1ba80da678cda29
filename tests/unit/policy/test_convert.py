"""The converter's bookkeeping without a stack (auditor.policy.convert,
auditor.plugins.runtimes.lite.converter, ``[stacks.X.convert]``): the converter's words in a
failure, the converted artifact's fingerprint, a canonical digest of a converted MindIR, and
the config checks."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest
from auditor.plugins.runtimes.lite import converter as lite_convert

from auditor.config.load import parse
from auditor.config.tables import ConfigError, ConvertTable
from auditor.policy import convert
from auditor.stacks.worker import WorkerError
from auditor.worker.mindir import canonical_sha256

# What Lite 2.0 wrote for a graph whose output does not depend on its inputs, saved as MINDIR
# (research notes, converter_onnx/out/cases/*.stderr).
STAMP = "LITE(748,7f2e,python):2026-12-04-00:23:01.196.777 [mindspore/lite/tools/"
SERIALIZER = "mindir_exporter/mindir_serializer.cc"
LOG = "\n".join(
    f"[{level}] {STAMP}{where}"
    for level, where in (
        ("WARNING", "../src/common/numa_adapter.cc:35] NUMAAdapter] Open libnuma.so failed!"),
        (
            "ERROR",
            f"{SERIALIZER}:430] GetFgParaAccordingToProtoName] "
            "param proto name: Default/Add-op39 is not in param dict.",
        ),
        (
            "ERROR",
            f"{SERIALIZER}:175] PreProcSaveTogether] error occur when check condition of saving together.",
        ),
        ("ERROR", f"{SERIALIZER}:204] Save] PreProcSaveTogether failed"),
        ("ERROR", f"{SERIALIZER}:204] Save] PreProcSaveTogether failed"),
        (
            "ERROR",
            "converter/converter.cc:1] SaveMindIRModel] Export to mindir failed: -1 Common error code.",
        ),
    )
)


def test_decisive_lines_are_the_errors_without_stamps():
    lines = convert.decisive_lines(LOG)
    assert lines[0] == (
        f"mindspore/lite/tools/{SERIALIZER}:430] GetFgParaAccordingToProtoName] "
        "param proto name: Default/Add-op39 is not in param dict."
    )
    assert len(lines) == convert.MAX_LOG_LINES and len(set(lines)) == len(lines)  # repeats once
    assert not any("NUMAAdapter" in line for line in lines)  # warnings are not the reason


def test_a_failure_says_the_options_the_exception_and_the_log():
    table = ConvertTable(save_type="mindir", weight_fp16=True)
    exc = WorkerError(
        "lite20", "convert", "error", "Converter model failed! ..., error is Common error code.", LOG
    )
    out = convert.failure(exc, table)
    assert out.message.startswith(
        "MindSpore Lite converter (mindir, optimize general, weight_fp16): Converter model failed!"
    )
    assert "its log says: mindspore/lite/tools/mindir_exporter/mindir_serializer.cc:430]" in out.message
    assert out.describe().startswith("stack lite20: convert failed: MindSpore Lite converter")
    crash = WorkerError("lite20", "convert", "crash", "killed by SIGSEGV")
    assert convert.failure(crash, table) is crash  # a dead worker is said as such


def test_the_converted_artifact_is_described(tmp_path: Path):
    ms = b"\x24\x00\x00\x00MSL2" + bytes(40)
    reply = {"format": "ms", "converter": {"package": "mindspore-lite", "version": "2.0.0", "commit": "87e3"}}
    info = convert.describe(ms, reply, ConvertTable(weight_fp16=True), "ab" * 32, "[registry]\n")
    assert info["sha256"] == hashlib.sha256(ms).hexdigest() and info["format"] == "ms"
    assert info["options"]["weight_fp16"] is True and info["source_sha256"] == "ab" * 32
    assert info["config_sha256"] == hashlib.sha256(b"[registry]\n").hexdigest()
    assert "canonical_sha256" not in info  # a .ms of an fp32 source is byte-stable (measured)
    assert lite_convert.is_flatbuffer(ms) and not lite_convert.is_flatbuffer(b"\x0a\x050.1.1")


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_canonical_digest_ignores_the_order_of_primitives():
    head = _field(1, b"0.1.1") + _field(2, b"MindSpore") + _field(7, b"graph")
    a = head + _field(12, b"prim-a") + _field(12, b"prim-b") + bytes([13 << 3, 1])
    b = head + _field(12, b"prim-b") + _field(12, b"prim-a") + bytes([13 << 3, 1])
    assert a != b and canonical_sha256(a) == canonical_sha256(b)
    assert canonical_sha256(head + _field(12, b"prim-c")) != canonical_sha256(a)
    assert canonical_sha256(b"\x24\x00\x00\x00MSL2" + bytes(40)) is None  # not a MindIR's wire format


def test_a_config_file_that_cannot_be_read_is_named(tmp_path: Path):
    table = ConvertTable(config_file=str(tmp_path / "missing.cfg"))
    with pytest.raises(WorkerError) as exc:
        convert.config_text(table, "lite20")
    assert "cannot read the converter config file" in exc.value.message and "missing.cfg" in exc.value.message
    assert convert.config_text(ConvertTable(), "lite20") is None


def test_convert_tables_in_the_config(default_doc):
    doc = copy.deepcopy(default_doc)
    doc["stacks"]["lite20"]["convert"] = {"weight_fp16": True, "input_shape": {"obs": [1, 3]}}
    table = parse(doc, "/etc/auditor/auditor.toml").stacks["lite20"].convert
    assert table.options() == {
        "optimize": "general",
        "weight_fp16": True,
        "input_shape": {"obs": [1, 3]},
        "input_data_type": "float32",
        "output_data_type": "float32",
        "save_type": "ms",
    }
    assert table.describe() == "ms, optimize general, weight_fp16, input_shape obs=[1, 3]"
    bad = copy.deepcopy(doc)
    bad["stacks"]["lite20"]["convert"] = {"config_file": "conv.cfg", "save_type": "onnx", "optimize": "fast"}
    bad["stacks"]["ms20"]["convert"] = {}
    with pytest.raises(ConfigError) as exc:
        parse(bad, "/etc/auditor/auditor.toml")
    assert exc.value.errors == [
        "stacks.ms20.convert: only a mindspore-lite stack converts models (this one runs 'mindspore')",
        "stacks.lite20.convert.optimize: must be one of none, general, ascend_oriented, not 'fast'",
        "stacks.lite20.convert.save_type: must be one of ms, mindir, not 'onnx'",
    ]
    bad = copy.deepcopy(doc)
    model = {
        "path": "p.mindir",
        "reference": "lite20",
        "stacks": ["ms210-graph"],
        "convert": {"weight_fp16": True},
    }
    bad["models"] = {"policy": model}
    with pytest.raises(ConfigError) as exc:
        parse(bad, "/etc/auditor/auditor.toml")
    assert exc.value.errors == [
        "models.policy.convert: only mindspore-lite stacks convert models; ms210-graph serve(s) it too "
        "(name the Lite stacks in stacks = [...])",
    ]
    doc["stacks"]["lite20"]["convert"] = {"config_file": "conv.cfg"}
    assert (
        parse(doc, "/etc/auditor/auditor.toml").stacks["lite20"].convert.config_file
        == "/etc/auditor/conv.cfg"
    )


def test_config_sections_the_converter_ignores_are_recorded():
    from auditor.report.summary import conversion_words
    from auditor.results import Artifact, ProbeResult

    config = "[registry]\ndisable_fusion=on\n[no_such_section]\nfoo=bar\n"
    info = convert.describe(
        b"\x24\x00\x00\x00MSL2" + bytes(8), {"format": "ms"}, ConvertTable(), "0" * 64, config
    )
    assert info["unknown_config_sections"] == ["no_such_section"] and "ignored_input_shape" not in info
    r = ProbeResult(
        "a->b",
        "a",
        "b",
        "p",
        "1",
        "fp32",
        "consistent",
        "ok",
        conversion=Artifact("ab" * 32, "lite-ms", 12, info),
    )
    assert conversion_words(r)[-1] == (
        "! the converter does not know these config sections and ignored them: [no_such_section]"
    )
