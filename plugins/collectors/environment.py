"""The environment variables of the stack's worker that change numbers (or which libraries
are loaded): determinism switches, matmul tuning, thread counts, ``MS_*``, ``ASCEND_*``,
library and Python paths.

The section maps each such variable that is set to its value. Values that look like
secrets never leave the worker: a variable whose name contains TOKEN, SECRET, PASSWORD,
PASSWD, KEY or CREDENTIAL is ``"<redacted>"``, and credentials embedded in a value
(``scheme://user:pass@host``, ``user:pass@host``, ``?token=...``) are replaced in place.
"""

import re

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
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
REDACTED = "<redacted>"

_URL_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]*@")
_LEADING_USERINFO = re.compile(r"^[^/@\s:=]+:[^/@\s]+@(?=[^\s@]+$)")
_SECRET_PARAM = re.compile(
    r"(?i)([?&;][^=&;?\s]*(?:token|secret|password|passwd|key|credential)[^=&;?\s]*=)[^&;\s]*"
)


def collect(context):
    environ = context.get("environ") or {}
    return {name: redact(name, environ[name]) for name in sorted(environ) if relevant(name)}


def relevant(name):
    return name in NAMES or name.startswith(PREFIXES)


def redact(name, value):
    """The value as it may be stored: secrets replaced by ``<redacted>``."""
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS):
        return REDACTED
    value = _URL_USERINFO.sub(r"\1" + REDACTED + "@", value)
    value = _LEADING_USERINFO.sub(REDACTED + "@", value)
    return _SECRET_PARAM.sub(r"\1" + REDACTED, value)
