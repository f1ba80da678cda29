"""`auditor plugins` shows what each plugin contributes; `auditor plugins --check` imports the
stack side of every plugin in each stack's interpreter and reports failures with file and line;
a single-file plugin probe is reported with what to do instead of a bare "No module named"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.extend.check import check, contributions
from auditor.extend.manager import Plugins
from auditor.extend.probe_spec import single_file_problem
from tests.conftest import stack_python
from tests.unit.extend.test_plugins import GOOD, TINY_PROBE, write_plugins

NEW_SYNTAX_PROBE = TINY_PROBE.replace(
    "def make_inputs(params):\n",
    "def make_inputs(params):\n    if (n := params['batch']) < 0:\n        n = 0\n",
)
CLEAN = {"good_plugin", "goodpkg", "lone_probe", "lone_plugin", "newpkg", "new_plugin", "raising_collector"}


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield write_plugins(
        tmp_path / "plugins",
        {
            "good_plugin.py": GOOD,
            "goodpkg/__init__.py": "",
            "goodpkg/tiny_probe.py": TINY_PROBE,
            "goodpkg/collector.py": "NAME = 'goodpkg'\ndef collect(context):\n    return {}\n",
            # a runtime needing no framework: a worker of the auditor's own interpreter starts with it
            "goodpkg/runtime.py": "class Onnx(object):\n    package, version = 'onnx-test', '0'\n"
            "    def __init__(self, device):\n        self.device = device\n",
            "lone_probe.py": TINY_PROBE.replace('"tiny"', '"lone"'),
            "lone_plugin.py": "from auditor import hookimpl\n@hookimpl\ndef auditor_probes():\n"
            "    return ['lone_probe']\n",
        },
    )
    for name in list(sys.modules):
        if name.split(".")[0] in CLEAN:
            del sys.modules[name]


def config_for(plugin_dir: Path, tmp_path: Path, stacks: dict[str, str]) -> Path:
    text = f'[plugins]\ndirs = ["{plugin_dir}"]\n'
    roles = ["train", "infer"]
    for i, (name, python) in enumerate(stacks.items()):
        runtime = "mindspore" if roles[i % 2] == "train" else "mindspore-lite"
        text += f'[stacks.{name}]\nrole = "{roles[i % 2]}"\nruntime = "{runtime}"\npython = "{python}"\n'
    names = list(stacks)
    text += f'[[pairs]]\ntrain = "{names[0]}"\ninfer = "{names[1]}"\nprobes = ["tiny"]\n'
    path = tmp_path / "auditor.toml"
    path.write_text(text)
    return path


def test_listing_shows_what_each_plugin_contributes(plugin_dir: Path, tmp_path: Path) -> None:
    plugins = Plugins([plugin_dir], entry_points=False)
    gives = contributions(plugins)["good_plugin"]
    assert gives["probes"] == ["tiny (variants: default)"]
    assert gives["runtimes"] == ["onnx-test (load)"]
    assert gives["collectors"] == ["goodpkg.collector"]
    assert (gives["rules"], gives["comparators"], gives["sinks"]) == (["always"], ["always_ok"], ["collect"])
    assert gives["commands"] == ["hello-plugin"]
    config = config_for(plugin_dir, tmp_path, {"t": sys.executable, "i": sys.executable})
    out = CliRunner().invoke(cli, ["--config", str(config), "plugins"])
    assert "    probes: tiny (variants: default)\n" in out.stdout
    assert "    runtimes: onnx-test (load)\n" in out.stdout
    listed = json.loads(CliRunner().invoke(cli, ["--config", str(config), "plugins", "--json"]).stdout)
    assert {p["name"]: p["provides"] for p in listed}["good_plugin"]["sinks"] == ["collect"]


def test_a_single_file_probe_is_reported_with_what_to_do(plugin_dir: Path) -> None:
    plugins = Plugins([plugin_dir], entry_points=False)
    assert "lone" in plugins.probes()  # it loads in the auditor; its build_cell cannot run in a worker
    [problem] = [p for p in plugins.problems if "lone" in p]
    assert "lone_probe.py is a single-file module" in problem
    assert "Move it into a folder with an __init__.py" in problem
    assert single_file_problem("goodpkg.tiny_probe") is None


def test_check_reports_syntax_with_file_and_line(plugin_dir: Path, tmp_path: Path) -> None:
    """Two stacks on the auditor's own interpreter, with the plugin's framework-free runtime:
    their workers start (through Reach, as a cycle starts them), the single-file probe is
    refused for every stack, the package modules import, a module that raises is named with
    its file and line."""
    write_plugins(plugin_dir, {"goodpkg/raises.py": "x = 1\nraise RuntimeError('no device here')\n"})
    write_plugins(
        plugin_dir,
        {
            "raising_collector.py": "from auditor import hookimpl\n@hookimpl\n"
            "def auditor_fingerprint_collectors():\n    return ['goodpkg.raises']\n"
        },
    )
    plugins = Plugins([plugin_dir], entry_points=False)
    stacks_cfg = tmp_path / "auditor.toml"
    stacks_cfg.write_text(
        f'[plugins]\ndirs = ["{plugin_dir}"]\n'
        + "".join(
            f'[stacks.{n}]\nrole = "infer"\nruntime = "onnx-test"\npython = "{sys.executable}"\n'
            f'models = ["{tmp_path}/served/*.mindir"]\n'
            for n in ("t", "i")
        )
    )
    out = CliRunner().invoke(cli, ["--config", str(stacks_cfg), "plugins", "--check"])
    assert out.exit_code == 1, out.output
    assert "error: lone_probe (plugin lone_plugin) in every stack:" in out.stdout
    assert "error: goodpkg.raises (plugin raising_collector) in stack t" in out.stdout
    assert "goodpkg/raises.py:2: RuntimeError: no device here" in out.stdout
    from auditor.cli.context import Context

    report = check(plugins, Context(str(stacks_cfg), None).config())
    assert report.stack_errors == {}
    assert {(c.module, c.stack) for c in report.checks if not c.error} >= {
        ("goodpkg.tiny_probe", "t"),
        ("goodpkg.collector", "i"),
        ("goodpkg.runtime", "t"),
    }


@pytest.mark.stacks
def test_check_finds_syntax_python_37_cannot_parse(stacks, plugin_dir: Path, tmp_path: Path) -> None:
    write_plugins(
        plugin_dir,
        {
            "newpkg/__init__.py": "",
            "newpkg/probe.py": NEW_SYNTAX_PROBE.replace('"tiny"', '"newer"'),
            "new_plugin.py": "from auditor import hookimpl\n@hookimpl\ndef auditor_probes():\n"
            "    return ['newpkg.probe']\n",
        },
    )
    config = config_for(
        plugin_dir, tmp_path, {"ms210": stack_python("ms210"), "lite20": stack_python("lite20")}
    )
    out = CliRunner().invoke(cli, ["--config", str(config), "plugins", "--check", "--json"])
    assert out.exit_code == 1, out.output
    checks = json.loads(out.stdout)["check"]["checks"]
    by = {(c["module"], c["stack"]): c for c in checks}
    assert by[("newpkg.probe", "ms210")]["error"] is None  # Python 3.11 parses it
    failed = by[("newpkg.probe", "lite20")]
    assert failed["error"].startswith("SyntaxError") and failed["python"].startswith("3.7")
    assert failed["file"].endswith("newpkg/probe.py") and failed["line"] == 11
    assert by[("goodpkg.tiny_probe", "lite20")]["error"] is None
    text = CliRunner().invoke(cli, ["--config", str(config), "plugins", "--check"]).stdout
    assert "error: newpkg.probe (plugin new_plugin) in stack lite20, Python 3.7" in text
    assert "newpkg/probe.py:11: SyntaxError" in text
