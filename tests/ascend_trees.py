"""Realistic Ascend host trees for tests, written from the formats in shared FACTS.md §3.

    tree = build_tree(tmp_path, "consistent-8.2")
    tree.ascend_root, tree.system_root, tree.npu_smi   # Paths
    tree.context(timeout=2.0)                            # a collector context
    tree.stack_options()                                 # keys for a [stacks.X] table
    tree.spec                                            # what was written (TreeSpec)

Each tree is ``<base>/<name>/``: ``Ascend/`` (the ascend_root: toolkit / cann / nnrt with
``latest`` links the way the installers make them, ``driver/``, ``firmware/``), ``root/``
(the system_root: ``etc/os-release``, ``etc/ascend_install.info``,
``etc/Ascend/ascend_cann_install.info``) and ``bin/npu-smi``, a shell script that prints the
``info`` table, the board view and the ``-m`` view of the tree's NPUs. ``npu_smi_mode``
makes it hang (sleeps, with a child process, until killed), print garbage, or fail.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NPU_SMI_MODES = ("normal", "hang", "garbage", "error")
HANG_PID_FILE = "npu-smi.child-pid"  # the hanging script's sleeping child writes its pid here


@dataclass(frozen=True)
class Npu:
    npu: int
    name: str  # as npu-smi prints it: "910B3", "310P3"
    health: str = "OK"
    chips: tuple[int, ...] = (0,)
    bus: str = "0000:C1:00.0"


@dataclass(frozen=True)
class TreeSpec:
    """Everything a tree holds; tests compare the collectors' answers with these values."""

    name: str
    description: str
    arch: str = "x86_64"
    os_release: tuple[str, str, str] = ("ubuntu", "22.04", "Ubuntu 22.04.4 LTS")
    # CANN toolkit: layout None = no toolkit at all
    layout: str | None = None
    cann_version: str | None = None  # the release, e.g. 8.2.RC1
    compiler_version: str | None = None  # Version= of compiler/version.info
    version_dir: str | None = None  # version_dir= of the components (absent in 9.x files)
    toolkit_innerversion: str | None = None
    toolkit_compatible: tuple[str, ...] = ()  # compatible_version entries; "A,B" is a range
    nnrt_version: str | None = None
    nnrt_innerversion: str | None = None
    # driver and firmware: None = not installed
    driver_version: str | None = None
    driver_innerversion: str | None = None
    driver_compatible: tuple[str, ...] = ()
    driver_compatible_fw: tuple[tuple[str, str], ...] = ()
    firmware_version: str | None = None
    firmware_compatible_drv: tuple[tuple[str, str], ...] = ()
    # npu-smi
    kind: str = "910B"  # table layout: "910B", "310P" (Chip  Device) or "A3" (Chip  Phy-ID)
    npus: tuple[Npu, ...] = ()
    board_compatibility: str = "OK"

    @property
    def chips(self) -> list[dict[str, Any]]:
        """The chips the npu_smi collector should report, in its format."""
        out = []
        for n in self.npus:
            for c in n.chips:
                entry: dict[str, Any] = {"npu": n.npu, "chip": c, "name": n.name, "health": n.health}
                if self.kind == "310P":
                    entry["device"] = c
                elif self.kind == "A3":
                    entry["phy_id"] = len(out)
                out.append(entry)
        return out


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
_TWO_910B = (Npu(0, "910B3", bus="0000:C1:00.0"), Npu(1, "910B3", bus="0000:C2:00.0"))
_EULER = ("openEuler", "22.03", "openEuler 22.03 (LTS-SP4)")

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
            **_DRIVER_25_0,
        ),
        TreeSpec(
            "cann-8.5",
            "CANN 8.5.0 in the cann/<arch>-linux layout, driver 25.3.rc1",
            layout="cann",
            cann_version="8.5.0",
            compiler_version="8.5.0.2.220",
            version_dir="8.5.0",
            toolkit_innerversion="V100R001C25SPC001B220",
            toolkit_compatible=("V100R001C21", "V100R001C22", "V100R001C23", "V100R001C25"),
            npus=_TWO_910B,
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
            **_DRIVER_24_1,
        ),
        TreeSpec(
            "cann-9.1-share-info",
            "CANN 9.1 beta with component files in share/info (no install-info file, no version_dir)",
            layout="share/info",
            cann_version="9.1.0-beta.1",
            compiler_version="9.1.0-beta.1",
            npus=_TWO_910B,
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
            **_DRIVER_25_0,
        ),
        TreeSpec("empty", "a host with nothing Ascend installed and no npu-smi"),
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

    def context(self, timeout: float = 5.0, environ: dict[str, str] | None = None) -> dict[str, Any]:
        """A collector context for this tree (environment: only PATH, unless given)."""
        return {
            "ascend_root": str(self.ascend_root),
            "system_root": str(self.system_root),
            "npu_smi": str(self.npu_smi),
            "timeout": timeout,
            "environ": {"PATH": os.environ.get("PATH", os.defpath)} if environ is None else dict(environ),
        }

    def stack_options(self, timeout: float = 5.0) -> dict[str, Any]:
        """The keys to put in a ``[stacks.X]`` table so a stack is fingerprinted against this tree."""
        return {
            "ascend_root": str(self.ascend_root),
            "system_root": str(self.system_root),
            "npu_smi": str(self.npu_smi),
            "npu_smi_timeout": timeout,
        }

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
    tree = AscendTree(name, spec, ascend, system, bindir / "npu-smi")
    _write_os_release(system, spec)
    # systemd's machine id: one per tree, so trees look like different machines.
    write(system / "etc" / "machine-id", hashlib.md5(name.encode()).hexdigest() + "\n")  # noqa: S324
    if spec.layout is not None:
        _write_toolkit(ascend, system, spec)
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


