"""The plugin manager: discovery from plugin directories and entry points, and what happens
to plugins that are broken in each of the ways a user's plugin can be."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor import hookspecs
from auditor.cli.main import cli
from auditor.compare.outputs import Comparator, MetricCheck
from auditor.extend.manager import BUILTINS, Plugins
from auditor.hookspecs import hookimpl
from auditor.runtime import RuntimeSpec

GOOD = '''
"""A plugin that implements a probe, a runtime, a comparator, a collector and a command."""
import click
from auditor import hookimpl
from auditor.compare.outputs import Comparator, MetricCheck
from auditor.runtime import RuntimeSpec

__version__ = "1.2.3"


@hookimpl
def auditor_probes():
    return ["goodpkg.tiny_probe"]


@hookimpl
def auditor_runtimes():
    return [RuntimeSpec("onnx-test", "load", "goodpkg.runtime:Onnx", "a test runtime")]


@hookimpl
def auditor_comparators():
    return [Comparator("always_ok", lambda t, i, o: [MetricCheck("ok", 1.0, True)])]


@hookimpl
def auditor_fingerprint_collectors():
    return ["goodpkg.collector"]


@hookimpl
def auditor_rules():
    from auditor.rules.engine import Rule, finding

    def always(context):
        yield finding("always", "info", "x", "x/always", "always fires", {}, "nothing to do")

    return [Rule("always", "fires on every cycle", always)]


@hookimpl
def auditor_alert_sinks():
    from auditor.alerts.engine import SinkType

    class Collect:
        events = []

        def send(self, event):
            self.events.append(event)

    return [SinkType("collect", "keeps events in memory", lambda o: [], lambda name, o: Collect())]


@hookimpl
def auditor_cli_commands(cli):
    @cli.command("hello-plugin")
    def hello():
        """Say hello from a plugin."""
        click.echo("hello from good_plugin")
'''

TINY_PROBE = """
import numpy as np
NAME = "tiny"
VERSION = "7"
INPUTS = ("x",)
OUTPUTS = ("y",)
DEFAULT_PARAMS = {"batch": 2}
def make_weights(params):
    return {}
def make_inputs(params):
    return [np.zeros((params["batch"], 3), np.float32)]
def build_cell(params, weights):
    raise NotImplementedError("not built in these tests")
