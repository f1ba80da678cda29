"""What `auditor fix` prints, from an outcome made here (the stacks test runs the real search):
the change, the fixed export's verdict, the cost table, each candidate with why it was
rejected, and the not-found case with the closest candidate."""

from __future__ import annotations

import re

from auditor.cli.fix import render, to_json
from auditor.compare.verdicts import OutputComparison
from auditor.fix.fixer import Fix
from auditor.fix.search import Search, Trial
from auditor.fix.target import Candidate
from auditor.results import Artifact, CycleResult, Latency, ProbeResult

CELLS = [
    {"path": "hidden.0", "type": "Dense", "parameters": 256, "children": 0},
    {"path": "head", "type": "Dense", "parameters": 65, "children": 0},
    {"path": "", "type": "GaussianPolicy", "parameters": 1, "children": 2},
]


class Target:
    probe, variant, train, stack, kind = "ppo_policy", "fp16", "ms20", "lite20", "probe"
    label = "ppo_policy [fp16] ms20 → lite20"

    def describe(self) -> dict[str, str]:
        return {"kind": self.kind, "probe": self.probe}

    def conversion(self) -> None:
        return None


def candidate(
    status: str, keep: tuple[str, ...] | None, size: int, p50: float, reload: str | None = None
) -> Candidate:
    ok = status == "consistent"
    r = ProbeResult(
        "ms20->lite20", "ms20", "lite20", "ppo_policy", "2", "fp16", status, "",
        outputs=(OutputComparison("std", ok, {"max_abs": 0.0 if ok else 0.6}, 0 if ok else 256, 256, None),),
        artifact=Artifact("ab" * 32, "mindir", size, {}),
        infer_latency=Latency(256, 5, p50, p50, p50, p50),
    )  # fmt: skip
    plan = None if keep is None else {"compute": "float16", "keep": list(keep)}
    return Candidate(plan, r, CycleResult(0.0, 1.0, "<t>", {}, [r], []), b"x" * size, reload)


def outcome(found: bool) -> Fix:
    both = candidate("consistent" if found else "drift", ("head", ""), 28_500, 98.0)
    trials = [
        Trial((), False, 1.0, candidate("consistent", (), 28_000, 108.0, reload="std differs")),
        Trial(("head", ""), found, 0.0 if found else 1.0, both),
        Trial(("head",), False, 1.0, candidate("drift", ("head",), 28_400, 97.0)),
    ]  # fmt: skip
    search = Search(("hidden.0", "head", ""), 1, trials, ("head", "") if found else None)
    return Fix(
        Target(),  # type: ignore[arg-type]
        candidate("drift", None, 17_800, 83.0),
        CELLS,
        search,
        float32=candidate("consistent", None, 27_600, 76.0) if found else None,
        seconds=12.5,
    )


def test_the_fix_is_said_with_its_change_cost_and_candidates() -> None:
    text = render(outcome(True), "fixed.mindir", "fixed.mindir")
    assert (
        text.splitlines()[0] == "auditor fix · ppo_policy [fp16] ms20 → lite20 · 5 exports audited in 12.5 s"
    )
    assert "FOUND: keep head, the network's own operations in float32" in text
    assert "    net.to_float(mstype.float32)\n    net.hidden[0].to_float(mstype.float16)" in text
    rows = {r.split()[0] + r.split()[1]: r for r in text.splitlines() if "KB" in r}
    assert "27.8 KB" in rows["thefix"] and "98 µs" in rows["thefix"]
    assert "17.4 KB" in rows["asconfigured"] and "27.0 KB" in rows["allfloat32"]
    m = re.search(r"^candidates \((\d+) of at most (\d+)\)$", text, re.M)
    assert m is not None and m.groups() == ("3", "6")
    assert re.search(r"^  1\. nothing kept in float32 +RELOAD: std differs", text, re.M)
    assert "wrote the fixed export to fixed.mindir" in text


def test_no_fix_names_the_closest_candidate_and_writes_nothing() -> None:
    found = outcome(False)
    text = render(found, None, "fixed.mindir")
    assert "NOT FOUND" in text and "closest: " in text
    assert "--out fixed.mindir: nothing written (no fix)" in text
    doc = to_json(found, None)
    assert doc["found"] is False and doc["cells"] is None and doc["result"] is None
    assert [c["keep"] for c in doc["candidates"]] == [[], ["head", ""], ["head"]]
    assert doc["candidates"][0]["reload"] == "std differs" and doc["closest"]["keep"] in (
        [],
        ["head", ""],
        ["head"],
    )


def test_json_has_the_fields_a_program_reads() -> None:
    doc = to_json(outcome(True), "fixed.mindir")
    assert doc["found"] is True and doc["cells"] == ["head", ""] and doc["exports"] == 5
    assert doc["result"]["status"] == "consistent" and doc["cost"]["fix"]["size"] == 28_500
    assert doc["change"][0] == "from mindspore import dtype as mstype"
