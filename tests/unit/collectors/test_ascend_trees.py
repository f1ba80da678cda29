"""Every fixture Ascend tree (tests/ascend_trees.py) through the real collectors, the way a
stack's worker runs them: the CANN each framework would load and on what basis, per tree and
per environment (the one its set_env.sh gives, and none), and npu-smi's facts per NPU and per
chip from the published outputs; then what the rules say about them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from auditor.plugins import default_rules as dr
from auditor.plugins.collectors import _npu_smi_views as views
from auditor.plugins.default_collectors import COLLECTORS

from auditor.rules import cann_choice
from auditor.rules.engine import run_rules
from auditor.worker import fingerprint as runner
from tests.ascend_trees import FIXTURES, FRAMEWORKS, SPECS, TREE_NAMES, build_tree, write
from tests.unit.collectors.test_ascend_layouts import CHECKER_20, CHECKER_210
from tests.unit.rules.test_rules import context, runtime, stack

# framework -> (the checker its MindSpore ships, or None for Lite; version; runtime)
STACKS = {
    "ms20": (CHECKER_20, "2.0.0", "mindspore"),
    "ms210": (CHECKER_210, "2.10.0", "mindspore"),
    "lite20": (None, "2.0.0", "mindspore-lite"),
}


def rules(*names: str) -> list:
    return [r for r in dr.RULES if r.name in names]


def site(where: Path, framework: str) -> Path:
    """A site-packages holding what the collectors read of the framework (never imported)."""
    checker, version, _ = STACKS[framework]
    package = "mindspore" if checker else "mindspore_lite"
    write(where / package / "__init__.py", "raise RuntimeError('imported')\n")
    write(where / package / "version.py", f"__version__ = '{version}'\n")
    if checker:
        write(where / package / "run_check" / "_check_version.py", checker)
    return where


def fingerprint(tree, framework: str, environ: dict[str, str]) -> dict[str, Any]:
    ctx = tree.context(timeout=5.0) | {"sys_path": [str(site(tree.top / "site" / framework, framework))]}
    ctx.pop("environ")
    doc = runner.collect(COLLECTORS, ctx, environ)["fingerprint"]
    _, version, package = STACKS[framework]
    doc["runtime"] = runtime(package, version)
    return doc


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("trees")
    return {name: build_tree(base, name) for name in TREE_NAMES}


# -- the CANN per stack, with its basis ----------------------------------------------------------
@pytest.mark.parametrize("name", TREE_NAMES)
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("env", ["set_env", "bare"])
def test_each_tree_gives_each_framework_its_cann_and_basis(trees, name: str, framework: str, env: str):
    tree = trees[name]
    environ = tree.set_env() if env == "set_env" else tree.context()["environ"]
    doc = fingerprint(tree, framework, environ)
    key = "mindspore_lite" if framework == "lite20" else "mindspore"
    assert list(doc["cann"]["choice"]) == [key]
    choice = cann_choice.for_framework(doc["cann"], key)
    expected = tree.expected_cann(framework + ("" if env == "set_env" else "-bare"))
    assert ((choice.package or {}).get("id"), choice.basis) == expected, choice.how
    assert choice.probable == (choice.basis == "inference")
    if choice.package is not None:
        # the release as the package's own files say it, the same in every consumer
        assert choice.release == choice.package["version"] and choice.package["version_source"]
        ctx = context({"t": stack("t", runtime=STACKS[framework][2])}, {"t": doc})
        assert cann_choice.for_runtime(ctx, "t") == choice
    if choice.basis == "lookup":
        assert choice.checked is choice.package and choice.tried[-1].endswith("/compiler/version.info")
    if choice.basis == "environment":
        assert choice.source in ("ASCEND_HOME_PATH", "LD_LIBRARY_PATH")
        assert choice.libraries is not None or choice.source == "ASCEND_HOME_PATH"
    assert choice.how and all(isinstance(p, str) for p in choice.tried)


def test_mindspore_2_0_tries_its_own_paths_in_its_own_order(trees):
    """cann-8.5: none of 2.0's paths exists; bare, the finding names all three, in order."""
    tree = trees["cann-8.5"]
    doc = fingerprint(tree, "ms20", tree.context()["environ"])
    choice = cann_choice.for_framework(doc["cann"], "mindspore")
    root = tree.ascend_root
    assert choice.tried == [
        f"{root}/nnae/latest/compiler/version.info",
        f"{root}/ascend-toolkit/latest/compiler/version.info",
        f"{root}/latest/compiler/version.info",
    ]
    assert choice.checked is None and "skips its version check" in choice.how
    for device, severity in (("cpu", "info"), ("ascend:0", "critical")):
        s = {"t": stack("t", device=device, ascend_root=str(root))}
        (f,) = run_rules(rules("runtime-cann"), context(s, {"t": doc}))
        assert (f.details["rule"], f.severity) == ("runtime-cann", severity)
        assert f"none of MindSpore's AscendEnvChecker paths exists ({', '.join(choice.tried)})" in f.message
        assert f"probably cann 8.5.0 at {root}/cann, where its set_env.sh would point" in f.message


