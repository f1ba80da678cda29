"""A plugin that implements a hook that does not exist (``auditor_probe``, singular)."""

from auditor.hookspecs import hookimpl


@hookimpl
def auditor_probe():
    return ["nothing"]
