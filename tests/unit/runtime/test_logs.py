"""A runtime's log format (auditor.runtime.logs): the lines it writes in a short form, each once
with how often it repeated, its noise left out; the built-in MindSpore family's glog format, and
no log format for ONNX Runtime."""

from __future__ import annotations

import re

import pytest
from auditor.plugins.runtimes.lite.spec import LITE
from auditor.plugins.runtimes.mindspore.spec import MINDSPORE, MINDSPORE_GRAPH, MINDSPORE_LOG
from auditor.plugins.runtimes.ort.spec import ORT

from auditor.runtime import LogFormat, RuntimeSpec

# A made-up runtime's log: "E TOY 12:00:01 [src/loader.cc:7] words".
TOY = LogFormat(
    re.compile(r"^([EW]) (\w+) \S+ \[([^\]]+)\] (.*)$"),
    noise=re.compile(r"harmless"),
    notable=(re.compile(r"another release"),),
    errors=("E",),
)


def glog(level: str, text: str, source: str = "core/load_mindir/load_model.cc:2445") -> str:
    return (
        f"[{level}] CORE(18958,7fad00dfbb80,python):2026-12-03-23:37:02.193.229 [mindspore/{source}] {text}"
    )


def test_a_repeated_line_is_counted_once_in_its_place() -> None:
    text = "\n".join(
        [
            "E TOY 12:00:01 [src/loader.cc:7] no kernel for Foo",
            "W TOY 12:00:02 [src/graph.cc:9] slow path",
            "E TOY 12:00:03 [src/loader.cc:7] no kernel for Foo",
            "  E TOY 12:00:04 [other/loader.cc:8] no kernel for Foo  ",
            "not a line of the runtime",
        ]
    )
    # No time, directory or line number: the same words from the same file are one line.
    assert TOY.lines(text) == ["[E] TOY loader.cc no kernel for Foo (x3)", "[W] TOY graph.cc slow path"]


def test_noise_is_left_out() -> None:
    text = "W TOY 1 [numa.cc:1] harmless\nW TOY 2 [numa.cc:2] real\nW TOY 3 [numa.cc:3] harmless"
    assert TOY.lines(text) == ["[W] TOY numa.cc real"]


def test_notable_lines_and_error_levels() -> None:
    assert TOY.is_notable("[W] TOY loader.cc a file of another release")
    assert not TOY.is_notable("[W] TOY loader.cc slow path")
    assert TOY.is_error("[E] TOY loader.cc no kernel") and not TOY.is_error("[W] TOY loader.cc no kernel")


def test_mindspore_glog_lines_are_short() -> None:
    line = glog("WARNING", "CheckAndWarnMindIRVersion] Loaded MindIR version is 0.1.1, but ...")
    assert MINDSPORE_LOG.lines(line + "\n" + line) == [
        "[WARNING] CORE load_model.cc CheckAndWarnMindIRVersion] Loaded MindIR version is 0.1.1, but ... (x2)"
    ]
    assert MINDSPORE_LOG.is_error("[EXCEPTION] ME x.cc y") and not MINDSPORE_LOG.is_error(
        "[WARNING] ME x.cc y"
    )


def test_each_runtime_declares_its_log_format() -> None:
    """MindSpore's two runtimes share its glog format; Lite writes the same lines with its own
    noise on top (every line MindSpore's leaves out, it does too); ONNX Runtime's worker reports
    its errors in the exception's message, with no log format to read."""
    assert MINDSPORE.log is MINDSPORE_LOG and MINDSPORE_GRAPH.log is MINDSPORE_LOG
    assert LITE.log is not None and LITE.log.line is MINDSPORE_LOG.line
    assert LITE.log.notable == MINDSPORE_LOG.notable
    numa = glog(
        "WARNING", "NUMAAdapter] Open libnuma.so failed!try again.", "lite/src/extendrt/numa_adapter.cc:35"
    )
    numpy = glog("ERROR", "Numpy init failed")
    assert LITE.log.lines(numa + "\n" + numpy) == []
    assert MINDSPORE_LOG.lines(numpy) == []
    assert ORT.log is None


def test_a_log_format_is_checked() -> None:
    with pytest.raises(ValueError, match="groups level, module, where and words"):
        LogFormat(re.compile(r"^\[(\w+)\] (.*)$"))
    with pytest.raises(ValueError, match="compiled"):
        LogFormat(re.compile(r"(a)(b)(c)(d)"), noise="libnuma")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log must be a LogFormat"):
        RuntimeSpec("x", "load", "m:C", log=MINDSPORE_LOG.line)  # type: ignore[arg-type]