def test_a_pinned_ascend_home_path_beside_a_newer_loader_path(trees):
    """toolkits-side-by-side: ASCEND_HOME_PATH pinned to 8.0.0, LD_LIBRARY_PATH still on latest
    (8.2.RC1). MindSpore 2.10 checks 8.0.0 (7.6: not in its list) and loads 8.2.RC1."""
    tree = trees["toolkits-side-by-side"]
    environ = dict(tree.set_env(), ASCEND_HOME_PATH=f"{tree.ascend_root}/ascend-toolkit/8.0.0")
    doc = fingerprint(tree, "ms210", environ)
    choice = cann_choice.for_framework(doc["cann"], "mindspore")
    assert (choice.package["id"], choice.basis, choice.source) == (
        "ascend-toolkit/8.0.0",
        "environment",
        "ASCEND_HOME_PATH",
    )
    assert choice.libraries["id"] == "ascend-toolkit/latest" and choice.libraries["version"] == "8.2.RC1"
    s = {"t": stack("t", device="ascend:0", ascend_root=str(tree.ascend_root))}
    found = {f.key: f for f in run_rules(dr.RULES, context(s, {"t": doc}))}
    assert set(found) == {"t/mindspore-cann", "t/runtime-cann-split"}
    split = found["t/runtime-cann-split"]
    assert split.severity == "error"
    assert "checks ascend-toolkit 8.0.0 (compiler 7.6.0.1.220)" in split.message
    assert "libraries of ascend-toolkit 8.2.RC1 (compiler 8.2.0.0.201)" in split.message
    assert "uses ascend-toolkit 8.0.0 (compiler 7.6.0.1.220)" in found["t/mindspore-cann"].message
    assert "also installed: ascend-toolkit 8.2.RC1" in found["t/mindspore-cann"].message


def test_lite_on_a_host_with_toolkit_and_nnrt_uses_what_the_loader_finds(trees):
    """300i-pro: the toolkit's set_env.sh puts the toolkit on LD_LIBRARY_PATH, so Lite loads the
    toolkit, not the nnrt beside it; without the environment, nnrt is only a guess."""
    tree = trees["300i-pro"]
    sourced = cann_choice.for_framework(fingerprint(tree, "lite20", tree.set_env())["cann"], "mindspore_lite")
    assert (sourced.package["name"], sourced.probable) == ("ascend-toolkit", False)
    assert f"finds libascendcl.so in {tree.ascend_root}/ascend-toolkit/latest/lib64" in sourced.how
    bare = cann_choice.for_framework(
        fingerprint(tree, "lite20", tree.context()["environ"])["cann"], "mindspore_lite"
    )
    assert (bare.package["name"], bare.probable) == ("nnrt", True) and "probably nnrt 8.0.0" in bare.how


def test_a_cann_a_user_installed_elsewhere_is_found_through_the_environment(trees):
    tree = trees["home-nondefault"]
    doc = fingerprint(tree, "ms210", tree.set_env())
    home = f"{tree.top}/home/HwHiAiUser/Ascend/cann-8.5.0"
    (entry,) = doc["cann"]["packages"]
    assert (entry["id"], entry["home"], entry["relative"], entry["version"]) == (home, home, None, "8.5.0")
    assert doc["cann"]["env_home"] == {"variable": "ASCEND_HOME_PATH", "path": home + "/", "package": home}
    s = {"t": stack("t", device="ascend:0", ascend_root=str(tree.ascend_root))}
    assert run_rules(rules("mindspore-cann", "runtime-cann"), context(s, {"t": doc})) == []
    # MindSpore 2.0 finds it only through LD_LIBRARY_PATH, its own check skipped, and 8.5 is not 6.3
    doc = fingerprint(tree, "ms20", tree.set_env())
    (f,) = run_rules(rules("mindspore-cann"), context(s, {"t": doc}))
    assert (
        f.severity == "critical" and "which is 8.5 by its compiler's Version= (MindSpore skips" in f.message
    )
    assert (
        f"uses cann 8.5.0 (compiler 8.5.0.2.220) at {home} (by the environment ($LD_LIBRARY_PATH))"
        in f.message
    )


