"""Everything that runs inside a stack must import on Python 3.7 (ms20 and lite20 are 3.7).

The interpreter is located the way scripts/install-stacks locates it (PATH, pyenv versions,
/usr/bin), not through a pyenv shim, which fails when 3.7 is not an active pyenv version.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from auditor.extend.manager import Plugins
from auditor.stacks import payload
from auditor.stacks.launch import worker_packages
from tests.conftest import REPO, stack_python
from tests.requires import need, probe


def _python37() -> str:
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-stacks"), "--which-python", "3.7"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    need("python3.7", probe("python3.7", lambda: None))
    if proc.returncode != 0:
        need("python3.7", "no Python 3.7 on this machine: " + proc.stderr.strip())
    return proc.stdout.strip()


TRAIN_ONLY = {"opsweep.cells", "tests.model_fixtures.mypolicy.nets"}
"""Stack-side modules that import MindSpore at the top, loaded in train stacks only: the operator
sweep's cells and a user's training network (a model probe's reference)."""


def stack_side_modules() -> list[str]:
    """Every module that runs inside a stack, found as a remote payload finds what to send
    (auditor.stacks.payload: from the entry modules, their imports within the worker's packages,
    at any depth): the request loop and the zygote, every runtime's worker class, every probe
    (built-in, the tests', the example plugin's), every fingerprint collector, the user-network
    fixtures and the operator sweep's cells. Not a hand-kept list of files: a new module is found
    by being imported."""
    plugins = Plugins(entry_points=False)
    runtime_modules = {r.worker_class.partition(":")[0] for r in plugins.runtimes().values()}
    entries = [
        *runtime_modules,
        # everything in a runtime's package but its spec runs in a stack (ARCHITECTURE.md)
        *(
            f"{module.rpartition('.')[0]}.{p.stem}"
            for module in runtime_modules
            for p in Path(importlib.util.find_spec(module).origin).parent.glob("[!_]*.py")
            if p.name != "spec.py"
        ),
        *(spec.module for spec in plugins.probes().values()),
        *plugins.fingerprint_collectors(),
        *(f"tests.probe_fixtures.{p.stem}" for p in (REPO / "tests" / "probe_fixtures").glob("[!_]*.py")),
        *(
            f"tests.model_fixtures.mypolicy.{p.stem}"
            for p in (REPO / "tests/model_fixtures/mypolicy").glob("[!_]*.py")
        ),
        "auditor_discrete_policy.policy",
        *TRAIN_ONLY,
    ]
    packages = worker_packages(entries)
    packages.append(("opsweep", str(REPO / "scripts" / "opsweep")))
    return sorted(payload.build(packages).names), [list(p) for p in packages]


IMPORT_ALL = """
import importlib, json, sys, traceback, types
packages, names = json.loads(sys.stdin.read())
for name, path in packages:
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "failed": failed}))
"""


@pytest.mark.parametrize("stack", ["ms20", "lite20"])
def test_every_stack_side_module_imports_on_the_stacks_python_37(stacks, stack):
    """Imported, not only parsed, by the real 3.7 interpreters of the stacks (numpy 1.21 and the
    runtime there), registered the way a worker registers its packages (no ``__init__`` run)."""
    names, packages = stack_side_modules()
    # the layout must be found: a glob or a package that matches nothing fails here, not later
    for anchor in (
        "auditor.worker.main",
        "auditor.worker.zygote",
        "auditor.worker.mindir",
        "auditor.probes.ppo_policy",
        "auditor.plugins.collectors.npu_telemetry",
        "auditor.plugins.runtimes.lite.worker",
        "auditor.plugins.runtimes.mindspore.worker",
        "auditor.plugins.runtimes.ort.onnx_wire",
        "tests.probe_fixtures.faulty",
        "auditor_discrete_policy.policy",
    ):
        assert anchor in names, anchor
    assert len(names) >= 35
    wanted = [n for n in names if stack == "ms20" or n not in TRAIN_ONLY]
    proc = subprocess.run(
        [str(stack_python(stack)), "-c", IMPORT_ALL],
        input=json.dumps([packages, wanted]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["python"] == "3.7"
    assert answer["failed"] == {}, "\n".join(answer["failed"].values())


def test_stack_side_code_parses_on_python_37():
    """Without the stacks too: every stack-side module compiles on a Python 3.7 (the one
    scripts/install-stacks would use)."""
    names, packages = stack_side_modules()
    files = [str(_file(n, packages)) for n in names]
    assert len(files) >= 35 and all(Path(f).is_file() for f in files)
    check = "import sys\nfor f in sys.argv[1:]:\n    compile(open(f).read(), f, 'exec')\n"
    proc = subprocess.run([_python37(), "-c", check, *files], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def _file(name: str, packages: list[list[str]]) -> Path:
    """Where module ``name`` is, by the longest registered package holding it."""
    package, path = max(
        (p for p in packages if name == p[0] or name.startswith(p[0] + ".")), key=lambda p: len(p[0])
    )
    rest = name[len(package) :].lstrip(".").split(".") if name != package else []
    base = Path(path).joinpath(*rest)
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def test_bootstrap_sources_parse_on_python_37():
    """The code given to a stack interpreter with ``-c`` (local and remote) is 3.7 code too."""
    from auditor.worker.bootstrap import SOURCE, ZYGOTE_SOURCE
    from auditor.worker.remote_boot import CONNECT, LAUNCH
    from auditor.worker.remote_boot import SOURCE as REMOTE
    from auditor.worker.remote_boot import ZYGOTE_SOURCE as REMOTE_ZYGOTE

    check = (
        "import ast, sys\nfor i, s in enumerate(sys.stdin.read().split('\\0')):\n    ast.parse(s, str(i))\n"
    )
    sources = "\0".join((SOURCE, ZYGOTE_SOURCE, REMOTE, REMOTE_ZYGOTE, CONNECT, LAUNCH))
    python = _python37()
    proc = subprocess.run([python, "-c", check], input=sources, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
