"""Ascend host trees for tests: the files and the ``npu-smi`` of real hosts, built from
published outputs and version files (``tests/ascend_fixtures/``, each cited in its
SOURCES.md) and, where nothing is published, from the formats in shared FACTS.md §3 and the
npu-smi source.

    tree = build_tree(tmp_path, "a2-failing-card")
    tree.ascend_root, tree.system_root, tree.npu_smi   # Paths
    tree.context(timeout=2.0)                            # a collector context (environment: PATH)
    tree.set_env()                                       # the environment its set_env.sh gives
    tree.stack_options()                                 # keys for a [stacks.X] table
    tree.spec                                            # what was written, and what it means

Each tree is ``<base>/<name>/``: ``Ascend/`` (the ascend_root: toolkit / cann / nnae / nnrt
with ``latest`` links the way the installers make them, ``driver/``, ``firmware/``), ``root/``
(the system_root: ``etc/os-release``, ``etc/ascend_install.info``,
``etc/Ascend/ascend_cann_install.info``), ``bin/npu-smi`` (a shell script answering ``info``,
``info -t board -i N`` per NPU and ``info -m`` as the real tool prints them, failing the way it
fails: its message on stdout, the exit status the code ``& 0xFF``), and for one tree a CANN
installed by a user under ``home/``. ``npu_smi_mode`` makes the whole tool hang (sleeps, with
a child process, until killed), print garbage, or fail.

A spec holds what a correct fingerprint of the tree says: per NPU (``npu_facts``), per chip
(``chips``) and, per framework, which CANN it would load and on what basis (``expect_cann``).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "ascend_fixtures"
NPU_SMI_MODES = ("normal", "hang", "garbage", "error", "init-failed")
HANG_PID_FILE = "npu-smi.child-pid"  # the hanging script's sleeping child writes its pid here
# `npu-smi` exits with its negative code: the shell sees code & 0xFF (npucli/src/npu_smi.c).
DEVICE_USED = -8020  # DCMI_ERR_CODE_RESOURCE_OCCUPIED
INNER_ERROR = -8005  # DCMI_ERR_CODE_INNER_ERR
NPU_TIME_OUT = -9006  # NPU_ERR_CODE_TIME_OUT, what a board query of a card that does not answer returns
FRAMEWORKS = ("ms20", "ms210", "lite20")


def exit_status(code: int) -> int:
    return code & 0xFF


def fixture(relative: str) -> str:
    return (FIXTURES / relative).read_text()


@dataclass(frozen=True)
class Npu:
    npu: int
    name: str  # as npu-smi prints it: "910B3", "310P3"
    health: str = "OK"
    chips: tuple[int, ...] = (0,)
    bus: str | None = "0000:C1:00.0"  # None: the table prints NA (a SoC)
    chip_buses: tuple[str, ...] = ()  # per chip, where the chips have buses of their own (A3)
    software: str | None = None  # the board's Software Version (default: the tree's driver)
    firmware: str | None = None  # the board's Firmware Version (default: the firmware file's)
    compatibility: str | None = None  # None: the tree's; "": not printed (SoC, 310)
    board_file: str | None = None  # a published `-t board` output instead of a generated one
    board_fails: bool = False  # `-t board -i N` fails for this card (NPU_TIME_OUT)


@dataclass(frozen=True)
class Release:
    """A CANN release installed beside the tree's toolkit (``ascend-toolkit/<version>``)."""

    version: str
    compiler: str
    install_info: str  # a fixture under version/
    version_cfg: str | None = None


@dataclass(frozen=True)
class TreeSpec:
    """Everything a tree holds; tests compare the collectors' answers with these values."""

    name: str
    description: str
    arch: str = "x86_64"
    os_release: tuple[str, str, str] = ("ubuntu", "22.04", "Ubuntu 22.04.4 LTS")
    # CANN toolkit: layout None = no toolkit under ascend_root
    layout: str | None = None
    cann_version: str | None = None  # the release, e.g. 8.2.RC1
    compiler_version: str | None = None  # Version= of compiler/version.info
    version_dir: str | None = None  # version_dir= of the components (absent in 9.x files)
    toolkit_innerversion: str | None = None
    toolkit_compatible: tuple[str, ...] = ()  # compatible_version entries; "A,B" is a range
    toolkit_info: str | None = None  # a published install-info file (fixture) to use as is
    toolkit_cfg: str | None = None  # a published version.cfg (fixture) to use as is
    beside: tuple[Release, ...] = ()  # more releases under ascend-toolkit/ (latest stays ours)
    mixed_latest: bool = False  # latest/ is a directory of links into the release (MindIE)
    user_home: str | None = None  # the CANN lives here (below the tree), not under ascend_root
    nnrt_version: str | None = None
    nnrt_innerversion: str | None = None
    # driver and firmware: None = not installed
    driver_version: str | None = None
    driver_innerversion: str | None = None
    driver_compatible: tuple[str, ...] = ()
    driver_compatible_fw: tuple[tuple[str, str], ...] = ()
    driver_file: str | None = None  # a published driver version.info (fixture)
    firmware_version: str | None = None
    firmware_compatible_drv: tuple[tuple[str, str], ...] = ()
    firmware_file: str | None = None
    # npu-smi
    kind: str = "910B"  # "910B", "310P" (Chip  Device), "A3" (Chip  Phy-ID), "310B" (SoC)
    npus: tuple[Npu, ...] = ()
    board_compatibility: str = "OK"
    info_file: str | None = None  # a published `npu-smi info` table (fixture); npus must match it
    # the environment the packages' set_env.sh gives ({ascend}: ascend_root, {top}: the tree)
    set_env: tuple[tuple[str, str], ...] = ()
    # framework -> (package id, basis) with the set_env environment, and with "<fw>-bare" keys
    # with only PATH; an id may hold {top}
    expect_cann: tuple[tuple[str, str | None, str], ...] = ()

    @property
    def chips(self) -> list[dict[str, Any]]:
        """The chips the npu_smi collector should report, in its format."""
        out = []
        for n in self.npus:
            for c in n.chips:
                entry: dict[str, Any] = {
                    "npu": n.npu,
                    "chip": c,
                    "name": n.name,
                    "health": n.health,
                    "bus_id": n.chip_buses[c] if n.chip_buses else n.bus,
                }
                if self.kind in ("310P", "310B"):
                    entry["device"] = c
                elif self.kind == "A3":
                    entry["phy_id"] = len(out)
                out.append(entry)
        return out

    def board_facts(self, n: Npu) -> dict[str, Any] | None:
        if n.board_fails:
            return None
        compatibility = self.board_compatibility if n.compatibility is None else (n.compatibility or None)
        return {
            "software_version": n.software or self.driver_version,
            "firmware_version": n.firmware or self.firmware_version,
            "compatibility": compatibility,
            "chip_count": len(n.chips),
        }

    def npu_facts(self) -> dict[str, dict[str, Any]]:
        """``npu_smi.npus`` as the collector should report it (board: the judging fields)."""
        return {
            str(n.npu): {
                "npu": n.npu,
                "name": n.name,
                "health": n.health,
                "chip_count": len(n.chips),
                "board": self.board_facts(n),
            }
            for n in self.npus
        }

    def expected_cann(self, framework: str, top: Path) -> tuple[str | None, str]:
        for key, package, basis in self.expect_cann:
            if key == framework:
                return (package.format(top=top) if package else None), basis
        raise KeyError(f"tree {self.name}: no CANN expectation for {framework}")