def _write_toolkit(ascend: Path, system: Path, spec: TreeSpec) -> None:
    if spec.layout == "ascend-toolkit":
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
    stamp = "20250620_000000000"
    base = real / "share" / "info" if spec.layout == "share/info" else real
    components = {
        "compiler": _component(spec.compiler_version, spec.version_dir, stamp),
        "runtime": _component(
            spec.compiler_version,
            spec.version_dir,
            stamp,
            required_package_compiler_version='"{}"'.format(".".join(spec.compiler_version.split(".")[:2])),
        ),
        "opp": _component(spec.compiler_version, spec.version_dir, stamp),
        "toolkit": _component(spec.compiler_version, spec.version_dir, stamp),
    }
    for component, text in components.items():
        write(base / component / "version.info", text)
    if spec.layout == "share/info":
        return
    pair = f"[{spec.compiler_version}:{spec.cann_version}]"
    write(
        real / "version.cfg",
        "# version: 1.0\n"
        + "".join(
            f"{c}_{kind}_version={pair}\n" for c in components for kind in ("running", "upgrade", "installed")
        ),
    )
    write(
        real / f"{spec.arch}-linux" / "ascend_toolkit_install.info",
        _kv(
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
    _link(ascend / "nnrt" / "latest", spec.nnrt_version)
    write(system / "etc" / "Ascend" / "ascend_cann_install.info", _kv(Install_Path="/usr/local/Ascend/nnrt"))


def _write_driver(ascend: Path, system: Path, spec: TreeSpec) -> None:
    write(
        ascend / "driver" / "version.info",
        _kv(
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
        ),
    )
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
        _kv(
            Version=spec.firmware_version,
            firmware_version="1.0",
            package_version=spec.firmware_version,
            compatible_version_drv=_ranges(spec.firmware_compatible_drv),
        ),
    )


# -- npu-smi ---------------------------------------------------------------------------------
def info_table(spec: TreeSpec) -> str:
    """``npu-smi info`` as the tool prints it for the tree's NPUs (volatile columns made up)."""
    driver = spec.driver_version or "NA"
    if spec.kind == "A3":
        w = (27, 15, 52)
        heads = (
            ("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
            ("Chip  Phy-ID", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        )
    elif spec.kind == "310P":
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
            if spec.kind == "310P":
                out.append(line(f"{n.npu:<7} {n.name}", n.health, "NA           49                0    / 0"))
                out.append(line(f"{c:<7} {c}", n.bus, "0            1685 / 44280"))
            elif spec.kind == "A3":
                power = "166.5" if i == 0 else "-"
                out.append(line(f"{n.npu:<5} {n.name}", n.health, f"{power:<11} 38                0    / 0"))
                out.append(line(f"{c:<5} {phy}", n.bus, "0           0    / 0          3131 / 65536"))
            else:
                out.append(line(f"{n.npu:<5} {n.name}", n.health, "94.3        53                0    / 0"))
                out.append(line(f"{c}", n.bus, "0           0    / 0          4487 / 65536"))
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
    rows = [
        ("NPU ID", str(npu.npu)),
        ("Product Name", ""),
        ("Model", "NA"),
        ("Manufacturer", "Huawei"),
        ("Serial Number", f"102369{npu.npu * 7919:06d}"),
        ("Software Version", spec.driver_version or "NA"),
        ("Firmware Version", spec.firmware_version or "NA"),
        ("Compatibility", spec.board_compatibility),
        ("Board ID", "0x64"),
        ("PCB ID", "A"),
        ("BOM ID", "1"),
        ("PCIe Bus Info", npu.bus),
        ("Slot ID", str(npu.npu)),
        ("Class ID", "NA"),
        ("PCI Vendor ID", "0x19E5"),
        ("PCI Device ID", "0xD500" if spec.kind == "310P" else "0xD802"),
        ("Subsystem Vendor ID", "0x0200"),
        ("Subsystem Device ID", "0x0100"),
        ("Chip Count", str(len(npu.chips))),
    ]
    return "".join(f"        {k:<31}: {v}\n" for k, v in rows)


def chip_map(spec: TreeSpec) -> str:
    """``npu-smi info -m``: A3-class systems add ``Chip Phy-ID`` before ``Chip Name`` and name
    the chip without the "Ascend " prefix being split off (published listings)."""
    a3 = spec.kind == "A3"
    heads = ("NPU ID", "Chip ID", "Chip Logic ID") + (("Chip Phy-ID",) if a3 else ()) + ("Chip Name",)
    out = ["        " + "".join(f"{h:<31}" for h in heads)]
    logic = 0
    for n in spec.npus:
        for c in n.chips:
            ids = (str(n.npu), str(c), str(logic)) + ((str(logic),) if a3 else ())
            name = n.name if a3 else f"Ascend {n.name}"
            out.append("        " + "".join(f"{v:<31}" for v in ids + (name,)))
            logic += 1
        mcu = (str(n.npu), str(len(n.chips)), "-") + (("-",) if a3 else ())
        out.append("        " + "".join(f"{v:<31}" for v in mcu + ("Mcu",)))
    return "\n".join(line.rstrip() for line in out) + "\n"


def write_npu_smi(path: Path, spec: TreeSpec, mode: str = "normal") -> Path:
    """A fake npu-smi for ``spec``: an executable shell script answering the three views."""
    q = shlex.quote
    if mode == "hang":
        # Like a driver call that never returns, with a child holding the pipes open: only
        # killing the whole process group ends it.
        body = f"sleep 3600 &\necho $! > {q(str(path.parent / HANG_PID_FILE))}\nwait\n"
    elif mode == "garbage":
        body = "printf '\\377\\376\\001\\002 dcmi \\033[0m \\201\\202\\n'\nexit 0\n"
    elif mode == "error":
        body = "echo 'dcmi model initialized failed, because the device is used. ret is -8020'\nexit 255\n"
    else:
        cases = [f"  \"info\") cat <<'EOF_VIEW'\n{info_table(spec)}EOF_VIEW\n  ;;\n"]
        for n in spec.npus:
            cases.append(
                f"  \"info -t board -i {n.npu}\") cat <<'EOF_VIEW'\n{board_view(spec, n)}EOF_VIEW\n  ;;\n"
            )
        cases.append(f"  \"info -m\") cat <<'EOF_VIEW'\n{chip_map(spec)}EOF_VIEW\n  ;;\n")
        cases.append('  *) echo "Error: invalid parameter: $*" >&2\n     exit 2 ;;\n')
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
    compiler_text: str | None = None,
) -> Path:
    """Install one CANN package the way its installer lays it out: ``<dir>/<release>/`` with a
    ``latest`` link, ``<arch>-linux/<install-info>`` naming the release and, for the packages
    that carry the compiler (toolkit, nnae; nnrt has none), ``compiler/version.info``
    (``compiler_text`` replaces its content, for files as found on real hosts). Returns the
    package's ``latest`` directory."""
    directory, info, package_name = PACKAGE_DIRS[name]
    real = ascend / directory / release
    write(
        real / f"{arch}-linux" / info,
        _kv(
            package_name=package_name,
            version=release,
            innerversion="V100R001C20SPC001B220",
            arch=arch,
            os="linux",
            path=f"/usr/local/Ascend/{directory}/{release}/{arch}-linux",
        ),
    )
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
