"""The NPU firmware package: ``<ascend_root>/firmware/version.info``.

``compatible_version_drv`` lists the driver ranges this firmware accepts, as ``[start, end]``
lists of strings exactly as written (``[24.1,24.1.]`` means every 24.1.*).
"""

from auditor.plugins.collectors._files import Unreadable, ascend_path, field, parse_groups, read_kv

NAME = "firmware"


def collect(context):
    unknown = {}
    path = ascend_path(context, "firmware", "version.info")
    doc = {
        "file": path,
        "version": None,
        "firmware_version": None,
        "compatible_version_drv": None,
        "package_version": None,
        "unknown": unknown,
    }
    try:
        values = read_kv(path)
    except Unreadable as exc:
        for key in ("version", "firmware_version", "compatible_version_drv", "package_version"):
            unknown[key] = str(exc)
        return doc
    doc["version"] = field(values, "Version", path, unknown, "version")
    doc["firmware_version"] = field(values, "firmware_version", path, unknown)
    doc["compatible_version_drv"] = field(
        values, "compatible_version_drv", path, unknown, convert=parse_groups
    )
    doc["package_version"] = field(values, "package_version", path, unknown)
    return doc
