"""Host groups ([groups.NAME], auditor.config.groups) without stacks: Ansible-style ranges, the
group's host keys with {host} substituted, one stack per member, pairs, models and rollout
pairs expanded, and every problem said with its key path. On the real stacks:
tests/fleet/test_groups_stacks.py."""

from __future__ import annotations

import copy

import pytest

from auditor.config.groups import expand_pattern
from auditor.config.load import parse
from auditor.config.tables import ConfigError


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("infer-[01:03]", ["infer-01", "infer-02", "infer-03"]),
        ("node[8:10].dc", ["node8.dc", "node9.dc", "node10.dc"]),
        ("web-[0:20:10]", ["web-0", "web-10", "web-20"]),
        ("rack[a:c]", ["racka", "rackb", "rackc"]),
        ("r[1:2]-n[a:b]", ["r1-na", "r1-nb", "r2-na", "r2-nb"]),
        ("10.0.0.5", ["10.0.0.5"]),
    ],
)
def test_ranges_expand_as_ansible_does(pattern: str, names: list[str]) -> None:
    assert expand_pattern(pattern) == names


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("x[3:1]", "is empty"),
        ("x[1-3]", "is not a range"),
        ("x[1:3", "unclosed or nested"),
        ("x[0:9999999]", "more than 4096 hosts"),
    ],
)
def test_a_bad_range_says_why(pattern: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        expand_pattern(pattern)


def fleet(doc: dict, **extra: object) -> dict:
    """The default doc with lite20 as a stack of group "infer" (three command-transport hosts)."""
    d = copy.deepcopy(doc)
    d["groups"] = {
        "infer": {
            "hosts": ["infer-[01:03]"],
            "command": ["env", "AUDITOR_HOST={host}", "sh", "-c", 'exec "$@"', "sh"],
        }
    }
    d["stacks"]["lite20"]["group"] = "infer"
    d["stacks"]["lite20"]["python"] = "/opt/{host}/lite20/bin/python"
    d.update(extra)
    return d


def test_a_group_is_one_host_and_one_stack_per_member(doc: dict) -> None:
    cfg = parse(fleet(doc), "/etc/auditor/auditor.toml")
    members = [f"lite20@infer-0{i}" for i in (1, 2, 3)]
    assert [n for n in cfg.stacks if n.startswith("lite20")] == members
    for i, name in enumerate(members, 1):
        stack = cfg.stacks[name]
        assert stack.host == f"infer-0{i}" and stack.python == f"/opt/infer-0{i}/lite20/bin/python"
        host = cfg.hosts[f"infer-0{i}"]
        assert host.transport == "command" and host.command[1] == f"AUDITOR_HOST=infer-0{i}"
    # each pair naming lite20 is one pair per member; the others stay as they were
    names = [p.name for p in cfg.pairs]
    assert sorted(n for n in names if "lite20" in n) == [
        f"{t}->{m}" for t in ("ms20", "ms210") for m in members
    ]
    assert "ms210->ms210-graph" in names


def test_models_and_rollout_pairs_name_every_member(doc: dict) -> None:
    d = fleet(doc)
    d["models"] = {"policy": {"path": "p.mindir", "stacks": ["lite20"], "reference": "ms210-graph"}}
    d["rollout"] = {**d.get("rollout", {}), "pairs": ["ms20->lite20"]}
    cfg = parse(d, "/etc/auditor/auditor.toml")
    assert cfg.models["policy"].stacks == tuple(f"lite20@infer-0{i}" for i in (1, 2, 3))
    assert cfg.rollout.pairs == tuple(f"ms20->lite20@infer-0{i}" for i in (1, 2, 3))


def test_group_problems_name_their_key(doc: dict) -> None:
    d = fleet(doc)
    d["groups"]["bad"] = {"hosts": ["x[9:1]"], "ssh": "a@{host}"}
    d["groups"]["empty"] = {"ssh": "a@{host}"}
    d["groups"]["twice"] = {"hosts": ["infer-02"], "ssh": "a@{host}"}
    d["stacks"]["ms210-graph"]["group"] = "nosuch"
    d["hosts"] = {"infer-03": {"ssh": "x@y"}}
    with pytest.raises(ConfigError) as err:
        parse(d, "/etc/auditor/auditor.toml")
    text = "\n".join(err.value.errors)
    assert "groups.bad.hosts[0]: 'x[9:1]': [9:1] is empty" in text
    assert "groups.empty.hosts: is required" in text
    assert "groups.twice.hosts[0]: host infer-02 is listed twice (also in infer)" in text
    assert "stacks.ms210-graph.group: no [groups.nosuch] table (groups: infer, bad, twice)" in text
    assert "groups.infer.hosts: host infer-03 also has a [hosts.infer-03] table: name it once" in text


def test_a_member_host_is_checked_like_any_host(doc: dict) -> None:
    d = fleet(doc)
    d["groups"]["infer"] = {"hosts": ["infer-[01:02]"], "ssh": "a@{host}", "command": ["x"]}
    with pytest.raises(ConfigError) as err:
        parse(d, "/etc/auditor/auditor.toml")
    # said once, on the group's table the user wrote (#54: it was once per member, on hosts.*)
    assert [e for e in err.value.errors if "ssh or command" in e] == [
        "groups.infer: set either ssh or command, not both"
    ]


@pytest.mark.faults
def test_a_problem_of_a_group_is_one_line_on_its_key(doc: dict) -> None:
    """#54: a bad key of a group or of a grouped stack was said once per member, on keys the
    user never wrote (hosts.infer-01.prallel, stacks.lite20@infer-01.foo)."""
    d = fleet(doc)
    d["groups"]["infer"]["prallel"] = 2
    d["stacks"]["lite20"]["foo"] = 1
    with pytest.raises(ConfigError) as err:
        parse(d, "/etc/auditor/auditor.toml")
    said = [e.split(":")[0] for e in err.value.errors]
    assert said.count("groups.infer.prallel") == 1 and said.count("stacks.lite20.foo") == 1, said
    assert not [e for e in said if e.startswith("hosts.infer-") or "@" in e], said


def test_no_group_leaves_the_document_as_it_is(doc: dict) -> None:
    from auditor.config import groups

    said: list[tuple[str, str]] = []
    assert groups.expand(doc, lambda path, message: said.append((path, message))) is doc and said == []
    grouped = fleet(doc)
    before = copy.deepcopy(grouped)
    assert groups.expand(grouped, lambda *a: None) is not grouped and grouped == before  # not changed


INVENTORY = """# the platform team's inventory
[infer_east]
infer-[01:02] ansible_user=auditor
10.0.0.5

[infer_west]
west-a

[infer:children]
infer_east
infer_west

[infer:vars]
ansible_python_interpreter=/usr/bin/python3
"""


def test_an_ansible_ini_inventory_names_a_groups_hosts(doc: dict, tmp_path) -> None:
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    d = fleet(doc)
    d["groups"]["infer"] = {"inventory": "hosts.ini", "group": "infer", "ssh": "auditor@{host}"}
    cfg = parse(d, str(tmp_path / "auditor.toml"))
    members = [n for n in cfg.stacks if n.startswith("lite20@")]
    assert members == ["lite20@infer-01", "lite20@infer-02", "lite20@10.0.0.5", "lite20@west-a"]
    assert cfg.hosts["west-a"].ssh == "auditor@west-a"
    d["groups"]["infer"]["group"] = "infer_south"
    with pytest.raises(ConfigError) as err:
        parse(d, str(tmp_path / "auditor.toml"))
    assert any(
        e.startswith("groups.infer.inventory: ")
        and "has no group 'infer_south' (groups: infer, infer_east" in e
        for e in err.value.errors
    ), err.value.errors
    d["groups"]["infer"]["inventory"] = "missing.ini"
    with pytest.raises(ConfigError, match="cannot read .*missing.ini"):
        parse(d, str(tmp_path / "auditor.toml"))


YAML_INVENTORY = """# the same inventory, as Ansible's YAML
all:
  children:
    infer:
      children:
        infer_east:
          hosts:
            infer-[01:02]:
              ansible_user: auditor
            10.0.0.5:
        infer_west:
          hosts:
            west-a:
      vars:
        ansible_python_interpreter: /usr/bin/python3
    training:
      hosts:
        train-1:
"""


def test_an_ansible_yaml_inventory_reads_as_the_ini_one(doc: dict, tmp_path) -> None:
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    (tmp_path / "hosts.yml").write_text(YAML_INVENTORY)
    d = fleet(doc)
    d["groups"]["infer"] = {"inventory": "hosts.yml", "group": "infer", "ssh": "auditor@{host}"}
    from_yaml = parse(d, str(tmp_path / "auditor.toml"))
    d["groups"]["infer"]["inventory"] = "hosts.ini"
    from_ini = parse(d, str(tmp_path / "auditor.toml"))
    assert list(from_yaml.stacks) == list(from_ini.stacks)
    assert [n for n in from_yaml.stacks if n.startswith("lite20@")][-1] == "lite20@west-a"
    (tmp_path / "bad.yml").write_text("all:\n  children:\n    infer: [a, b]\n")
    (tmp_path / "broken.yaml").write_text("all:\n  hosts: {a\n")
    for name, words in (
        ("bad.yml", "all.children.infer must be a mapping"),
        ("broken.yaml", "broken.yaml:3: not YAML"),
    ):
        d["groups"]["infer"]["inventory"] = name
        with pytest.raises(ConfigError) as err:
            parse(d, str(tmp_path / "auditor.toml"))
        assert any(e.startswith("groups.infer.inventory: ") and words in e for e in err.value.errors), (
            err.value.errors
        )


def test_group_selects_its_members_everywhere_a_host_would(doc: dict) -> None:
    from auditor.config.selection import Selection, SelectionError, narrow

    d = fleet(doc)
    d["groups"]["other"] = {"hosts": ["edge-1"], "ssh": "a@{host}"}
    d["stacks"]["ms210-graph"]["group"] = "other"
    cfg = parse(d, "/etc/auditor/auditor.toml")
    assert cfg.stacks["lite20@infer-02"].group == "infer"  # a member keeps its group's name
    done = narrow(cfg, Selection(groups=("infer",)))
    assert {p.name for p in done.config.pairs} == {
        f"{t}->lite20@infer-0{i}" for t in ("ms20", "ms210") for i in (1, 2, 3)
    }
    assert done.scope is not None and done.scope.selectors == {"group": ["infer"]}
    with pytest.raises(
        SelectionError, match=r"--group nosuch: no group 'nosuch' in .* \(known: infer, other\)"
    ):
        narrow(cfg, Selection(groups=("nosuch",)))


@pytest.mark.faults
def test_a_group_that_makes_no_members_says_why_once_and_nothing_false(doc: dict) -> None:
    """#54: a group whose hosts could not be read also drew 'no pairs configured' (its stacks'
    pairs were dropped with them) or 'no [groups.infer] table' (the table is there)."""
    for hosts, said in (
        (["infer-[01:"], "groups.infer.hosts[0]: 'infer-[01:': an unclosed or nested range"),
        (3, "groups.infer.hosts: must be a list of host names and patterns, not 3: the group's hosts"),
    ):
        d = fleet(doc)
        d["groups"]["infer"]["hosts"] = hosts
        with pytest.raises(ConfigError) as err:
            parse(d, "/etc/auditor/auditor.toml")
        assert len(err.value.errors) == 1 and err.value.errors[0].startswith(said), err.value.errors
