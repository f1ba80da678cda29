"""Version drift: the field-by-field diff of two fingerprint documents, its finding, the
history queries behind it and ``auditor drift``."""

from __future__ import annotations

import copy
import json
import time

from click.testing import CliRunner

from auditor.cli.drift import drift_history
from auditor.cli.main import cli
from auditor.fingerprint.drift import Change, diff, drift_finding
from auditor.history.store import Store
from auditor.results import CycleResult, StackReport, fingerprint_digest


def document(**changes) -> dict:
    doc = {
        "host": {
            "hostname": "train-01",
            "os_release": {"ID": "ubuntu", "VERSION_ID": "22.04", "PRETTY_NAME": "Ubuntu 22.04.4 LTS"},
            "kernel": "5.15.0",
            "python": {"version": "3.7.16", "executable": "/s/bin/python", "implementation": "CPython"},
            "unknown": {},
        },
        "packages": {
            "all": {"mindspore": "2.9.0", "numpy": "1.21.5", "protobuf": "3.20.3"},
            "framework": {"mindspore": "2.9.0", "mindspore-lite": None, "numpy": "1.21.5"},
            "unknown": {"mindspore-lite": "not installed"},
        },
        "framework": {
            "mindspore": {"version": "2.9.0", "commit_id": "aaaa1111", "supported_cann": ["8.2"]},
            "mindspore_lite": None,
            "unknown": {"mindspore_lite": "not installed"},
        },
        "cann": {"root": "/usr/local/Ascend", "version": "8.2.RC1", "compiler_version": "8.2", "unknown": {}},
        "driver": {"version": "24.1.rc2", "innerversion": "V100R001C19SPC002B230", "unknown": {}},
        "firmware": {"version": "7.3.0.1.231", "unknown": {}},
        "npu_smi": {"available": True, "count": 2},
        "environment": {"OMP_NUM_THREADS": "8"},
        "runtime": {
            "runtime": "mindspore",
            "runtime_package": "mindspore",
            "runtime_version": "2.9.0",
            "python": "3.7.16",
            "numpy": "1.21.5",
            "executable": "/s/bin/python",
        },
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = doc
        for p in parents:
            node = node[p]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return doc


DELETE = object()


def words(before: dict, after: dict) -> list[str]:
    return [c.words for c in diff(before, after)]


def test_identical_documents_have_no_changes():
    assert diff(document(), document()) == []


def test_the_brief_examples_in_order_of_importance():
    after = document(
        framework__mindspore__version="2.10.0",
        runtime__runtime_version="2.10.0",
        packages__all__mindspore="2.10.0",
        packages__framework__mindspore="2.10.0",
        cann__compiler_version="8.3",
        driver__version="25.0.rc1.1",
        packages__all__numpy="1.21.6",
        packages__framework__numpy="1.21.6",
        runtime__numpy="1.21.6",
        environment__HCCL_DETERMINISTIC="true",
    )
    assert words(document(), after) == [
        "mindspore 2.9.0 -> 2.10.0",  # framework, runtime and both package lists: said once
        "CANN compiler 8.2 -> 8.3",
        "driver 24.1.rc2 -> 25.0.rc1.1",
        "numpy 1.21.5 -> 1.21.6",
        "env HCCL_DETERMINISTIC unset -> true",
    ]
    changes = diff(document(), after)
    assert changes[0] == Change(
        "framework.mindspore.version", "2.9.0", "2.10.0", "mindspore 2.9.0 -> 2.10.0", True
    )
    assert all(c.important for c in changes)


def test_absent_and_unknown_values_are_named_for_what_they_mean():
    after = document(
        environment__OMP_NUM_THREADS=DELETE,
        packages__all__protobuf=DELETE,
        packages__all__scipy="1.10.1",
        driver__version=None,
        driver__unknown={"version": "/usr/local/Ascend/driver/version.info: missing"},
        framework__mindspore_lite={"version": "2.0.0", "commit_id": "87e3"},
    )
    assert words(document(), after) == [
        "mindspore-lite not installed -> 2.0.0",
        "driver 24.1.rc2 -> unknown",
        "env OMP_NUM_THREADS 8 -> unset",
        "protobuf 3.20.3 -> not installed",
        "scipy not installed -> 1.10.1",
        "why driver.version is unknown: known -> /usr/local/Ascend/driver/version.info: missing",
    ]
    by_words = {c.words: c for c in diff(document(), after)}
    assert not by_words["scipy not installed -> 1.10.1"].important
    assert by_words["driver 24.1.rc2 -> unknown"].after is None


def test_a_failed_or_missing_section_is_one_change():
    after = document(cann={"error": "collector raised OSError: [Errno 5] Input/output error"})
    del after["npu_smi"]
    assert words(document(), after) == [
        "cann: its collector failed (collector raised OSError: [Errno 5] Input/output error)",
        "npu_smi: no longer collected",
    ]
    assert words(after, document()) == ["cann: its collector works again", "npu_smi: now collected"]


def test_host_and_other_fields_come_after_the_important_ones():
    after = document(
        host__kernel="6.1.0",
        host__os_release={"ID": "ubuntu", "VERSION_ID": "24.04", "PRETTY_NAME": "Ubuntu 24.04 LTS"},
        npu_smi={"available": True, "count": 1},
        firmware__version="7.7.0.1.231",
        framework__mindspore={"version": "2.9.0", "commit_id": "bbbb2222", "supported_cann": ["8.2", "8.3"]},
    )
    assert words(document(), after) == [
        "firmware 7.3.0.1.231 -> 7.7.0.1.231",
        "MindSpore's supported CANN [8.2] -> [8.2, 8.3]",
        "mindspore commit aaaa1111 -> bbbb2222",
        "NPU count 2 -> 1",
        "OS Ubuntu 22.04.4 LTS -> Ubuntu 24.04 LTS",
        "kernel 5.15.0 -> 6.1.0",
        "host.os_release.VERSION_ID 22.04 -> 24.04",
    ]


def test_the_drift_finding():
    changes = diff(document(), document(driver__version="25.0.rc1.1", host__kernel="6.1"))
    f = drift_finding("ms20", changes, 7, "a" * 64, "b" * 64)
    assert (f.kind, f.severity, f.subject, f.key) == (
        "version-drift",
        "warning",
        "ms20",
        "ms20/version-drift",
    )
    assert f.message == "ms20 changed since run 7: driver 24.1.rc2 -> 25.0.rc1.1; kernel 5.15.0 -> 6.1"
    assert [c["words"] for c in f.details["changes"]] == [
        "driver 24.1.rc2 -> 25.0.rc1.1",
        "kernel 5.15.0 -> 6.1",
    ]
    assert f.details["previous_run"] == 7 and f.details["digest"] == "b" * 64
    minor = drift_finding("ms20", diff(document(), document(host__kernel="6.1")), 7, "a", "b")
    assert minor.severity == "info"
    many = {f"packages__all__p{i}": str(i) for i in range(12)}
    f = drift_finding("ms20", diff(document(), document(**many)), None, "a", "b")
    assert f.message.endswith("; and 4 more") and "since its last fingerprint" in f.message
    assert len(f.details["changes"]) == 12


def test_the_old_flat_hello_document_to_the_full_one_is_a_few_section_changes():
    hello = {"python": "3.7.16", "numpy": "1.21.5", "runtime": "mindspore", "runtime_version": "2.0.0"}
    got = words(hello, document())
    assert "framework: now collected" in got and "cann: now collected" in got
    assert len(got) == len(set(document()) | set(hello))


# -- history ----------------------------------------------------------------------------------------
def store_runs(store: Store, docs: list[dict | None], stack: str = "ms20", host: str = "local") -> list[int]:
    ids = []
    for doc in docs:
        run_id = store.begin_run("test.toml")
        report = StackReport(stack, "train", "mindspore", "/s/bin/python", "cpu", host, doc)
        now = time.time()
        store.finish_run(run_id, CycleResult(now, now, "test.toml", {stack: report}, [], []), {})
        ids.append(run_id)
    return ids


def test_previous_fingerprint_skips_runs_without_one(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    assert store.previous_fingerprint("local", "ms20") is None
    first, second, _ = store_runs(store, [document(), None, document(driver__version="25.0")])
    store_runs(store, [document()], host="other-host")  # same name, another host
    run_id, digest, doc = store.previous_fingerprint("local", "ms20")
    assert (run_id, digest) == (first + 2, fingerprint_digest(document(driver__version="25.0")))
    assert doc["driver"]["version"] == "25.0"
    assert store.previous_fingerprint("local", "nope") is None


def test_drift_history_lists_each_change_once(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    v1, v2 = document(), document(framework__mindspore__version="2.10.0", cann__compiler_version="8.3")
    ids = store_runs(store, [v1, v1, None, v2, v2, copy.deepcopy(v1)])
    entries = drift_history(store, "ms20")
    assert [e["run_id"] for e in entries] == [ids[0], ids[3], ids[5]]
    assert entries[0]["previous_digest"] is None and entries[0]["changes"] == []
    assert [c["words"] for c in entries[1]["changes"]] == [
        "mindspore 2.9.0 -> 2.10.0",
        "CANN compiler 8.2 -> 8.3",
    ]
    assert [c["words"] for c in entries[2]["changes"]] == [
        "mindspore 2.10.0 -> 2.9.0",
        "CANN compiler 8.3 -> 8.2",
    ]


def test_drift_command(history_db):
    db = history_db
    store = Store.open(f"sqlite:///{db}")
    ids = store_runs(
        store, [document(), document(driver__version="25.0.rc1.1"), document(driver__version="25.3")]
    )
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", str(db), "drift", "ms20"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split() == ["run", "started", "(UTC)", "auditor", "host", "digest", "change"]
    assert lines[1].split()[0] == str(ids[2]) and lines[1].endswith("driver 25.0.rc1.1 -> 25.3")
    assert store.auditor_id in lines[1].split()
    assert lines[-1].split()[0] == str(ids[0]) and lines[-1].endswith("first fingerprint")
    rows = runner.invoke(cli, ["--db", str(db), "drift", "ms20", "--format", "csv"]).output.splitlines()
    assert rows[0] == "run,started_at,auditor,host,digest,change" and len(rows) == 4
    mine = runner.invoke(cli, ["--db", str(db), "drift", "ms20", "--auditor", "other", "--format", "csv"])
    assert mine.output.splitlines() == [rows[0]]
    out = runner.invoke(cli, ["--db", str(db), "drift", "ms20", "--json", "--limit", "1"])
    doc = json.loads(out.output)
    assert doc["stack"] == "ms20" and [e["run_id"] for e in doc["changes"]] == [ids[2]]
    assert doc["changes"][0]["changes"][0]["path"] == "driver.version"
    out = runner.invoke(cli, ["--db", str(db), "drift", "lite20"])
    assert out.exit_code == 0 and "no fingerprint of stack 'lite20'" in out.output


def failed_document() -> dict:
    """What older auditors stored when a worker died while fingerprinting."""
    return {
        "runtime": document()["runtime"],
        "fingerprint_error": "stack ms20: fingerprint failed: worker died",
    }


def test_previous_fingerprint_is_the_last_good_one_not_a_failed_collection(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    good, _ = store_runs(store, [document(), failed_document()])
    run_id, digest, doc = store.previous_fingerprint("local", "ms20")
    assert (run_id, digest) == (good, fingerprint_digest(document()))
    assert "fingerprint_error" not in doc


def test_drift_history_skips_failed_collections(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    ids = store_runs(store, [document(), failed_document(), document()])
    assert [e["run_id"] for e in drift_history(store, "ms20")] == [ids[0]]


def test_a_failed_fingerprint_is_not_stored_and_makes_the_run_an_error(history_db):
    from auditor.cycle.cycle import stack_report
    from auditor.stacks.session import StackSession as _Session

    session = _Session.__new__(_Session)
    session.problems, session.hello, session.start_error = [], {"runtime": "mindspore"}, None
    stack = type(
        "S", (), dict(name="ms20", role="train", runtime="mindspore", python="p", device="cpu", host="local")
    )
    report = stack_report(stack, session, failed_document())
    assert report.fingerprint is None
    assert report.problems and "fingerprint not taken" in report.problems[0]
    now = time.time()
    result = CycleResult(now, now, "t", {"ms20": report}, [], [])
    assert result.outcome == "error"
    store = Store.open(f"sqlite:///{history_db}")
    store.finish_run(store.begin_run("t"), result, {})
    assert store.fingerprint_history("ms20") == []


def test_drift_of_a_stack_nobody_knows_is_a_usage_error(tmp_path, history_db, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./auditor.toml: only the history names stacks
    monkeypatch.delenv("AUDITOR_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    db = history_db  # a history that exists, and knows no such stack
    out = CliRunner().invoke(cli, ["--db", str(db), "drift", "ms2O"])
    assert out.exit_code == 2, out.output
    assert "no stack 'ms2O' in the history or the config" in out.output
