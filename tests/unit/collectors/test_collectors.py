"""The fingerprint collectors against fixture Ascend trees (tests/ascend_trees.py), in this
process for speed, and once under a real Python 3.7 to prove they run there."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from auditor.plugins.collectors import _files, npu_smi
from auditor.plugins.default_collectors import COLLECTORS

from auditor.extend.manager import Plugins
from auditor.stacks.launch import worker_packages
from auditor.worker import fingerprint as runner
from auditor.worker.bootstrap import SOURCE
from tests.ascend_trees import SPECS, TREE_NAMES, Npu, build_tree, write, write_npu_smi
from tests.conftest import REPO
from tests.unit.worker.test_py37_compat import _python37

SECTIONS = ("host", "packages", "framework", "cann", "driver", "firmware", "npu_smi", "environment", "models")


def collect(context: dict, collectors: list[str] = COLLECTORS) -> dict:
    ctx = dict(context)
    environ = ctx.pop("environ", {})
    return runner.collect(collectors, ctx, environ)["fingerprint"]


def assert_nulls_explained(doc: dict) -> None:
    """The schema's promise: every null field of a section has its reason in "unknown"."""
    for name, section in doc.items():
        if name == "environment":
            continue
        assert "error" not in section, section
        for key, value in section.items():
            if value is None:
                assert key in section["unknown"], f"{name}.{key} is null without a reason"
                assert section["unknown"][key], f"{name}.{key}: empty reason"


