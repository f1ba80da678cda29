"""The fingerprint collected through the real stacks' workers (Python 3.7 mindspore 2.0 and
mindspore-lite 2.0, Python 3.11 mindspore 2.10): what the installed packages really ship."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from auditor.plugins.default_collectors import COLLECTORS

from auditor.config.tables import Config, StackConfig
from auditor.extend.manager import Plugins
from auditor.fingerprint.collect import fingerprint_stack
from auditor.worker import fingerprint as runner
from tests.ascend_trees import AscendTree, build_tree
from tests.conftest import stack_python
from tests.unit.collectors.test_collectors import SECTIONS, _assert_dead, assert_nulls_explained

pytestmark = pytest.mark.stacks


def fingerprint_one(stack: StackConfig) -> dict:
    """The stack's fingerprint, its worker opened the one way every command opens it."""
    config = Config("<test>", "sqlite://", {stack.name: stack}, (), {})
    return fingerprint_stack(Plugins(entry_points=False).reach(config), stack.name, COLLECTORS)


RUNTIMES = {"ms20": "mindspore", "lite20": "mindspore-lite", "ms210": "mindspore"}
# The tree each stack is fingerprinted against (ms210 gets the too-old CANN 8.0.0).
TREES = {"ms20": "consistent-8.2", "lite20": "310p-nnrt", "ms210": "cann-8.0.0"}
HEX = re.compile(r"^[0-9a-f]{8,40}$")


def make_stack(
    name: str, tree: AscendTree, timeout: float = 5.0, env: dict[str, str] | None = None
) -> StackConfig:
    role = "infer" if name == "lite20" else "train"
    return StackConfig(
        name,
        role,
        RUNTIMES[name],
        str(stack_python(name)),
        ascend_root=str(tree.ascend_root),
        system_root=str(tree.system_root),
        npu_smi=str(tree.npu_smi),
        npu_smi_timeout=timeout,
        env=env or {},
    )


@pytest.fixture(scope="module")
def documents(stacks, tmp_path_factory) -> dict[str, tuple[AscendTree, dict]]:
    base = tmp_path_factory.mktemp("trees")
    out = {}
    for name, tree_name in TREES.items():
        tree = build_tree(base / name, tree_name)
        out[name] = tree, fingerprint_one(make_stack(name, tree))
    return out


def test_every_section_and_the_runtime_come_back(documents) -> None:
    for name, (_, doc) in documents.items():
        # a stack that watches no model files has no models section (auditor.fingerprint.collect)
        assert list(doc) == [*(s for s in SECTIONS if s != "models"), "runtime"], name
        assert_nulls_explained({k: v for k, v in doc.items() if k != "runtime"})
        assert "pid" not in doc["runtime"]
        assert doc["runtime"]["runtime"] == RUNTIMES[name]
        assert doc["host"]["python"]["executable"] == doc["runtime"]["executable"]


def test_ms20_packages_and_build(documents) -> None:
    _, doc = documents["ms20"]
    assert doc["host"]["python"]["version"].startswith("3.7.")
    assert doc["packages"]["all"]["mindspore"] == "2.0.0"
    assert doc["packages"]["framework"]["numpy"] == doc["runtime"]["numpy"]
    assert doc["packages"]["framework"]["numpy"].startswith("1.21.")
    assert doc["packages"]["framework"]["mindspore-lite"] is None
    ms = doc["framework"]["mindspore"]
    assert ms["version"] == "2.0.0" and ms["supported_cann"] == ["6.11", "6.3"]
    assert HEX.match(ms["commit_id"]) and "r2.0" in ms["commit_branch"]
    assert ms["checker_file"].endswith("site-packages/mindspore/run_check/_check_version.py")
    assert doc["framework"]["mindspore_lite"] is None