_CODES_8_2 = (
    "V100R001C15,V100R001C17",
    "V100R001C18",
    "V100R001C19",
    "V100R001C20",
    "V100R001C21",
    "V100R001C22",
)
_DRIVER_25_0 = dict(
    driver_version="25.0.rc1.1",
    driver_innerversion="V100R001C21SPC002B220",
    driver_compatible=("V100R001C17", "V100R001C18", "V100R001C19", "V100R001C20", "V100R001C21"),
    driver_compatible_fw=(("7.0.0", "7.7.99"),),
)
_DRIVER_24_1 = dict(
    driver_version="24.1.rc2",
    driver_innerversion="V100R001C19SPC002B230",
    driver_compatible=("V100R001C15", "V100R001C17", "V100R001C18", "V100R001C19", "V100R001C20"),
    driver_compatible_fw=(("7.0.0", "7.3.99"),),
    firmware_version="7.3.0.1.231",
    firmware_compatible_drv=(("23.0.0", "23.0.0."), ("24.1", "24.1.")),
)
_DRIVER_25_3 = dict(
    driver_version="25.3.rc1",
    driver_innerversion="V100R001C23SPC001B210",
    driver_compatible=("V100R001C19", "V100R001C20", "V100R001C21", "V100R001C22", "V100R001C23"),
    driver_compatible_fw=(("7.0.0", "7.8.99"),),
    firmware_version="7.8.0.2.212",
    firmware_compatible_drv=(("24.1", "24.1."), ("25.0", "25.0."), ("25.3", "25.3.")),
)


def _driver(
    file: str, version: str, innerversion: str, compatible: str, fw: tuple[str, str]
) -> dict[str, Any]:
    """A published driver version.info (tests/ascend_fixtures/version/) and the values the
    assertions need from it (``compatible``: the C numbers of its compatible_version list)."""
    return dict(
        driver_file=f"version/{file}",
        driver_version=version,
        driver_innerversion=innerversion,
        driver_compatible=tuple(f"V100R001C{c}" for c in compatible.split()),
        driver_compatible_fw=(fw,),
    )


def _toolkit(
    info: str, release: str, compiler: str, innerversion: str, compatible: str, **more: Any
) -> dict[str, Any]:
    """A toolkit at ascend-toolkit/latest whose install-info file is published (``info``, under
    tests/ascend_fixtures/version/), with the values the assertions need from it
    (``compatible``: its compatible_version entries, C numbers, "13-19" for a range)."""
    codes = tuple(",".join(f"V100R001C{c}" for c in entry.split("-")) for entry in compatible.split())
    return dict(
        layout="ascend-toolkit",
        cann_version=release,
        compiler_version=compiler,
        version_dir=release,
        toolkit_innerversion=innerversion,
        toolkit_compatible=codes,
        toolkit_info=f"version/{info}",
        **more,
    )


_PUBLISHED_DRIVER_24_1_RC2_2 = _driver(
    "driver_24.1.rc2.2_version.info",
    "24.1.rc2.2",
    "V100R001C18SPC001B233",
    "30 13 15 17 18",
    ("7.0.0", "7.2.99"),
)
_PUBLISHED_DRIVER_24_1_RC3 = _driver(
    "driver_24.1.rc3_version.info", "24.1.rc3", "V100R001C19SPC001B124", "13 15 17 18 19", ("7.0.0", "7.5.99")
)
_PUBLISHED_DRIVER_25_3 = _driver(
    "driver_25.3.rc1_doc_version.info",
    "25.3.rc1",
    "V100R001C23SPC002B212",
    "19 20 21 22 23",
    ("7.0.0", "8.9.9"),
)
_PUBLISHED_FIRMWARE_7_5 = dict(
    firmware_file="version/firmware_7.5.0.1.129_same_host_as_driver_24.1.rc3_version.info",
    firmware_version="7.5.0.1.129",
    firmware_compatible_drv=(("23.0.0", "23.0.0."), ("24.0", "24.0."), ("24.1", "24.1.")),
)
_TWO_910B = (Npu(0, "910B3", bus="0000:C1:00.0"), Npu(1, "910B3", bus="0000:C2:00.0"))
_EULER = ("openEuler", "22.03", "openEuler 22.03 (LTS-SP4)")
# Bus-Ids of the 16 cards of vllm-ascend#629 (npu-smi/910B2C/...), in NPU order.
_A2_BUSES = (
    "5A", "19", "49", "39", "DA", "99", "B8", "C8", "59", "18", "48", "38", "D9", "98", "B9", "C9",
)  # fmt: skip
# Bus-Ids of the 8 cards x 2 dies of vllm-ascend#5825 (npu-smi/A3/...), in table order.
_A3_BUSES = (
    ("9D", "9F"), ("99", "9B"), ("95", "97"), ("91", "93"),
    ("8D", "8F"), ("89", "8B"), ("85", "87"), ("81", "83"),
)  # fmt: skip