"""


def write_plugins(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


PLUGIN_MODULES = {
    "good_plugin", "goodpkg", "broken_syntax", "unknown_hook", "raises_in_hook", "bad_probe",
    "duplicate_probe", "exits",
}  # fmt: skip


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Directory plugins are imported by name and their folder put on sys.path: undo both.
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield write_plugins(
        tmp_path / "plugins",
        {
            "good_plugin.py": GOOD,
            "goodpkg/__init__.py": "",
            "goodpkg/tiny_probe.py": TINY_PROBE,
            "broken_syntax.py": "def oops(:\n",
            "unknown_hook.py": (
                "from auditor import hookimpl\n@hookimpl\ndef auditor_no_such_hook():\n    pass\n"
            ),
            "raises_in_hook.py": (
                "from auditor import hookimpl\n@hookimpl\ndef auditor_probes():\n"
                "    raise RuntimeError('database is down')\n"
            ),
            "bad_probe.py": "from auditor import hookimpl\n@hookimpl\ndef auditor_probes():\n"
            "    return ['no_such_module_anywhere.probe']\n",
            "duplicate_probe.py": "from auditor import hookimpl\n@hookimpl\ndef auditor_probes():\n"
            "    return ['auditor.probes.ppo_policy']\n",
            "exits.py": "raise SystemExit(3)\n",
            "_private.py": "raise RuntimeError('never imported')\n",
            "notes.txt": "not a plugin",
        },
    )
    for name in list(sys.modules):
        if name.split(".")[0] in PLUGIN_MODULES:
            del sys.modules[name]


def test_builtins_register_through_the_hooks() -> None:
    plugins = Plugins(entry_points=False)
    assert [i.name for i in plugins.infos] == list(BUILTINS)
    assert all(i.builtin and i.error is None and i.hooks for i in plugins.infos)
    assert "ppo_policy" in plugins.probes()
    runtimes = plugins.runtimes()
    assert {runtimes[n].can for n in ("mindspore-graph", "mindspore-lite")} == {"load"}
    assert runtimes["mindspore"].can == "export"
    assert plugins.problems == []


def test_directory_plugins_load_and_broken_ones_are_reported(plugin_dir: Path) -> None:
    plugins = Plugins([plugin_dir], entry_points=False)
    infos = {i.name: i for i in plugins.infos}
    assert infos["good_plugin"].error is None
    assert infos["good_plugin"].version == "1.2.3"
    assert infos["good_plugin"].source == str(plugin_dir / "good_plugin.py")
    assert "auditor_probes" in infos["good_plugin"].hooks
    assert "cannot import: SyntaxError" in infos["broken_syntax"].error
    assert "unknown hook(s): auditor_no_such_hook" in infos["unknown_hook"].error
    assert "cannot import: SystemExit" in infos["exits"].error
    assert "_private" not in infos and "notes" not in infos
    assert infos["goodpkg"].error is None  # a package in the directory is a plugin too (no hooks)

    probes = plugins.probes()
    assert probes["tiny"].version == "7" and probes["tiny"].module == "goodpkg.tiny_probe"
    assert "duplicate_probe: probe 'ppo_policy' is already provided" in "\n".join(plugins.problems)
    assert plugins.runtimes()["onnx-test"].worker_class == "goodpkg.runtime:Onnx"
    assert "always_ok" in plugins.comparators()
    assert "goodpkg.collector" in plugins.fingerprint_collectors()
    [fired] = plugins.rules()["always"].check(None)
    assert (fired.key, fired.details["action"]) == ("x/always", "nothing to do")
    sink = plugins.alert_sinks()["collect"].create("mine", {})
    sink.send({"event": "opened"})
    assert sink.events == [{"event": "opened"}]
    assert {"log", "jsonl", "webhook", "exec"} <= set(plugins.alert_sinks())  # built-ins still there

    text = "\n".join(plugins.problems)
    assert "raises_in_hook: auditor_probes raised RuntimeError: database is down" in text
    assert "no_such_module_anywhere" in text
    assert "'ppo_policy' is already provided by auditor.probes.ppo_policy" in text
    # asking twice reports once
    n = len(plugins.problems)
    plugins.probes()
    assert len(plugins.problems) == n


def test_missing_plugin_directory_is_reported(tmp_path: Path) -> None:
    plugins = Plugins([tmp_path / "nowhere"], entry_points=False)
    assert plugins.problems == [f"plugin directory {tmp_path / 'nowhere'}: not a directory"]


def test_duplicate_names_keep_the_first_and_report_the_second() -> None:
    class First:
        @hookimpl
        def auditor_comparators(self):
            return [Comparator("same", lambda t, i, o: [MetricCheck("a", 1.0, True)])]

    class Second:
        @hookimpl
        def auditor_comparators(self):
            return [Comparator("same", lambda t, i, o: [MetricCheck("b", 2.0, True)])]

    plugins = Plugins(entry_points=False, builtins=())
    plugins.pm.register(First(), name="first")
    plugins.pm.register(Second(), name="second")
    found = plugins.comparators()
    assert found["same"].compare({}, {}, {})[0].metric == "a"
    assert any("second" in p and "already provided by first" in p for p in plugins.problems)


def test_runtime_spec_validates() -> None:
    with pytest.raises(ValueError, match="can must be"):
        RuntimeSpec("x", "train", "a:B")
    with pytest.raises(ValueError, match="module:Class"):
        RuntimeSpec("x", "load", "a.B")


def test_hookimpl_is_importable_from_auditor_without_pluggy_at_import_time() -> None:
    import auditor

    assert auditor.hookimpl is hookspecs.hookimpl
    with pytest.raises(AttributeError):
        auditor.no_such_thing  # noqa: B018


def test_plugins_command_lists_plugins_and_errors(plugin_dir: Path, tmp_path: Path, doc: dict) -> None:
    config = tmp_path / "auditor.toml"
    config.write_text(f'[plugins]\ndirs = ["{plugin_dir}"]\n' + _pairs_only())
    result = CliRunner().invoke(cli, ["--config", str(config), "plugins", "--json"])
    assert result.exit_code == 0, result.output
    listed = {p["name"]: p for p in json.loads(result.stdout)}
    assert listed["good_plugin"]["version"] == "1.2.3"
    assert "auditor_runtimes" in listed["good_plugin"]["hooks"]
    assert listed["broken_syntax"]["error"].startswith("cannot import: SyntaxError")
    assert not any(p["builtin"] for p in listed.values())
    assert "warning: plugin broken_syntax" in result.stderr

    everything = CliRunner().invoke(cli, ["--config", str(config), "plugins", "--all"])
    assert "auditor.plugins.default_probes" in everything.stdout
    assert "error: implements unknown hook(s): auditor_no_such_hook" in everything.stdout


def test_plugin_probes_and_runtimes_pass_config_validation(plugin_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "auditor.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [plugins]
            dirs = ["{plugin_dir}"]
            [stacks.t]
            role = "train"
            runtime = "mindspore"
            python = "/bin/true"
            [stacks.i]
            role = "infer"
            runtime = "onnx-test"
            python = "/bin/true"
            [[pairs]]
            train = "t"
            infer = "i"
            probes = ["tiny"]
            [probes.tiny]
            params = {{ batch = 4, nope = 1 }}
            """
        )
    )
    result = CliRunner().invoke(cli, ["--config", str(config), "config", "check"])
    assert result.exit_code == 2
    # the plugin's probe and runtime are known; only the bad parameter is reported
    assert "probes.tiny.params.nope: probe tiny has no such parameter (known: batch)" in result.stderr
    assert "unknown runtime" not in result.stderr and "unknown probe" not in result.stderr