def test_lite20_packages_and_build(documents) -> None:
    _, doc = documents["lite20"]
    assert doc["packages"]["all"]["mindspore-lite"] == "2.0.0"
    assert "mindspore" not in doc["packages"]["all"]
    assert doc["packages"]["framework"]["numpy"] == doc["runtime"]["numpy"]
    assert doc["packages"]["framework"]["numpy"].startswith("1.21.")
    lite = doc["framework"]["mindspore_lite"]
    assert lite["version"] == "2.0.0" and HEX.match(lite["commit_id"])
    # The MindSpore 2.0.0 and Lite 2.0.0 wheels come from one commit (short and full hash).
    assert lite["commit_id"].startswith(documents["ms20"][1]["framework"]["mindspore"]["commit_id"])


def test_ms210_packages_and_build(documents) -> None:
    _, doc = documents["ms210"]
    assert doc["host"]["python"]["version"].startswith("3.11.")
    assert doc["packages"]["all"]["mindspore"] == "2.10.0"
    assert doc["packages"]["framework"]["numpy"] == doc["runtime"]["numpy"]
    ms = doc["framework"]["mindspore"]
    assert ms["version"] == "2.10.0" and doc["runtime"]["runtime_version"] == "2.10.0"
    assert ms["supported_cann"] == ["8.2", "8.3", "8.5", "9.0", "9.1"]
    assert HEX.match(ms["commit_id"]) and "r2.10" in ms["commit_branch"]


def test_the_workers_read_the_trees_as_this_process_does(documents) -> None:
    """Python 3.7 and 3.11 workers give the same host sections as the in-process collectors."""
    for name, (tree, doc) in documents.items():
        context = tree.context()
        environ = context.pop("environ")
        ours = runner.collect(COLLECTORS, context, environ)["fingerprint"]
        for section in ("driver", "firmware", "npu_smi"):
            assert doc[section] == ours[section], (name, section)
        # the choice is the stack's framework's: this process has none installed
        assert {**doc["cann"], "choice": {}} == ours["cann"] and ours["cann"]["choice"] == {}
        assert doc["cann"]["version"] == (tree.spec.cann_version or tree.spec.nnrt_version)


# -- which CANN each reference stack would load, read from its installed framework ---------------
FRAMEWORK_KEY = {"ms20": "mindspore", "ms210": "mindspore", "lite20": "mindspore_lite"}
CHOICE_TREES = ("toolkits-side-by-side", "cann-8.5", "300i-pro", "home-nondefault")


@pytest.fixture(scope="module")
def choices(stacks, tmp_path_factory) -> dict[tuple[str, str, str], tuple[AscendTree, dict]]:
    """(tree, stack, environment) -> the stack's fingerprint against the tree: with the
    environment the tree's set_env.sh exports, and with none."""
    base = tmp_path_factory.mktemp("choices")
    out = {}
    for tree_name in CHOICE_TREES:
        tree = build_tree(base, tree_name)
        sourced = {k: v for k, v in tree.set_env().items() if k != "PATH"}
        for name in FRAMEWORK_KEY:
            for env_name, env in (("set_env", sourced), ("bare", {})):
                out[tree_name, name, env_name] = tree, fingerprint_one(make_stack(name, tree, env=env))
    return out


@pytest.mark.parametrize("tree_name", CHOICE_TREES)
@pytest.mark.parametrize("name", list(FRAMEWORK_KEY))
@pytest.mark.parametrize("env_name", ["set_env", "bare"])
def test_each_stack_names_the_cann_its_framework_would_load(choices, tree_name, name, env_name) -> None:
    """The real ms20, ms210 and lite20 packages, parsed in their own workers: MindSpore 2.0's
    fixed lookup order, MindSpore 2.10's ASCEND_HOME_PATH, Lite's dynamic loader."""
    tree, doc = choices[tree_name, name, env_name]
    (key,) = doc["cann"]["choice"]
    assert key == FRAMEWORK_KEY[name]
    choice = doc["cann"]["choice"][key]
    expected = tree.expected_cann(name + ("" if env_name == "set_env" else "-bare"))
    assert (choice["package"], choice["basis"]) == expected, choice["how"]
    assert choice["probable"] == (choice["basis"] == "inference")
    if name == "ms20":
        # its installed checker's own order, mapped under the stack's ascend_root
        assert choice["tried"][:3] == [
            f"{tree.ascend_root}/{p}/compiler/version.info"
            for p in ("nnae/latest", "ascend-toolkit/latest", "latest")
        ]
    if name == "ms210" and choice["basis"] == "environment":
        assert choice["source"] == "ASCEND_HOME_PATH" and choice["checked"] == choice["package"]
    if name == "lite20" and choice["basis"] == "environment":
        assert choice["source"] == "LD_LIBRARY_PATH" and choice["checked"] is None


