# ruff: noqa: E501  (real npu-smi listings are wider than a line)
"""Fingerprints and rules on Ascend hosts laid out the way real ones are (issue #13): several
CANN packages side by side, version files as they are found, npu-smi tables of multi-chip
products, and the environment the auditor itself adds. Each case is built from the published
formats (FACTS.md §3, public npu-smi listings), not from what the parser expects, and each
would have caught the auditor's earlier behaviour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from auditor.plugins import default_rules as dr
from auditor.plugins.collectors import _npu_smi_views as views
from auditor.plugins.collectors import cann as cann_collector
from auditor.plugins.collectors import npu_smi
from auditor.plugins.default_collectors import COLLECTORS

from auditor.rules import cann_choice
from auditor.rules.engine import run_rules
from auditor.worker import fingerprint as runner
from tests.ascend_trees import build_tree, write, write_package
from tests.unit.rules.test_rules import RULES, context, runtime, stack

# -- npu-smi: real published tables -----------------------------------------------------------
# Atlas 300I Duo, one card (NPU 2) with two chips: the NPU row is printed once per chip
# (Syllo/nvtop#421, npu-smi 25.2.0).
DUO_INFO = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 25.2.0                                   Version: 25.2.0                                       |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 2       310P3                 | OK              | NA           45                0     / 0             |
| 0       0                     | 0000:01:00.0    | 0            1529 / 44280                            |
+-------------------------------+-----------------+------------------------------------------------------+
| 2       310P3                 | OK              | NA           43                0     / 0             |
| 1       1                     | 0000:01:00.0    | 0            1412 / 43693                            |
+===============================+=================+======================================================+
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Chip                  | Process id      | Process name             | Process memory(MB)        |
+===============================+=================+======================================================+
| No running processes found in NPU 2                                                                    |
+===============================+=================+======================================================+
"""

# An A3-class node: each card's two dies, the second column is Chip Phy-ID
# (vllm-project/vllm-ascend#2534 and #2082, npu-smi 25.2.1; first two cards).
A3_INFO = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 25.2.1                   Version: 25.2.1                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 178.5       36                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3416 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -           36                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3195 / 65536         |
+===========================+===============+====================================================+
| 1     Ascend910           | OK            | 186.3       36                0    / 0             |
| 0     2                   | 0000:99:00.0  | 0           0    / 0          3415 / 65536         |
+------------------------------------------------------------------------------------------------+
| 1     Ascend910           | OK            | -           36                0    / 0             |
| 1     3                   | 0000:9B:00.0  | 0           0    / 0          3193 / 65536         |
+===========================+===============+====================================================+
"""

# `npu-smi info -m` on an A3-class node: Chip Phy-ID before Chip Name, an Mcu row per card.
A3_MAP = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Phy-ID                    Chip Name
        0                              0                              0                              0                              Ascend910
        0                              1                              1                              1                              Ascend910
        0                              2                              -                              -                              Mcu
        1                              0                              2                              2                              Ascend910
        1                              1                              3                              3                              Ascend910
        1                              2                              -                              -                              Mcu
"""

# The older four-column map of a 300I Duo card: names with a space, an Mcu row.
DUO_MAP = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
        2                              0                              0                              Ascend 310P3
        2                              1                              1                              Ascend 310P3
        2                              2                              -                              Mcu
