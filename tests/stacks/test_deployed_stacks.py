"""The deployed-model watch on the real stacks: lite20 serves /srv-like files; each cycle
fingerprints them in lite20's worker (Python 3.7, no framework), and replacing the file with a
retrained one, with the same policy in float16, with one exported by another MindSpore, or
deleting it, gives the matching model-drift finding at its severity (another graph: an error,
the run's exit status 1, unless the stack's model_drift_severity says otherwise); the
MindIR-version rule runs on the deployed file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from auditor.config.tables import Config
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.history.store import Store
from tests.configs import build
from tests.user_models import export_user_policy

pytestmark = pytest.mark.stacks


@pytest.fixture(scope="module")
def exports(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("exports")
    return {
        "v1": export_user_policy("ms20", d / "v1.mindir", seed=0),
        "retrained": export_user_policy("ms20", d / "retrained.mindir", seed=1),
        "fp16": export_user_policy("ms20", d / "fp16.mindir", seed=0, fp16=True),
        "ms210": export_user_policy("ms210", d / "ms210.mindir", seed=0),
    }


def _watching(default_doc: dict, srv: Path, source: Path, plugins: Plugins, **lite20: object) -> Config:
    """The shipped stacks, no pair: lite20 watches the MindIR files in ``srv``."""
    watching = {**default_doc["stacks"]["lite20"], "models": [str(srv / "*.mindir")], **lite20}
    return build(
        default_doc,
        source=str(source),
        runtimes=plugins.runtimes(),
        stacks={**default_doc["stacks"], "lite20": watching},
        rollout={"enabled": False},
        drop=["pairs"],
    )


def test_replacing_and_deleting_the_deployed_file(
    exports: dict[str, Path], default_doc: dict, tmp_path: Path
) -> None:
    srv = tmp_path / "srv" / "policy"
    srv.mkdir(parents=True)
    plugins = Plugins(entry_points=False)
    config = _watching(default_doc, srv, tmp_path / "auditor.toml", plugins)
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")

    def cycle():  # noqa: ANN202
        c = Cycle(config, plugins.probes(), plugins.runtimes(), plugins=plugins, history=store)
        result = c.run()
        store.finish_run(store.begin_run(str(tmp_path)), result, c.artifacts)
        assert set(result.stacks) == {"lite20"}  # only the watching stack is started
        return result

    def findings(result, kind):  # noqa: ANN001, ANN202
        return [f for f in result.findings if f.kind == kind]

    deployed = srv / "policy.mindir"
    shutil.copyfile(exports["v1"], deployed)
    first = cycle()
    files = first.stacks["lite20"].fingerprint["models"]["files"]
    entry = files[str(deployed)]
    assert entry["model_version"] == "2.0.0" and entry["mind_ir_version"] == 1
    assert "LayerNorm" in entry["op_types"] and entry["inputs"] == [
        {"name": "obs", "shape": [8, 11], "dtype": "float32"}
    ]
    assert findings(first, "model-drift") == [] and findings(first, "incompatible") == []

    same = cycle()  # nothing changed: no drift of any kind
    assert [f.kind for f in same.findings] == []

    shutil.copyfile(exports["retrained"], deployed)
    (f,) = findings(cycle(), "model-drift")
    assert f.details["change"] == "retrained" and f.severity == "warning"
    assert (
        f"deployed model {deployed} on lite20 changed since run" in f.message and "new weights" in f.message
    )

    same = cycle()
    assert same.exit_code == 0  # a retrained file is a warning: the run stays clean

    shutil.copyfile(exports["fp16"], deployed)  # fp32 -> fp16: another graph, an error
    result = cycle()
    (f,) = findings(result, "model-drift")
    assert (f.details["change"], f.severity) == ("graph", "error")
    assert "another graph from the same exporter (operators +Cast; inputs obs[8, 11] float32 -> " in f.message
    assert "obs[8, 11] float16" in f.message
    assert result.outcome == "error" and result.exit_code == 1  # an error finding: not clean, said so

    shutil.copyfile(exports["ms210"], deployed)
    result = cycle()
    (f,) = findings(result, "model-drift")
    assert f.details["change"] == "re-exported"
    assert "MindSpore 2.10.0, MindIR version 3 (was MindSpore 2.0.0, MindIR version 1" in f.message
    (rule,) = findings(result, "incompatible")  # the MindIR-version rule on the deployed file
    assert rule.subject == "deployed:lite20->lite20" and "MindIR version 3" in rule.message
    assert str(deployed) in rule.details["facts"]["not_loaded"].__repr__()
    assert [x.kind for x in result.findings if x.kind == "version-drift"] == []  # one change, one finding

    deployed.unlink()
    (f,) = findings(cycle(), "model-drift")
    assert f.details["change"] == "removed" and f.details["after"] is None
    assert "removed (was MindSpore 2.10.0" in f.message
    store.close()


def test_the_severity_of_a_changed_model_is_the_stacks_to_set(
    exports: dict[str, Path], default_doc: dict, tmp_path: Path
) -> None:
    srv = tmp_path / "srv"
    srv.mkdir()
    plugins = Plugins(entry_points=False)
    severity = {"graph": "warning", "retrained": "critical"}
    config = _watching(default_doc, srv, tmp_path / "auditor.toml", plugins, model_drift_severity=severity)
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    deployed = srv / "policy.mindir"
    outcomes = []
    for source in ("v1", "retrained", "fp16"):
        shutil.copyfile(exports[source], deployed)
        c = Cycle(config, plugins.probes(), plugins.runtimes(), plugins=plugins, history=store)
        result = c.run()
        store.finish_run(store.begin_run(str(tmp_path)), result, c.artifacts)
        drift = [(f.details["change"], f.severity) for f in result.findings if f.kind == "model-drift"]
        outcomes.append((drift, result.exit_code))
    store.close()
    assert outcomes == [([], 0), ([("retrained", "critical")], 1), ([("graph", "warning")], 0)]