# The environment a toolkit's set_env.sh exports (the parts that choose a CANN), and the
# expectations that follow for a host with one toolkit at ascend-toolkit/latest.
_TOOLKIT_ENV = (
    ("ASCEND_TOOLKIT_HOME", "{ascend}/ascend-toolkit/latest"),
    ("ASCEND_HOME_PATH", "{ascend}/ascend-toolkit/latest"),
    ("LD_LIBRARY_PATH", "{ascend}/driver/lib64/driver:{ascend}/ascend-toolkit/latest/lib64"),
)
_ON_TOOLKIT = (
    ("ms20", "ascend-toolkit/latest", "lookup"),
    ("ms210", "ascend-toolkit/latest", "environment"),
    ("lite20", "ascend-toolkit/latest", "environment"),
    ("ms20-bare", "ascend-toolkit/latest", "lookup"),
    ("ms210-bare", "ascend-toolkit/latest", "inference"),
    ("lite20-bare", "ascend-toolkit/latest", "inference"),
)
# CANN 8.5 and 9.x: set_env.sh lives in cann-<release>/ and points everything there.
_CANN_ENV = (
    ("ASCEND_HOME_PATH", "{ascend}/cann/"),
    ("LD_LIBRARY_PATH", "{ascend}/cann/lib64:{ascend}/driver/lib64/driver"),
)
_ON_CANN = (
    ("ms20", "cann", "environment"),  # none of 2.0's paths: the loader takes cann/lib64
    ("ms210", "cann", "environment"),
    ("lite20", "cann", "environment"),
    ("ms20-bare", "cann", "inference"),  # nothing on any of its paths
    ("ms210-bare", "cann", "inference"),
    ("lite20-bare", "cann", "inference"),
)
_NOTHING = tuple((f + bare, None, "inference") for f in FRAMEWORKS for bare in ("", "-bare"))
_USER_HOME = "home/HwHiAiUser/Ascend"