def test_the_release_comes_from_the_components_not_the_labels(trees):
    """mixed-latest: latest/version.cfg says 8.0.T63; the components it links to say 8.2.RC2."""
    tree = trees["mixed-latest"]
    doc = fingerprint(tree, "ms210", tree.set_env())
    cann = doc["cann"]
    latest = next(p for p in cann["packages"] if p["id"] == "ascend-toolkit/latest")
    assert (latest["version"], latest["version_source"]) == ("8.2.RC2", "compiler/version.info version_dir")
    assert cann["version_cfg"]["compiler_running_version"] == ["7.6.T13.0.B094", "8.0.T63"]
    assert cann["version"] == "8.2.RC2" and cann_choice.for_framework(cann, "mindspore").release == "8.2.RC2"
    rows = cann_choice.summary(doc, "mindspore")
    assert rows[0][1].startswith("ascend-toolkit 8.2.RC2  compiler 8.2.0.2.220")
    # latest/ links into 8.2.RC2/: one install reached twice, not another one beside it (#54)
    assert latest["links_into"] == "ascend-toolkit/8.2.RC2"
    assert not [text for _, text in rows if text.startswith("also installed")], rows


def test_releases_installed_beside_are_listed_once_each(trees):
    name = next(n for n in TREE_NAMES if SPECS[n].beside)
    tree = trees[name]
    doc = fingerprint(tree, "ms210", tree.set_env())
    (also,) = [text for _, text in cann_choice.summary(doc, "mindspore") if text.startswith("also installed")]
    listed = also.removeprefix("also installed: ").split(", ")
    assert sorted(x.split(" (")[0] for x in listed) == sorted(
        f"ascend-toolkit {r.version}" for r in SPECS[name].beside
    )


# -- npu-smi per NPU and per chip --------------------------------------------------------------
def test_a_failing_board_query_costs_that_npu_only(trees):
    tree = trees["a2-failing-card"]
    doc = fingerprint(tree, "ms210", tree.set_env())["npu_smi"]
    assert doc["count"] == 16 and doc["npus"]["9"]["board"] is None
    assert doc["unknown"]["npus.9.board"] == (
        f"`{tree.npu_smi} info -t board -i 9`: exit status 210: Failed to query board version info."
    )
    others = [doc["npus"][str(i)]["board"] for i in range(16) if i != 9]
    assert all(b["compatibility"] == "OK" and b["chip_count"] == 1 for b in others)
    assert {b["pcie_bus_info"] for b in others} == {c["bus_id"] for c in doc["chips"] if c["npu"] != 9}
    # ... and the firmware the cards run is not the package on disk: one finding, NPU 9 named
    s = {"t": stack("t", device="ascend:0", ascend_root=str(tree.ascend_root))}
    (f,) = run_rules(rules("npu-firmware"), context(s, {"t": fingerprint(tree, "ms210", tree.set_env())}))
    assert (f.details["rule"], f.severity) == ("npu-firmware", "warning")
    ids = ", ".join(str(i) for i in range(16) if i != 9)
    assert f.message == (
        f"NPU firmware on disk under {tree.ascend_root} (local) is 7.5.0.1.129, but NPUs {ids} report "
        "7.3.0.1.231; NPU 9 did not say (no board view)"
    )
    assert f.details["facts"]["no_board_view"] == [9]


def test_a_soc_keeps_its_chip_without_a_bus(trees):
    tree = trees["310b-soc"]
    doc = fingerprint(tree, "ms20", tree.set_env())["npu_smi"]
    assert doc["chips"] == [
        {"npu": 0, "chip": 0, "name": "310B1", "health": "OK", "bus_id": None, "device": 0}
    ]
    assert doc["unknown"]["chips.0.0.bus_id"] == "npu-smi prints NA"
    board = doc["npus"]["0"]["board"]
    assert board == {
        "software_version": "23.0.rc3",
        "firmware_version": "6.2.1.0",
        "compatibility": None,
        "chip_count": 1,
        "product_name": "IT22DMDB02",
        "serial_number": "025VLB10K7000275",
        "faulty_chip_count": 0,
    }
    assert (
        doc["unknown"]["npus.0.board.compatibility"] == "npu-smi prints no Compatibility line for this board"
    )


