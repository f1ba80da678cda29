"""A group's member out of line with its peers (auditor.fleet.peers and the group-peers rule)
without stacks: the facts compared, a strict majority needed, a variable or a model file on
some members only, fewer than three members never singled out."""

from __future__ import annotations

import copy

from auditor.fleet import peers
from auditor.rules.engine import RuleContext
from plugins.default_rules import group_peers


def output_findings(groups: dict, repeats: dict | None = None) -> list:
    """``peers.digest_findings`` from each member's outputs, as the cycle keeps them: digests, and
    one copy of each distinct output."""
    digests = {k: {m: peers.output_digest(list(o)) for m, o in ms.items()} for k, ms in groups.items()}
    distinct = {k: {digests[k][m]: o for m, o in ms.items()} for k, ms in groups.items()}
    return peers.digest_findings(digests, distinct, repeats)


def fingerprint(
    cann: str = "8.0.RC2", lite: str = "2.0.0", env: dict | None = None, model: str = "aa"
) -> dict:
    return {
        "host": {"hostname": "ignored", "kernel": "6.1", "os_release": {"PRETTY_NAME": "Debian 12"}},
        "packages": {"framework": {"mindspore-lite": lite, "te": None}},
        "cann": {"version": cann},
        "driver": {"version": "24.1.rc2"},
        "environment": env or {},
        "models": {"files": {"/srv/x/policy.mindir": {"sha256": model * 32}}},
    }


def test_the_facts_a_member_shares_with_its_peers() -> None:
    facts = peers.facts(fingerprint(env={"MS_ALLOC_CONF": "x"}))
    assert facts == {
        "OS": "Debian 12",
        "kernel": "6.1",
        "CANN": "8.0.RC2",
        "NPU driver": "24.1.rc2",
        "package mindspore-lite": "2.0.0",
        "env MS_ALLOC_CONF": "x",
        "model policy.mindir": "aa" * 6,
    }  # the hostname is not a shared fact; a package that is not installed is left out


def test_a_member_differing_from_a_strict_majority_is_named() -> None:
    group = {f"lite20@infer-0{i}": fingerprint() for i in range(1, 6)}
    group["lite20@infer-03"] = fingerprint(cann="8.0.RC1", model="bb")
    group["lite20@infer-05"] = fingerprint(env={"MS_DEV_RUNTIME_CONF": "x"})
    odd = {(o.member, o.fact): o for o in peers.out_of_line(group)}
    assert set(odd) == {
        ("lite20@infer-03", "CANN"),
        ("lite20@infer-03", "model policy.mindir"),
        ("lite20@infer-05", "env MS_DEV_RUNTIME_CONF"),
    }
    cann = odd[("lite20@infer-03", "CANN")]
    assert cann.describe() == "CANN 8.0.RC1 where 4 of 5 have 8.0.RC2"
    assert odd[("lite20@infer-05", "env MS_DEV_RUNTIME_CONF")].majority == "(unset)"


def test_no_strict_majority_and_too_few_members_single_out_nobody() -> None:
    half = {f"s@h{i}": fingerprint(cann="a" if i < 2 else "b") for i in range(4)}
    assert peers.out_of_line(half) == []  # a fleet half upgraded
    assert peers.out_of_line({"s@h1": fingerprint(), "s@h2": fingerprint(cann="x")}) == []


def test_the_rule_gives_one_finding_per_member(doc: dict) -> None:
    from auditor.config.load import parse

    d = copy.deepcopy(doc)
    d["groups"] = {"infer": {"hosts": ["infer-[01:04]"], "command": ["sh", "-c", 'exec "$@"', "sh"]}}
    d["stacks"]["lite20"]["group"] = "infer"
    cfg = parse(d, "/etc/auditor/auditor.toml")
    prints = {n: fingerprint() for n in cfg.stacks}
    prints["lite20@infer-02"] = fingerprint(cann="7.0", lite="2.1.0")
    prints["lite20@infer-04"] = None  # not reached: not compared, still counted as a member
    ctx = RuleContext(stacks=dict(cfg.stacks), fingerprints=prints, pairs=cfg.pairs)
    (f,) = list(group_peers(ctx))
    assert f.kind == "out-of-line" and f.subject == "lite20@infer-02"
    assert f.message == (
        "lite20@infer-02 is out of line with its group (4 hosts serving lite20): CANN 7.0 where 2 of 3 "
        "have 8.0.RC2; package mindspore-lite 2.1.0 where 2 of 3 have 2.0.0"
    )


def test_a_member_computing_differently_from_its_peers_is_named_with_its_difference() -> None:
    import numpy as np

    same = [np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4), np.zeros(2, np.float32)]
    odd = [same[0] + np.float32(1e-7), same[1]]
    members = {f"lite20@infer-0{i}": [a.copy() for a in same] for i in range(1, 5)}
    members["lite20@infer-03"] = odd
    (f,) = output_findings({("ms20", "lite20", "ppo_policy", "fp32"): members})
    assert f.kind == "out-of-line" and f.subject == "lite20@infer-03"
    assert f.details["agree"] == 3 and f.details["total"] == 4 and 0 < f.details["max_abs"] < 2e-7
    assert (
        "computes ppo_policy [fp32] differently from its peers" in f.message and "ms20's export" in f.message
    )
    # bitwise: a dtype of its own is a difference too; no strict majority, nobody named
    split = {"s@a": same, "s@b": same, "s@c": odd, "s@d": [same[0].astype(np.float64), same[1]]}
    assert output_findings({("t", "s", "p", "v"): split}) == []
    assert output_findings({("t", "s", "p", "v"): {"s@a": same, "s@b": odd}}) == []