# -- the fixture trees -------------------------------------------------------------------------
@pytest.mark.parametrize("name", TREE_NAMES)
def test_every_collector_reads_each_tree(tmp_path: Path, name: str) -> None:
    tree = build_tree(tmp_path, name)
    spec = tree.spec
    doc = collect(tree.context())
    assert list(doc) == list(SECTIONS)
    assert_nulls_explained(doc)

    os_id, version_id, pretty = spec.os_release
    assert doc["host"]["os_release"] == {"ID": os_id, "VERSION_ID": version_id, "PRETTY_NAME": pretty}
    assert doc["host"]["python"]["version"] == ".".join(map(str, sys.version_info[:3]))

    c = doc["cann"]
    assert c["layout"] == spec.layout
    assert c["version"] == (spec.cann_version if spec.layout else spec.nnrt_version)
    assert c["compiler_version"] == (spec.compiler_version if spec.layout else None)
    by_id = {p["id"]: p for p in c["packages"]}
    if spec.layout in ("ascend-toolkit", "cann"):
        home = "ascend-toolkit/latest" if spec.layout == "ascend-toolkit" else "cann"
        # the package's release from its own component files, whatever its labels say
        assert by_id[home]["version"] == spec.cann_version
        assert by_id[home]["version_source"] == "compiler/version.info version_dir"
        assert by_id[home]["compiler_version"] == spec.compiler_version
        assert c["version_source"] == f"{home}: compiler/version.info version_dir"
        assert c["version_cfg"]["runtime_running_version"][-1:] in ([spec.cann_version], ["8.0.T63"])
        assert c["components"]["runtime"]["required_package_compiler_version"] == ".".join(
            spec.compiler_version.split(".")[:2]
        )
        if spec.mixed_latest:  # latest/ holds links and a stale version.cfg, no install info
            assert c["toolkit"] is None and c["version_cfg"]["runtime_running_version"][1] == "8.0.T63"
        else:
            assert c["toolkit"]["version"] == spec.cann_version
            assert c["toolkit"]["innerversion"] == spec.toolkit_innerversion
            assert c["toolkit"]["compatible_version"] == list(spec.toolkit_compatible)
            assert c["toolkit"]["arch"] == spec.arch
            assert by_id[home]["innerversion"] == spec.toolkit_innerversion
            assert c["install_registry"]["Install_Path"].startswith("/usr/local/Ascend/")
    elif spec.layout == "share/info":
        assert c["toolkit"] is None and "ascend_toolkit_install.info: missing" in c["unknown"]["toolkit"]
        assert c["version_source"] == "cann: compiler/version.info Version"
        assert set(c["components"]) == {"compiler", "runtime", "opp", "toolkit"}
    else:
        assert c["toolkit"] is None and "no CANN toolkit" in c["unknown"]["toolkit"]
    for release in spec.beside:  # side by side, each with its own release and compiler
        entry = by_id[f"ascend-toolkit/{release.version}"]
        assert (entry["version"], entry["compiler_version"]) == (release.version, release.compiler)
    if spec.nnrt_version:
        nnrt = by_id["nnrt/latest"]
        assert nnrt["version"] == spec.nnrt_version and nnrt["compiler_present"] is False
        assert nnrt["version_source"].startswith("ascend_nnrt_install.info")
        assert c["nnrt"]["innerversion"] == spec.nnrt_innerversion
        if not spec.layout:
            assert c["version_source"] == "nnrt/latest: " + nnrt["version_source"]
    else:
        assert c["nnrt"] is None and c["unknown"]["nnrt"] == f"{tree.ascend_root}/nnrt/latest: missing"
    expected_ids = {
        *(["ascend-toolkit/latest"] if spec.layout == "ascend-toolkit" else []),
        *(["cann"] if spec.layout in ("cann", "share/info") else []),
        *(["ascend-toolkit/" + spec.cann_version] if spec.mixed_latest else []),
        *(f"ascend-toolkit/{r.version}" for r in spec.beside),
        *(["nnrt/latest"] if spec.nnrt_version else []),
    }
    assert set(by_id) == expected_ids  # a release reached through latest or cann is listed once

    d, f = doc["driver"], doc["firmware"]
    assert d["version"] == spec.driver_version
    if spec.driver_innerversion:
        assert d["innerversion"] == spec.driver_innerversion
        assert d["compatible_version"] == list(spec.driver_compatible)
        assert d["compatible_version_fw"] == [list(r) for r in spec.driver_compatible_fw]
        assert d["install_info"]["Driver_Install_Status"] == "complete"
    elif spec.driver_version:  # a driver file of which only the Version is known
        assert d["unknown"]["innerversion"].endswith("driver/version.info: no Innerversion= line")
    else:
        assert d["unknown"]["version"].endswith("driver/version.info: missing")
        assert d["unknown"]["install_info"].endswith("etc/ascend_install.info: missing")
    assert f["version"] == spec.firmware_version
    if spec.firmware_version:
        assert f["compatible_version_drv"] == [list(r) for r in spec.firmware_compatible_drv]

    n = doc["npu_smi"]
    if spec.npus:
        assert n["available"] is True and n["resolved"] == str(tree.npu_smi)
        assert n["driver_version"] == spec.driver_version
        assert n["count"] == len(spec.npus)
        assert n["chip_count"] == len(spec.chips)
        assert n["chips"] == spec.chips
        facts = {
            k: {**v, "board": v["board"] and {f: v["board"][f] for f in v["board"] if f in JUDGING}}
            for k, v in n["npus"].items()
        }
        assert facts == spec.npu_facts()
        assert [(m["npu"], m["chip"], m["name"]) for m in n["chip_map"]] == [
            (c["npu"], c["chip"], c["name"] if spec.kind == "A3" else "Ascend " + c["name"])
            for c in spec.chips
        ]
        if spec.kind == "A3" and not spec.info_file:
            assert [m["phy_id"] for m in n["chip_map"]] == [c["phy_id"] for c in spec.chips]
        expected_unknown = {f"npus.{x.npu}.board" for x in spec.npus if x.board_fails}
        expected_unknown |= {f"chips.{c['npu']}.{c['chip']}.bus_id" for c in spec.chips if not c["bus_id"]}
        expected_unknown |= {f"npus.{x.npu}.board.compatibility" for x in spec.npus if x.compatibility == ""}
        assert set(n["unknown"]) == expected_unknown
    else:
        assert n["available"] is False and n["unknown"]["chips"].endswith("npu-smi: not found")


JUDGING = ("software_version", "firmware_version", "compatibility", "chip_count")


def test_the_consistent_tree_has_nothing_unknown_but_the_absent_packages(tmp_path: Path) -> None:
    doc = collect(build_tree(tmp_path, "consistent-8.2").context())
    assert set(doc["cann"]["unknown"]) == {"nnae", "nnrt", "env_home"}
    for name in ("driver", "firmware", "npu_smi"):
        assert doc[name]["unknown"] == {}, name