"""


def test_a_300i_duo_card_is_one_npu_with_two_chips():
    info = views.parse_table("`npu-smi info`", DUO_INFO)
    assert len(info["npus"]) == 1 and len(info["chips"]) == 2
    assert [(c["npu"], c["chip"], c["device"]) for c in info["chips"]] == [(2, 0, 0), (2, 1, 1)]
    assert info["driver_version"] == "25.2.0"


def test_an_a3_node_counts_cards_and_dies_and_names_the_phy_id():
    info = views.parse_table("`npu-smi info`", A3_INFO)
    assert len(info["npus"]) == 2 and len(info["chips"]) == 4
    assert [(c["npu"], c["chip"], c["phy_id"]) for c in info["chips"]] == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]
    assert all("device" not in c for c in info["chips"])


def test_chip_maps_are_read_by_their_header_and_mcu_rows_are_not_chips():
    a3 = views.parse_chip_map("`npu-smi info -m`", A3_MAP)
    assert a3 == [
        {"npu": n, "chip": c, "logic_id": lid, "phy_id": lid, "name": "Ascend910"}
        for n, c, lid in ((0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3))
    ]
    duo = views.parse_chip_map("`npu-smi info -m`", DUO_MAP)
    assert [(m["npu"], m["chip"], m["logic_id"], m["name"]) for m in duo] == [
        (2, 0, 0, "Ascend 310P3"),
        (2, 1, 1, "Ascend 310P3"),
    ]


def test_the_a3_tree_is_fingerprinted_through_the_fake_npu_smi(tmp_path: Path):
    tree = build_tree(tmp_path, "a3-8.2")
    doc = npu_smi.collect(tree.context())
    assert doc["count"] == 2 and doc["chip_count"] == 4 and len(doc["chip_map"]) == 4


# -- version files as they are found ----------------------------------------------------------
GOOD = "Version=8.2.0.0.201\nversion_dir=8.2.RC1\ntimestamp=20250620_000000000\n"


@pytest.mark.parametrize(
    ("what", "content"),
    [
        ("utf-8 BOM", b"\xef\xbb\xbf" + GOOD.encode()),
        ("CRLF", GOOD.replace("\n", "\r\n").encode()),
        ("BOM and CRLF", b"\xef\xbb\xbf" + GOOD.replace("\n", "\r\n").encode()),
        ("spaces around =", b"Version = 8.2.0.0.201\nversion_dir = 8.2.RC1\n"),
        ("quoted", b"Version=\"8.2.0.0.201\"\nversion_dir='8.2.RC1'\n"),
        ("other order", b"timestamp=20250620_000000000\nversion_dir=8.2.RC1\nVersion=8.2.0.0.201\n"),
        ("optional keys missing", b"Version=8.2.0.0.201\n"),
    ],
)
def test_version_files_as_found_parse(tmp_path: Path, what: str, content: bytes):
    root = tmp_path / "Ascend"
    write_package(root, "ascend-toolkit", "8.2.RC1", None, compiler_text=content)
    doc = cann_collector.collect({"ascend_root": str(root), "system_root": str(tmp_path), "environ": {}})
    assert doc["compiler_version"] == "8.2.0.0.201", (what, doc["unknown"])
    (toolkit,) = [p for p in doc["packages"] if p["name"] == "ascend-toolkit"]
    assert toolkit["compiler_version"] == "8.2.0.0.201"
    assert "compiler_error" not in toolkit


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"Version: 8.2.0.0.201\n", "garbled (no key=value lines)"),
        (b"version_dir=8.2.RC1\n", "no Version= line"),
        (b"\x00\x01\x02", "binary content"),
    ],
)
def test_an_unparseable_version_file_is_reported_with_its_path(tmp_path: Path, content: bytes, reason: str):
    root = tmp_path / "Ascend"
    write_package(root, "ascend-toolkit", "8.2.RC1", None, compiler_text=content)
    doc = cann_collector.collect({"ascend_root": str(root), "system_root": str(tmp_path), "environ": {}})
    (toolkit,) = [p for p in doc["packages"] if p["name"] == "ascend-toolkit"]
    assert toolkit["compiler_version"] is None
    assert reason in toolkit["compiler_error"] and toolkit["compiler_file"] in toolkit["compiler_error"]
    # ... and the MindSpore<->CANN rule says so, on a CPU stack too, instead of staying silent.
    fp = _fingerprint(
        tmp_path, root, CHECKER_210, environ={"ASCEND_HOME_PATH": str(root / "ascend-toolkit/latest")}
    )
    found = run_rules([RULES["mindspore-cann"]], context({"t": stack("t", ascend_root=str(root))}, {"t": fp}))
    assert len(found) == 1 and "cannot be parsed" in found[0].message and reason in found[0].message


# -- MindSpore <-> CANN: the CANN MindSpore itself would check ----------------------------------
# Shaped like the installed checkers (mindspore/run_check/_check_version.py): 2.0.0 tries fixed
# paths, 2.10.0 reads $ASCEND_HOME_PATH.
CHECKER_20 = """
import os
class AscendEnvChecker:
    def __init__(self, library_path):
        self.version = ["6.11", "6.3"]
        atlas_nnae_version = "/usr/local/Ascend/nnae/latest/compiler/version.info"
        atlas_toolkit_version = "/usr/local/Ascend/ascend-toolkit/latest/compiler/version.info"
        hisi_fwk_version = "/usr/local/Ascend/latest/compiler/version.info"
        if os.path.exists(atlas_nnae_version):
            self.fwk_version = atlas_nnae_version
        elif os.path.exists(atlas_toolkit_version):
            self.fwk_version = atlas_toolkit_version
        elif os.path.exists(hisi_fwk_version):
            self.fwk_version = hisi_fwk_version
