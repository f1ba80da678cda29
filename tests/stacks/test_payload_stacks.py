"""The remote payload carries what the worker side really imports, proven with the stacks' own
interpreters (numpy and the framework, nothing of the auditor): the zip a cycle would send,
unpacked where nothing else of the auditor can be found, imports every module a worker may be
asked for (the request loop, the runtime classes, every probe, every collector, the example
plugin's probe), and every module of the auditor's or a plugin's that those imports load comes
from the zip. (Over a real sshd, with every request a cycle makes: tests/fleet/test_parity_stacks.py.)"""

from __future__ import annotations

import io
import json
import os
import subprocess
import zipfile

import pytest

from auditor.cli.context import Context
from auditor.extend.manager import Plugins
from auditor.stacks import payload
from auditor.worker.bootstrap import REGISTER
from tests.conftest import DEFAULT_CONFIG, REPO, stack_python

pytestmark = pytest.mark.stacks

IMPORT_ALL = (
    REGISTER
    + r"""
import importlib
failed = {}
for name in spec["entries"]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = "%s: %s" % (type(exc).__name__, exc)
tops = set(n.partition(".")[0] for n, _ in spec["packages"])
files = {}
for name, module in list(sys.modules.items()):
    if name.partition(".")[0] in tops and getattr(module, "__file__", None):
        files[name] = module.__file__
sys.stdout.write(json.dumps({"failed": failed, "files": files}) + "\n")
"""
)


@pytest.mark.parametrize("stack", ["ms20", "lite20", "ms210"])
def test_the_payload_is_everything_a_stack_imports(stacks, tmp_path, stack):
    plugins = Plugins()
    reach = plugins.reach(Context(str(DEFAULT_CONFIG), None).config())
    built = payload.build(reach.packages)
    lib = tmp_path / "lib"
    zipfile.ZipFile(io.BytesIO(built.data)).extractall(lib)
    spec = {
        "packages": [[n, str(lib.joinpath(*n.split(".")))] for n, _ in reach.packages],
        "entries": list(reach.packages.entries),
    }
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [str(stack_python(stack)), "-c", IMPORT_ALL, json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: nothing of the auditor is importable but the zip
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["failed"] == {}
    outside = {n: f for n, f in answer["files"].items() if not f.startswith(str(lib))}
    assert outside == {}, outside  # every module of ours came from the zip
    assert set(answer["files"]) == set(built.names)  # and the zip holds nothing they did not import
    assert "auditor.worker.mindir" in built.names and str(REPO) not in json.dumps(answer["files"])
