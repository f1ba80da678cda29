"""A user's own policies, exported IN THE TEST by the real ms20 and ms210 stacks:
tests/model_fixtures/user_policy.py (LayerNorm, a discrete and a continuous head, 11
observations), and the package tests/model_fixtures/mypolicy (seven policies built by a factory,
with the checkpoints training saved)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from auditor.policy.model_file import seeded_inputs
from auditor.worker.mindir import read_info
from tests.conftest import DEFAULT_CONFIG, REPO, stack_python

SCRIPT = REPO / "tests" / "model_fixtures" / "user_policy.py"


def export_user_policy(
    stack: str, out: Path, seed: int = 0, noise: bool = False, batch: int = 8, fp16: bool = False
) -> Path:
    """Export the policy with ``stack``'s MindSpore to ``out`` (a .mindir path)."""
    argv = [str(stack_python(stack)), str(SCRIPT), str(out), "--seed", str(seed), "--batch", str(batch)]
    if noise:
        argv.append("--noise")
    if fp16:
        argv.append("--fp16")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.is_file(), f"{stack} wrote no {out}"
    return out


POLICIES = REPO / "tests" / "model_fixtures" / "mypolicy" / "export.py"


def export_policies(
    stack: str, out: Path, kinds: tuple[str, ...] = (), seed: int = 0, batch: int = 8
) -> list[Path]:
    """Export mypolicy's policies (all, or ``kinds``) with ``stack``'s MindSpore into ``out``:
    KIND.mindir and its checkpoint KIND.ckpt each, for a batch of ``batch``."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [str(stack_python(stack)), str(POLICIES), str(out), "--seed", str(seed), "--batch", str(batch)]
    if kinds:
        argv += ["--kinds", ",".join(kinds)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(out.glob("*.mindir"))


FIXTURES = REPO / "tests" / "model_fixtures"
SERVERS = {"lite20": ("lite", "lite20"), "ms210-graph": ("graph", "ms210"), "ms20-graph": ("graph", "ms20")}
"""The serving stacks the policies are checked on: name -> (how run_mindir.py loads, interpreter)."""
MS20_GRAPH = """
[stacks.ms20-graph]
role = "infer"
runtime = "mindspore-graph"
python = "${AUDITOR_STACKS_DIR:-${XDG_CACHE_HOME:-~/.cache}/auditor/stacks}/ms20/bin/python"
"""


def policies_config(policies: dict[tuple[str, str], Path], path: Path) -> Path:
    """The shipped stacks without pairs or rollouts, short latency runs, MindSpore 2.0 GraphCell
    as a server too, and each policy ((exporter, kind) -> file) as a [models.EXPORTER_KIND]
    served by SERVERS, its reference the training network: its factory and checkpoint on the
    stack that exported it. Written to ``path``."""
    head = DEFAULT_CONFIG.read_text().split("# --- pairs")[0]
    head = head.replace("[rollout]\nenabled = true", "[rollout]\nenabled = false")
    head = head.replace("warmup = 5 ", "warmup = 1 ").replace("iterations = 50 ", "iterations = 5 ")
    models = []
    for (exporter, kind), file in policies.items():
        network = (
            f'{{ factory = "mypolicy.nets:build_actor", checkpoint = "{file.with_suffix(".ckpt")}", '
            f'stack = "{exporter}", path = "{FIXTURES}", kwargs = {{ kind = "{kind}" }} }}'
        )
        models.append(
            f'\n[models.{exporter}_{kind}]\npath = "{file}"\nstacks = {json.dumps(list(SERVERS))}\n'
            f"train = {network}\n"
        )
    path.write_text(head + MS20_GRAPH + "".join(models))
    return path


def served_truth(policies: dict[tuple[str, str], Path]) -> dict[tuple[str, str, str], dict]:
    """(exporter, kind, server) -> what the serving runtime did with the file, outside the
    auditor (tests/model_fixtures/run_mindir.py), on the batch `check` runs (seeded normal
    inputs of the file's signature): one process per server, every model kept alive. Each
    result: phase ("load", "run" or "done"), error, outputs [[shape, dtype, finite]], and
    ``works`` (ran, every output finite)."""
    for path in policies.values():
        np.savez(
            path.with_suffix(".inputs.npz"), *seeded_inputs(read_info(path.read_bytes()).inputs or (), 0)
        )

    def run(server: str) -> None:
        how, python = SERVERS[server]
        argv = [str(stack_python(python)), str(FIXTURES / "run_mindir.py"), how, *map(str, policies.values())]
        with contextlib.suppress(subprocess.TimeoutExpired):  # a hang: the result files say where
            subprocess.run(
                argv, capture_output=True, timeout=600, env={**os.environ, "RUN_MINDIR_TAG": server}
            )

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run, SERVERS))
    out = {}
    for (exporter, kind), path in policies.items():
        for server in SERVERS:
            result = path.with_name(f"{kind}.{server}.json")
            got = (
                json.loads(result.read_text())
                if result.exists()
                else {"phase": "start", "error": "no result"}
            )
            got["works"] = got["phase"] == "done" and all(finite for _, _, finite in got["outputs"])
            out[(exporter, kind, server)] = got
    return out