SPECS: dict[str, TreeSpec] = {
    s.name: s
    for s in (
        TreeSpec(
            "consistent-8.2",
            "910B training host: CANN 8.2.RC1, driver 25.0.rc1.1, firmware 7.7.0.1.231 (a published set)",
            arch="aarch64",
            os_release=_EULER,
            layout="ascend-toolkit",
            cann_version="8.2.RC1",
            compiler_version="8.2.0.0.201",
            version_dir="8.2.RC1",
            toolkit_innerversion="V100R001C22SPC001B231",
            toolkit_compatible=_CODES_8_2,
            firmware_version="7.7.0.1.231",
            firmware_compatible_drv=(("23.0.0", "23.0.0."), ("24.1", "24.1."), ("25.0", "25.0.")),
            npus=_TWO_910B,
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
            **_DRIVER_25_0,
        ),
        TreeSpec(
            "cann-8.0.0",
            "CANN 8.0.0 (compiler Version 7.6.0.1.220) with driver 24.1.rc2: too old for MindSpore 2.10",
            layout="ascend-toolkit",
            cann_version="8.0.0",
            compiler_version="7.6.0.1.220",
            version_dir="8.0.0",
            toolkit_innerversion="V100R001C20SPC001B220",
            toolkit_compatible=("V100R001C15", "V100R001C17", "V100R001C18", "V100R001C19", "V100R001C20"),
            npus=_TWO_910B,
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
            **_DRIVER_24_1,
        ),
        TreeSpec(
            "driver-firmware-mismatch",
            "CANN 8.2.RC1 and driver 25.0.rc1.1 over firmware 6.3.0.1.241, which neither side accepts",
            arch="aarch64",
            os_release=_EULER,
            layout="ascend-toolkit",
            cann_version="8.2.RC1",
            compiler_version="8.2.0.0.201",
            version_dir="8.2.RC1",
            toolkit_innerversion="V100R001C22SPC001B231",
            toolkit_compatible=_CODES_8_2,
            firmware_version="6.3.0.1.241",
            firmware_compatible_drv=(("22.0", "22.0."), ("23.0.rc1", "23.0.rc1.")),
            npus=(Npu(0, "910B3", "Warning"), Npu(1, "910B3", "Alarm", bus="0000:C2:00.0")),
            board_compatibility="NOK",
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
            **_DRIVER_25_0,
        ),
        TreeSpec(
            "cann-8.5",
            "CANN 8.5.0 alone in the cann/<arch>-linux layout (none of MindSpore 2.0's paths), "
            "driver 25.3.rc1",
            layout="cann",
            cann_version="8.5.0",
            compiler_version="8.5.0.2.220",
            version_dir="8.5.0",
            toolkit_innerversion="V100R001C25SPC001B220",
            toolkit_compatible=("V100R001C21", "V100R001C22", "V100R001C23", "V100R001C25"),
            npus=_TWO_910B,
            set_env=_CANN_ENV,
            expect_cann=_ON_CANN,
            **_DRIVER_25_3,
        ),
        TreeSpec(
            "310p-nnrt",
            "310P inference host: nnrt 8.0.0 only (no toolkit), two Duo cards of two chips each",
            os_release=("ubuntu", "20.04", "Ubuntu 20.04.6 LTS"),
            nnrt_version="8.0.0",
            nnrt_innerversion="V100R001C20SPC001B220",
            kind="310P",
            npus=(
                Npu(1, "310P3", chips=(0, 1), bus="0000:01:00.0"),
                Npu(2, "310P3", "Warning", chips=(0, 1), bus="0000:02:00.0"),
            ),
            set_env=(("LD_LIBRARY_PATH", "{ascend}/nnrt/latest/lib64:{ascend}/driver/lib64/driver"),),
            expect_cann=(
                ("ms20", "nnrt/latest", "environment"),
                ("ms210", "nnrt/latest", "environment"),
                ("lite20", "nnrt/latest", "environment"),
                ("ms20-bare", None, "inference"),  # nnrt has no compiler MindSpore could check
                ("ms210-bare", None, "inference"),
                ("lite20-bare", "nnrt/latest", "inference"),
            ),
            **_DRIVER_24_1,
        ),
        TreeSpec(
            "cann-9.1-share-info",
            "CANN 9.1 beta with component files in share/info (no install-info file, no version_dir)",
            layout="share/info",
            cann_version="9.1.0-beta.1",
            compiler_version="9.1.0-beta.1",
            npus=_TWO_910B,
            set_env=_CANN_ENV,
            expect_cann=_ON_CANN,
            **_DRIVER_25_3,
        ),
        TreeSpec(
            "a3-8.2",
            "A3-class node: CANN 8.2.RC1, two Ascend910 cards of two dies each (Chip Phy-ID columns)",
            arch="aarch64",
            os_release=_EULER,
            layout="ascend-toolkit",
            cann_version="8.2.RC1",
            compiler_version="8.2.0.0.201",
            version_dir="8.2.RC1",
            toolkit_innerversion="V100R001C22SPC001B231",
            toolkit_compatible=_CODES_8_2,
            firmware_version="7.7.0.1.231",
            firmware_compatible_drv=(("24.1", "24.1."), ("25.0", "25.0.")),
            kind="A3",
            npus=(
                Npu(0, "Ascend910", chips=(0, 1), bus="0000:9D:00.0"),
                Npu(1, "Ascend910", chips=(0, 1), bus="0000:99:00.0"),
            ),
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
            **_DRIVER_25_0,
        ),
        TreeSpec(
            "310b-soc",
            "Atlas 200I DK A2 (310B1 SoC): published npu-smi 23.0.rc3 table (Bus-Id NA) and board "
            "(no Compatibility line, firmware 6.2.1.0); CANN 8.0.RC3 (published install info); a "
            "driver version.info with its Version only (no 310B file is published)",
            arch="aarch64",
            **_toolkit(
                "toolkit_8.0.RC3_ascend_toolkit_install.info",
                "8.0.RC3",
                "7.5.0.1.129",
                "V100R001C19SPC001B155",
                "13-19 30",
            ),
            driver_version="23.0.rc3",
            kind="310B",
            info_file="npu-smi/310B/info_23.0.rc3_310B1.txt",
            npus=(
                Npu(
                    0,
                    "310B1",
                    bus=None,
                    firmware="6.2.1.0",
                    compatibility="",
                    board_file="npu-smi/310B/info_t_board_23.0.rc3_dk_a2.txt",
                ),
            ),
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
        ),
        TreeSpec(
            "300i-pro",
            "Atlas 300I Pro inference server: two 310P3 cards of one chip each (no published table: "
            "the 310P format of npu-smi's source and nvtop#421), toolkit 8.0.0 and nnrt 8.0.0 side by "
            "side (published toolkit install info and version.cfg), driver 24.1.rc2.2 and firmware "
            "7.5.0.1.129 (published files)",
            arch="aarch64",
            **_toolkit(
                "toolkit_8.0.0_ascend_toolkit_install.info",
                "8.0.0",
                "7.6.0.1.220",
                "V100R001C20SPC001B251",
                "15 17 18 19 20",
                toolkit_cfg="version/toolkit_8.0.0_version.cfg",
            ),
            nnrt_version="8.0.0",
            nnrt_innerversion="V100R001C20SPC001B251",
            kind="310P",
            npus=(Npu(0, "310P3", bus="0000:01:00.0"), Npu(1, "310P3", bus="0000:81:00.0")),
            set_env=_TOOLKIT_ENV,
            expect_cann=(
                *_ON_TOOLKIT[:5],
                ("lite20-bare", "nnrt/latest", "inference"),  # Lite: nnrt, probably; LD names none
            ),
            **_PUBLISHED_DRIVER_24_1_RC2_2,
            **_PUBLISHED_FIRMWARE_7_5,
        ),
        TreeSpec(
            "a2-failing-card",
            "Atlas A2 box, 16 x 910B2C (published npu-smi 24.1.rc2.2 table, vllm-ascend#629) whose "
            "NPU 9 does not answer its board query; CANN 8.1.RC1 (published install info and version.cfg "
            "of that host), driver 24.1.rc2.2 (published); the firmware package on disk is 7.5.0.1.129 "
            "(published, 24.1.rc3's) while the cards still run 7.3.0.1.231 (upgraded without a reboot)",
            **_toolkit(
                "toolkit_8.1.RC1_B212_ascend_toolkit_install.info",
                "8.1.RC1",
                "7.7.T20.0.B210",
                "V100R001C21SPC001B212",
                "15 18 19 20 21",
                toolkit_cfg="version/toolkit_8.1.RC1_version.cfg_fragment_two_installs",
            ),
            info_file="npu-smi/910B2C/info_24.1.rc2.2_16x_vllm-ascend629.txt",
            npus=tuple(
                Npu(i, "910B2C", bus=f"0000:{bus}:00.0", firmware="7.3.0.1.231", board_fails=i == 9)
                for i, bus in enumerate(_A2_BUSES)
            ),
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
            **_PUBLISHED_DRIVER_24_1_RC2_2,
            **_PUBLISHED_FIRMWARE_7_5,
        ),
        TreeSpec(
            "toolkits-side-by-side",
            "three toolkits under ascend-toolkit/ (8.0.RC3, 8.0.0, 8.2.RC1: published install-info "
            "files) with latest -> 8.2.RC1; driver 24.1.rc3 and firmware 7.5.0.1.129 of one host",
            arch="aarch64",
            **_toolkit(
                "toolkit_8.2.RC1_ascend_toolkit_install.info",
                "8.2.RC1",
                "8.2.0.0.201",
                "V100R001C22SPC001B231",
                "15 18 19 20 21 23",
            ),
            beside=(
                Release("8.0.RC3", "7.5.0.1.129", "version/toolkit_8.0.RC3_ascend_toolkit_install.info"),
                Release(
                    "8.0.0",
                    "7.6.0.1.220",
                    "version/toolkit_8.0.0_ascend_toolkit_install.info",
                    "version/toolkit_8.0.0_version.cfg",
                ),
            ),
            npus=(
                Npu(0, "910B3", bus="0000:C1:00.0", firmware="7.5.0.1.129"),
                Npu(1, "910B3", bus="0000:C2:00.0", firmware="7.5.0.1.129"),
            ),
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
            **_PUBLISHED_DRIVER_24_1_RC3,
            **_PUBLISHED_FIRMWARE_7_5,
        ),
        TreeSpec(
            "home-nondefault",
            "A3 node (published npu-smi 25.3.rc1 table, vllm-ascend#5825; driver 25.3.rc1, published) "
            "whose CANN 8.5.0 a user installed in ~HwHiAiUser/Ascend: ASCEND_HOME_PATH points there, "
            "nothing CANN under /usr/local/Ascend (published 8.5.0 install info and opp version.info)",
            arch="aarch64",
            os_release=_EULER,
            cann_version="8.5.0",
            compiler_version="8.5.0.2.220",
            version_dir="8.5.0",
            toolkit_innerversion="V100R001C25SPC001B212",
            toolkit_info="version/toolkit_8.5.0_cann_aarch64-linux_ascend_toolkit_install.info",
            user_home=_USER_HOME,
            kind="A3",
            info_file="npu-smi/A3/info_25.3.rc1_8cards_16dies_procs_vllm-ascend5825.txt",
            npus=tuple(
                Npu(
                    i,
                    "Ascend910",
                    chips=(0, 1),
                    bus=f"0000:{buses[0]}:00.0",
                    chip_buses=tuple(f"0000:{b}:00.0" for b in buses),
                    firmware="7.8.0.2.212",
                )
                for i, buses in enumerate(_A3_BUSES)
            ),
            set_env=(
                ("ASCEND_HOME_PATH", "{top}/" + _USER_HOME + "/cann-8.5.0/"),
                ("LD_LIBRARY_PATH", "{ascend}/driver/lib64/driver:{top}/" + _USER_HOME + "/cann-8.5.0/lib64"),
            ),
            expect_cann=(
                ("ms20", "{top}/" + _USER_HOME + "/cann-8.5.0", "environment"),
                ("ms210", "{top}/" + _USER_HOME + "/cann-8.5.0", "environment"),
                ("lite20", "{top}/" + _USER_HOME + "/cann-8.5.0", "environment"),
                ("ms20-bare", None, "inference"),
                ("ms210-bare", None, "inference"),
                ("lite20-bare", None, "inference"),
            ),
            **_PUBLISHED_DRIVER_25_3,
        ),
        TreeSpec(
            "mixed-latest",
            "MindIE image: ascend-toolkit/latest/ is a directory of per-component links to "
            "../8.2.RC2/ while its version.cfg still says 8.0.T63 (published listing and version.cfg)",
            arch="aarch64",
            layout="ascend-toolkit",
            cann_version="8.2.RC2",
            compiler_version="8.2.0.2.220",
            version_dir="8.2.RC2",
            toolkit_cfg="version/mixed_latest_mindie/latest_version.cfg",
            mixed_latest=True,
            npus=_TWO_910B,
            set_env=_TOOLKIT_ENV,
            expect_cann=_ON_TOOLKIT,
            **_DRIVER_25_0,
            firmware_version="7.7.0.1.231",
            firmware_compatible_drv=(("24.1", "24.1."), ("25.0", "25.0.")),
        ),
        TreeSpec("empty", "a host with nothing Ascend installed and no npu-smi", expect_cann=_NOTHING),
    )
}
TREE_NAMES = tuple(SPECS)