def test_health_values_and_a_310p_process_row_are_read_as_printed(tmp_path: Path) -> None:
    spec = dataclasses.replace(
        SPECS["consistent-8.2"],
        npus=(Npu(0, "910B4", "Critical"), Npu(3, "910B4", "Warning", bus="0000:C3:00.0")),
    )
    tree = build_tree(tmp_path, "consistent-8.2")
    write_npu_smi(tree.npu_smi, spec)
    doc = collect(tree.context(), ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    assert [(c["npu"], c["health"]) for c in doc["chips"]] == [(0, "Critical"), (3, "Warning")]
    # the process table's "0  0 | 23451 | python3.7" row is not a chip
    assert doc["count"] == 2 and len(doc["chips"]) == 2


def test_a_toolkit_named_by_ascend_home_path_is_preferred(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "cann-8.5")
    older = build_tree(tmp_path / "other", "consistent-8.2")
    (tree.ascend_root / "ascend-toolkit").symlink_to(older.ascend_root / "ascend-toolkit")
    doc = collect(tree.context(), ["auditor.plugins.collectors.cann"])["cann"]
    assert doc["layout"] == "ascend-toolkit" and doc["version"] == "8.2.RC1"
    assert doc["other_homes"] == [str(tree.ascend_root / "cann")]
    env = {"ASCEND_HOME_PATH": str(tree.ascend_root / "cann")}
    doc = collect(tree.context(environ=env), ["auditor.plugins.collectors.cann"])["cann"]
    assert doc["layout"] == "cann" and doc["version"] == "8.5.0"
    # a toolkit outside ascend_root, found through the environment only
    empty = build_tree(tmp_path, "empty")
    env = {"ASCEND_HOME_PATH": str(tree.ascend_root / "cann")}
    doc = collect(empty.context(environ=env), ["auditor.plugins.collectors.cann"])["cann"]
    assert doc["home"] == os.path.realpath(tree.ascend_root / "cann") and doc["version"] == "8.5.0"


# -- files that are not what they should be ----------------------------------------------------
BAD_FILES = {
    "missing": (None, "missing"),
    "empty": (b"", "empty"),
    "blank": (b"\n  \n", "empty"),
    "binary": (b"Version=25.0\x00\x00\x01\x02\xff" * 8, "binary content"),
    "garbled": (bytes(range(128, 256)) * 4, "not UTF-8"),
    "control characters": (b"\x1b\x1b\x07\x08\x1b" * 40 + b"Version=1\n", "control characters"),
    "no key=value": ("\u00e9\u00e8 random words, no equals sign\n".encode(), "no key=value lines"),
    "huge": (b"Version=25.0.rc1.1\n" + b"# padding padding padding\n" * 12000, "larger than 256 KiB"),
    "directory": ("dir", "a directory"),
    "fifo": ("fifo", "not a regular file"),
}
# (file below the tree, section, field that becomes null)
TARGETS = [
    ("Ascend/driver/version.info", "driver", "version"),
    ("Ascend/firmware/version.info", "firmware", "version"),
    ("Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info", "cann", "toolkit"),
    ("Ascend/ascend-toolkit/latest/compiler/version.info", "cann", "compiler_version"),
    ("Ascend/ascend-toolkit/latest/version.cfg", "cann", "version_cfg"),
    ("root/etc/ascend_install.info", "driver", "install_info"),
    ("root/etc/os-release", "host", "os_release"),
]


def _spoil(path: Path, kind: str) -> None:
    content, _ = BAD_FILES[kind]
    path.unlink(missing_ok=True)
    if content == "dir":
        path.mkdir()
    elif content == "fifo":
        os.mkfifo(path)
    elif content is not None:
        path.write_bytes(content)


@pytest.mark.parametrize("kind", list(BAD_FILES))
@pytest.mark.parametrize(("relative", "section", "key"), TARGETS, ids=[t[0].split("/")[-1] for t in TARGETS])
def test_bad_files_give_null_and_a_reason(
    tmp_path: Path, kind: str, relative: str, section: str, key: str
) -> None:
    tree = build_tree(tmp_path, "consistent-8.2")
    path = tree.ascend_root.parent / relative
    _spoil(path, kind)
    # A FIFO is never opened (opening one blocks until a writer comes): collect() returns, and
    # nothing here ever writes to it, so a collect that opened it would never return.
    doc = _returns(lambda: collect(tree.context()))
    assert doc[section][key] is None
    reason = doc[section]["unknown"][key]
    expected = BAD_FILES[kind][1]
    # a missing install-info file is named by the pattern looked for
    named = str(path) in reason or str(path).replace("aarch64-linux", "<arch>-linux") in reason
    assert expected in reason and named, reason
    assert_nulls_explained(doc)
    # The other sections are untouched.
    assert doc["npu_smi"]["count"] == 2


def test_an_unreadable_file_is_reported_as_permission_denied(tmp_path: Path, monkeypatch) -> None:
    tree = build_tree(tmp_path, "consistent-8.2")
    target = str(tree.ascend_root / "driver" / "version.info")
    if os.geteuid() != 0:
        os.chmod(target, 0)
    else:  # root reads anything: make open() fail the way it does for everyone else
        real_open = open

        def fake_open(path, *args, **kwargs):
            if str(path) == target:
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(_files, "open", fake_open, raising=False)
    doc = collect(tree.context(), ["auditor.plugins.collectors.driver"])["driver"]
    assert doc["version"] is None
    assert doc["unknown"]["version"] == f"{target}: permission denied"


def test_a_malformed_list_nulls_only_its_field(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "consistent-8.2")
    path = tree.ascend_root / "driver" / "version.info"
    path.write_text(
        path.read_text().replace("compatible_version_fw=[7.0.0,7.7.99]", "compatible_version_fw=7.0.0-7.7.99")
    )
    doc = collect(tree.context(), ["auditor.plugins.collectors.driver"])["driver"]
    assert doc["version"] == "25.0.rc1.1"
    assert doc["compatible_version_fw"] is None
    assert "not a [a,b],[c] list" in doc["unknown"]["compatible_version_fw"]


def test_a_huge_cpuinfo_is_still_read_for_its_first_block(tmp_path: Path) -> None:
    cpuinfo = write(
        tmp_path / "cpuinfo", "processor\t: 0\nmodel name\t: Kunpeng 920\n\n" + "flags\t: x\n" * 60000
    )
    doc = collect(
        {"cpuinfo": str(cpuinfo), "system_root": str(tmp_path)}, ["auditor.plugins.collectors.host"]
    )
    assert doc["host"]["cpu_model"] == "Kunpeng 920"


def test_aarch64_cpuinfo_names_the_cpu_from_its_codes() -> None:
    from auditor.plugins.collectors.host import parse_cpu_model

    text = "processor\t: 0\nBogoMIPS\t: 200.00\nCPU implementer\t: 0x48\nCPU part\t: 0xd01\n"
    assert parse_cpu_model(text) == "Kunpeng-920"
    assert parse_cpu_model("CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n") == "ARM part 0xd0c"
    assert parse_cpu_model("flags: x\n") is None


# -- the shared helpers ------------------------------------------------------------------------
def test_bracket_lists_keep_ranges_and_trailing_dots() -> None:
    assert _files.parse_groups("[23.0.0,23.0.0.],[24.1,24.1.]") == [["23.0.0", "23.0.0."], ["24.1", "24.1."]]
    assert _files.parse_groups("[7.0.0,7.7.99]") == [["7.0.0", "7.7.99"]]
    assert _files.parse_groups("") == []
    assert _files.parse_codes("[V100R001C15],[V100R001C18, V100R001C20]") == [
        "V100R001C15",
        "V100R001C18,V100R001C20",
    ]
    for bad in ("7.0.0", "[7.0.0", "[a]x[b]", "[a],junk"):
        with pytest.raises(ValueError):
            _files.parse_groups(bad)


def test_key_value_lines() -> None:
    text = '# version: 1.0\nVersion=8.2.0.0.201\n  spaced = yes \nrequired="8.2"\nnot a line\n=x\n'
    assert _files.parse_kv(text) == {"Version": "8.2.0.0.201", "spaced": "yes", "required": "8.2"}
    with pytest.raises(ValueError):
        _files.parse_kv("# only a comment\n")


def test_commands_are_killed_with_their_group_at_the_deadline(tmp_path: Path) -> None:
    script = write(tmp_path / "slow", f"#!/bin/sh\nsleep 600 &\necho $! > {tmp_path}/pid\nwait\n", 0o755)
    with pytest.raises(_files.TimedOut, match=r"timed out after 0.5 s; process group killed"):
        _files.run_command([str(script)], 0.5)
    _assert_dead(int((tmp_path / "pid").read_text()))  # the 600 s sleep: killed with the group


def test_command_output_is_bounded(tmp_path: Path) -> None:
    script = write(
        tmp_path / "chatty", f"#!/bin/sh\necho $$ > {tmp_path}/pid\nexec yes '| 0  910B3 | OK | 1 |'\n", 0o755
    )
    with pytest.raises(_files.Unreadable, match=r"wrote more than 256 KiB; process group killed"):
        _files.run_command([str(script)], 30)
    _assert_dead(int((tmp_path / "pid").read_text()))  # stopped at the cap, not at the 30 s deadline


def _returns(call, seconds: float = 120.0):
    """``call()``'s value; a call still running after ``seconds`` is a failure (it blocks), not
    a slow run: nothing here measures how fast it was."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds:g} s"
    return out[0]


def log_calls(npu_smi_path: Path) -> Path:
    """Make the fake npu-smi note its arguments, one line per run; the note's path."""
    calls = npu_smi_path.parent / "calls.log"
    text = npu_smi_path.read_text()
    head, _, rest = text.partition("\n")
    write(npu_smi_path, f'{head}\necho "$*" >> "{calls}"\n{rest}', 0o755)
    calls.write_text("")
    return calls


def _assert_dead(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} outlived the kill")


# -- npu-smi misbehaving -----------------------------------------------------------------------
def test_a_hanging_npu_smi_is_killed_at_its_timeout(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "consistent-8.2", npu_smi_mode="hang")
    calls = log_calls(tree.npu_smi)
    doc = collect(tree.context(timeout=1.0), ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    assert calls.read_text().splitlines() == ["info"]  # one timeout, then nothing more is tried
    assert doc["available"] is False and doc["chips"] is None
    assert doc["unknown"]["chips"] == f"`{tree.npu_smi} info`: timed out after 1 s; process group killed"
    assert doc["unknown"]["npus"] == doc["unknown"]["chips"]
    assert doc["unknown"]["chip_map"].startswith("not tried: ")
    _assert_dead(int(tree.hang_pid_file.read_text()))


def _board_hangs_on(tree, npu: int) -> None:
    """The tree's npu-smi, but its board query of ``npu`` hangs in the driver."""
    text = tree.npu_smi.read_text()
    hang = f'  "info -t board -i {npu}") sleep 3600 &\n  echo $! > {tree.hang_pid_file}\n  wait ;;\n'
    head, _, rest = text.partition(f'  "info -t board -i {npu}")')
    write(tree.npu_smi, head + hang + rest.partition(";;\n")[2], 0o755)


def test_a_board_query_that_hangs_costs_that_npu_and_what_comes_after(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "a2-failing-card")
    _board_hangs_on(tree, 3)
    calls = log_calls(tree.npu_smi)
    doc = collect(tree.context(timeout=1.0), ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    # the table, the first boards, the one that hangs: nothing after it is tried
    assert calls.read_text().splitlines()[-1] == "info -t board -i 3"
    # the table and the boards read before the hang are kept
    assert doc["count"] == 16 and doc["chip_count"] == 16
    assert [doc["npus"][str(i)]["board"]["firmware_version"] for i in range(3)] == ["7.3.0.1.231"] * 3
    hung = f"`{tree.npu_smi} info -t board -i 3`: timed out after 1 s; process group killed"
    assert doc["unknown"]["npus.3.board"] == hung
    for i in range(4, 16):
        assert doc["npus"][str(i)]["board"] is None
        assert doc["unknown"][f"npus.{i}.board"] == f"not tried: {hung}"
    assert doc["unknown"]["chip_map"] == f"not tried: {hung}"
    _assert_dead(int(tree.hang_pid_file.read_text()))


def test_all_npu_smi_runs_stay_within_the_fingerprints_allowance(tmp_path: Path) -> None:
    """Sixteen slow board queries, none timing out alone: the collector stops at CALLS
    timeouts in all (the worker's deadline for a fingerprint allows that), and says so."""
    tree = build_tree(tmp_path, "a2-failing-card")
    text = tree.npu_smi.read_text()
    write(tree.npu_smi, text.replace('case "$*" in', 'sleep 0.3\ncase "$*" in', 1), 0o755)
    calls = log_calls(tree.npu_smi)
    doc = collect(tree.context(timeout=0.5), ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    # at most as many runs of 0.3 s as the allowance (CALLS timeouts of 0.5 s) holds, and one
    # that the allowance cut short: not one a board
    assert len(calls.read_text().splitlines()) <= npu_smi.CALLS * 0.5 / 0.3 + 1
    assert doc["count"] == 16
    read = [k for k, v in doc["npus"].items() if v["board"] is not None]
    assert 1 <= len(read) < 15, read  # some boards, not all
    skipped = [k for k, v in doc["unknown"].items() if "used the 1.5 s this fingerprint allows it" in v]
    assert "chip_map" in skipped and len(skipped) >= 2


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "info`: garbled (not UTF-8 text at byte 0) output"),
        # npu-smi exits with its code & 0xFF, its message on stdout (npucli/src/npu_smi.c)
        (
            "error",
            "info`: exit status 172: dcmi model initialized failed, because the device is used. ret is -8020",
        ),
        ("init-failed", "info`: exit status 187: dcmi module initialize failed. ret is -8005"),
    ],
)
def test_a_broken_npu_smi_is_reported(tmp_path: Path, mode: str, reason: str) -> None:
    tree = build_tree(tmp_path, "consistent-8.2", npu_smi_mode=mode)
    doc = collect(tree.context(), ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    assert doc["available"] is False and doc["count"] is None
    assert reason in doc["unknown"]["count"]


def test_npu_smi_text_without_a_table_is_reported(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "consistent-8.2")
    write(tree.npu_smi, "#!/bin/sh\necho 'npu-smi: command usage: ...'\n", 0o755)
    doc = collect(tree.context(), ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    assert "no NPU table in the output (it starts 'npu-smi: command usage" in doc["unknown"]["chips"]


def test_npu_smi_is_looked_up_on_the_stacks_path(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "310p-nnrt")
    context = dict(
        tree.context(environ={"PATH": f"/nonexistent:{tree.npu_smi.parent}:/usr/bin:/bin"}), npu_smi="npu-smi"
    )
    doc = collect(context, ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    assert doc["resolved"] == str(tree.npu_smi) and doc["count"] == 2
    context["environ"] = {"PATH": "/nonexistent"}
    doc = collect(context, ["auditor.plugins.collectors.npu_smi"])["npu_smi"]
    assert doc["unknown"]["chips"] == "npu-smi: not found on PATH"


# -- environment -------------------------------------------------------------------------------
def test_environment_keeps_numerics_variables_and_redacts_secrets() -> None:
    environ = {
        "HCCL_DETERMINISTIC": "true",
        "OMP_NUM_THREADS": "4",
        "GLOG_v": "2",
        "MS_DEV_JIT_SYNTAX_LEVEL": "0",
        "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
        "LD_LIBRARY_PATH": "/usr/local/Ascend/driver/lib64:/opt/lib",
        "ASCEND_TOKEN": "tok-123",
        "MS_SECRET_KEY": "abc",
        "ASCEND_DB_PASSWORD": "pw1",
        "MS_API_KEY": "k-999",
        "ASCEND_MIRROR": "https://alice:s3cr3t@mirror.example.org/ascend",
        "MS_PROXY": "bob:hunter2@proxy.example.org:8080",
        "MS_ENDPOINT": "https://api.example.org/v1?region=cn&access_token=zzz111&x=1",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "never-collected",
    }
    doc = collect({"environ": environ}, ["auditor.plugins.collectors.environment"])["environment"]
    assert doc == {
        "ASCEND_DB_PASSWORD": "<redacted>",
        "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
        "ASCEND_MIRROR": "https://<redacted>@mirror.example.org/ascend",
        "ASCEND_TOKEN": "<redacted>",
        "GLOG_v": "2",
        "HCCL_DETERMINISTIC": "true",
        "LD_LIBRARY_PATH": "/usr/local/Ascend/driver/lib64:/opt/lib",
        "MS_API_KEY": "<redacted>",
        "MS_DEV_JIT_SYNTAX_LEVEL": "0",
        "MS_ENDPOINT": "https://api.example.org/v1?region=cn&access_token=<redacted>&x=1",
        "MS_PROXY": "<redacted>@proxy.example.org:8080",
        "MS_SECRET_KEY": "<redacted>",
        "OMP_NUM_THREADS": "4",
    }
    text = json.dumps(doc)
    for secret in ("tok-123", "abc", "pw1", "k-999", "s3cr3t", "hunter2", "zzz111", "never-collected"):
        assert secret not in text


def test_the_environment_is_the_one_the_worker_started_with(monkeypatch) -> None:
    monkeypatch.setenv("MS_DEV_SET_AFTER_START", "1")  # as MindSpore's import does
    doc = runner.collect(["auditor.plugins.collectors.environment"])["fingerprint"]["environment"]
    assert "MS_DEV_SET_AFTER_START" not in doc
    assert runner.make_context()["environ"] == runner.STARTUP_ENVIRON


# -- packages and framework builds -------------------------------------------------------------
def _dist(site: Path, dirname: str, metadata: str | bytes, filename: str = "METADATA") -> None:
    write(site / dirname / filename, metadata)


def test_packages_are_read_from_metadata_first_on_the_path_winning(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(
        first,
        "mindspore-2.0.0.dist-info",
        "Metadata-Version: 2.1\nName: mindspore\nVersion: 2.0.0\n\nName: x\n",
    )
    _dist(first, "mindspore_lite-2.0.0.dist-info", "Name: Mindspore_Lite\nVersion: 2.0.0\n")
    _dist(first, "te-0.4.0.egg-info", "Name: te\nVersion: 0.4.0\n", "PKG-INFO")
    write(first / "hccl-0.1.0.egg-info", "Metadata-Version: 1.0\nName: hccl\nVersion: 0.1.0\n")
    long_description = "Name: numpy\nVersion: 1.21.6\n\n" + "A long description.\n" * 30000
    _dist(first, "numpy-1.21.6.dist-info", long_description)
    _dist(first, "broken-1.0.dist-info", b"\x00\x01\x02binary")
    _dist(first, "headless-2.0.dist-info", "no headers here\n")
    _dist(second, "mindspore-2.10.0.dist-info", "Name: mindspore\nVersion: 2.10.0\n")
    doc = collect(
        {"sys_path": ["", str(tmp_path / "missing"), str(first), str(second)]},
        ["auditor.plugins.collectors.packages"],
    )["packages"]
    assert doc["all"] == {
        "broken": None,
        "headless": None,
        "hccl": "0.1.0",
        "mindspore": "2.0.0",
        "mindspore-lite": "2.0.0",
        "numpy": "1.21.6",
        "te": "0.4.0",
    }
    assert doc["framework"] == {
        "mindspore": "2.0.0",
        "mindspore-lite": "2.0.0",
        "numpy": "1.21.6",
        "te": "0.4.0",
        "hccl": "0.1.0",
    }
    assert "binary content" in doc["unknown"]["broken"]
    assert "no Name: and Version: headers" in doc["unknown"]["headless"]


CHECKER = '''
class EnvChecker:
    pass


class GPUEnvChecker(EnvChecker):
    def __init__(self, library_path):
        self.version = ["10.1", "11.1"]


class AscendEnvChecker(EnvChecker):
    """ascend environment check"""

    def __init__(self, library_path):
        self.library_path = library_path
        self.version = ["8.2", "8.3", "8.5", "9.0", "9.1"]
        self.ascend_home_path = os.getenv("ASCEND_HOME_PATH")
        if self.ascend_home_path is not None:
            self.compiler_version = self.ascend_home_path + "/compiler/version.info"
        else:
            self.compiler_version = ""
'''


def _fake_mindspore(site: Path, commit: str, checker: str = CHECKER) -> Path:
    package = site / "mindspore"
    write(package / "__init__.py", "raise RuntimeError('the collector imported mindspore')\n")
    write(package / "version.py", "__version__ = '2.10.0'\n")
    write(package / ".commit_id", commit)
    write(package / "run_check" / "__init__.py", "raise RuntimeError('imported run_check')\n")
    write(package / "run_check" / "_check_version.py", checker)
    return package


def test_framework_builds_are_read_without_importing_them(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_mindspore(site, "__commit_id__ = '[sha1]:2d550373,[branch]:(HEAD,origin/r2.10,r2.10)'\n")
    write(site / "mindspore_lite" / "__init__.py", "raise RuntimeError('imported lite')\n")
    write(site / "mindspore_lite" / "version.py", "__version__ = '2.0.0'\n")
    write(site / "mindspore_lite" / ".commit_id", "commit 87e30858f9e2ade0cfbe884031944a220c06e9cf\n")
    doc = collect({"sys_path": [str(site)]}, ["auditor.plugins.collectors.framework"])["framework"]
    assert doc["mindspore"] == {
        "path": str(site / "mindspore"),
        "version": "2.10.0",
        "commit_id": "2d550373",
        "commit_branch": "HEAD,origin/r2.10,r2.10",
        "checker_file": str(site / "mindspore" / "run_check" / "_check_version.py"),
        "supported_cann": ["8.2", "8.3", "8.5", "9.0", "9.1"],
        "cann_lookup": {"env": "ASCEND_HOME_PATH", "paths": []},
    }
    assert doc["mindspore_lite"] == {
        "path": str(site / "mindspore_lite"),
        "version": "2.0.0",
        "commit_id": "87e30858f9e2ade0cfbe884031944a220c06e9cf",
    }
    assert doc["unknown"] == {}
    assert "mindspore" not in sys.modules and "mindspore_lite" not in sys.modules


@pytest.mark.parametrize(
    ("commit", "checker", "key", "reason"),
    [
        ("garbage\n", CHECKER, "mindspore.commit_id", "unrecognised content 'garbage'"),
        (b"\x00\x00", CHECKER, "mindspore.commit_id", "binary content"),
        (
            "commit abcdef1\n",
            "class AscendEnvChecker:\n    pass\n",
            "mindspore.supported_cann",
            "has no __init__",
        ),
        ("commit abcdef1\n", "def broken(:\n", "mindspore.supported_cann", "cannot parse (line 1"),
        ("commit abcdef1\n", "x = 1\n", "mindspore.supported_cann", "no class AscendEnvChecker"),
        (
            "commit abcdef1\n",
            "class AscendEnvChecker:\n    def __init__(self):\n        self.version = VERSIONS\n",
            "mindspore.supported_cann",
            "self.version is not a list of strings",
        ),
    ],
)
def test_framework_files_that_cannot_be_read(
    tmp_path: Path, commit, checker: str, key: str, reason: str
) -> None:
    site = tmp_path / "site"
    _fake_mindspore(site, commit, checker)
    doc = collect({"sys_path": [str(site)]}, ["auditor.plugins.collectors.framework"])["framework"]
    field = key.split(".")[1]
    assert doc["mindspore"][field] is None
    assert reason in doc["unknown"][key]
    assert doc["mindspore"]["version"] == "2.10.0"
    assert doc["mindspore_lite"] is None and doc["unknown"]["mindspore_lite"].startswith("not installed")


# -- the worker-side runner --------------------------------------------------------------------
def test_a_failing_collector_costs_only_its_section(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "fpplugins"
    write(package / "__init__.py", "")
    write(
        package / "raises.py", "NAME = 'raises'\ndef collect(context):\n    raise OSError('disk on fire')\n"
    )
    write(package / "notdict.py", "NAME = 'notdict'\ndef collect(context):\n    return [1]\n")
    write(package / "notjson.py", "NAME = 'notjson'\ndef collect(context):\n    return {'x': {1, 2}}\n")
    write(package / "nameless.py", "def collect(context):\n    return {}\n")
    write(package / "twice.py", "NAME = 'environment'\ndef collect(context):\n    return {}\n")
    write(
        package / "mutates.py",
        "NAME = 'mutates'\ndef collect(context):\n    context['environ'].clear()\n    return {}\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = [f"fpplugins.{m}" for m in ("raises", "notdict", "notjson", "nameless", "mutates")]
    modules += ["fpplugins.missing", "auditor.plugins.collectors.environment", "fpplugins.twice"]
    reply = runner.collect(modules, {}, {"MS_X": "1"})
    doc = reply["fingerprint"]
    assert doc["raises"] == {"error": "fpplugins.raises: collect() raised OSError: disk on fire"}
    assert "disk on fire" in reply["tracebacks"]["raises"]
    assert doc["notdict"] == {"error": "fpplugins.notdict: collect() returned list, not a dict"}
    assert doc["notjson"]["error"].startswith(
        "fpplugins.notjson: collect() returned something that is not JSON"
    )
    assert doc["nameless"] == {
        "error": "fpplugins.nameless: defines no NAME string and collect(context) function"
    }
    assert doc["missing"]["error"].startswith("fpplugins.missing: cannot import ModuleNotFoundError")
    assert doc["environment"] == {"MS_X": "1"}  # the mutating collector spoiled only its own copy
    assert doc["fpplugins.twice"]["error"].startswith(
        "fpplugins.twice: section 'environment' is already filled"
    )
    assert set(reply["seconds"]) == set(doc)


def test_the_builtin_plugin_registers_every_collector() -> None:
    plugins = Plugins(entry_points=False)
    # the built-ins come first, in document order; other plugins may add more after them
    assert plugins.fingerprint_collectors()[: len(COLLECTORS)] == COLLECTORS
    assert not [p for p in plugins.problems if "collector" in p]
    assert ("auditor.plugins.collectors", str(REPO / "plugins" / "collectors")) in worker_packages()
    names = [runner._run(m, runner.make_context({}, {}))[0] for m in COLLECTORS]
    assert names == list(SECTIONS)


# -- Python 3.7 --------------------------------------------------------------------------------
PY37_FILES = sorted(str(p) for p in (REPO / "plugins" / "collectors").glob("*.py")) + [
    str(REPO / "auditor" / "worker" / "fingerprint.py"),
    str(REPO / "plugins" / "default_collectors.py"),
]


def test_collectors_parse_on_python_37() -> None:
    check = "import ast, sys\nfor f in sys.argv[1:]:\n    ast.parse(open(f).read(), f)\n"
    proc = subprocess.run(
        [_python37(), "-c", check, *PY37_FILES[:-1]], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


# The worker's own bootstrap, ending in a collection instead of the request loop.
BOOTSTRAP = SOURCE.replace(
    "from auditor.worker.main import serve\nserve(spec)",
    "from auditor.worker.fingerprint import collect\n"
    'print(json.dumps(collect(spec["collectors"], spec["context"], spec["environ"])))',
)
assert BOOTSTRAP != SOURCE


@pytest.mark.parametrize("name", ["consistent-8.2", "310p-nnrt"])
def test_collectors_run_on_python_37_as_they_do_here(tmp_path: Path, name: str) -> None:
    """The same tree through a bare Python 3.7 (standard library only, packages registered the
    way the worker's bootstrap does) gives the same sections as in this process."""
    tree = build_tree(tmp_path, name)
    context = tree.context()
    environ = context.pop("environ")
    spec = {"packages": worker_packages(), "collectors": COLLECTORS, "context": context, "environ": environ}
    proc = subprocess.run(
        [_python37(), "-I", "-c", BOOTSTRAP, json.dumps(spec)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    theirs = json.loads(proc.stdout)["fingerprint"]
    ours = runner.collect(COLLECTORS, context, environ)["fingerprint"]
    assert theirs["host"]["python"]["version"].startswith("3.7.")
    assert_nulls_explained(theirs)
    for section in ("cann", "driver", "firmware", "npu_smi", "environment"):
        assert theirs[section] == ours[section], section
    assert theirs["host"]["os_release"] == ours["host"]["os_release"]
