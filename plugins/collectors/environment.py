"""The environment variables of the stack's worker that change numbers (or which libraries
are loaded): determinism switches, matmul tuning, thread counts, ``MS_*``, ``ASCEND_*``,
library and Python paths.

The section maps each such variable that is set to its value. Values that look like
secrets never leave the worker: a variable whose name contains TOKEN, SECRET, PASSWORD,
PASSWD, AUTH, KEY or CREDENTIAL (or matches a ``[secrets] names`` pattern of auditor.toml) is
``"<redacted>"``, and credentials embedded in a value (``scheme://user:pass@host``,
``user:pass@host``, ``?token=...``, ``--password=...`` or ``--token ...`` inside option strings,
and what a ``[secrets] values`` pattern matches) are replaced in place. The auditor applies the
same ``redact`` to every fingerprint it receives (auditor.redact), so a plugin collector's
section is covered too.
"""

import fnmatch
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
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "AUTH", "KEY", "CREDENTIAL")
REDACTED = "<redacted>"

_URL_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]*@")
_LEADING_USERINFO = re.compile(r"^[^/@\s:=]+:[^/@\s]+@(?=[^\s@]+$)")
_SECRET_PARAM = re.compile(
    r"(?i)([?&;][^=&;?\s]*(?:token|secret|password|passwd|auth|key|credential)[^=&;?\s]*=)[^&;\s]*"
)
# "--password=x", "--api-key x", "-auth-token=x" inside an option string (e.g. MS_*_OPTIONS).
_SECRET_OPTION = re.compile(
    r"(?i)((?:^|\s)--?[a-z0-9_.-]*(?:token|secret|password|passwd|auth|key|credential)[a-z0-9_.-]*)"
    r"(=|\s+)(?!-)(\"[^\"]*\"|'[^']*'|\S+)"
)


def collect(context):
    environ = context.get("environ") or {}
    names = context.get("redact_names") or ()
    values = context.get("redact_values") or ()
    return {name: redact(name, environ[name], names, values) for name in sorted(environ) if relevant(name)}


def relevant(name):
    return name in NAMES or name.startswith(PREFIXES)


def secret_name(name, patterns=()):
    """Whether a variable's name says its value is a secret (or a configured pattern says so)."""
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS):
        return True
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def redact_value(value, patterns=()):
    """A value with the credentials it holds replaced by ``<redacted>``."""
    value = _URL_USERINFO.sub(r"\1" + REDACTED + "@", value)
    value = _LEADING_USERINFO.sub(REDACTED + "@", value)
    value = _SECRET_PARAM.sub(r"\1" + REDACTED, value)
    value = _SECRET_OPTION.sub(lambda m: m.group(1) + m.group(2) + REDACTED, value)
    for pattern in patterns:
        value = re.sub(pattern, REDACTED, value)
    return value


def redact(name, value, names=(), values=()):
    """The value as it may be stored: secrets replaced by ``<redacted>``. ``names`` are extra
    shell patterns of secret variable names, ``values`` extra regular expressions of secrets."""
    if secret_name(name, names):
        return REDACTED
    return redact_value(value, values)