@dataclass(frozen=True)
class AscendTree:
    name: str
    spec: TreeSpec
    ascend_root: Path
    system_root: Path
    npu_smi: Path
    top: Path = field(default=Path("/"))

    def context(self, timeout: float = 5.0, environ: dict[str, str] | None = None) -> dict[str, Any]:
        """A collector context for this tree (environment: only PATH, unless given)."""
        return {
            "ascend_root": str(self.ascend_root),
            "system_root": str(self.system_root),
            "npu_smi": str(self.npu_smi),
            "timeout": timeout,
            "environ": {"PATH": os.environ.get("PATH", os.defpath)} if environ is None else dict(environ),
        }

    def set_env(self) -> dict[str, str]:
        """PATH and what the installed packages' set_env.sh would add to a stack's environment."""
        values = {k: v.format(ascend=self.ascend_root, top=self.top) for k, v in self.spec.set_env}
        return {"PATH": os.environ.get("PATH", os.defpath), **values}

    def stack_options(self, timeout: float = 5.0) -> dict[str, Any]:
        """The keys to put in a ``[stacks.X]`` table so a stack is fingerprinted against this tree."""
        return {
            "ascend_root": str(self.ascend_root),
            "system_root": str(self.system_root),
            "npu_smi": str(self.npu_smi),
            "npu_smi_timeout": timeout,
        }

    def expected_cann(self, framework: str) -> tuple[str | None, str]:
        return self.spec.expected_cann(framework, self.top)

    @property
    def hang_pid_file(self) -> Path:
        return self.npu_smi.parent / HANG_PID_FILE


def build_tree(base: Path, name: str, npu_smi_mode: str = "normal") -> AscendTree:
    """Write the tree ``name`` (one of TREE_NAMES) under ``base/name`` and return where it is."""
    if name not in SPECS:
        raise ValueError(f"unknown Ascend tree {name!r} (known: {', '.join(TREE_NAMES)})")
    if npu_smi_mode not in NPU_SMI_MODES:
        raise ValueError(f"unknown npu-smi mode {npu_smi_mode!r} (known: {', '.join(NPU_SMI_MODES)})")
    spec = SPECS[name]
    top = Path(base) / name
    ascend, system, bindir = top / "Ascend", top / "root", top / "bin"
    for d in (ascend, system / "etc", bindir):
        d.mkdir(parents=True, exist_ok=True)
    tree = AscendTree(name, spec, ascend, system, bindir / "npu-smi", top)
    _write_os_release(system, spec)
    # systemd's machine id: one per tree, so trees look like different machines.
    write(system / "etc" / "machine-id", hashlib.md5(name.encode()).hexdigest() + "\n")  # noqa: S324
    if spec.mixed_latest:
        _write_mixed_latest(ascend, system, spec)
    elif spec.layout is not None:
        _write_toolkit(ascend, system, spec)
    elif spec.user_home is not None:
        _write_toolkit(top / spec.user_home, system, spec, layout="cann")
    for release in spec.beside:
        _write_release(ascend, spec, release)
    if spec.nnrt_version is not None:
        _write_nnrt(ascend, system, spec)
    if spec.driver_version is not None:
        _write_driver(ascend, system, spec)
    if spec.firmware_version is not None:
        _write_firmware(ascend, spec)
    if spec.npus:
        write_npu_smi(tree.npu_smi, spec, npu_smi_mode)
    return tree