def test_no_firmware_finding_when_the_cards_run_the_package(trees):
    for name in ("toolkits-side-by-side", "300i-pro", "consistent-8.2"):
        tree = trees[name]
        s = {"t": stack("t", device="ascend:0", ascend_root=str(tree.ascend_root))}
        doc = fingerprint(tree, "ms210", tree.set_env())
        assert run_rules(rules("npu-firmware"), context(s, {"t": doc})) == [], name


PUBLISHED_TABLES = {
    # file: (NPUs, chips, first chip as the collector reports it)
    "310/info_20.2.0_card215_4chips.txt": (1, 4, (215, 0, "310", "0000:DA:00.0")),
    "310/info_21.0.4_card6_4chips.txt": (1, 4, (6, 0, "310", "0000:89:00.0")),
    "310B/info_23.0.rc3_310B1.txt": (1, 1, (0, 0, "310B1", None)),
    "310B/info_24.1.rc3_310B.txt": (1, 1, (0, 0, "310B", None)),
    "310B/info_25.5.0_xxx.txt": (1, 1, (0, 0, "xxx", None)),
    "310P3_duo/info_25.2.0_nvtop421.txt": (1, 2, (2, 0, "310P3", "0000:01:00.0")),
    "910A/info_22.0.3.1_8x_910A.txt": (8, 8, (0, 0, "910A", "0000:61:00.0")),
    "910A/info_24.1.RC2_8x_xxx_2warning.txt": (8, 8, (0, 0, "xxx", "0000:C1:00.0")),
    "910B2/info_23.0.3_8x_vllm-ascend378.txt": (8, 8, (0, 0, "910B2", "0000:C1:00.0")),
    "910B2C/info_24.1.rc2.2_16x_vllm-ascend629.txt": (16, 16, (0, 0, "910B2C", "0000:5A:00.0")),
    "910B3/info_25.2.0_8x_procs_vllm-ascend3865.txt": (8, 8, (0, 0, "910B3", "0000:C1:00.0")),
    "A3/info_25.3.rc1_8cards_16dies_procs_vllm-ascend5825.txt": (8, 16, (0, 0, "Ascend910", "0000:9D:00.0")),
    "950/info_xxx_doc.txt": (1, 1, (0, 0, "xxx", "0000:91:00.0")),
}


@pytest.mark.parametrize("name", list(PUBLISHED_TABLES))
def test_every_published_table_gives_its_npus_and_chips(name: str):
    npus, chips, first = PUBLISHED_TABLES[name]
    table = views.parse_table("`npu-smi info`", (FIXTURES / "npu-smi" / name).read_text())
    assert (len(table["npus"]), len(table["chips"])) == (npus, chips)
    c = table["chips"][0]
    assert (c["npu"], c["chip"], c["name"], c["bus_id"]) == first


def test_the_910a_table_keeps_each_npus_health():
    table = views.parse_table("x", (FIXTURES / "npu-smi/910A/info_24.1.RC2_8x_xxx_2warning.txt").read_text())
    assert [n["npu"] for n in table["npus"] if n["health"] == "Warning"] == [3, 7]


def test_the_950_chip_map_has_no_logic_id_and_reads():
    rows = views.parse_chip_map("x", (FIXTURES / "npu-smi/950/info_m_doc.txt").read_text())
    assert rows == [{"npu": 0, "chip": 0, "name": "xxx", "phy_id": 0, "slot_id": 0}]
    board = views.kv_first((FIXTURES / "npu-smi/950/info_t_board.txt").read_text())
    assert board["Main Board ID"] == "0x68(1P)" and board["PCIe Bus Info"] == "0000:F1:00.0"


def test_published_maps_skip_mcu_rows():
    rows = views.parse_chip_map("x", (FIXTURES / "npu-smi/310/info_m_21.0.4_with_mcu.txt").read_text())
    assert [(r["npu"], r["chip"], r["logic_id"], r["name"]) for r in rows] == [
        (6, c, c, "MiniD") for c in range(4)
    ]


def test_key_value_views_split_per_chip_and_mcu():
    health = views.chip_blocks((FIXTURES / "npu-smi/310B/info_t_health.txt").read_text())
    assert health == [
        {"chip": 0, "mcu": False, "values": {"Health": "OK"}},
        {"chip": None, "mcu": True, "values": {"Health": "OK", "Chip Name": "MCU"}},
    ]
    usages = views.chip_blocks((FIXTURES / "npu-smi/910B/info_t_usages_25.5.1_IT21HMDC.txt").read_text())
    assert usages[0]["chip"] == 0 and usages[0]["values"]["HBM Capacity(MB)"] == "65536"
    assert views.known(" NA ") is None and views.known("-") is None and views.known(" 7.1 ") == "7.1"
    assert views.worst_health(["OK", "Alarm", "Warning"]) == "Alarm"
    assert views.worst_health(["OK", "UNKNOWN", "Critical"]) == "UNKNOWN"


