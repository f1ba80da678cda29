"""Which names and values are secrets, shared by both processes: the environment collector
applies it inside the stack (so a secret never leaves the worker) and the auditor applies it
again to every fingerprint it receives (auditor.common.redact), so a plugin collector's
section is covered too. Python 3.7, standard library only.
"""

import fnmatch
import re

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
