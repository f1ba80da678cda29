"""The plugin author's guide stays true: every hook is documented and exercised by a test,
and the guide's examples load as plugins and do what the text says."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import types
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from auditor import hookspecs
from auditor.cli.main import cli
from auditor.compare.outputs import Comparator, MetricCheck
from auditor.config.tables import PairConfig
from auditor.extend.manager import Plugins
from auditor.rules.engine import RuleContext
from auditor.runtime import MINDIR
from auditor.worker.runtimes import Runtime
from tests.conftest import DEFAULT_CONFIG, REPO

GUIDE = REPO / "docs" / "plugins.md"
HOOKS = sorted(n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("auditor_"))


def python_blocks() -> list[str]:
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.DOTALL)]


def test_every_hook_has_a_section_and_every_section_a_hook() -> None:
    sections = re.findall(r"^### (\w+)$", GUIDE.read_text(), re.MULTILINE)
    assert sorted(sections) == HOOKS
    for hook in HOOKS:
        assert getattr(hookspecs, hook).__doc__, f"{hook} has no docstring in auditor/hookspecs.py"


def test_every_hook_is_implemented_by_a_plugin_in_some_test() -> None:
    """A hook no test implements is a hook whose contract nobody checks."""
    sources = [p.read_text() for p in (REPO / "tests").rglob("*.py") if p.name != Path(__file__).name]
    missing = [h for h in HOOKS if not any(re.search(rf"def {h}\(", s) for s in sources)]
    assert missing == []


def test_every_python_example_parses() -> None:
    blocks = python_blocks()
    assert len(blocks) >= len(HOOKS)
    for block in blocks:
        ast.parse(block)


def _example_plugin(block: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(block, f"docs/plugins.md:{name}", "exec"), module.__dict__)
    return module


CHECKED = r"check: (\d+) stack-side module\(s\) imported in (\d+) stack\(s\): (\d+) ok, (\d+) failed"
"""The summary line of `auditor plugins --check`."""


def _plugins_from_examples() -> Plugins:
    plugins = Plugins(entry_points=False, builtins=())
    for i, block in enumerate(python_blocks()):
        if "@hookimpl" in block:
            plugins.pm.register(_example_plugin(block, f"example{i}"), name=f"example{i}")
    return plugins


def test_the_examples_load_as_plugins_without_problems() -> None:
    plugins = _plugins_from_examples()
    assert "my_policies.probe" in [m for _, ms in plugins._each("auditor_probes") for m in ms]
    assert plugins.runtimes()["lite-ascend"].can == "load"
    assert plugins.fingerprint_collectors() == ["my_collectors.hccl_conf"]
    assert set(plugins.rules()) == {"numpy-major"}
    assert set(plugins.comparators()) == {"value_sign"}
    assert set(plugins.alert_sinks()) == {"statsd"}
    group = click.Group("auditor")
    plugins.add_commands(group)
    assert "policy-report" in group.commands
    assert plugins.problems == []


def test_the_runtime_example_explains_its_failures_and_has_a_worker_side() -> None:
    spec = _plugins_from_examples().runtimes()["lite-ascend"]
    assert spec.loads is MINDIR and spec.package == "mindspore-lite"
    found = spec.explain("build failed: no kernel for Erf on Ascend", "load")
    assert (found.kind, found.operator, found.form.learned) == ("operator", "Erf", True)
    too_new = spec.explain("maximum mind ir version: 1, please ... the mind ir version: 3")
    assert (too_new.kind, too_new.maximum, too_new.version) == ("mindir-version", 1, 3)
    assert spec.explain("Common error code") is None
    [worker] = [b for b in python_blocks() if "class LiteAscend(Runtime)" in b]
    module = _example_plugin(worker, "lite_ascend")
    assert issubclass(module.LiteAscend, Runtime) and spec.worker_class.endswith(":LiteAscend")


def test_the_comparator_example_computes_what_it_says() -> None:
    comparator: Comparator = _plugins_from_examples().comparators()["value_sign"]
    train = {"value": np.array([1.0, -2.0, 3.0, 0.5])}
    infer = {"value": np.array([1.0, -2.0, -3.0, 0.5])}
    [check] = comparator.compare(train, infer, {"min_agreement": 0.5})
    expected = MetricCheck(
        "value_sign_agreement", 0.75, True, 0.5, "value", "value signs agree on 75.00%", ">="
    )
    assert check == expected
    [strict] = comparator.compare(train, infer, {})
    assert not strict.passed


def test_the_rule_example_fires_only_on_numpy_2() -> None:
    rule = _plugins_from_examples().rules()["numpy-major"]

    def context(numpy: str) -> RuleContext:
        return RuleContext(
            stacks={},
            fingerprints={"t": {"packages": {"framework": {"numpy": numpy}}}, "i": None},
            pairs=(PairConfig("t", "i", ("ppo_policy",)),),
        )

    [found] = rule.check(context("2.4.6"))
    assert (found.severity, found.key) == ("info", "t/numpy-major")
    assert found.details["facts"] == {"numpy": "2.4.6"}
    assert list(rule.check(context("1.21.6"))) == []


def test_the_sink_example_sends_a_datagram() -> None:
    import socket

    sink_type = _plugins_from_examples().alert_sinks()["statsd"]
    assert sink_type.validate({"port": "x"}) == ["port: must be an integer"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(5)
        sink = sink_type.create("metrics", {"port": server.getsockname()[1]})
        sink.send({"event": "opened", "alert": {"severity": "warning"}})
        assert server.recv(1024) == b"auditor.alert.opened:1|c|#severity:warning"


def test_the_cli_example_runs() -> None:
    group = click.Group("auditor")
    _plugins_from_examples().add_commands(group)
    result = CliRunner().invoke(group, ["policy-report", "--help"])
    assert result.exit_code == 0 and "Summarise PROBE" in result.output


# -- every block of the guide runs ---------------------------------------------------------------
# Python blocks that start with "# <path>.py:" are files of the guide's plugin folder (written
# into a temporary tree and loaded, checked and run from there); other Python blocks are plugin
# modules (the tests above); TOML blocks are parsed, and those about the example probe make up
# its config with the reference stacks; console blocks are run, their `$ auditor ...` lines.

FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
FILE_HEADER = re.compile(r"^# ([\w/.]+\.py):")


def blocks() -> list[tuple[str, str]]:
    return [(m.group(2), textwrap.dedent(m.group(3))) for m in FENCE.finditer(GUIDE.read_text())]


def guide_tree(root: Path) -> Path:
    """The guide's plugin folder and tests, as files under ``root``; its config as auditor.toml:
    the shipped file with the guide's edits made as a user makes them."""
    text = DEFAULT_CONFIG.read_text()
    for lang, body in blocks():
        header = FILE_HEADER.match(body)
        if lang == "python" and header:
            path = root / header.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
        elif lang == "toml" and body.startswith('[plugins]\ndirs = ["plugins"]'):
            text = with_guide_edits(text, body)
    (root / "auditor.toml").write_text(text)
    return root


