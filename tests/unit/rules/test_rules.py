"""The compatibility rules: each fires exactly where it should and stays silent where a fact is
unknown or the stacks agree. First against fingerprint documents written by hand in the agreed
schema, then against the fixture Ascend trees read by the real collectors in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from auditor.plugins import default_rules as dr
from auditor.plugins.default_collectors import COLLECTORS

from auditor.config.tables import PairConfig, StackConfig
from auditor.extend.manager import Plugins
from auditor.results import Finding, LearnedMaximum
from auditor.rules.engine import (
    ExportedModel,
    Rule,
    RuleContext,
    blocked,
    major_minor,
    run_rules,
    version_tuple,
)
from auditor.worker import fingerprint as runner
from tests.ascend_trees import TREE_NAMES, build_tree, write

RULES = {r.name: r for r in dr.RULES}
RUNTIMES = Plugins(entry_points=False).runtimes()  # the version facts of the built-in runtimes
MS210_SUPPORTED = ["8.2", "8.3", "8.5", "9.0", "9.1"]


def stack(name: str, role: str = "train", runtime: str = "mindspore", **kw: Any) -> StackConfig:
    return StackConfig(name=name, role=role, runtime=runtime, python=f"/stacks/{name}/bin/python", **kw)


def runtime(package: str, version: str, name: str | None = None) -> dict[str, Any]:
    return {
        "runtime": name or package,
        "runtime_package": package,
        "runtime_version": version,
        "python": "3.11.7",
        "numpy": "1.26.4",
        "executable": "/x/bin/python",
    }


def train_doc(ms: str = "2.10.0", supported: list[str] | None = None, **sections: Any) -> dict[str, Any]:
    doc = {
        "framework": {
            "mindspore": {"version": ms, "supported_cann": supported or MS210_SUPPORTED},
            "mindspore_lite": None,
            "unknown": {},
        },
        "runtime": runtime("mindspore", ms),
    }
    doc.update(sections)
    return doc


def lite_doc(version: str = "2.0.0", **sections: Any) -> dict[str, Any]:
    doc = {
        "framework": {"mindspore": None, "mindspore_lite": {"version": version}, "unknown": {}},
        "runtime": runtime("mindspore-lite", version),
    }
    doc.update(sections)
    return doc


def no_cann() -> dict[str, Any]:
    return {
        "root": "/usr/local/Ascend",
        "version": None,
        "compiler_version": None,
        "toolkit": None,
        "unknown": {"compiler_version": "/usr/local/Ascend: no CANN toolkit"},
    }


def cann(compiler: str, version: str | None = None, **toolkit: Any) -> dict[str, Any]:
    return {
        "root": "/usr/local/Ascend",
        "version": version,
        "compiler_version": compiler,
        "toolkit": toolkit or None,
        "unknown": {},
    }


def context(
    stacks: dict[str, StackConfig],
    docs: dict[str, dict | None],
    pairs: tuple[tuple[str, str], ...] = (),
    exported: list[ExportedModel] = (),
    learned: dict | None = None,
) -> RuleContext:
    return RuleContext(
        stacks,
        docs,
        tuple(PairConfig(t, i, ("ppo_policy",)) for t, i in pairs),
        list(exported),
        learned or {},
        runtimes=RUNTIMES,
    )


def run(name: str, ctx: RuleContext) -> list[Finding]:
    return list(RULES[name].check(ctx))


# -- the plugin -------------------------------------------------------------------------------
def test_builtin_rules_are_registered_through_the_hook():
    rules = Plugins(entry_points=False).rules()
    assert list(rules) == [
        "mindspore-cann",
        "mindir-version",
        "operator-support",
        "runtime-cann",
        "driver-firmware",
        "npu-firmware",
        "cann-driver",
        "train-infer-pairing",
        "group-peers",
    ]
    assert all(isinstance(r, Rule) and r.description for r in rules.values())
    assert [r.name for r in rules.values() if r.needs_artifacts] == ["mindir-version", "operator-support"]


def test_version_helpers():
    assert major_minor("8.2.0.0.201") == "8.2" and major_minor("8.2.RC1") == "8.2"
    assert major_minor("7.6.0.1.220") == "7.6" and major_minor("9.1.0-beta.1") == "9.1"
    assert major_minor("6.11") == "6.11" and major_minor(None) is None and major_minor("abc") is None
    assert version_tuple("2.4.10") == (2, 4, 10) and version_tuple("25.0.rc1.1") == (25, 0)
    assert version_tuple("9.1.0-beta.1") == (9, 1, 0) and version_tuple("rc") is None


# -- MindSpore <-> CANN -------------------------------------------------------------------------
def test_mindspore_cann_fires_on_a_cann_mindspore_does_not_list():
    s = {"t": stack("t", device="ascend:0")}
    found = run("mindspore-cann", context(s, {"t": train_doc(cann=cann("7.6.0.1.220", "8.0.0"))}))
    assert len(found) == 1
    f = found[0]
    assert (f.kind, f.severity, f.subject, f.key) == ("mindspore-cann", "critical", "t", "t/mindspore-cann")
    assert "MindSpore 2.10.0 supports CANN 8.2, 8.3, 8.5, 9.0, 9.1" in f.message
    assert "CANN 8.0.0 (compiler 7.6.0.1.220)" in f.message and "reads as 7.6" in f.message
    assert f.details["facts"]["cann_major_minor"] == "7.6"
    assert f.details["facts"]["supported_cann"] == MS210_SUPPORTED
    assert "a MindSpore release that supports CANN 7.6" in f.details["action"]


def test_mindspore_cann_names_the_recommended_cann_and_warns_on_a_cpu_stack():
    s = {"t": stack("t")}
    doc = train_doc("2.4.10", ["7.5", "7.6"], cann=cann("8.2.0.0.201", "8.2.RC1"))
    (f,) = run("mindspore-cann", context(s, {"t": doc}))
    assert f.severity == "warning"
    assert "install guide names 8.0.0" in f.details["action"]


@pytest.mark.parametrize(
    ("ms", "supported", "compiler"),
    [
        ("2.10.0", MS210_SUPPORTED, "8.2.0.0.201"),
        ("2.10.0", MS210_SUPPORTED, "9.1.0-beta.1"),
        ("2.4.10", ["7.5", "7.6"], "7.6.0.1.220"),  # 8.0.0's internal number
        ("2.0.0", ["6.11", "6.3"], "6.3.0.1.100"),
    ],
)
def test_mindspore_cann_is_silent_when_supported(ms, supported, compiler):
    s = {"t": stack("t", device="ascend:0")}
    assert run("mindspore-cann", context(s, {"t": train_doc(ms, supported, cann=cann(compiler))})) == []


def test_mindspore_cann_without_cann_is_silent_on_cpu_and_info_on_an_npu():
    docs = {
        "cpu": train_doc(cann=no_cann()),
        "npu": train_doc(cann=no_cann()),
        "lite": lite_doc(cann=no_cann()),
    }
    s = {"cpu": stack("cpu"), "npu": stack("npu", device="ascend:1"), "lite": stack("lite", "infer", "x")}
    (f,) = run("mindspore-cann", context(s, docs))
    assert (f.subject, f.severity) == ("npu", "info")
    assert "no CANN compiler version (/usr/local/Ascend: no CANN toolkit)" in f.message


def test_mindspore_cann_is_silent_when_facts_are_missing_or_failed():
    s = {"a": stack("a"), "b": stack("b"), "c": stack("c"), "d": stack("d")}
    docs = {
        "a": None,  # the worker did not start
        "b": train_doc(cann={"error": "collector raised"}),
        "c": {"framework": {"error": "boom"}, "cann": cann("7.6.0.1.220")},
        "d": train_doc(supported=[], cann=cann("7.6.0.1.220")),  # list unreadable
    }
    docs["d"]["framework"]["mindspore"]["supported_cann"] = None
    assert run("mindspore-cann", context(s, docs)) == []


# -- MindIR version <-> runtime -----------------------------------------------------------------
def exported(train: str, version: int, producer: str, variants=("fp32", "fp16"), readable=True):
    return [
        ExportedModel(
            train,
            "ppo_policy",
            v,
            {"readable": readable, "mind_ir_version": version, "model_version": producer, "sha256": v * 4},
        )
        for v in variants
    ]


def mindir_ctx(infer_doc: dict, files: list[ExportedModel], learned: dict | None = None, infer_rt="x"):
    s = {"tr": stack("tr"), "inf": stack("inf", "infer", infer_rt)}
    return context(s, {"tr": train_doc(), "inf": infer_doc}, (("tr", "inf"),), files, learned)


def test_mindir_version_blocks_every_too_new_variant_in_one_finding():
    found = run("mindir-version", mindir_ctx(lite_doc("2.0.0"), exported("tr", 3, "2.10.0"), infer_rt="lite"))
    assert len(found) == 1
    f = found[0]
    assert (f.kind, f.severity, f.subject, f.key) == (
        "incompatible",
        "critical",
        "tr->inf",
        "tr->inf/mindir-version",
    )
    assert f.message.startswith(
        "inf (lite 2.0.0) cannot load the MindIR exported by tr (MindSpore 2.10.0): the file has MindIR "
        "version 3, the runtime reads at most version 1 (known limit of MindSpore Lite 2.0.0)"
    )
    assert "the load was not attempted (2 probe variants)" in f.message
    assert f.details["blocks"] == [
        {"pair": "tr->inf", "probe": "ppo_policy", "variant": "fp32"},
        {"pair": "tr->inf", "probe": "ppo_policy", "variant": "fp16"},
    ]
    assert f.details["facts"]["runtime_max_mind_ir_version"] == 1
    assert "MindSpore 1.7 to 2.2.x" in f.details["action"]
    assert blocked([f], "tr->inf", "ppo_policy", "fp16") is f
    assert blocked([f], "tr->inf", "ppo_policy", "tanh-fp32") is None
    assert blocked([f], "other->inf", "ppo_policy", "fp32") is None


@pytest.mark.parametrize(
    ("infer_doc", "files", "why"),
    [
        (lite_doc("2.0.0"), exported("tr", 1, "2.0.0"), "version 1 is readable by Lite 2.0"),
        (lite_doc("2.3.0"), exported("tr", 3, "2.10.0"), "Lite 2.3.0's limit is not known"),
        ({"runtime": runtime("mindspore", "2.10.0")}, exported("tr", 3, "2.10.0"), "2.10 reads 3"),
        ({"runtime": runtime("mindspore", "2.10.0")}, exported("tr", 1, "2.0.0"), "older files load"),
        ({"runtime": runtime("mindspore", "3.0.0")}, exported("tr", 4, "3.0.0"), "a reader its writer's age"),
        ({"runtime": runtime("mindspore", "1.6.0")}, exported("tr", 3, "2.10.0"), "1.6 does not check"),
        (lite_doc("2.0.0"), exported("tr", 3, "2.10.0", readable=False), "unreadable: the load decides"),
        (lite_doc("2.0.0"), exported("other", 3, "2.10.0"), "another train stack's export"),
        (None, exported("tr", 3, "2.10.0"), "the infer stack did not start"),
    ],
)
def test_mindir_version_is_silent(infer_doc, files, why):
    assert run("mindir-version", mindir_ctx(infer_doc, files)) == [], why


def test_mindir_version_fires_for_an_older_mindspore_graph_runtime():
    (f,) = run(
        "mindir-version", mindir_ctx({"runtime": runtime("mindspore", "2.4.10")}, exported("tr", 3, "2.10.0"))
    )
    assert "reads at most version 2 (MindSpore 2.4.10 reads the version it writes)" in f.message


def test_mindir_version_uses_a_learned_maximum_first():
    learned = {
        ("mindspore-lite", "2.3.0"): LearnedMaximum(
            "mindspore-lite", "2.3.0", 2, "maximum mind ir version: 2"
        )
    }
    (f,) = run("mindir-version", mindir_ctx(lite_doc("2.3.0"), exported("tr", 3, "2.10.0"), learned))
    assert "at most version 2 (learned from its own rejection message)" in f.message
    # A learned limit above the file's version lets it through, whatever the table says.
    learned = {("mindspore-lite", "2.0.0"): LearnedMaximum("mindspore-lite", "2.0.0", 3)}
    assert run("mindir-version", mindir_ctx(lite_doc("2.0.0"), exported("tr", 3, "2.10.0"), learned)) == []


# -- driver <-> firmware --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "start", "end", "inside"),
    [
        ("7.7.0.1.231", "7.0.0", "7.7.99", True),
        ("7.8.0.2.212", "7.0.0", "7.7.99", False),
        ("24.1.rc2", "24.1", "24.1.", True),
        ("24.10.1", "24.1", "24.1.", False),
        ("25.0.rc1.1", "23.0.0", "23.0.0.", False),
        ("23.0.0", "23.0.0", "23.0.0.", True),
    ],
)
def test_version_ranges_compare_strings_cut_to_the_longer_end(version, start, end, inside):
    assert dr.in_version_range(version, start, end) is inside


def hw(drv: str, fw: str, fw_ranges=(("7.0.0", "7.7.99"),), drv_ranges=(("25.0", "25.0."),), **driver):
    return {
        "driver": {"version": drv, "compatible_version_fw": [list(r) for r in fw_ranges], **driver},
        "firmware": {"version": fw, "compatible_version_drv": [list(r) for r in drv_ranges]},
    }


def test_driver_firmware_fires_once_per_install_when_neither_side_accepts_the_other():
    s = {"a": stack("a", device="ascend:0"), "b": stack("b", "infer", "x")}
    doc = hw("24.1.rc2", "7.7.0.1.231", fw_ranges=[("7.0.0", "7.3.99")], drv_ranges=[("25.0", "25.0.")])
    (f,) = run("driver-firmware", context(s, {"a": train_doc(**doc), "b": lite_doc(**doc)}))
    assert (f.severity, f.subject, f.key) == ("critical", "local", "local:/usr/local/Ascend/driver-firmware")
    assert "driver 24.1.rc2 takes firmware [7.0.0, 7.3.99]" in f.message
    assert "firmware 7.7.0.1.231 takes drivers [25.0, 25.0.]" in f.message
    assert f.details["facts"]["stacks"] == ["a", "b"]


def test_driver_firmware_accepts_either_sides_range():
    s = {"a": stack("a")}
    ok_by_driver = hw("25.0.rc1.1", "7.7.0.1.231", drv_ranges=())
    ok_by_firmware = hw("25.0.rc1.1", "7.9.0.1.100", fw_ranges=[("7.0.0", "7.7.99")])
    for doc in (ok_by_driver, ok_by_firmware):
        assert run("driver-firmware", context(s, {"a": train_doc(**doc)})) == []


def test_firmware_below_6_4_is_always_incompatible():
    s = {"a": stack("a")}
    doc = hw("25.0.rc1.1", "6.3.0.1.241", fw_ranges=[("6.0", "7.7.99")])
    (f,) = run("driver-firmware", context(s, {"a": train_doc(**doc)}))
    assert f.severity == "warning"  # a CPU stack on that host
    assert "firmware 6.3.0.1.241 is older than 6.4" in f.message


def test_driver_firmware_is_silent_when_a_version_is_unknown():
    s = {"a": stack("a")}
    for doc in (hw("25.0.rc1.1", None), {"driver": {"version": None}, "firmware": {"version": "6.0.1"}}, {}):
        assert run("driver-firmware", context(s, {"a": train_doc(**doc)})) == []


# -- CANN <-> driver (inferred) -----------------------------------------------------------------
def cann_drv(cann_code: str, cann_list: list[str], drv_code: str, drv_list: list[str]) -> dict:
    return {
        "cann": cann("8.2.0.0.201", "8.2.RC1", innerversion=cann_code, compatible_version=cann_list),
        "driver": {"version": "25.0.rc1.1", "innerversion": drv_code, "compatible_version": drv_list},
    }


def test_cann_driver_fires_as_an_inferred_warning():
    s = {"a": stack("a", device="ascend:0")}
    doc = cann_drv(
        "V100R001C25SPC001B220", ["V100R001C23"], "V100R001C19SPC002B230", ["V100R001C15,V100R001C18"]
    )
    (f,) = run("cann-driver", context(s, {"a": train_doc(**doc)}))
    assert (f.severity, f.details["inferred"]) == ("warning", True)
    assert "inferred rule, unverified" in f.message
    assert "toolkit V100R001C25" in f.message and "(V100R001C19)" in f.message


@pytest.mark.parametrize(
    "doc",
    [
        cann_drv("V100R001C22SPC001B231", ["V100R001C21"], "V100R001C21SPC002B220", ["V100R001C17"]),
        cann_drv("V100R001C17SPC001B231", [], "V100R001C21SPC002B220", ["V100R001C15,V100R001C18"]),
        cann_drv("V100R001C22SPC001B231", [], "V100R001C21SPC002B220", []),  # neither list: unknown
        cann_drv("", ["V100R001C21"], "V100R001C21SPC002B220", []),  # no CANN code
        {"driver": {"innerversion": "V100R001C21SPC002B220"}},
    ],
)
def test_cann_driver_is_silent_when_compatible_or_unknown(doc):
    assert run("cann-driver", context({"a": stack("a")}, {"a": train_doc(**doc)})) == []


# -- train <-> infer pairing --------------------------------------------------------------------
def pairing(train: dict, infer: dict, infer_rt: str = "mindspore-lite") -> list[Finding]:
    s = {"tr": stack("tr"), "inf": stack("inf", "infer", infer_rt)}
    return run("train-infer-pairing", context(s, {"tr": train, "inf": infer}, (("tr", "inf"),)))


def test_pairing_flags_a_lite_version_other_than_the_exporting_mindspore():
    (f,) = pairing(train_doc("2.10.0"), lite_doc("2.0.0"))
    assert (f.severity, f.key, f.details["aspect"]) == ("warning", "tr->inf/pairing-version", "version")
    assert "exported by MindSpore 2.10.0, served by mindspore-lite 2.0.0" in f.message
    assert pairing(train_doc("2.0.0"), lite_doc("2.0.0")) == []


def test_pairing_warns_of_a_graph_runtime_of_another_release_and_notes_another_patch():
    """MindSpore 2.10 GraphCell loads 2.0 files with a warning of its own and fails on the first
    call of some (measured): a warning. A patch release apart is a note."""
    (f,) = pairing(
        train_doc("2.0.0"), {"runtime": runtime("mindspore", "2.10.0", "mindspore-graph")}, "graph"
    )
    assert f.severity == "warning" and "another release" in f.message and "first call" in f.message
    (patch,) = pairing(
        train_doc("2.0.0"), {"runtime": runtime("mindspore", "2.0.1", "mindspore-graph")}, "graph"
    )
    assert patch.severity == "info" and "another release" not in patch.message


def test_pairing_compares_cann_like_with_like():
    (f,) = pairing(
        train_doc("2.0.0", cann=cann("8.2.0.0.201", "8.2.RC1")), lite_doc(cann=cann("8.3.0.0.100"))
    )
    assert f.key == "tr->inf/pairing-cann" and "CANN compiler 8.2.0.0.201" in f.message
    # Compiler known on one side only: the release versions are compared instead.
    (f,) = pairing(
        train_doc("2.0.0", cann=cann("8.2.0.0.201", "8.2.RC1")), lite_doc(cann=cann(None, "8.0.0"))
    )
    assert "CANN 8.2.RC1" in f.message and "served on CANN 8.0.0" in f.message
    assert pairing(train_doc("2.0.0", cann=cann("7.6.0.1.220")), lite_doc(cann=cann(None, "8.0.0"))) == []
    assert pairing(train_doc("2.0.0", cann=cann("8.2.0.0.201")), lite_doc(cann=no_cann())) == []


def test_pairing_flags_numerics_environment_and_ignores_paths_and_log_levels():
    base = {"LD_LIBRARY_PATH": "/a", "GLOG_v": "2", "ASCEND_HOME_PATH": "/x", "OMP_NUM_THREADS": "4"}
    train = train_doc("2.0.0", environment={**base, "HCCL_DETERMINISTIC": "true"})
    infer = lite_doc(environment={**base, "LD_LIBRARY_PATH": "/b", "GLOG_v": "3", "ASCEND_HOME_PATH": "/y"})
    (f,) = pairing(train, infer)
    assert f.key == "tr->inf/pairing-environment"
    assert "HCCL_DETERMINISTIC=true (train) vs unset (infer)" in f.message
    assert list(f.details["facts"]["variables"]) == ["HCCL_DETERMINISTIC"]
    # Not collected on one side: unknown, not "unset".
    assert pairing(train, lite_doc()) == []


def test_pairing_is_silent_without_both_fingerprints():
    assert pairing(train_doc("2.10.0"), None) == []


# -- running rules ------------------------------------------------------------------------------
def test_a_rule_that_raises_costs_only_its_own_findings():
    def broken(ctx: RuleContext):
        raise KeyError("cann")

    rules = [Rule("broken", "raises", broken), RULES["train-infer-pairing"]]
    s = {"tr": stack("tr"), "inf": stack("inf", "infer", "mindspore-lite")}
    found = run_rules(rules, context(s, {"tr": train_doc(), "inf": lite_doc()}, (("tr", "inf"),)))
    assert [f.kind for f in found] == ["rule-error", "train-infer-pairing"]
    assert found[0].key == "broken/rule-error" and "KeyError" in found[0].message


def test_the_default_pairs_on_a_cpu_host_give_one_critical_finding():
    """This machine: no Ascend anywhere; ms210 -> lite20 is the one real incompatibility."""
    s = {
        "ms210": stack("ms210"),
        "ms210-graph": stack("ms210-graph", "infer", "mindspore-graph"),
        "ms20": stack("ms20"),
        "lite20": stack("lite20", "infer", "mindspore-lite"),
    }
    env = {"GLOG_v": "2", "PATH": "/usr/bin"}
    docs = {
        "ms210": train_doc("2.10.0", cann=no_cann(), environment=env),
        "ms210-graph": {
            **train_doc("2.10.0", cann=no_cann(), environment=env),
            "runtime": runtime("mindspore", "2.10.0"),
        },
        "ms20": train_doc("2.0.0", ["6.11", "6.3"], cann=no_cann(), environment=env),
        "lite20": lite_doc("2.0.0", cann=no_cann(), environment=env),
    }
    pairs = (("ms210", "ms210-graph"), ("ms210", "lite20"), ("ms20", "lite20"), ("ms20", "ms210-graph"))
    files = exported("ms210", 3, "2.10.0") + exported("ms20", 1, "2.0.0")
    found = run_rules(dr.RULES, context(s, docs, pairs, files))
    critical = [(f.kind, f.subject) for f in found if f.severity == "critical"]
    assert critical == [("incompatible", "ms210->lite20")]
    assert {(f.key, f.severity) for f in found} == {
        ("ms210->lite20/mindir-version", "critical"),
        ("ms210->lite20/pairing-version", "warning"),
        ("ms20->ms210-graph/pairing-version", "warning"),
    }


# -- fixture trees -> collectors (in this process) -> rules ---------------------------------------
# Shaped like the installed checkers: 2.0 tries fixed paths, later releases read ASCEND_HOME_PATH.
CHECKER = (
    "import os\nclass AscendEnvChecker:\n    def __init__(self):\n        self.version = {supported!r}\n"
    "        self.ascend_home_path = os.getenv('ASCEND_HOME_PATH')\n"
    "        if self.ascend_home_path is not None:\n"
    "            self.compiler_version = self.ascend_home_path + '/compiler/version.info'\n"
)


def fake_site(where: Path, mindspore: str | None, supported: list[str], lite: str | None) -> Path:
    """A site-packages with the MindSpore / Lite files the framework collector reads."""
    if mindspore is not None:
        write(where / "mindspore" / "__init__.py", "raise RuntimeError('imported')\n")
        write(where / "mindspore" / "version.py", f"__version__ = '{mindspore}'\n")
        write(where / "mindspore" / ".commit_id", "__commit_id__ = '[sha1]:2d550373,[branch]:(HEAD)'\n")
        write(where / "mindspore" / "run_check" / "_check_version.py", CHECKER.format(supported=supported))
    if lite is not None:
        write(where / "mindspore_lite" / "__init__.py", "raise RuntimeError('imported')\n")
        write(where / "mindspore_lite" / "version.py", f"__version__ = '{lite}'\n")
        write(where / "mindspore_lite" / ".commit_id", "commit 87e30858f9e2\n")
    return where


def tree_doc(
    tmp_path: Path, tree: str, mindspore: str | None = "2.10.0", supported=MS210_SUPPORTED, lite=None
) -> tuple[dict, str]:
    """(the fingerprint document of a stack on the fixture tree, its ascend_root)."""
    where = tmp_path / f"{tree}-{mindspore}-{lite}"
    t = build_tree(where, tree)
    site = fake_site(where / "site", mindspore, supported, lite)
    ctx = t.context(timeout=5.0) | {"sys_path": [str(site)]}
    ctx.pop("environ")
    environ = t.set_env()  # the stack runs with what the host's set_env.sh exports
    doc = runner.collect(COLLECTORS, ctx, environ)["fingerprint"]
    package, version = ("mindspore", mindspore) if mindspore else ("mindspore-lite", lite)
    doc["runtime"] = runtime(package, version)
    return doc, str(t.ascend_root)


TREE_EXPECTATIONS = {
    # tree: rule -> (severity, words of its message) that must fire for a MindSpore 2.10 train
    # stack on the NPU, run with the environment the host's set_env.sh exports; nothing else
    "consistent-8.2": {},
    "cann-8.0.0": {"mindspore-cann": ("critical", "uses ascend-toolkit 8.0.0 (compiler 7.6.0.1.220)")},
    "driver-firmware-mismatch": {"driver-firmware": ("critical", "firmware 6.3.0.1.241 is older than 6.4")},
    "cann-8.5": {},
    "cann-9.1-share-info": {},
    "a3-8.2": {},
    "310p-nnrt": {"mindspore-cann": ("info", "nnrt 8.0.0 has no compiler/version.info")},
    "empty": {"runtime-cann": ("critical", "$ASCEND_HOME_PATH is not set in the stack's environment")},
    "310b-soc": {"mindspore-cann": ("critical", "uses ascend-toolkit 8.0.RC3 (compiler 7.5.0.1.129)")},
    "300i-pro": {"mindspore-cann": ("critical", "uses ascend-toolkit 8.0.0 (compiler 7.6.0.1.220)")},
    "a2-failing-card": {
        "mindspore-cann": ("critical", "uses ascend-toolkit 8.1.RC1 (compiler 7.7.T20.0.B210)"),
        "npu-firmware": ("warning", "is 7.5.0.1.129, but NPUs 0, 1, 2, 3, 4, 5, 6, 7, 8, 10,"),
    },
    "toolkits-side-by-side": {
        "mindspore-cann": ("info", "which it supports; also installed: ascend-toolkit 8.0.0 (compiler 7.6"),
    },
    "home-nondefault": {},
    "mixed-latest": {},
}


def test_every_tree_has_its_rule_expectations():
    assert set(TREE_EXPECTATIONS) == set(TREE_NAMES)


@pytest.mark.parametrize("tree", list(TREE_EXPECTATIONS))
def test_each_tree_fires_exactly_the_rules_it_should(tmp_path, tree):
    expected = TREE_EXPECTATIONS[tree]
    doc, root = tree_doc(tmp_path, tree, "2.10.0", MS210_SUPPORTED)
    s = {"t": stack("t", device="ascend:0", ascend_root=root)}
    found = run_rules(dr.RULES, context(s, {"t": doc}))
    assert {f.details["rule"] for f in found} == set(expected), [f.message for f in found]
    for f in found:
        severity, words = expected[f.details["rule"]]
        assert f.severity == severity and words in f.message, f.message
    # The same stack on CPU: nothing beyond warnings.
    s = {"t": stack("t", ascend_root=root)}
    assert all(f.severity in ("info", "warning") for f in run_rules(dr.RULES, context(s, {"t": doc})))


def test_mindspore_2_4_10_on_the_cann_8_0_0_tree_is_silent(tmp_path):
    doc, root = tree_doc(tmp_path, "cann-8.0.0", "2.4.10", ["7.5", "7.6"])
    s = {"t": stack("t", device="ascend:0", ascend_root=root)}
    assert run_rules(dr.RULES, context(s, {"t": doc})) == []


def test_the_cann_driver_rule_fires_on_a_mixed_tree(tmp_path):
    """CANN 8.5's toolkit (C25, lists C21-C25) with the 24.1.rc2 driver (C19, lists C15-C20)."""
    doc, root = tree_doc(tmp_path, "cann-8.5")
    old, _ = tree_doc(tmp_path, "cann-8.0.0")
    doc["driver"], doc["firmware"] = old["driver"], old["firmware"]
    s = {"t": stack("t", device="ascend:0", ascend_root=root)}
    found = run_rules([RULES["cann-driver"]], context(s, {"t": doc}))
    assert [f.details["rule"] for f in found] == ["cann-driver"]
    # the release and the code of the one package the stack loads, never one's with the other's
    assert "CANN 8.5.0 (cann V100R001C25) and NPU driver 24.1.rc2 (V100R001C19)" in found[0].message


