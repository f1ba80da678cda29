"""The environment variables of the stack's worker that change numbers (or which libraries
are loaded): determinism switches, matmul tuning, thread counts, ``MS_*``, ``ASCEND_*``,
library and Python paths.

The section maps each such variable that is set to its value. Values that look like
secrets never leave the worker: a variable whose name contains TOKEN, SECRET, PASSWORD,
PASSWD, AUTH, KEY or CREDENTIAL (or matches a ``[secrets] names`` pattern of auditor.toml) is
``"<redacted>"``, and credentials embedded in a value (``scheme://user:pass@host``,
``user:pass@host``, ``?token=...``, ``--password=...`` or ``--token ...`` inside option strings,
and what a ``[secrets] values`` pattern matches) are replaced in place (the rules:
auditor.worker.secrets). The auditor applies the same ``redact`` to every fingerprint it
receives (auditor.common.redact), so a plugin collector's section is covered too.
"""

from auditor.worker.secrets import redact

NAME = "environment"
NAMES = (
    "HCCL_DETERMINISTIC",
    "LCCL_DETERMINISTIC",
    "CLOSE_MATMUL_K_SHIFT",
    "ATB_MATMUL_SHUFFLE_K_ENABLE",
    "GLOG_v",
    "OMP_NUM_THREADS",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
)
PREFIXES = ("MS_", "ASCEND_")


def collect(context):
    environ = context.get("environ") or {}
    names = context.get("redact_names") or ()
    values = context.get("redact_values") or ()
    return {name: redact(name, environ[name], names, values) for name in sorted(environ) if relevant(name)}


def relevant(name):
    return name in NAMES or name.startswith(PREFIXES)
