"""A host group on the real stacks: four inference hosts stood in by the ``command`` transport
(each its own argv prefix, as ``docker exec -i box`` would be), lite20 one stack per member,
the pair ms20 -> lite20 one pair per member; one member's interpreter is missing, which costs
that member only, and one serves another model file than its peers: out of line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from tests.fault_kit import small_config

pytestmark = pytest.mark.stacks

GROUP = """
[groups.infer]
hosts = ["infer-[01:04]"]
command = ["env", "AUDITOR_TEST_HOST={host}", "sh", "-c", 'exec "$@"', "sh"]
"""


@pytest.fixture(scope="module")
def audited(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("groups")
    config = small_config(d)
    text = config.read_text()
    lite = text.split("[stacks.lite20]\n", 1)[1].split("[[pairs]]", 1)[0]
    python = next(line for line in lite.splitlines() if line.startswith("python = "))
    # infer-03's interpreter is not there: {host} in the stack's python, a wrapper for the others
    for host in ("infer-01", "infer-02", "infer-04"):
        (d / host).mkdir()
        # the deployed model: the same file on every member but infer-02
        (d / host / "policy.mindir").write_bytes(b"policy v2" if host == "infer-02" else b"policy v1")
        wrapper = d / host / "python"
        wrapper.write_text(f'#!/bin/sh\nexec {python.split(chr(34))[1]} "$@"\n')
        wrapper.chmod(0o755)
    grouped = lite.replace(python, f'python = "{d}/{{host}}/python"\nmodels = ["{d}/{{host}}/policy.mindir"]')
    config.write_text(
        GROUP + text.replace(f"[stacks.lite20]\n{lite}", f'[stacks.lite20]\ngroup = "infer"\n{grouped}')
    )
    base = ["--config", str(config), "--db", str(d / "h.db")]
    runner = CliRunner()
    checked = runner.invoke(cli, [*base, "config", "check"])
    audit = runner.invoke(cli, [*base, "audit", "--json"])
    return {"base": base, "checked": checked, "audit": audit, "doc": json.loads(audit.stdout)}


def test_each_member_is_a_stack_on_its_own_host(audited: dict) -> None:
    assert audited["checked"].exit_code == 0, audited["checked"].output
    doc = audited["doc"]
    results = {r["pair"]: r for r in doc["results"]}
    assert set(results) == {f"ms20->lite20@infer-0{i}" for i in (1, 2, 3, 4)}
    for i in (1, 2, 4):
        r = results[f"ms20->lite20@infer-0{i}"]
        assert r["status"] == "consistent" and r["infer"] == f"lite20@infer-0{i}", r["message"]
    missing = results["ms20->lite20@infer-03"]
    assert missing["status"] == "error" and "infer-03/python" in missing["message"], missing["message"]
    stacks = doc["stacks"]
    assert stacks["lite20@infer-01"]["fingerprint"]["connection"]["transport"] == "command"


def test_history_filters_by_member_host(audited: dict) -> None:
    out = CliRunner().invoke(cli, [*audited["base"], "history", "--host", "infer-02", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert {row["pair"] for row in json.loads(out.stdout)} == {"ms20->lite20@infer-02"}


def test_the_member_with_another_model_file_is_out_of_line(audited: dict) -> None:
    found = [f for f in audited["doc"]["findings"] if f["kind"] == "out-of-line"]
    assert [f["subject"] for f in found] == ["lite20@infer-02"], found
    (fact,) = found[0]["details"]["facts"]["facts"]
    # infer-03 was not reached: three fingerprints, two agree
    assert fact["fact"] == "model policy.mindir" and (fact["agree"], fact["total"]) == (2, 3)
    assert "is out of line with its group (4 hosts serving lite20)" in found[0]["message"]