@pytest.mark.parametrize(
    ("train_tree", "infer_tree", "words"),
    [
        ("consistent-8.2", "cann-8.5", "CANN 8.2.RC1 (ascend-toolkit), served on CANN 8.5.0 (cann)"),
        ("consistent-8.2", "310p-nnrt", "CANN 8.2.RC1 (ascend-toolkit), served on CANN 8.0.0 (nnrt)"),
    ],
)
def test_pairing_across_trees(tmp_path, train_tree, infer_tree, words):
    train, train_root = tree_doc(tmp_path, train_tree, "2.10.0")
    infer, infer_root = tree_doc(tmp_path, infer_tree, None, lite="2.10.0")
    s = {
        "tr": stack("tr", device="ascend:0", ascend_root=train_root),
        "inf": stack("inf", "infer", "mindspore-lite", host="inference-host", ascend_root=infer_root),
    }
    found = run_rules(
        [RULES["train-infer-pairing"]], context(s, {"tr": train, "inf": infer}, (("tr", "inf"),))
    )
    assert [f.key for f in found] == ["tr->inf/pairing-cann"]
    assert words in found[0].message
    same, _ = tree_doc(tmp_path, train_tree, None, lite="2.10.0")
    assert (
        run_rules([RULES["train-infer-pairing"]], context(s, {"tr": train, "inf": same}, (("tr", "inf"),)))
        == []
    )


def test_no_rule_finding_leaves_out_its_facts_and_action(tmp_path):
    doc, root = tree_doc(tmp_path, "driver-firmware-mismatch")
    old, _ = tree_doc(tmp_path, "cann-8.0.0")
    s = {
        "t": stack("t", device="ascend:0", ascend_root=root),
        "u": stack("u", device="ascend:0", ascend_root="/u"),
    }
    found = run_rules(dr.RULES, context(s, {"t": doc, "u": old}))
    assert {f.details["rule"] for f in found} == {"driver-firmware", "mindspore-cann"}
    for f in found:
        assert f.details["facts"] and f.details["action"] and f.message
