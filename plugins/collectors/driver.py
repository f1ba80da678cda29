"""The Ascend driver: ``<ascend_root>/driver/version.info`` and ``<system_root>/etc/ascend_install.info``.

``compatible_version`` lists the CANN innerversion codes the driver supports (a range is
kept as ``"A,B"``); ``compatible_version_fw`` the firmware ranges, as ``[start, end]`` lists
of strings exactly as written (``[7.0.0,7.7.99]``), for the rules to compare.
"""

from auditor.plugins.collectors._files import (
    Unreadable,
    ascend_path,
    field,
    parse_codes,
    parse_groups,
    read_kv,
    system_path,
)

NAME = "driver"
FILE_FIELDS = (
    "version",
    "innerversion",
    "ascendhal_version",
    "compatible_version",
    "compatible_version_fw",
    "package_version",
)


def collect(context):
    unknown = {}
    path = ascend_path(context, "driver", "version.info")
    doc = {
        "file": path,
        "version": None,
        "innerversion": None,
        "ascendhal_version": None,
        "compatible_version": None,
        "compatible_version_fw": None,
        "package_version": None,
        "install_info": None,
        "unknown": unknown,
    }
    try:
        values = read_kv(path)
    except Unreadable as exc:
        for key in FILE_FIELDS:
            unknown[key] = str(exc)
    else:
        doc["version"] = field(values, "Version", path, unknown, "version")
        # "Innerversion" in the driver's file, "innerversion" in CANN's: accept either.
        inner = "innerversion" if "innerversion" in values else "Innerversion"
        doc["innerversion"] = field(values, inner, path, unknown, "innerversion")
        doc["ascendhal_version"] = field(values, "ascendhal_version", path, unknown)
        doc["compatible_version"] = field(values, "compatible_version", path, unknown, convert=parse_codes)
        doc["compatible_version_fw"] = field(
            values, "compatible_version_fw", path, unknown, convert=parse_groups
        )
        # Absent from many drivers (FACTS): then null, with that as the reason.
        doc["package_version"] = field(values, "package_version", path, unknown)
    install = system_path(context, "etc/ascend_install.info")
    try:
        doc["install_info"] = read_kv(install)
    except Unreadable as exc:
        unknown["install_info"] = str(exc)
    return doc
