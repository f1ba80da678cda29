"""The printed code change: MindSpore's to_float calls that give each cell the plan's precision.
The oracle re-applies the calls the way to_float works (recursive, a later call overrides) on a
cell tree and reads each unit's final setting."""

from __future__ import annotations

import pytest

from auditor.fix.code import attribute, lines

UNITS = ["actor.body.0", "actor.body.1", "actor.norm", "actor", "std_head", ""]


def final_settings(calls: list[str], units: list[str]) -> dict[str, str]:
    """to_float's semantics: each call sets its cell and every cell under it."""
    setting = dict.fromkeys(units, "float32")  # a network as built: float32
    for call in calls:
        target, _, rest = call.partition(".to_float(")
        dtype = "float16" if "float16" in rest else "float32"
        path = target.removeprefix("net").replace("[", ".").replace("]", "").strip(".")
        for u in units:
            if path == "" or u == path or u.startswith(path + "."):
                setting[u] = dtype
    return setting


@pytest.mark.parametrize(
    "keep",
    [(), ("std_head",), ("actor.norm",), ("actor",), ("",), ("", "actor.body.0"), ("actor", "actor.body.1")],
)
def test_the_calls_give_each_cell_the_plans_precision(keep: tuple[str, ...]) -> None:
    calls = lines(UNITS, keep)
    got = final_settings(calls, UNITS)
    assert got == {u: ("float32" if u in keep else "float16") for u in UNITS}
    assert calls[0] == f"net.to_float(mstype.{'float32' if '' in keep else 'float16'})"
    assert len(calls) == len(set(calls))
    # one call per cell whose setting is not its parent's: no call is redundant
    assert len(calls) == len(lines(UNITS, keep)) == len(set(calls))


def test_the_network_kept_is_set_once_and_its_children_put_back() -> None:
    assert lines(["fc0", "head", ""], ("head", "")) == [
        "net.to_float(mstype.float32)",
        "net.fc0.to_float(mstype.float16)",
    ]


def test_nothing_kept_is_one_call_and_a_leaf_kept_is_one_more() -> None:
    assert lines(UNITS, ()) == ["net.to_float(mstype.float16)"]
    assert lines(UNITS, ("std_head",)) == [
        "net.to_float(mstype.float16)",
        "net.std_head.to_float(mstype.float32)",
    ]


def test_attribute_paths() -> None:
    assert attribute("net", "") == "net"
    assert attribute("net", "hidden.1") == "net.hidden[1]"
    assert attribute("policy", "actor.std-head") == "policy.actor['std-head']"