def test_a_nan_against_a_number_or_other_nan_bits_say_what_differs() -> None:
    import numpy as np

    same = [np.array([0.5, np.nan, 1.0], np.float32)]
    members = {f"s@h{i}": [same[0].copy()] for i in range(5)}  # three of five agree
    members["s@h1"] = [np.array([0.5, 0.25, 1.0], np.float32)]  # a number where the peers have NaN
    other_nan = same[0].copy()
    other_nan.view(np.uint32)[1] = 0x7FC00001  # a NaN with another payload: bitwise different, same numbers
    members["s@h2"] = [other_nan]
    found = {f.subject: f for f in output_findings({("t", "s", "p", "v"): members})}
    assert set(found) == {"s@h1", "s@h2"}
    assert found["s@h1"].details["max_abs"] == float("inf") and "NaN, Inf or shapes" in found["s@h1"].message
    assert (
        found["s@h2"].details["max_abs"] == 0
        and "other NaN payloads or signed zeros" in found["s@h2"].message
    )


def test_a_member_whose_cpu_lacks_a_numerics_feature_is_named(doc: dict) -> None:
    """Same CPU model, one host without AVX-512 (a VM that hides it): its kernels differ."""
    from auditor.plugins.collectors.host import parse_cpu_numerics

    from auditor.config.load import parse

    full = (
        "processor\t: 0\nmodel name\t: Xeon\nflags\t\t: fpu sse4_2 avx fma avx2 avx512f avx512bw amx_tile x\n"
    )
    hidden = full.replace(" avx512f avx512bw", "")
    assert parse_cpu_numerics(full) == "sse4_2 avx fma avx2 avx512f avx512bw amx_tile"
    assert parse_cpu_numerics("Features\t: fp asimd evtstrm sve i8mm\n") == "fp asimd sve i8mm"
    assert parse_cpu_numerics("model name\t: x\n") is None
    d = copy.deepcopy(doc)
    d["groups"] = {"infer": {"hosts": ["infer-[01:04]"], "command": ["sh", "-c", 'exec "$@"', "sh"]}}
    d["stacks"]["lite20"]["group"] = "infer"
    cfg = parse(d, "/etc/auditor/auditor.toml")
    prints = {}
    for n in cfg.stacks:
        fp = fingerprint()
        fp["host"]["cpu_model"] = "Xeon"
        fp["host"]["cpu_numerics"] = parse_cpu_numerics(hidden if n == "lite20@infer-03" else full)
        prints[n] = fp
    (f,) = list(group_peers(RuleContext(stacks=dict(cfg.stacks), fingerprints=prints, pairs=cfg.pairs)))
    assert (
        f.subject == "lite20@infer-03"
        and "CPU numerics features sse4_2 avx fma avx2 amx_tile where" in f.message
    )


def test_a_group_too_small_to_compare_says_so(doc: dict) -> None:
    from auditor.config.load import parse

    d = copy.deepcopy(doc)
    d["groups"] = {"infer": {"hosts": ["infer-[01:04]"], "command": ["sh", "-c", 'exec "$@"', "sh"]}}
    d["stacks"]["lite20"]["group"] = "infer"
    cfg = parse(d, "/etc/auditor/auditor.toml")
    prints = {n: fingerprint() for n in cfg.stacks if not n.startswith("lite20@") or n.endswith(("01", "02"))}
    (f,) = list(group_peers(RuleContext(stacks=dict(cfg.stacks), fingerprints=prints, pairs=cfg.pairs)))
    assert f.kind == "not-compared" and f.severity == "info" and f.subject == "lite20"
    assert "peers not compared (2 members fingerprinted in this run of 4" in f.message


def test_a_range_broken_on_one_host_its_peers_keep_is_the_hosts_not_the_runtimes() -> None:
    from auditor.results import Finding

    def broke(stack: str) -> Finding:
        return Finding(
            "invariant",
            "error",
            stack,
            f"{stack}/ppo_policy/fp32/invariant/std/range",
            f"{stack} computed std = -1 ...",
            {"probe": "ppo_policy", "variant": "fp32", "action": "report it to the runtime's maintainers"},
        )

    served = {("lite20", "ppo_policy", "fp32"): {f"lite20@infer-{i:02d}" for i in range(1, 13)}}
    (one,) = peers.host_not_runtime([broke("lite20@infer-07")], served)
    assert one.details["action"].startswith("infer-07 breaks it where 11 of 12 lite20 hosts keep it")
    assert "maintainers" not in one.details["action"]
    # every member breaks it: the runtime's, as said; a stack of no group: as said
    every = [broke(f"lite20@infer-{i:02d}") for i in range(1, 13)]
    assert [f.details["action"] for f in peers.host_not_runtime(every, served)] == [
        every[0].details["action"]
    ] * 12
    assert peers.host_not_runtime([broke("lite20")], served)[0].details["action"].endswith("maintainers")
