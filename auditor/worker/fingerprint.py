"""The worker's side of a fingerprint: run each collector module, one section each.

A collector that cannot be imported, raises, or returns something that is not a
JSON-serialisable dict becomes ``{"error": ...}`` in its section; the others still run,
so one broken plugin costs one section, never the fingerprint.
"""

import importlib
import json
import os
import time
import traceback

# The environment the worker was started with, taken when the worker loads this module,
# before the runtime is imported: MindSpore's import rewrites os.environ (it prepends its
# own lib/ to LD_LIBRARY_PATH and sets MS_DEV_* switches), and the fingerprint is about what
# the stack is given, which is what an operator can change and what drifts.
# Variables the auditor itself set for its worker (log levels that make MindSpore Lite say why
# a build failed) are named in WORKER_SET_ENV and are not part of the stack's environment.
WORKER_SET_ENV = "AUDITOR_WORKER_SET_ENV"
WORKER_MARK = "AUDITOR_WORKER"
"""Set by the auditor in each local worker's environment (its directory): what the worker
starts inherits it, so the auditor finds and ends it at the worker's close, even a process
that left the worker's session and directory (auditor.common.tempdirs.processes_marked)."""


def stack_environ(environ):
    """``environ`` without the variables the auditor added (and without the list of them)."""
    added = set(filter(None, (environ.get(WORKER_SET_ENV) or "").split(",")))
    return {k: v for k, v in environ.items() if k not in added and k not in (WORKER_SET_ENV, WORKER_MARK)}


STARTUP_ENVIRON = stack_environ(dict(os.environ))

DEFAULTS = {
    "ascend_root": "/usr/local/Ascend",
    "system_root": "/",
    "npu_smi": "npu-smi",
    "timeout": 10.0,
}


def make_context(context=None, environ=None):
    """The context a collector gets: the stack's paths and options, and the environment."""
    ctx = dict(DEFAULTS)
    ctx.update({k: v for k, v in (context or {}).items() if v is not None})
    ctx["timeout"] = float(ctx["timeout"])
    ctx["environ"] = dict(STARTUP_ENVIRON if environ is None else environ)
    return ctx


def collect(collectors, context=None, environ=None):
    """The fingerprint of the named collector modules, with what it cost:
    ``{"fingerprint": {section: dict}, "seconds": {section: s}, "tracebacks": {section: text}}``.
    Tracebacks stay out of the document, which is stored by content."""
    base = make_context(context, environ)
    document, seconds, tracebacks, owners = {}, {}, {}, {}
    for module_name in collectors:
        started = time.time()
        name, section, tb = _run(module_name, base)
        if name in owners:
            name, section = (
                module_name,
                {"error": "%s: section %r is already filled by %s" % (module_name, name, owners[name])},
            )
        owners[name] = module_name
        document[name] = section
        seconds[name] = round(time.time() - started, 4)
        if tb:
            tracebacks[name] = tb
    return {"fingerprint": document, "seconds": seconds, "tracebacks": tracebacks}


def _run(module_name, base):
    fallback = module_name.rpartition(".")[2]
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # a plugin's import may raise anything
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _error(fallback, module_name, "cannot import", exc)
    name = getattr(module, "NAME", None)
    if not isinstance(name, str) or not name or not callable(getattr(module, "collect", None)):
        problem = "%s: defines no NAME string and collect(context) function" % module_name
        return fallback, {"error": problem}, None
    context = dict(base, environ=dict(base["environ"]))  # a collector cannot spoil the next one's
    try:
        section = module.collect(context)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _error(name, module_name, "collect() raised", exc)
    if not isinstance(section, dict):
        problem = "%s: collect() returned %s, not a dict" % (module_name, type(section).__name__)
        return name, {"error": problem}, None
    try:
        json.dumps(section, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problem = "%s: collect() returned something that is not JSON: %s" % (module_name, exc)
        return name, {"error": problem}, None
    return name, section, None


def _error(name, module_name, what, exc):
    section = {"error": "%s: %s %s: %s" % (module_name, what, type(exc).__name__, exc)}
    return name, section, traceback.format_exc(limit=-4)
