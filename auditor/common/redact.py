"""Secrets out of everything the auditor shows or keeps: database URLs with their password
and secret query parameters (``?password=``, ``sslpassword``, ``token``...) hidden, free
text (errors, log lines) with every credential auditor.worker.secrets recognises hidden, and
fingerprints with secret-looking environment values replaced.

The rules for environment values live in auditor.worker.secrets (the environment collector
applies them inside the stack's worker, so secrets never leave it); ``redact_fingerprint``
applies the same rules again in the auditor to every fingerprint it receives, before it is
stored, logged, compared, sent to a sink or exported, so plugin collectors and the worker's
hello are covered too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from auditor.worker import secrets

REDACTED = secrets.REDACTED
HIDDEN = "***"
"""What a hidden password looks like in a URL or a message (``postgresql://u:***@h/d``)."""
_URL_PASSWORD = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://[^\s:/@]*:)[^\s@/]*@")


def redact_url(url: str) -> str:
    """A database (or any) URL with its password and its secret query parameters shown as
    ``***``."""
    try:
        from sqlalchemy.engine import make_url

        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:  # not an SQLAlchemy URL: hide what looks like a password anyway
        shown = url
    return redact_text(shown)


def redact_text(text: str) -> str:
    """Text (an error message, a log line) with every credential in it as ``***``: the
    password of every URL (the user is kept), secret query parameters, secret-named
    assignments (``MS_API_TOKEN=...``, libpq's ``password=...``) and options."""
    return secrets.redact_text(_URL_PASSWORD.sub(r"\1***@", text), HIDDEN)


def redact_argv(argv: Iterable[str], marker: str = HIDDEN) -> list[str]:
    """A command line with its secrets as ``marker`` (auditor.worker.secrets.redact_argv): a
    host's ``command`` prefix wherever it is shown or kept."""
    return secrets.redact_argv(list(argv), marker)


def _walk(value: Any, key: str, names: Iterable[str], values: Iterable[str]) -> Any:
    if isinstance(value, dict):
        return {k: _walk(v, str(k), names, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, key, names, values) for v in value]
    if isinstance(value, str):
        return secrets.redact(key, value, tuple(names), tuple(values))
    return value


def redact_fingerprint(
    document: dict[str, Any], names: Iterable[str] = (), values: Iterable[str] = ()
) -> dict[str, Any]:
    """The fingerprint with every secret-looking value redacted: in the environment section by
    variable name and value, elsewhere by value (credentials in URLs and option strings, and the
    ``[secrets] values`` patterns)."""
    out = {}
    for section, content in document.items():
        if section == "environment" and isinstance(content, dict):
            out[section] = _walk(content, "", names, values)
        else:
            out[section] = _walk_values(content, values)
    return out


def _walk_values(value: Any, values: Iterable[str]) -> Any:
    if isinstance(value, dict):
        return {k: _walk_values(v, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk_values(v, values) for v in value]
    if isinstance(value, str):
        return secrets.redact_value(value, tuple(values))
    return value


class RedactingFilter(logging.Filter):
    """A log filter that hides URL passwords in every record (the daemon's log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is logging's problem, not ours
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
