"""A fingerprint split into the template its peers share and its own part (auditor.db.fingerprints):
exact both ways, shared where documents differ only in what names their machine."""

from __future__ import annotations

import copy

from auditor.db.content import document_digest
from auditor.db.fingerprints import TOKEN, join, split
from tests.history_fixtures import member_document as member


def test_a_document_comes_back_exactly():
    doc = member("infer-07", machine_id="a" * 32, serial="SN-7")
    template, own = split(copy.deepcopy(doc))
    assert own is not None and join(template, own) == doc
    assert "infer-07" not in repr(template)  # every mention of its host is the token
    assert TOKEN in template["models"]["patterns"][0] and TOKEN in next(iter(template["models"]["files"]))
    assert "connection" not in template and "machine_id" not in template["host"]
    assert "serial_number" not in template["npu_smi"]["npus"]["0"]["board"]


def test_members_that_differ_only_in_their_machine_share_a_template():
    a = member("infer-01", machine_id="a" * 32, serial="SN-1")
    b = member("infer-02", machine_id="b" * 32, serial="SN-2")
    upgraded = member("infer-03", machine_id="c" * 32, serial="SN-3", cann="8.1.RC1")
    templates = [document_digest(split(d)[0]) for d in (a, b, upgraded)]
    assert templates[0] == templates[1] != templates[2]
    assert [join(*split(d)) for d in (a, b, upgraded)] == [a, b, upgraded]


def test_a_member_whose_host_name_is_inside_another_comes_back_exactly():
    doc = member("infer-1")
    doc["models"]["patterns"].append("/srv/infer-10/policy.mindir")  # infer-1 is in infer-10
    template, own = split(doc)
    assert join(template, own) == doc


def test_what_cannot_be_taken_apart_exactly_is_kept_whole():
    with_token = member("infer-01")
    with_token["environment"] = {"NOTE": f"literally {TOKEN}"}
    template, own = split(with_token)
    # the host is not replaced (the token would be ambiguous), the machine's values still move
    assert join(template, own) == with_token and own is not None and own["host"] is None
    local = {"host": {"kernel": "6.1.0"}, "runtime": {"runtime_version": "2.0.0"}}
    assert split(local) == (local, None)


def test_a_short_host_name_is_not_replaced():
    doc = member("ab")
    template, own = split(doc)
    assert own is not None and own["host"] is None and join(template, own) == doc
    assert template["models"]["patterns"] == ["/srv/ab/policy.mindir"]