def with_guide_edits(shipped: str, block: str) -> str:
    """The shipped config with the guide's block applied: [plugins] dirs set, each of its pairs
    replacing the shipped pair of the same two stacks, its [probes.*] tables added."""
    guide = tomllib.loads(block)
    assert "[plugins]\ndirs = []\n" in shipped
    text = shipped.replace(
        "[plugins]\ndirs = []\n", f"[plugins]\ndirs = {json.dumps(guide['plugins']['dirs'])}\n"
    )
    for pair in guide["pairs"]:
        head = f'[[pairs]]\ntrain = "{pair["train"]}"\ninfer = "{pair["infer"]}"\n'
        old = re.search(re.escape(head) + r"probes = \[[^\]]*\]\n", text)
        assert old is not None, f"the guide edits a pair the shipped config does not have: {head}"
        text = text.replace(old.group(0), f"{head}probes = {json.dumps(pair['probes'])}\n")
    return text + "\n" + block[block.index("[probes.") :]


def test_every_block_is_run_by_a_test() -> None:
    kinds = {"file": 0, "plugin": 0, "toml": 0, "console": 0}
    for lang, body in blocks():
        if lang == "python":
            kinds["file" if FILE_HEADER.match(body) else "plugin"] += 1
            assert FILE_HEADER.match(body) or "@hookimpl" in body, f"a Python block no test runs:\n{body}"
        else:
            assert lang in ("toml", "console"), f"a {lang} block no test runs:\n{body}"
            kinds[lang] += 1
            if lang == "toml":
                tomllib.loads(body)
            else:
                assert any(line.startswith("$ auditor ") for line in body.splitlines())
    assert kinds["file"] >= 5 and kinds["plugin"] >= len(HOOKS) - 1 and kinds["console"] >= 2


def test_the_guide_plugin_folder_loads_and_its_config_is_valid(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    root = guide_tree(tmp_path)
    plugins = Plugins([root / "plugins"], entry_points=False)
    assert plugins.problems == []
    assert "value_net" in plugins.probes() and "my_collectors.hccl_conf" in plugins.fingerprint_collectors()
    result = CliRunner().invoke(cli, ["--config", str(root / "auditor.toml"), "config", "check"])
    assert result.exit_code == 0, result.output
    sink_block = next(b for lang, b in blocks() if lang == "toml" and "statsd" in b)
    options = tomllib.loads(sink_block)["alerts"]["sinks"]["metrics"]
    sink_type = _plugins_from_examples().alert_sinks()[options.pop("type")]
    assert sink_type.validate(options) == []
    entry = next(b for lang, b in blocks() if lang == "toml" and "entry-points" in b)
    assert tomllib.loads(entry)["project"]["entry-points"]["auditor"]
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_loads.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    for name in [m for m in sys.modules if m.split(".")[0] in ("my_policies", "my_collectors")]:
        del sys.modules[name]


@pytest.mark.stacks
def test_the_guide_runs_on_the_reference_stacks(stacks: Path, tmp_path: Path) -> None:
    """The console blocks, the 3.7 check and the guide's run_probe test, on the real stacks."""
    root = guide_tree(tmp_path)
    env = {**os.environ, "AUDITOR_CONFIG": str(root / "auditor.toml")}
    auditor = Path(sys.executable).parent / "auditor"
    for lang, body in blocks():
        if lang != "console":
            continue
        shown = [line for line in body.splitlines() if line and not line.startswith("$ ")]
        for line in body.splitlines():
            if line.startswith("$ auditor "):
                args = line[len("$ auditor ") :].split("#")[0].split()
                proc = subprocess.run(
                    [str(auditor), *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
                )
                assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
                if shown and "--json" not in args and "--check" not in args:
                    assert set(shown) <= set(proc.stdout.splitlines()), proc.stdout
                if "--check" in args:
                    # the plugin's stack side really imported in every stack, none failed
                    m = re.search(CHECKED, proc.stdout)
                    assert m is not None, proc.stdout
                    modules, stacks, ok, failed = map(int, m.groups())
                    assert modules >= 1 and stacks >= 1 and ok == modules * stacks and failed == 0, (
                        proc.stdout
                    )
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_value_net.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert "1 passed" in tests.stdout
