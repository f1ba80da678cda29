"""The remote payload is derived from the imports: what the entry modules import, at any depth
and in any form, from the worker's packages, and nothing else."""

from __future__ import annotations

import io
import textwrap
import zipfile
from pathlib import Path

from auditor.stacks import payload


def tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_imports_are_followed_in_every_form(tmp_path):
    tree(
        tmp_path,
        {
            "plug/__init__.py": "raise RuntimeError('registered packages never run their __init__')\n",
            "plug/probe.py": """
                import json, numpy
                from . import helpers
                from .sub.deep import thing
                def build_cell(params, weights):
                    import mindspore  # the framework is the host's own
                    from plug import lazy
                    return lazy
                """,
            "plug/helpers.py": "import importlib\nmod = importlib.import_module('plug.dynamic')\n",
            "plug/dynamic.py": "X = 1\n",
            "plug/lazy.py": "from .helpers import mod\n",
            "plug/sub/__init__.py": "",  # below a registered package: Python runs it, so it goes
            "plug/sub/deep.py": "thing = 1\n",
            "plug/unused.py": "import nothing_imports_this\n",
            "plug/broken.py": "def oops(:\n",
            "plug/data.json": "{}",
        },
    )
    packages = payload.Packages([("plug", str(tmp_path / "plug"))], ["plug.probe", "plug.broken"])
    found = payload.module_files(packages, packages.entries)
    assert sorted(found) == [
        "plug.broken",  # kept: the worker reports its SyntaxError as it would locally
        "plug.dynamic",
        "plug.helpers",
        "plug.lazy",
        "plug.probe",
        "plug.sub",
        "plug.sub.deep",
    ]
    built = payload.build(packages)
    names = zipfile.ZipFile(io.BytesIO(built.data)).namelist()
    assert sorted(names) == sorted(
        [
            "plug/broken.py",
            "plug/dynamic.py",
            "plug/helpers.py",
            "plug/lazy.py",
            "plug/probe.py",
            "plug/sub/__init__.py",
            "plug/sub/deep.py",
        ]
    )
    assert built.names == tuple(sorted(found))


def test_the_zip_names_modules_not_folders(tmp_path):
    """``auditor.probes`` lives in a folder called probes/ in a checkout: in the zip it is where
    its name says, which is where the remote boot registers it."""
    tree(tmp_path, {"probes/p.py": "from auditor.probes import q\n", "probes/q.py": ""})
    packages = payload.Packages([("auditor.probes", str(tmp_path / "probes"))], ["auditor.probes.p"])
    names = zipfile.ZipFile(io.BytesIO(payload.build(packages).data)).namelist()
    assert sorted(names) == ["auditor/probes/p.py", "auditor/probes/q.py"]


def test_a_reach_with_a_training_networks_folder_still_carries_every_entry(tmp_path):
    """Reach.packages adds a model's training-network folder to the worker's packages; the
    payload built from them still holds the collectors, probes and runtime classes (a plain
    list there once carried the request loop alone, and every remote collector failed)."""
    from auditor.config.load import load
    from auditor.extend.manager import Plugins
    from auditor.stacks.session import reach

    tree(tmp_path, {"mypolicy/__init__.py": "", "mypolicy/nets.py": "def build():\n    return None\n"})
    (tmp_path / "p.mindir").write_bytes(b"")
    text = (Path(__file__).resolve().parents[3] / "auditor.toml").read_text()
    text += (
        f'\n[models.policy]\npath = "{tmp_path / "p.mindir"}"\nstacks = ["lite20"]\n'
        f'train = {{ factory = "mypolicy.nets:build", stack = "ms20", path = "{tmp_path}" }}\n'
    )
    (tmp_path / "auditor.toml").write_text(text)
    config = load(tmp_path / "auditor.toml")
    plugins = Plugins(entry_points=False)
    to_reach = reach(
        config,
        plugins.runtimes(),
        [s.module for s in plugins.probes().values()],
        plugins.fingerprint_collectors(),
    )
    names = set(payload.build(to_reach.packages).names)
    assert {"auditor.plugins.collectors.environment", "auditor.probes.ppo_policy", "mypolicy.nets"} <= names
    assert ("mypolicy", str(tmp_path / "mypolicy")) in to_reach.packages


def test_every_payload_carries_the_telemetry_collector():
    """The cycle samples each host's NPUs through its worker: a remote host without the
    collector in its payload reported its telemetry unavailable while a local one did not."""
    from auditor.stacks.launch import TELEMETRY_COLLECTOR, worker_packages

    assert TELEMETRY_COLLECTOR in set(payload.build(worker_packages()).names)


def test_a_worker_built_without_packages_carries_its_runtime_class():
    """A StackWorker made by hand (no Reach) still sends its runtime class to a remote host:
    since the runtimes became packages, the class no longer lives in the worker package."""
    from auditor.config.tables import StackConfig
    from auditor.stacks.worker import StackWorker

    lite = "auditor.plugins.runtimes.lite.worker:LiteRuntime"
    worker = StackWorker(StackConfig("s", "infer", "mindspore-lite", "/nonexistent"), runtime_class=lite)
    try:
        assert "auditor.plugins.runtimes.lite.worker" in set(payload.build(worker.packages).names)
    finally:
        worker.close()