"""
CHECKER_210 = """
import os
class AscendEnvChecker:
    def __init__(self, library_path):
        self.version = ["8.2", "8.3", "8.5", "9.0", "9.1"]
        self.ascend_home_path = os.getenv("ASCEND_HOME_PATH")
        if self.ascend_home_path is not None:
            self.compiler_version = self.ascend_home_path + "/compiler/version.info"
"""


def _fingerprint(
    tmp_path: Path, root: Path, checker: str | None, lite: str | None = None, environ: dict | None = None
) -> dict[str, Any]:
    site = tmp_path / "site"
    version = "2.0.0" if checker and '"6.3"' in checker else "2.10.0"
    if checker is not None:
        write(site / "mindspore" / "__init__.py", "raise RuntimeError('imported')\n")
        write(site / "mindspore" / "version.py", f"__version__ = '{version}'\n")
        write(site / "mindspore" / "run_check" / "_check_version.py", checker)
    if lite is not None:
        write(site / "mindspore_lite" / "__init__.py", "raise RuntimeError('imported')\n")
        write(site / "mindspore_lite" / "version.py", f"__version__ = '{lite}'\n")
    ctx = {
        "ascend_root": str(root),
        "system_root": str(tmp_path),
        "sys_path": [str(site)],
        "npu_smi": "/nonexistent",
    }
    doc = runner.collect(COLLECTORS, ctx, dict(environ or {}))["fingerprint"]
    doc["runtime"] = runtime("mindspore-lite", lite) if lite else runtime("mindspore", version)
    return doc


def _ms_cann(tmp_path: Path, root: Path, checker: str, environ: dict | None = None, device: str = "ascend:0"):
    fp = _fingerprint(tmp_path, root, checker, environ=environ)
    s = {"t": stack("t", device=device, ascend_root=str(root))}
    return fp, run_rules([RULES["mindspore-cann"]], context(s, {"t": fp}))


def test_ms20_on_an_nnae_only_host_checks_nnae(tmp_path: Path):
    root = tmp_path / "Ascend"
    write_package(root, "nnae", "6.3.RC1", "6.3.0.1.100")
    fp, found = _ms_cann(tmp_path, root, CHECKER_20)
    assert found == []
    choice = cann_choice.for_framework(fp["cann"], "mindspore")
    assert choice.package["name"] == "nnae" and choice.release == "6.3.RC1"
    assert (choice.basis, choice.probable, choice.checked) == ("lookup", False, choice.package)


def test_ms20_on_a_toolkit_only_host_checks_the_toolkit(tmp_path: Path):
    root = tmp_path / "Ascend"
    write_package(root, "ascend-toolkit", "7.0.0", "7.0.0.5.242")
    fp, found = _ms_cann(tmp_path, root, CHECKER_20)
    assert [f.severity for f in found] == ["critical"]
    assert "ascend-toolkit 7.0.0 (compiler 7.0.0.5.242)" in found[0].message


def test_ms20_with_nnae_and_a_newer_toolkit_judges_nnae_and_lists_the_toolkit(tmp_path: Path):
    """The old rule judged the toolkit (7.0: "incompatible"); MindSpore 2.0 checks nnae first."""
    root = tmp_path / "Ascend"
    write_package(root, "nnae", "6.3.RC1", "6.3.0.1.100")
    write_package(root, "ascend-toolkit", "7.0.0", "7.0.0.5.242")
    fp, found = _ms_cann(tmp_path, root, CHECKER_20)
    assert [f.severity for f in found] == ["info"]
    assert "uses nnae 6.3.RC1" in found[0].message
    assert "also installed: ascend-toolkit 7.0.0 (compiler 7.0.0.5.242)" in found[0].message
    assert found[0].details["facts"]["cann_package"] == "nnae/latest"
    assert found[0].details["facts"]["basis"] == "lookup"
    # The reverse (an old nnae, a good toolkit) is incompatible: nnae wins MindSpore's lookup.
    root2 = tmp_path / "Ascend2"
    write_package(root2, "nnae", "6.0.RC1", "6.0.0.1.100")
    write_package(root2, "ascend-toolkit", "6.3.RC1", "6.3.0.1.100")
    _, found = _ms_cann(tmp_path / "b", root2, CHECKER_20)
    assert [f.severity for f in found] == ["critical"] and "uses nnae 6.0.RC1" in found[0].message


def test_ms210_follows_ascend_home_path_from_the_stacks_environment(tmp_path: Path):
    root = tmp_path / "Ascend"
    write_package(root, "nnae", "8.0.0", "7.6.0.1.220")
    toolkit = write_package(root, "ascend-toolkit", "8.2.RC1", "8.2.0.0.201")
    _, found = _ms_cann(tmp_path, root, CHECKER_210, environ={"ASCEND_HOME_PATH": str(toolkit)})
    assert [f.severity for f in found] == ["info"] and "ascend-toolkit 8.2.RC1" in found[0].message
    _, found = _ms_cann(
        tmp_path / "b", root, CHECKER_210, environ={"ASCEND_HOME_PATH": str(root / "nnae/latest")}
    )
    assert [f.severity for f in found] == ["critical"] and "uses nnae 8.0.0" in found[0].message
    assert "$ASCEND_HOME_PATH" in found[0].message


def test_nnrt_only_has_no_compiler_for_mindspore(tmp_path: Path):
    """MindSpore needs a toolkit or nnae; an nnrt-only host gives it no CANN on any of its paths:
    one runtime-cann finding naming them (critical on the NPU), and no mindspore-cann one."""
    root = tmp_path / "Ascend"
    write_package(root, "nnrt", "8.0.0", None)
    fp = _fingerprint(tmp_path, root, CHECKER_20)
    rules = [RULES["mindspore-cann"], RULES["runtime-cann"]]
    for device, severity in (("ascend:0", "critical"), ("cpu", "info")):
        s = {"t": stack("t", device=device, ascend_root=str(root))}
        (f,) = run_rules(rules, context(s, {"t": fp}))
        assert (f.details["rule"], f.severity) == ("runtime-cann", severity)
        assert "MindSpore would find no CANN on any of its paths: none of MindSpore's" in f.message
        assert f"{root}/nnae/latest/compiler/version.info, {root}/ascend-toolkit/latest/compiler" in f.message
        assert "nor a toolkit or nnae (the CANN with a compiler MindSpore needs)" in f.message


# -- toolkit and an older nnrt: each runtime's own ---------------------------------------------
def _pair_docs(tmp_path: Path, train_release: str, train_compiler: str):
    train_root, infer_root = tmp_path / "train" / "Ascend", tmp_path / "infer" / "Ascend"
    write_package(train_root, "ascend-toolkit", train_release, train_compiler)
    write_package(infer_root, "ascend-toolkit", "8.2.RC1", "8.2.0.0.201")
    write_package(infer_root, "nnrt", "8.0.0", None)
    train = _fingerprint(tmp_path / "train", train_root, CHECKER_210)
    infer = _fingerprint(tmp_path / "infer", infer_root, None, lite="2.10.0")
    stacks = {
        "tr": stack("tr", device="ascend:0", ascend_root=str(train_root)),
        "inf": stack("inf", "infer", "mindspore-lite", host="infer-host", ascend_root=str(infer_root)),
    }
    return stacks, train, infer


def test_toolkit_and_older_nnrt_are_both_fingerprinted_and_lite_is_judged_on_nnrt(tmp_path: Path):
    stacks, train, infer = _pair_docs(tmp_path, "8.0.0", "7.6.0.1.220")
    assert {(p["name"], p["version"]) for p in infer["cann"]["packages"]} == {
        ("ascend-toolkit", "8.2.RC1"),
        ("nnrt", "8.0.0"),
    }
    ctx = context(stacks, {"tr": train, "inf": infer}, (("tr", "inf"),))
    # Lite runs on nnrt 8.0.0, the same release as the training toolkit: no pairing finding
    # (the old rule compared the toolkits' compilers, 7.6 vs 8.2, and warned).
    assert run_rules([RULES["train-infer-pairing"]], ctx) == []
    assert cann_choice.for_runtime(ctx, "inf").package["name"] == "nnrt"
    assert cann_choice.for_runtime(ctx, "tr").package["name"] == "ascend-toolkit"


def test_pairing_compares_releases_and_names_the_packages(tmp_path: Path):
    """8.2.RC1 toolkit for training, nnrt 8.0.0 under Lite: a real difference the old rule missed
    (same toolkit compiler on both hosts)."""
    stacks, train, infer = _pair_docs(tmp_path, "8.2.RC1", "8.2.0.0.201")
    found = run_rules(
        [RULES["train-infer-pairing"]], context(stacks, {"tr": train, "inf": infer}, (("tr", "inf"),))
    )
    assert [f.key for f in found] == ["tr->inf/pairing-cann"]
    # neither environment names a CANN: both sides are the auditor's inference, and say so;
    # a difference between two guesses is information with the way to know, not a warning
    assert "CANN 8.2.RC1 (ascend-toolkit, probably)" in found[0].message
    assert "CANN 8.0.0 (nnrt, probably)" in found[0].message
    assert found[0].severity == "info" and "inferred, not read from its environment" in found[0].message
    assert "ASCEND_HOME_PATH" in found[0].details["action"] and found[0].details["inferred"] is True
    # both sides read from their environments: the same difference is a warning
    for doc, framework in ((train, "mindspore"), (infer, "mindspore_lite")):
        doc["cann"]["choice"][framework].update(probable=False, basis="environment")
    known = run_rules(
        [RULES["train-infer-pairing"]], context(stacks, {"tr": train, "inf": infer}, (("tr", "inf"),))
    )
    assert [(f.key, f.severity) for f in known] == [("tr->inf/pairing-cann", "warning")]
    assert "probably" not in known[0].message and "inferred" not in known[0].message


def test_pairing_never_sets_an_internal_number_against_a_release(tmp_path: Path):
    """8.0.RC3 (compiler 7.5.0.1.129) against 8.0.0 (compiler 7.6.0.1.220): the label is the two
    releases, not "CANN compiler 7.5.0.1.129"."""
    train_root, infer_root = tmp_path / "train" / "Ascend", tmp_path / "infer" / "Ascend"
    write_package(train_root, "ascend-toolkit", "8.0.RC3", "7.5.0.1.129")
    write_package(infer_root, "ascend-toolkit", "8.0.0", "7.6.0.1.220")
    train = _fingerprint(tmp_path / "train", train_root, CHECKER_210)
    infer = _fingerprint(tmp_path / "infer", infer_root, CHECKER_210)
    stacks = {
        "tr": stack("tr", ascend_root=str(train_root)),
        "inf": stack("inf", "infer", "mindspore-graph", host="h2", ascend_root=str(infer_root)),
    }
    found = run_rules(
        [RULES["train-infer-pairing"]], context(stacks, {"tr": train, "inf": infer}, (("tr", "inf"),))
    )
    assert [f.key for f in found] == ["tr->inf/pairing-cann"]
    assert "CANN 8.0.RC3" in found[0].message and "CANN 8.0.0" in found[0].message
    assert "7.5.0.1.129" not in found[0].message.split("(")[0]


def test_the_cann_driver_rule_reads_the_package_the_runtime_loads(tmp_path: Path):
    stacks, train, infer = _pair_docs(tmp_path, "8.0.0", "7.6.0.1.220")
    ctx = context(stacks, {"tr": train, "inf": infer}, (("tr", "inf"),))
    assert dr.runtime_package(ctx, "inf")["name"] == "nnrt"


def test_the_cann_driver_message_names_one_package_with_its_own_release_and_code(tmp_path: Path):
    """MindSpore 2.0 loads nnae 6.3.RC1 (C13) beside a toolkit 8.2.RC1 (C22): the finding pairs
    nnae's release with nnae's code (it paired the toolkit's release with nnae's code)."""
    root = tmp_path / "Ascend"
    write_package(root, "nnae", "6.3.RC1", "6.3.0.1.100", innerversion="V100R001C13SPC001B100")
    write_package(root, "ascend-toolkit", "8.2.RC1", "8.2.0.0.201", innerversion="V100R001C22SPC001B231")
    write(
        root / "driver" / "version.info",
        "Version=25.0.rc1.1\nInnerversion=V100R001C21SPC002B220\n"
        "compatible_version=[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21]\n",
    )
    fp = _fingerprint(tmp_path, root, CHECKER_20)
    s = {"t": stack("t", device="ascend:0", ascend_root=str(root))}
    (f,) = run_rules([RULES["cann-driver"]], context(s, {"t": fp}))
    assert f.message.startswith("CANN 6.3.RC1 (nnae V100R001C13) and NPU driver 25.0.rc1.1 (V100R001C21)")
    assert (
        f.details["facts"]["cann_package"] == "nnae/latest"
        and f.details["facts"]["cann_version"] == "6.3.RC1"
    )
    # A Lite stack with nothing in its environment: which CANN it loads is a guess, and said so.
    lite = _fingerprint(tmp_path / "lite", root, None, lite="2.0.0")
    s = {"t": stack("t", "infer", "mindspore-lite", device="ascend:0", ascend_root=str(root))}
    (f,) = run_rules([RULES["cann-driver"]], context(s, {"t": lite}))
    assert f.message.startswith(
        "CANN 8.2.RC1 (ascend-toolkit V100R001C22, probably the one the stacks load) and"
    )
    assert f.details["facts"]["cann_package_probable"] is True
