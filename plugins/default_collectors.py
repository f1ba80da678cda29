"""The built-in fingerprint collectors, registered through the same hook as any plugin's.

Each module fills one section of the fingerprint document (see ``auditor.fingerprint.collect``);
they run inside every stack's worker, in this order.
"""

from auditor.hookspecs import hookimpl

COLLECTORS = [
    "auditor.plugins.collectors.host",
    "auditor.plugins.collectors.packages",
    "auditor.plugins.collectors.framework",
    "auditor.plugins.collectors.cann",
    "auditor.plugins.collectors.driver",
    "auditor.plugins.collectors.firmware",
    "auditor.plugins.collectors.npu_smi",
    "auditor.plugins.collectors.environment",
    "auditor.plugins.collectors.models",
]


@hookimpl
def auditor_fingerprint_collectors() -> list[str]:
    return list(COLLECTORS)