def test_the_choice_reads_the_installed_checkers(choices) -> None:
    """What the framework collector read from each installed checker is what decided."""
    _, ms20 = choices["toolkits-side-by-side", "ms20", "set_env"]
    _, ms210 = choices["toolkits-side-by-side", "ms210", "set_env"]
    assert ms20["framework"]["mindspore"]["cann_lookup"] == {
        "env": None,
        "paths": [
            "/usr/local/Ascend/nnae/latest/compiler/version.info",
            "/usr/local/Ascend/ascend-toolkit/latest/compiler/version.info",
            "/usr/local/Ascend/latest/compiler/version.info",
        ],
    }
    assert ms210["framework"]["mindspore"]["cann_lookup"] == {"env": "ASCEND_HOME_PATH", "paths": []}
    assert "AscendEnvChecker tries" in ms20["cann"]["choice"]["mindspore"]["how"]
    assert "$ASCEND_HOME_PATH/compiler/version.info" in ms210["cann"]["choice"]["mindspore"]["how"]


def test_a_hanging_npu_smi_does_not_hang_the_worker(stacks, tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "consistent-8.2", npu_smi_mode="hang")
    doc = fingerprint_one(make_stack("lite20", tree, timeout=1.0))  # its worker answered
    assert (
        doc["npu_smi"]["unknown"]["chips"]
        == f"`{tree.npu_smi} info`: timed out after 1 s; process group killed"
    )
    assert doc["driver"]["version"] == "25.0.rc1.1"  # the other sections are all there
    _assert_dead(int(tree.hang_pid_file.read_text()))


def test_stack_environment_is_redacted_and_runtime_changes_left_out(stacks, tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "empty")
    env = {
        "HCCL_DETERMINISTIC": "true",
        "ASCEND_AUTH_TOKEN": "sekret-1",
        "MS_CACHE_URL": "https://ci:sekret-2@cache.example.org/ms",
    }
    doc = fingerprint_one(make_stack("ms20", tree, env=env))
    environment = doc["environment"]
    assert environment["HCCL_DETERMINISTIC"] == "true"
    assert environment["ASCEND_AUTH_TOKEN"] == "<redacted>"
    assert environment["MS_CACHE_URL"] == "https://<redacted>@cache.example.org/ms"
    assert "sekret" not in str(doc)
    # MindSpore 2.0's import sets MS_DEV_CLOSE_VERSION_CHECK and prepends its lib/ to
    # LD_LIBRARY_PATH; that is the runtime's doing, not the stack's environment.
    assert "MS_DEV_CLOSE_VERSION_CHECK" not in environment
    assert "mindspore" not in environment.get("LD_LIBRARY_PATH", "")


def test_variables_the_auditor_sets_for_its_workers_are_not_the_stacks(stacks, tmp_path, monkeypatch) -> None:
    """The auditor sets GLOG_v=2 for its workers (so Lite says why a build failed); that is not
    part of the stack's environment. A GLOG_v the stack's own config sets is."""
    monkeypatch.delenv("GLOG_v", raising=False)
    monkeypatch.delenv("GLOG_logtostderr", raising=False)
    tree = build_tree(tmp_path, "empty")
    doc = fingerprint_one(make_stack("lite20", tree, env={"OMP_NUM_THREADS": "2"}))
    assert "GLOG_v" not in doc["environment"] and doc["environment"]["OMP_NUM_THREADS"] == "2"
    assert not any(k.startswith("AUDITOR_") for k in doc["environment"])
    doc = fingerprint_one(make_stack("lite20", tree, env={"GLOG_v": "3"}))
    assert doc["environment"]["GLOG_v"] == "3"
