"""Every command the documentation shows exists (#54): each `auditor ...` line of every page's
command blocks names a command `auditor --help` lists, and each option it passes is in that
command's own `--help`; so are the options given to the scripts and benches the pages run.
A renamed command or option fails here instead of on a reader's first try."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests.conftest import REPO
from tests.docs import PAGES

SHELL = ("", "sh", "bash", "console", "shell")
"""Fenced blocks that hold commands (an unlabelled block may hold a report: its lines do not
start with a command, so nothing of it is taken)."""
WRAPPERS = {"sudo", "exec", "time", "env", "nohup"}
SCRIPTS = re.compile(r"(?:^|/)((?:scripts/[\w.-]+)|(?:bench/[\w]+\.py))$")


def commands() -> list[tuple[str, list[str]]]:
    """(where, argv after the program) of every auditor, script or bench command in a block."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for lang, code in re.findall(r"```(\w*)\n(.*?)```", text, re.DOTALL):
            if lang not in SHELL:
                continue
            for line in code.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                line = re.split(r"\s#|\s{3,}", line)[0]  # a comment, or a table's description column
                for part in re.split(r"&&|\|\||;|\||\$\(|\)", line):
                    argv = _argv(part)
                    if argv:
                        found.append((f"{page.relative_to(REPO)}: {line}", argv))
    return found


def _argv(part: str) -> list[str] | None:
    try:
        tokens = shlex.split(part)
    except ValueError:
        return None
    while tokens and ("=" in tokens[0] and not tokens[0].startswith("-") or tokens[0] in WRAPPERS):
        tokens = tokens[1:]
        if tokens[:1] == ["-u"]:  # sudo -u USER
            tokens = tokens[2:]
    if not tokens:
        return None
    if tokens[0].rsplit("/", 1)[-1].startswith("python") and len(tokens) > 1:
        tokens = tokens[1:]  # python bench/x.py ...
    program = tokens[0]
    if program.rsplit("/", 1)[-1] == "auditor" or SCRIPTS.search(program):
        return [program, *(t.strip("[]") for t in tokens[1:] if t.strip("[]"))]
    return None


@cache
def _help(path: tuple[str, ...]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
    return result.exit_code, result.output


@cache
def _script_help(program: str) -> str:
    script = REPO / SCRIPTS.search(program).group(1)  # type: ignore[union-attr]
    argv = [sys.executable, str(script)] if script.suffix == ".py" else [str(script)]
    done = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, f"{script} --help: exit {done.returncode}: {done.stderr[-500:]}"
    return done.stdout


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


def _auditor_problems(argv: list[str]) -> list[str]:
    """What in ``argv`` (after ``auditor``) `--help` does not list: walks the command path the
    way click would, option by option."""
    path: list[str] = []
    code, text = _help(())
    problems = []
    values = False  # the previous token was an option that takes a value
    for token in argv:
        if values:
            values = False
            continue
        if token.startswith("-"):
            name = token.split("=", 1)[0]
            if name not in _options(text):
                problems.append(f"{' '.join(['auditor', *path])} --help does not list {name}")
            # an option that takes a value shows a metavar after it in --help
            values = (
                "=" not in token and re.search(rf"{re.escape(name)}(?:, -\w)? [A-Z\[<]", text) is not None
            )
            continue
        sub = re.search(r"^Commands:\n(.*)", text, re.MULTILINE | re.DOTALL)
        if sub is None or token.startswith(("<", "$")):
            break  # a command's arguments: nothing more to look up
        if token not in set(re.findall(r"^  ([\w-]+)", sub.group(1), re.MULTILINE)):
            problems.append(f"{' '.join(['auditor', *path])} --help lists no command {token!r}")
            break
        path.append(token)
        code, text = _help(tuple(path))
        assert code == 0, text
    return problems


COMMANDS = commands()


def test_the_pages_show_commands_at_all():
    """The walk finds what the pages hold (a parser that finds nothing would pass everything)."""
    programs = {argv[0].rsplit("/", 1)[-1] for _, argv in COMMANDS}
    assert {"auditor", "install-stacks", "full_cycle.py"} <= programs, programs
    assert len([1 for _, argv in COMMANDS if argv[0].endswith("auditor")]) >= 60
    assert any(argv[-1] == "daemon" and argv[0] == "/opt/auditor/bin/auditor" for _, argv in COMMANDS)


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[" ".join(a)[:60] for _, a in COMMANDS])
def test_each_command_in_the_docs_is_in_its_help(where: str, argv: list[str]):
    if argv[0].rsplit("/", 1)[-1] == "auditor":
        problems = _auditor_problems(argv[1:])
    else:
        text = _script_help(argv[0])
        problems = [
            f"{argv[0]} --help does not list {t.split('=')[0]}"
            for t in argv[1:]
            if t.startswith("--") and t.split("=")[0] not in _options(text)
        ]
    assert not problems, f"{where}: {problems}"


def test_the_walk_sees_a_renamed_command_and_option():
    """The oracle of the test above, on commands that do not exist."""
    assert _auditor_problems(["hosts", "chek"]) == ["auditor hosts --help lists no command 'chek'"]
    assert _auditor_problems(["audit", "--pairs", "a->b"]) == ["auditor audit --help does not list --pairs"]
    assert _auditor_problems(["--config", "x.toml", "audit", "--pair", "a->b", "--json"]) == []