# -- files -----------------------------------------------------------------------------------
def write(path: Path, text: str | bytes, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def _kv(**values: str | None) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items() if v is not None)


def _codes(codes: tuple[str, ...]) -> str:
    return ",".join(f"[{c}]" for c in codes)


def _ranges(ranges: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"[{a},{b}]" for a, b in ranges)


def _link(link: Path, target: str) -> None:
    """``link`` -> ``target`` (relative), as the installers make ``latest``."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def _write_os_release(system: Path, spec: TreeSpec) -> None:
    os_id, version_id, pretty = spec.os_release
    write(
        system / "etc" / "os-release",
        f'NAME="{pretty.split()[0]}"\nVERSION="{version_id}"\nID="{os_id}"\n'
        f'VERSION_ID="{version_id}"\nPRETTY_NAME="{pretty}"\nHOME_URL="https://example.org/"\n',
    )


def _component(version: str | None, version_dir: str | None, stamp: str, **extra: str) -> str:
    return _kv(Version=version, version_dir=version_dir, timestamp=stamp, **extra)


def _write_libraries(real: Path, arch: str) -> None:
    """``<arch>-linux/lib64/libascendcl.so`` (what the loader looks for) and the ``lib64`` link."""
    write(real / f"{arch}-linux" / "lib64" / "libascendcl.so", b"\x7fELF fixture, not a library\n")
    if not (real / "lib64").exists():
        _link(real / "lib64", f"{arch}-linux/lib64")


def _components(spec: TreeSpec, compiler: str, version_dir: str | None) -> dict[str, str]:
    stamp = "20250620_000000000"
    return {
        "compiler": _component(compiler, version_dir, stamp),
        "runtime": _component(
            compiler,
            version_dir,
            stamp,
            required_package_compiler_version='"{}"'.format(".".join(compiler.split(".")[:2])),
        ),
        "opp": _component(compiler, version_dir, stamp),
        "toolkit": _component(compiler, version_dir, stamp),
    }


def _version_cfg(components: dict[str, str], compiler: str, release: str) -> str:
    pair = f"[{compiler}:{release}]"
    return "# version: 1.0\n" + "".join(
        f"{c}_{kind}_version={pair}\n" for c in components for kind in ("running", "upgrade", "installed")
    )


def _write_toolkit(ascend: Path, system: Path, spec: TreeSpec, layout: str | None = None) -> None:
    layout = layout or spec.layout
    if layout == "ascend-toolkit":
        real = ascend / "ascend-toolkit" / spec.cann_version
        _link(ascend / "ascend-toolkit" / "latest", spec.cann_version)
        install_dir = "/usr/local/Ascend/ascend-toolkit"
        write(
            ascend / "ascend-toolkit" / "set_env.sh",
            "export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest\n"
            "export ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}\n",
        )
    else:
        real = ascend / f"cann-{spec.cann_version}"
        _link(ascend / "cann", real.name)
        install_dir = "/usr/local/Ascend/cann"
    real.mkdir(parents=True, exist_ok=True)
    base = real / "share" / "info" if layout == "share/info" else real
    components = _components(spec, spec.compiler_version, spec.version_dir)
    if spec.user_home is not None:
        # the one published component file of CANN 8.5.0 (PyPTO FAQ)
        components["opp"] = fixture("version/toolkit_8.5.0_opp_version.info")
    for component, text in components.items():
        write(base / component / "version.info", text)
    _write_libraries(real, spec.arch)
    if layout == "share/info":
        return
    write(
        real / "version.cfg",
        fixture(spec.toolkit_cfg)
        if spec.toolkit_cfg
        else _version_cfg(components, spec.compiler_version, spec.cann_version),
    )
    write(
        real / f"{spec.arch}-linux" / "ascend_toolkit_install.info",
        fixture(spec.toolkit_info)
        if spec.toolkit_info
        else _kv(
            package_name="Ascend-cann-toolkit",
            version=spec.cann_version,
            innerversion=spec.toolkit_innerversion,
            compatible_version=_codes(spec.toolkit_compatible),
            arch=spec.arch,
            os="linux",
            path=f"{install_dir}/{spec.cann_version}/{spec.arch}-linux",
        ),
    )
    write(system / "etc" / "Ascend" / "ascend_cann_install.info", _kv(Install_Path=install_dir))


def _write_release(ascend: Path, spec: TreeSpec, release: Release) -> None:
    """One more release under ascend-toolkit/, as its installer leaves it (latest untouched)."""
    real = ascend / "ascend-toolkit" / release.version
    components = _components(spec, release.compiler, release.version)
    for component, text in components.items():
        write(real / component / "version.info", text)
    _write_libraries(real, spec.arch)
    write(
        real / "version.cfg",
        fixture(release.version_cfg)
        if release.version_cfg
        else _version_cfg(components, release.compiler, release.version),
    )
    write(real / f"{spec.arch}-linux" / "ascend_toolkit_install.info", fixture(release.install_info))


def _write_mixed_latest(ascend: Path, system: Path, spec: TreeSpec) -> None:
    """The MindIE image's layout (npu-smi/../version/mixed_latest_mindie/ll_ascend-toolkit_latest.txt):
    the release in ascend-toolkit/8.2.RC2/, and latest/ a real directory whose components are
    links into it, whose <arch>-linux/ is a directory, and whose version.cfg is stale."""
    toolkit = ascend / "ascend-toolkit"
    real = toolkit / spec.cann_version
    components = _components(spec, spec.compiler_version, spec.version_dir)
    for component, text in components.items():
        write(real / component / "version.info", text)
    _write_libraries(real, spec.arch)
    latest = toolkit / "latest"
    for component in components:
        _link(latest / component, f"../{spec.cann_version}/{component}")
    _link(latest / f"{spec.arch}-linux" / "lib64", f"../../{spec.cann_version}/{spec.arch}-linux/lib64")
    _link(latest / "lib64", f"{spec.arch}-linux/lib64")
    write(latest / "version.cfg", fixture(spec.toolkit_cfg))
    write(system / "etc" / "Ascend" / "ascend_cann_install.info", _kv(Install_Path=str(toolkit)))


def _write_nnrt(ascend: Path, system: Path, spec: TreeSpec) -> None:
    real = ascend / "nnrt" / spec.nnrt_version
    write(
        real / f"{spec.arch}-linux" / "ascend_nnrt_install.info",
        _kv(
            package_name="Ascend-cann-nnrt",
            version=spec.nnrt_version,
            innerversion=spec.nnrt_innerversion,
            compatible_version=_codes(("V100R001C15", "V100R001C17", "V100R001C18", "V100R001C19")),
            arch=spec.arch,
            os="linux",
            path=f"/usr/local/Ascend/nnrt/{spec.nnrt_version}/{spec.arch}-linux",
        ),
    )
    _write_libraries(real, spec.arch)
    _link(ascend / "nnrt" / "latest", spec.nnrt_version)
    registry = system / "etc" / "Ascend" / "ascend_cann_install.info"
    if not registry.exists():
        write(registry, _kv(Install_Path="/usr/local/Ascend/nnrt"))


def _write_driver(ascend: Path, system: Path, spec: TreeSpec) -> None:
    if spec.driver_file:
        text = fixture(spec.driver_file)
    elif spec.driver_innerversion is None:
        text = _kv(Version=spec.driver_version)  # what is known of a driver whose file is not published
    else:
        text = _kv(
            Version=spec.driver_version,
            ascendhal_version="7.35.23",
            aicpu_version="1.0",
            tdt_version="1.0",
            log_version="1.0",
            prof_version="2.0",
            dvppkernels_version="1.1",
            tsfw_version="1.0",
            Innerversion=spec.driver_innerversion,
            compatible_version=_codes(spec.driver_compatible),
            compatible_version_fw=_ranges(spec.driver_compatible_fw),
            package_version=spec.driver_version,
        )
    write(ascend / "driver" / "version.info", text)
    write(
        system / "etc" / "ascend_install.info",
        _kv(
            UserName="HwHiAiUser",
            UserGroup="HwHiAiUser",
            Firmware_Install_Type="full",
            Firmware_Install_Path_Param="/usr/local/Ascend",
            Driver_Install_Type="full",
            Driver_Install_Path_Param="/usr/local/Ascend",
            Driver_Install_For_All="no",
            Driver_Install_Mode="normal",
            Driver_Install_Status="complete",
        ),
    )


def _write_firmware(ascend: Path, spec: TreeSpec) -> None:
    write(
        ascend / "firmware" / "version.info",
        fixture(spec.firmware_file)
        if spec.firmware_file
        else _kv(
            Version=spec.firmware_version,
            firmware_version="1.0",
            package_version=spec.firmware_version,
            compatible_version_drv=_ranges(spec.firmware_compatible_drv),
        ),
    )


# -- npu-smi ---------------------------------------------------------------------------------
def info_table(spec: TreeSpec) -> str:
    """``npu-smi info`` for the tree's NPUs: the published table when the tree has one, else in
    the tool's format (volatile columns made up)."""
    if spec.info_file:
        return fixture(spec.info_file)
    driver = spec.driver_version or "NA"
    if spec.kind == "A3":
        w = (27, 15, 52)
        heads = (
            ("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
            ("Chip  Phy-ID", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        )
    elif spec.kind in ("310P", "310B"):
        w = (31, 17, 54)
        heads = (
            ("NPU     Name", "Health", "Power(W)     Temp(C)           Hugepages-Usage(page)"),
            ("Chip    Device", "Bus-Id", "AICore(%)    Memory-Usage(MB)"),
        )
    else:
        w = (27, 15, 52)
        heads = (
            ("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
            ("Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        )
    width = sum(w) + 2

    def line(*cells: str) -> str:
        return "|" + "|".join(f" {c:<{n - 1}}" for c, n in zip(cells, w, strict=True)) + "|"

    dash = "+" + "+".join("-" * n for n in w) + "+"
    equal = "+" + "+".join("=" * n for n in w) + "+"
    out = [
        "+" + "-" * width + "+",
        f"| {'npu-smi ' + driver:<32} {'Version: ' + driver:<{width - 34}}|",
        dash,
        line(*heads[0]),
        line(*heads[1]),
        equal,
    ]
    phy = 0
    for n in spec.npus:
        # A card of several chips (300I Duo) or dies (A3) repeats its NPU row before each
        # chip's row, parted by a dashed line (nvtop#421, vllm-ascend#2534 show real tables).
        for i, c in enumerate(n.chips):
            if i:
                out.append("+" + "-" * width + "+" if spec.kind == "A3" else dash)
            bus = (n.chip_buses[c] if n.chip_buses else n.bus) or "NA"
            if spec.kind in ("310P", "310B"):
                out.append(line(f"{n.npu:<7} {n.name}", n.health, "NA           49                0    / 0"))
                out.append(line(f"{c:<7} {c}", bus, "0            1685 / 44280"))
            elif spec.kind == "A3":
                power = "166.5" if i == 0 else "-"
                out.append(line(f"{n.npu:<5} {n.name}", n.health, f"{power:<11} 38                0    / 0"))
                out.append(line(f"{c:<5} {phy}", bus, "0           0    / 0          3131 / 65536"))
            else:
                out.append(line(f"{n.npu:<5} {n.name}", n.health, "94.3        53                0    / 0"))
                out.append(line(f"{c}", bus, "0           0    / 0          4487 / 65536"))
            phy += 1
        out.append(equal)
    out += [
        dash,
        line("NPU     Chip", "Process id", "Process name             | Process memory(MB)"),
        equal,
    ]
    first = spec.npus[0]
    out.append(line(f"{first.npu:<7} {first.chips[0]}", "23451", "python3.7                | 157"))
    for n in spec.npus[1:]:
        out.append(f"| {f'No running processes found in NPU {n.npu}':<{width - 1}}|")
    out.append(equal)
    return "\n".join(out) + "\n"


def board_view(spec: TreeSpec, npu: Npu) -> str:
    """``npu-smi info -t board -i N``: the published output when the NPU has one, else the
    fields ``print_ascend_board_info`` prints for this product (TAB, key padded to 30, " : "),
    with the published IT21HMDC board as the model of the values."""
    if npu.board_file:
        return fixture(npu.board_file)
    facts = spec.board_facts(npu) or {}
    rows = [("NPU ID", str(npu.npu))]
    if spec.kind in ("910B", "A3"):
        rows += [
            ("Product Name", "IT21HMDC_Bin5" if spec.kind == "910B" else "NA"),
            ("Model", "NA"),
            ("Manufacturer", "Huawei"),
            ("Serial Number", f"1025C9{npu.npu * 7919:06d}"),
        ]
    rows += [
        ("Software Version", facts.get("software_version") or "NA"),
        ("Firmware Version", facts.get("firmware_version") or "NA"),
    ]
    if facts.get("compatibility"):
        rows.append(("Compatibility", facts["compatibility"]))
    rows += [("Board ID", "0x60"), ("PCB ID", "A"), ("BOM ID", "1")]
    if npu.bus:
        rows += [
            ("PCIe Bus Info", npu.bus),
            ("Slot ID", str(npu.npu)),
            ("Class ID", "NA"),
            ("PCI Vendor ID", "0x19E5"),
            ("PCI Device ID", "0xD500" if spec.kind == "310P" else "0xD802"),
            ("Subsystem Vendor ID", "0x19E5"),
            ("Subsystem Device ID", "0x3003"),
        ]
    rows.append(("Chip Count", str(len(npu.chips))))
    return "".join(f"\t{k:<30} : {v}\n" for k, v in rows)


def chip_map(spec: TreeSpec) -> str:
    """``npu-smi info -m`` in the columns of npu_info_print.c: A3-class systems add ``Chip
    Phy-ID`` before ``Chip Name`` and print the name alone; others print "Ascend <name>"."""
    a3 = spec.kind == "A3"
    heads = ("NPU ID", "Chip ID", "Chip Logic ID") + (("Chip Phy-ID",) if a3 else ()) + ("Chip Name",)
    out = ["\t" + " ".join(f"{h:<30}" for h in heads)]
    logic = 0
    for n in spec.npus:
        for c in n.chips:
            ids = (str(n.npu), str(c), str(logic)) + ((str(logic),) if a3 else ())
            name = n.name if a3 else f"Ascend {n.name}"
            out.append("\t" + " ".join(f"{v:<30}" for v in ids) + " " + name)
            logic += 1
        mcu = (str(n.npu), str(len(n.chips)), "-") + (("-",) if a3 else ())
        out.append("\t" + " ".join(f"{v:<30}" for v in mcu) + " Mcu")
    return "\n".join(line.rstrip() for line in out) + "\n"


def _view(args: str, text: str, status: int = 0) -> str:
    return f"  \"{args}\") cat <<'EOF_VIEW'\n{text}EOF_VIEW\n  exit {status} ;;\n"


def _failing(message: str, code: int) -> str:
    """A script body that fails the way npu-smi does: message on stdout, status code & 0xFF."""
    return f"echo {shlex.quote(message)}\nexit {exit_status(code)}\n"


def write_npu_smi(path: Path, spec: TreeSpec, mode: str = "normal") -> Path:
    """A fake npu-smi for ``spec``: an executable shell script answering the views."""
    q = shlex.quote
    if mode == "hang":
        # Like a driver call that never returns, with a child holding the pipes open: only
        # killing the whole process group ends it.
        body = f"sleep 3600 &\necho $! > {q(str(path.parent / HANG_PID_FILE))}\nwait\n"
    elif mode == "garbage":
        body = "printf '\\377\\376\\001\\002 dcmi \\033[0m \\201\\202\\n'\nexit 0\n"
    elif mode == "error":
        body = _failing(fixture("npu-smi/errors/dcmi_device_used_-8020.stdout").strip(), DEVICE_USED)
    elif mode == "init-failed":
        body = _failing(fixture("npu-smi/errors/dcmi_init_failed_-8005.stdout").strip(), INNER_ERROR)
    else:
        cases = [_view("info", info_table(spec))]
        for n in spec.npus:
            if n.board_fails:
                text = "Failed to query board version info.\n"
                cases.append(_view(f"info -t board -i {n.npu}", text, exit_status(NPU_TIME_OUT)))
            else:
                cases.append(_view(f"info -t board -i {n.npu}", board_view(spec, n)))
        cases.append(_view("info -m", chip_map(spec)))
        cases.append('  *) echo "Command or option is not found."\n     exit 1 ;;\n')
        body = 'case "$*" in\n' + "".join(cases) + "esac\n"
    write(path, f"#!/bin/sh\n# fake npu-smi: {spec.name} tree, mode {mode}\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# -- several CANN packages side by side ------------------------------------------------------
PACKAGE_DIRS = {
    # name: (directory under ascend_root holding <release>/ and latest, install-info file, package_name)
    "nnae": ("nnae", "ascend_nnae_install.info", "Ascend-cann-nnae"),
    "ascend-toolkit": ("ascend-toolkit", "ascend_toolkit_install.info", "Ascend-cann-toolkit"),
    "nnrt": ("nnrt", "ascend_nnrt_install.info", "Ascend-cann-nnrt"),
}


def write_package(
    ascend: Path,
    name: str,
    release: str,
    compiler: str | None,
    arch: str = "x86_64",
    compiler_text: str | bytes | None = None,
    libraries: bool = True,
    innerversion: str = "V100R001C20SPC001B220",
) -> Path:
    """Install one CANN package the way its installer lays it out: ``<dir>/<release>/`` with a
    ``latest`` link, ``<arch>-linux/<install-info>`` naming the release, ``lib64`` with
    ``libascendcl.so`` and, for the packages that carry the compiler (toolkit, nnae; nnrt has
    none), ``compiler/version.info`` (``compiler_text`` replaces its content, for files as
    found on real hosts). Returns the package's ``latest`` directory."""
    directory, info, package_name = PACKAGE_DIRS[name]
    real = ascend / directory / release
    write(
        real / f"{arch}-linux" / info,
        _kv(
            package_name=package_name,
            version=release,
            innerversion=innerversion,
            arch=arch,
            os="linux",
            path=f"/usr/local/Ascend/{directory}/{release}/{arch}-linux",
        ),
    )
    if libraries:
        _write_libraries(real, arch)
    if compiler is not None or compiler_text is not None:
        text = (
            compiler_text
            if compiler_text is not None
            else _component(compiler, release, "20240101_000000000")
        )
        write(real / "compiler" / "version.info", text.encode("utf-8") if isinstance(text, str) else text)
    latest = ascend / directory / "latest"
    if not latest.exists():
        _link(latest, release)
    return latest