def test_relative_plugin_dirs_are_relative_to_the_config_file(plugin_dir: Path) -> None:
    config = plugin_dir.parent / "auditor.toml"
    config.write_text('[plugins]\ndirs = ["plugins"]\n' + _pairs_only())
    result = CliRunner().invoke(cli, ["--config", str(config), "plugins"])
    assert "good_plugin 1.2.3" in result.stdout


def test_cli_commands_hook_adds_commands(plugin_dir: Path) -> None:
    import click

    group = click.Group("auditor")
    Plugins([plugin_dir], entry_points=False).add_commands(group)
    result = CliRunner().invoke(group, ["hello-plugin"])
    assert result.output == "hello from good_plugin\n"


def _pairs_only() -> str:
    return textwrap.dedent(
        """
        [stacks.t]
        role = "train"
        runtime = "mindspore"
        python = "/bin/true"
        [stacks.i]
        role = "infer"
        runtime = "mindspore-lite"
        python = "/bin/true"
        [[pairs]]
        train = "t"
        infer = "i"
        probes = ["ppo_policy"]
        """
    )


def test_audit_names_the_probe_module_that_did_not_import(plugin_dir: Path, tmp_path: Path) -> None:
    """A probe a pair needs whose plugin module failed to import: `audit` says which module and
    why, not only that the probe is unknown (it was visible only in `auditor plugins`)."""
    config = tmp_path / "auditor.toml"
    config.write_text(
        f'[plugins]\ndirs = ["{plugin_dir}"]\n'
        + _pairs_only().replace('probes = ["ppo_policy"]', 'probes = ["x"]')
    )
    result = CliRunner().invoke(cli, ["--config", str(config), "audit", "--no-store"])
    assert result.exit_code == 2
    assert (
        "plugin bad_probe: probe no_such_module_anywhere.probe: ModuleNotFoundError: "
        "No module named 'no_such_module_anywhere'" in result.stderr
    )
    assert "unknown probe 'x'" in result.stderr and "Traceback" not in result.stderr
