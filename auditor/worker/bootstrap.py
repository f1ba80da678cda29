"""The few lines a stack interpreter runs first (passed with ``-c``).

They register the auditor's worker package and the probe packages as namespace-like
modules pointing at their directories, so that ``import auditor.worker.main`` never runs
``auditor/__init__.py`` (which needs Python 3.11 and the auditor's dependencies) and the
stack's own site-packages are not shadowed by the auditor's.
"""

REGISTER = """
import json, sys, types
spec = json.loads(sys.argv[1])
for name, path in spec["packages"]:
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
"""
"""The packages of ``spec["packages"]`` registered without running their ``__init__``; also
used by ``auditor plugins --check`` to import plugin modules the way a worker does."""

SOURCE = (
    REGISTER
    + """from auditor.worker.main import serve
serve(spec)
"""
)

ZYGOTE_SOURCE = (
    REGISTER
    + """from auditor.worker.zygote import main
main(spec)
"""
)
"""A stack's warm interpreter (``auditor.worker.zygote``): imports the runtime once and forks
a worker per request; its spec names the runtime class, the packages and its socket."""
