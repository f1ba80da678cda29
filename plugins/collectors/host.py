"""The host a stack runs on: name, OS release, kernel, architecture, CPU model and the CPU
features that change numerics, Python.

The OS release is read from ``<system_root>/etc/os-release``; the kernel, architecture and
CPU come from the running system (``uname``, ``/proc/cpuinfo``), which ``system_root``
cannot stand in for (the context key ``cpuinfo`` names another file, for tests).
"""

import platform
import socket
import sys

from auditor.plugins.collectors._files import Unreadable, parse_kv, read_text, system_path

NAME = "host"
OS_RELEASE_KEYS = ("ID", "VERSION_ID", "PRETTY_NAME")
CPUINFO = "/proc/cpuinfo"

# The CPU features a runtime's kernels choose between, so that two hosts with the same model
# name and different features (a VM that hides AVX-512, a BIOS that turns AMX off) may give
# other bits: fused multiply-add, vector widths, reduced-precision and dot-product units.
NUMERICS_FLAGS = (
    # x86 (/proc/cpuinfo "flags")
    "sse4_2", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f", "avx512dq", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    # aarch64 (/proc/cpuinfo "Features")
    "fp", "asimd", "fphp", "asimdhp", "asimddp", "asimdfhm", "sve", "sve2", "bf16", "i8mm", "sme",
)  # fmt: skip

# aarch64 /proc/cpuinfo names no model, only implementer and part codes.
ARM_IMPLEMENTERS = {"0x41": "ARM", "0x48": "HiSilicon", "0x70": "Phytium", "0xc0": "Ampere"}
ARM_PARTS = {("0x48", "0xd01"): "Kunpeng-920", ("0x48", "0xd02"): "Kunpeng-930"}


def collect(context):
    unknown = {}
    cpuinfo = _cpuinfo(context.get("cpuinfo", CPUINFO), unknown)
    return {
        "hostname": socket.gethostname(),
        "machine_id": _machine_id(context, unknown),
        "os_release": _os_release(context, unknown),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu_model": _from_cpuinfo(
            cpuinfo, parse_cpu_model, "cpu_model", "model name, CPU implementer or CPU part", unknown
        ),
        "cpu_numerics": _from_cpuinfo(
            cpuinfo, parse_cpu_numerics, "cpu_numerics", "flags or Features", unknown
        ),
        "python": {
            "version": "%d.%d.%d" % sys.version_info[:3],
            "executable": sys.executable,
            "implementation": platform.python_implementation(),
        },
        "unknown": unknown,
    }


def _machine_id(context, unknown):
    """systemd's /etc/machine-id (or D-Bus's copy): tells two hosts apart when names repeat."""
    reasons = []
    for relative in ("etc/machine-id", "var/lib/dbus/machine-id"):
        path = system_path(context, relative)
        try:
            value = read_text(path).strip()
        except Unreadable as exc:
            reasons.append(str(exc))
            continue
        if value:
            return value
        reasons.append("%s: empty" % path)
    unknown["machine_id"] = "; ".join(reasons)
    return None


def _os_release(context, unknown):
    reasons = []
    for relative in ("etc/os-release", "usr/lib/os-release"):
        path = system_path(context, relative)
        try:
            values = parse_kv(read_text(path))
        except Unreadable as exc:
            reasons.append(str(exc))
            continue
        except ValueError as exc:
            reasons.append("%s: garbled (%s)" % (path, exc))
            continue
        return {key: values.get(key) for key in OS_RELEASE_KEYS}
    unknown["os_release"] = "; ".join(reasons)
    return None


def _cpuinfo(path, unknown):
    """(path, its text) or (path, None) with why in ``unknown`` (the CPU facts' shared reason)."""
    try:
        # /proc/cpuinfo grows with the number of cores; what is read is in the first block.
        return path, read_text(path, truncate=True)
    except Unreadable as exc:
        unknown["cpu_model"] = unknown["cpu_numerics"] = str(exc)
        return path, None


def _from_cpuinfo(cpuinfo, parse, key, lines, unknown):
    path, text = cpuinfo
    if text is None:
        return None
    found = parse(text)
    if found is None:
        unknown[key] = "%s: no %s line" % (path, lines)
    return found


def parse_cpu_model(text):
    """The CPU model from /proc/cpuinfo text (x86 ``model name``; aarch64 implementer/part)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    for key in ("model name", "cpu model", "cpu"):
        if fields.get(key):
            return fields[key]
    implementer = fields.get("cpu implementer", "").lower()
    part = fields.get("cpu part", "").lower()
    if not implementer:
        return None
    if (implementer, part) in ARM_PARTS:
        return ARM_PARTS[(implementer, part)]
    vendor = ARM_IMPLEMENTERS.get(implementer, "implementer " + implementer)
    return "%s part %s" % (vendor, part or "?")


def parse_cpu_numerics(text):
    """The numerics-changing CPU features /proc/cpuinfo text lists (its first ``flags`` or
    ``Features`` line), in NUMERICS_FLAGS order, space-separated ("" where it lists none of
    them); None without such a line."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            have = set(value.split())
            return " ".join(f for f in NUMERICS_FLAGS if f in have)
    return None