def test_the_tree_specs_are_coherent():
    """Each tree's expectations cover every framework in both environments."""
    for spec in SPECS.values():
        keys = {k for k, _, _ in spec.expect_cann}
        assert keys == {f + e for f in FRAMEWORKS for e in ("", "-bare")}, spec.name


def test_auditor_fingerprint_shows_the_chosen_packages_release_and_compiler(tmp_path: Path):
    """An nnae-only host: there is no toolkit, and the summary used to print ``compiler ?``
    though the package MindSpore checks has one."""
    from auditor.cli.fingerprint import render
    from auditor.config.tables import StackConfig
    from tests.ascend_trees import write_package

    root = tmp_path / "Ascend"
    write_package(root, "nnae", "6.3.RC1", "6.3.0.1.100")
    write_package(root, "nnrt", "6.3.RC1", None)
    where = site(tmp_path / "site", "ms20")
    ctx = {"ascend_root": str(root), "system_root": str(tmp_path), "sys_path": [str(where)], "npu_smi": "/no"}
    doc = runner.collect(COLLECTORS, ctx, {"PATH": "/usr/bin"})["fingerprint"]
    doc["runtime"] = runtime("mindspore", "2.0.0")
    lines = render(StackConfig("ms20", "train", "mindspore", "/x/python"), doc).splitlines()
    at = lines.index(
        f"  CANN         nnae 6.3.RC1  compiler 6.3.0.1.100  V100R001C20SPC001B220  at {root}/nnae/latest"
    )
    assert lines[at + 1] == "               MindSpore uses it, by its own lookup order"
    assert lines[at + 2] == "               also installed: nnrt 6.3.RC1"
    assert not any("compiler ?" in line for line in lines)
    # a Lite stack on the same host, with nothing in its environment: nnrt, probably
    doc["cann"] = runner.collect(
        ["auditor.plugins.collectors.cann"], {**ctx, "sys_path": [str(site(tmp_path / "lite", "lite20"))]}, {}
    )["fingerprint"]["cann"]
    rows = cann_choice.summary(doc, "mindspore-lite")
    assert rows[1] == ("", "MindSpore Lite probably uses it, by the auditor's inference")
    assert rows[0][1].startswith("nnrt 6.3.RC1  compiler -")


def test_an_ascend_home_path_at_the_root_is_not_a_cann(trees):
    """ASCEND_HOME_PATH set to ascend_root itself (a common slip): its driver/ and firmware/
    version files do not make it a CANN package; MindSpore 2.10 finds no compiler there."""
    tree = trees["consistent-8.2"]
    doc = fingerprint(tree, "ms210", dict(tree.set_env(), ASCEND_HOME_PATH=str(tree.ascend_root)))
    cann = doc["cann"]
    assert [p["id"] for p in cann["packages"]] == ["ascend-toolkit/latest"]
    assert cann["env_home"] == {
        "variable": "ASCEND_HOME_PATH",
        "path": str(tree.ascend_root),
        "package": None,
    }
    choice = cann_choice.for_framework(cann, "mindspore")
    assert (choice.package["id"], choice.basis, choice.source) == (
        "ascend-toolkit/latest",
        "environment",
        "LD_LIBRARY_PATH",
    )
    assert choice.how.startswith(f"$ASCEND_HOME_PATH = {tree.ascend_root} holds no compiler/version.info")


def test_one_npu_on_other_firmware_reports_it_in_the_singular():
    """#54: "NPU 0 report 7.3..." read wrong; one card reports, several report."""
    s = {"t": stack("t", device="ascend:0", ascend_root="/usr/local/Ascend")}
    doc = {
        "firmware": {"version": "7.5.0.1.129", "file": "/usr/local/Ascend/firmware/version.info"},
        "npu_smi": {
            "npus": {
                "0": {"npu": 0, "board": {"firmware_version": "7.3.0.1.231"}},
                "1": {"npu": 1, "board": {"firmware_version": "7.5.0.1.129"}},
            }
        },
    }
    (f,) = run_rules(rules("npu-firmware"), context(s, {"t": doc}))
    assert f.message.endswith("is 7.5.0.1.129, but NPU 0 reports 7.3.0.1.231"), f.message
