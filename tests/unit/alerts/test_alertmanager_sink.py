"""The ``alertmanager`` sink: events as Alertmanager's v2 API takes them, checked against a real
Alertmanager (Debian's package) on 127.0.0.1: the alert appears with its labels and
annotations, is grouped per pair by the route, a silence suppresses it, and the resolved event
ends it. The oracle is Alertmanager's own API, not the sink's code."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from auditor.plugins import sink_alertmanager as am
from auditor.plugins.sink_webhook import WebhookError

from auditor.alerts.sinks import OPENED, REMINDER, RESOLVED
from tests.monitoring_servers import ALERTMANAGER, http, missing, start_alertmanager
from tests.requires import require
from tests.sshd import free_port

ROUTE = """
route:
  receiver: "null"
  group_by: ["pair"]
  group_wait: 1s
  group_interval: 1s
receivers:
  - name: "null"
"""


def event(kind: str, key: str, pair: str | None, probe: str, what: str = OPENED, **alert) -> dict:
    details = {"probe": probe, "variant": "fp16"}
    if pair:
        details["pair"] = pair
    now = datetime.now(UTC)
    body = {
        "id": 7,
        "key": key,
        "state": "resolved" if what == RESOLVED else "open",
        "kind": kind,
        "severity": "warning",
        "subject": pair or "infer-07",
        "message": f"{probe} [fp16]: std 3/512 elements out of tolerance\nmore lines",
        "details": details,
        "opened_at": (now - timedelta(minutes=5)).isoformat().replace("+00:00", "Z"),
        "resolved_at": now.isoformat().replace("+00:00", "Z") if what == RESOLVED else None,
        **alert,
    }
    return {"schema": "auditor.alert/1", "event": what, "alert": body, "host": "trainer-01"}


def sink(url: str, **options) -> am.AlertmanagerSink:
    opts = {"url": url, "timeout": 5, "retries": 0, **options}
    assert am.validate(opts) == []
    return am.create("am", opts)


def alerts(url: str) -> dict[str, dict]:
    return {a["labels"]["key"]: a for a in http(url + "/api/v2/alerts")}


def wait_for(what: str, read, holds, seconds: float = 20.0):  # noqa: ANN001, ANN201
    """``read()`` again until ``holds`` of it; what it read then (a deadline, not a duration)."""
    end = time.monotonic() + seconds
    while True:
        got = read()
        if holds(got):
            return got
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {seconds:g} s; last read: {got}")
        time.sleep(0.2)


def test_alerts_appear_grouped_per_pair_are_silenced_and_resolve(tmp_path) -> None:
    require("alertmanager", lambda: missing(ALERTMANAGER))
    server = start_alertmanager(tmp_path / "am", ROUTE)
    try:
        s = sink(
            server.url, labels={"team": "ml"}, runbook_url="https://docs.internal/auditor/alerts/#{kind}"
        )
        a1 = event("drift", "ms20->lite20/ppo_policy/fp16/drift", "ms20->lite20", "ppo_policy")
        a2 = event("drift", "ms20->lite20/sampler/fp16/drift", "ms20->lite20", "sampler")
        b1 = event("invariant", "ms20->ort/ppo_policy/fp16/invariant", "ms20->ort", "ppo_policy")
        for e in (a1, a2, b1):
            s.send(e)
        got = wait_for("three alerts", lambda: alerts(server.url), lambda a: len(a) == 3)
        first = got["ms20->lite20/ppo_policy/fp16/drift"]
        assert first["labels"] == {
            "alertname": "AuditorDrift",
            "kind": "drift",
            "severity": "warning",
            "subject": "ms20->lite20",
            "key": "ms20->lite20/ppo_policy/fp16/drift",
            "auditor": "trainer-01",
            "pair": "ms20->lite20",
            "probe": "ppo_policy",
            "variant": "fp16",
            "team": "ml",
        }
        assert (
            first["annotations"]["summary"]
            == "ms20->lite20: ppo_policy [fp16]: std 3/512 elements out of tolerance"
        )
        assert first["annotations"]["description"].endswith("more lines")
        assert first["annotations"]["runbook_url"] == "https://docs.internal/auditor/alerts/#drift"
        assert first["status"]["state"] == "active"
        # still open for valid_for (12 h by default) unless resent or resolved
        ends = datetime.fromisoformat(first["endsAt"].replace("Z", "+00:00"))
        assert ends > datetime.now(UTC) + timedelta(hours=11)

        # grouped per pair by the route (group_by: [pair])
        def groups() -> dict:
            answer = http(server.url + "/api/v2/alerts/groups")
            return {g["labels"].get("pair"): len(g["alerts"]) for g in answer}

        wait_for("two groups", groups, lambda g: g == {"ms20->lite20": 2, "ms20->ort": 1})

        # a silence on one pair suppresses its alert only
        now = datetime.now(UTC)
        http(
            server.url + "/api/v2/silences",
            {
                "matchers": [{"name": "pair", "value": "ms20->ort", "isRegex": False, "isEqual": True}],
                "startsAt": now.isoformat(),
                "endsAt": (now + timedelta(hours=1)).isoformat(),
                "createdBy": "test",
                "comment": "maintenance",
            },
        )
        states = wait_for(
            "the silence",
            lambda: {k: a["status"]["state"] for k, a in alerts(server.url).items()},
            lambda st: st["ms20->ort/ppo_policy/fp16/invariant"] == "suppressed",
        )
        assert states["ms20->lite20/ppo_policy/fp16/drift"] == "active"

        # a reminder keeps it one alert; the resolution ends it at once
        s.send(event("drift", "ms20->lite20/ppo_policy/fp16/drift", "ms20->lite20", "ppo_policy", REMINDER))
        assert len(alerts(server.url)) == 3
        s.send(event("drift", "ms20->lite20/ppo_policy/fp16/drift", "ms20->lite20", "ppo_policy", RESOLVED))
        left = wait_for(
            "the resolution",
            lambda: alerts(server.url),
            lambda a: "ms20->lite20/ppo_policy/fp16/drift" not in a,
        )
        assert set(left) == {"ms20->lite20/sampler/fp16/drift", "ms20->ort/ppo_policy/fp16/invariant"}
    finally:
        server.stop()


def test_an_alertmanager_that_is_down_fails_the_send_with_its_address() -> None:
    s = sink(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(
        WebhookError, match=r"POST http://127\.0\.0\.1:\d+/api/v2/alerts failed after 1 attempt"
    ):
        s.send(event("drift", "k", "ms20->lite20", "ppo_policy"))


def test_alert_names_labels_and_times() -> None:
    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    assert (
        am.alertname("out-of-line") == "AuditorOutOfLine"
        and am.alertname("npu-telemetry") == "AuditorNpuTelemetry"
    )
    opened = event("out-of-line", "infer-07/out-of-line/ppo_policy/fp16", None, "ppo_policy")
    opened["alert"]["opened_at"] = "2026-12-07T11:00:00Z"
    body = am.alert_of(opened, {"team": "ml", "kind": "not-this"}, 600.0, None, now)
    assert body["labels"]["kind"] == "out-of-line" and "pair" not in body["labels"]  # its own labels win
    assert (body["startsAt"], body["endsAt"]) == (
        "2026-12-07T11:00:00.000000Z",
        "2026-12-07T12:10:00.000000Z",
    )
    assert "runbook_url" not in body["annotations"]
    resolved = event("drift", "k", "p", "ppo_policy", RESOLVED, resolved_at="2026-12-07T11:30:00Z")
    resolved["alert"]["opened_at"] = "2026-12-07T11:00:00Z"
    assert am.alert_of(resolved, {}, 600.0, None, now)["endsAt"] == "2026-12-07T11:30:00.000000Z"


def test_options_are_checked_with_the_webhooks_and_their_own() -> None:
    problems = am.validate(
        {
            "url": "ftp://x",
            "labels": {"bad-name": "x", "ok": 3},
            "valid_for": 0,
            "timeout": -1,
            "colour": "red",
        }
    )
    assert "url: must be an http:// or https:// URL, not 'ftp://x'" in problems
    assert "labels.bad-name: not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)" in problems
    assert "labels.ok: must be a string, not int" in problems
    assert "valid_for: must be greater than 0 seconds, not 0" in problems
    assert "timeout: must be greater than 0, not -1" in problems
    assert any(
        p.startswith("colour: unknown option (expected one of: labels, runbook_url, valid_for, ")
        for p in problems
    )
    assert am.validate({}) == ["url: is required"]
