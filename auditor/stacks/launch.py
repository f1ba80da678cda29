"""What a stack worker is started with, wherever it runs: the packages it may import (and the
entries a remote payload is derived from), and the environment of a worker on this machine.
Light on purpose (no numpy): the daemon works out its warm workers' identities with it."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from pathlib import Path

import auditor
from auditor.stacks.payload import Packages
from auditor.worker.fingerprint import WORKER_SET_ENV

PACKAGE_DIR = Path(auditor.__file__).resolve().parent


def _package_dir(name: str) -> Path:
    """Where a package of the auditor's lives (``auditor.probes`` is the top-level probes/
    folder of a checkout, or inside an installed package), found without importing it."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(list(spec.submodule_search_locations)[0]).resolve()


TELEMETRY_COLLECTOR = "auditor.plugins.collectors.npu_telemetry"
"""Not a fingerprint section, but asked of every host each cycle and between cycles
(auditor.cycle.telemetry): every worker carries it, a remote one included."""


def worker_packages(modules: Iterable[str] = ()) -> Packages:
    """The packages a worker may import, as (module name, directory), parents first, and
    ``modules`` as the entries a remote payload's files are found from (stacks/payload.py).

    Always the worker package, the built-in probes, plugins and fingerprint collectors; for
    each module given that lives elsewhere (a plugin's probe or collector, a test's), its
    top-level package. Each is registered in the worker without running its ``__init__``,
    so only the modules themselves must be Python 3.7 compatible. A module outside any
    package is skipped: the worker will report it as not importable when it is needed.
    """
    modules = list(modules)
    plugins_dir = _package_dir("auditor.plugins")
    packages = [
        ("auditor", str(PACKAGE_DIR)),
        ("auditor.worker", str(PACKAGE_DIR / "worker")),
        ("auditor.probes", str(_package_dir("auditor.probes"))),
        ("auditor.plugins", str(plugins_dir)),
        ("auditor.plugins.collectors", str(plugins_dir / "collectors")),
    ]
    for module in modules:
        top = module.partition(".")[0]
        if top == "auditor" or any(name == top for name, _ in packages):
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            # Not a package the worker can be given: importing the module in the worker then
            # fails for the probe or collector that needs it, with ImportError, and only for it.
            continue
        packages.append((top, str(Path(list(spec.submodule_search_locations)[0]).resolve())))
    return Packages(packages, [*modules, TELEMETRY_COLLECTOR])


def local_worker_env(stack_env: dict[str, str]) -> dict[str, str]:
    """The environment of a local worker: the auditor's own, without PYTHONPATH/PYTHONHOME,
    with the stack's ``env`` on top."""
    env = dict(os.environ)
    # Raise the native log level so MindSpore Lite says why a model failed to build
    # (its Python error is only "Common error code"); the stack's env wins.
    env.setdefault("GLOG_v", "2")
    env.setdefault("GLOG_logtostderr", "1")
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    env.update(stack_env)
    # What the auditor added is not the stack's environment: the fingerprint leaves it out.
    env[WORKER_SET_ENV] = ",".join(
        k for k in ("GLOG_v", "GLOG_logtostderr") if k not in os.environ and k not in stack_env
    )
    return env
