"""A fingerprint stored as the part its peers share (a template) and its own part.

The hosts of a group run the same stack, so their fingerprint documents differ only where a
document names its machine: its own host name (the connection, ``{host}``-substituted
interpreter and model paths, a model file keyed by such a path), the machine's identity
(``hostname``, ``machine_id``, a board's ``serial_number``) and how it was reached (the
``connection`` section). Stored whole, each member's document was a distinct row of ~6 KB,
written once per member and again after every fleet-wide upgrade.

A document is split into:
- the *template*: the document without its own values, its host's name replaced by
  ``TOKEN`` everywhere (strings and keys); stored once by digest (``fingerprint_templates``),
  shared by every document that differs only in its own part;
- the *own part*: ``{"host": name or None, "values": [[path, value], ...]}``, kept on the
  ``fingerprints`` row of the whole document (about 300 bytes).

``join`` gives back exactly the document ``split`` was given: ``split`` checks that, and a
document it cannot take apart exactly (the token already in it, a host name that overlaps
itself) is kept whole as its own template. The whole document's digest stays what the cycle,
drift and the reports know (``auditor.results.fingerprint_digest``); only its storage changed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select

from auditor.db import schema as m
from auditor.db.content import document_digest
from auditor.db.rows import add_once

TOKEN = "{auditor:host}"
"""What a template has where its document named its own host."""
OWN_KEYS = frozenset({"hostname", "machine_id", "serial_number"})
"""Values that identify one machine, wherever they are in the document."""
OWN_SECTIONS = frozenset({"connection"})
"""Sections that say how one host was reached: its own part whole."""
MIN_HOST = 3
"""A shorter host name is not replaced (it would be found inside unrelated words; still exact)."""
_CHUNK = 500

Path = list[str]


def split(document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(template, own part) of a document; own None: the template is the document itself."""
    values: list[list[Any]] = []
    template = _without_own(document, [], values)
    connection = document.get("connection")
    host = connection.get("host") if isinstance(connection, dict) else None
    if not isinstance(host, str) or len(host) < MIN_HOST or _mentions(template, TOKEN):
        host = None
    if host is not None:
        template = _replace(template, host, TOKEN)
    own = {"host": host, "values": values} if host is not None or values else None
    if own is not None and join(template, own) != document:
        return document, None
    return template, own


def join(template: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    """The document ``split`` made these of."""
    if not own:
        return template
    host = own.get("host")
    document = _replace(template, TOKEN, host) if host else copy.deepcopy(template)
    for path, value in own.get("values") or []:
        node = document
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return document


def store(session: Any, documents: Mapping[str, dict[str, Any]], now: datetime) -> None:
    """Store each document by its whole digest (digest -> document) unless it is stored: its
    template once for every document that shares it, its own part on its row. A cycle's
    documents are mostly its last cycle's: those are found in one query and not split again."""
    F = m.Fingerprint
    wanted = sorted(documents)
    stored: set[str] = set()
    for i in range(0, len(wanted), _CHUNK):
        stored.update(session.scalars(select(F.digest).where(F.digest.in_(wanted[i : i + _CHUNK]))))
    for digest in wanted:
        if digest in stored:
            continue
        template, own = split(documents[digest])
        shared = document_digest(template)
        add_once(session, m.FingerprintTemplate, digest=shared, created_at=now, document=template)
        add_once(session, F, digest=digest, created_at=now, template_digest=shared, own=own)


def read(executor: Any, digests: Iterable[str]) -> dict[str, dict[str, Any] | None]:
    """digest -> document of the stored fingerprints among ``digests`` (a Connection or a
    Session: anything with ``execute``); None where a damaged row cannot be read (the health
    check names it)."""
    F, T = m.Fingerprint, m.FingerprintTemplate
    wanted = sorted({d for d in digests if d})
    out: dict[str, dict[str, Any] | None] = {}
    for i in range(0, len(wanted), _CHUNK):
        q = (
            select(F.digest, T.document, F.own)
            .join(T, T.digest == F.template_digest)
            .where(F.digest.in_(wanted[i : i + _CHUNK]))
        )
        for digest, template, own in executor.execute(q):
            readable = isinstance(template, dict) and (own is None or isinstance(own, dict))
            out[digest] = join(template, own) if readable else None
    return out


def _without_own(node: dict[str, Any], path: Path, values: list[list[Any]]) -> dict[str, Any]:
    """A copy of ``node`` without the own values, which are appended to ``values``."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        here = [*path, key]
        if key in OWN_KEYS or (not path and key in OWN_SECTIONS):
            values.append([here, value])
        elif isinstance(value, dict):
            out[key] = _without_own(value, here, values)
        else:
            out[key] = value
    return out


def _replace(node: Any, old: str, new: str) -> Any:
    """``node`` with ``old`` replaced by ``new`` in every string and key."""
    if isinstance(node, str):
        return node.replace(old, new)
    if isinstance(node, dict):
        return {_replace(k, old, new): _replace(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace(v, old, new) for v in node]
    return node


def _mentions(node: Any, text: str) -> bool:
    if isinstance(node, str):
        return text in node
    if isinstance(node, dict):
        return any(_mentions(k, text) or _mentions(v, text) for k, v in node.items())
    if isinstance(node, list):
        return any(_mentions(v, text) for v in node)
    return False


__all__ = ["MIN_HOST", "OWN_KEYS", "OWN_SECTIONS", "TOKEN", "join", "read", "split", "store"]
