"""The Alertmanager webhook receiver in-process: payloads recorded from Alertmanager 0.25, the
queue on SQLite and PostgreSQL, idempotency, overflow, restarts and the notify webhook."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from apps.http import alert_receiver
from apps.http.alert_payload import (
    PayloadError,
    build_question,
    investigation_of,
    parse_notification,
    thread_id_for,
)
from apps.http.alert_receiver import AlertSettings, notification_text
from apps.http.api import create_app
from persistence.alert_queue import AlertQueue, NewInvestigation
from persistence.locks import thread_lock
from persistence.store import open_persistence
from tests.sql_kit import query
from tests.webhook_sink import WebhookSink

PAYLOADS = Path(__file__).resolve().parent / "alertmanager"
KEYS = {"key-alice": "alice", "key-bob": "bob"}
ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"Authorization": "Bearer key-bob"}


def recorded(name: str) -> dict[str, Any]:
    """A notification Alertmanager 0.25 sent (captured from its webhook)."""
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    return data


def group(key: str, *alerts: tuple[str, str, str]) -> dict[str, Any]:
    """A firing notification of group ``key``: alerts as (alertname, fingerprint, startsAt)."""
    body = recorded("firing")
    template = body["alerts"][0]
    body["groupKey"] = key
    body["alerts"] = [
        {**copy.deepcopy(template), "labels": {**template["labels"], "alertname": name}}
        | {"fingerprint": fingerprint, "startsAt": starts}
        for name, fingerprint, starts in alerts
    ]
    return body


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("SUPERBIZ_LANGUAGE", "en")
    monkeypatch.setenv("SUPERBIZ_ALERT_CONCURRENCY", "2")


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url, api_keys=KEYS)) as test_client:
        yield test_client


def finished(client: TestClient, headers: dict[str, str], count: int) -> list[dict[str, Any]]:
    """The caller's investigations once ``count`` of them have finished."""
    rows: list[dict[str, Any]] = []
    for _ in range(600):
        rows = client.get("/api/alerts", headers=headers).json()["alerts"]
        if len([r for r in rows if r["status"] in ("done", "failed")]) >= count:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"not finished: {rows}")


# --- payloads ----------------------------------------------------------------------------


def test_payload_recorded_firing_notification_parses() -> None:
    notification = parse_notification(json.dumps(recorded("firing")).encode())

    assert notification.status == "firing" and notification.receiver == "superbiz"
    assert notification.groupKey == '{}:{alertname="HighErrorRate", service="order-service"}'
    (alert,) = notification.firing
    assert alert.name == "HighErrorRate" and alert.identity() == "db70c76e1fe3b917"
    assert alert.endsAt is not None and alert.endsAt.year == 1  # Alertmanager's "no end"


def test_payload_question_names_alerts_services_severity_annotations_window_and_runbook() -> None:
    body = recorded("firing")
    body["alerts"][0]["annotations"]["description"] = "order-service answers 30 % with 500"
    body["alerts"][0]["labels"]["job"] = "api"
    notification = parse_notification(json.dumps(body).encode())

    question = build_question(notification, ("job", "service"), timedelta(minutes=15))

    assert "HighErrorRate for api (severity critical)" in question
    assert "firing since 2026-12-01T13:00:01Z" in question
    assert "summary: 5xx ratio above 5%" in question
    assert "description: order-service answers 30 % with 500" in question
    assert "runbook: https://runbooks.example/HighErrorRate" in question
    assert "from 2026-12-01T12:45:01Z" in question


def test_payload_ids_follow_the_group_and_the_set_of_alerts() -> None:
    first = parse_notification(json.dumps(group("g", ("A", "f1", "2026-12-01T10:00:00Z"))).encode())
    again = parse_notification(
        json.dumps(
            group("g", ("A", "f1", "2026-12-01T10:00:00Z"), ("B", "f2", "2026-12-01T10:01:00Z"))
        ).encode()
    )
    labels = ("service",)
    one, two = (investigation_of(n, "alice", labels, timedelta()) for n in (first, again))
    assert one is not None and two is not None
    assert one.thread_id == two.thread_id == thread_id_for("alice", "g")
    assert one.diagnosis_id != two.diagnosis_id
    assert investigation_of(first, "bob", labels, timedelta()) != one
    resolved = parse_notification(json.dumps(recorded("resolved")).encode())
    assert investigation_of(resolved, "alice", labels, timedelta()) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"not json", ["the body is not valid JSON"]),
        (b"[1]", ["the body must be a JSON object, got an array"]),
        (
            json.dumps({"alerts": [{"labels": 3}]}).encode(),
            [
                "groupKey: Field required",
                "status: Field required",
                "receiver: Field required",
                "alerts[0].labels: Input should be a valid dictionary",
                "alerts[0].startsAt: Field required",
            ],
        ),
        (
            json.dumps({**recorded("firing"), "version": "5", "alerts": []}).encode(),
            ["payload version '5' is not", "alerts: List should have at least 1 item"],
        ),
    ],
    ids=["not-json", "not-object", "wrong-shape", "unknown-version-wrong-fields"],
)
def test_payload_not_alertmanagers_shape_lists_what_is_wrong(
    body: bytes, expected: list[str]
) -> None:
    with pytest.raises(PayloadError) as caught:
        parse_notification(body)

    for text in expected:
        assert text in str(caught.value), (text, str(caught.value))


def test_notification_text_says_a_failed_diagnosis_failed_and_links_it() -> None:
    row = {
        "alerts": [{"alert_name": "HighErrorRate", "service": "order-service"}],
        "status": "failed",
        "verdict": None,
        "score": None,
    }
    text = notification_text(row, "The diagnosis could not finish.", "http://x/api/diagnoses/d")

    assert text.startswith("superbiz: HighErrorRate (order-service): the diagnosis failed")
    assert text.endswith("Details: http://x/api/diagnoses/d")


def test_alert_settings_refuse_a_notify_url_that_is_not_http() -> None:
    with pytest.raises(ValueError, match="SUPERBIZ_NOTIFY_WEBHOOK_URL must be an http"):
        AlertSettings.from_env({"SUPERBIZ_NOTIFY_WEBHOOK_URL": "hooks.example/x"})
    with pytest.raises(ValueError, match="SUPERBIZ_ALERT_QUEUE_MAX must be at least 1"):
        AlertSettings.from_env({"SUPERBIZ_ALERT_QUEUE_MAX": "0"})


# --- the receiver ------------------------------------------------------------------------


def test_receiver_accepts_at_once_then_diagnoses_in_the_background(client: TestClient) -> None:
    response = client.post("/api/alertmanager", json=recorded("firing"), headers=ALICE)

    assert response.status_code == 202, response.text
    (accepted,) = response.json()["accepted"]
    assert accepted["group_key"] == recorded("firing")["groupKey"]
    assert accepted["thread_id"] == thread_id_for("alice", accepted["group_key"])
    (row,) = finished(client, ALICE, 1)
    assert row["diagnosis_id"] == accepted["diagnosis_id"]
    assert (row["status"], row["verdict"]) == ("done", "PASS")
    assert row["alerts"][0]["alert_name"] == "HighErrorRate"
    record = client.get(f"/api/diagnoses/{accepted['diagnosis_id']}", headers=ALICE).json()
    assert record["status"] == "done" and record["verdict"] == "PASS"
    # The investigation states a root cause: the incident analysis's, confirmed by its claims.
    assert record["self_evaluation"]["root_cause"]["service"] == "inventory-service"
    assert "Most likely root cause (inferred): inventory-service" in record["final_answer"]
    assert "HighErrorRate" in record["question"] and "order-service" in record["question"]
    threads = client.get("/api/threads", headers=ALICE).json()["threads"]
    assert [t["thread_id"] for t in threads] == [accepted["thread_id"]]
    assert client.get("/api/alerts", headers=BOB).json() == {"alerts": []}
    assert client.get(f"/api/diagnoses/{accepted['diagnosis_id']}", headers=BOB).status_code == 404


def test_receiver_repeat_of_a_group_starts_nothing_new(client: TestClient) -> None:
    first = client.post("/api/alertmanager", json=recorded("firing"), headers=ALICE)
    finished(client, ALICE, 1)
    repeat = client.post("/api/alertmanager", json=recorded("firing"), headers=ALICE)

    assert (first.status_code, repeat.status_code) == (202, 200)
    assert (
        repeat.json()["accepted"][0]["diagnosis_id"] == first.json()["accepted"][0]["diagnosis_id"]
    )
    assert repeat.json()["accepted"][0]["status"] == "done"
    thread = first.json()["accepted"][0]["thread_id"]
    diagnoses = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE).json()["diagnoses"]
    assert len(diagnoses) == 1
    assert len(client.get("/api/alerts", headers=ALICE).json()["alerts"]) == 1


def test_receiver_waits_while_another_run_holds_the_alert_thread(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(alert_receiver, "BUSY_RETRY_S", 0.2)
    monkeypatch.setattr(alert_receiver, "ERROR_RETRY_S", 0.2)
    thread = thread_id_for("alice", recorded("firing")["groupKey"])
    holder = open_persistence(database_url, origin="cli")
    try:
        with TestClient(create_app(database_url, api_keys=KEYS)) as client:
            with thread_lock(holder.db, thread):  # a CLI run on the same thread
                accepted = client.post("/api/alertmanager", json=recorded("firing"), headers=ALICE)
                assert accepted.status_code == 202, accepted.text
                time.sleep(1.0)
                (row,) = client.get("/api/alerts", headers=ALICE).json()["alerts"]
                assert row["status"] == "queued" and row["verdict"] is None
                diagnoses = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE)
                assert diagnoses.status_code == 404 or diagnoses.json()["diagnoses"] == []
            (row,) = finished(client, ALICE, 1)
            assert (row["status"], row["verdict"]) == ("done", "PASS")
            diagnoses = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE).json()
            assert [d["id"] for d in diagnoses["diagnoses"]] == [row["diagnosis_id"]]
    finally:
        holder.close()


def test_receiver_new_alert_in_a_group_continues_its_thread(client: TestClient) -> None:
    a = ("HighErrorRate", "f1", "2026-12-01T10:00:00Z")
    b = ("QueueBacklog", "f2", "2026-12-01T10:02:00Z")
    first = client.post("/api/alertmanager", json=group("g1", a), headers=ALICE)
    finished(client, ALICE, 1)
    grown = client.post("/api/alertmanager", json=group("g1", a, b), headers=ALICE)
    finished(client, ALICE, 2)
    shrunk = client.post("/api/alertmanager", json=group("g1", b), headers=ALICE)

    assert (first.status_code, grown.status_code, shrunk.status_code) == (202, 202, 200)
    thread = first.json()["accepted"][0]["thread_id"]
    assert grown.json()["accepted"][0]["thread_id"] == thread
    assert (
        shrunk.json()["accepted"][0]["diagnosis_id"] == grown.json()["accepted"][0]["diagnosis_id"]
    )
    diagnoses = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE).json()["diagnoses"]
    assert [d["id"] for d in diagnoses] == [
        first.json()["accepted"][0]["diagnosis_id"],
        grown.json()["accepted"][0]["diagnosis_id"],
    ]


def test_receiver_resolved_notification_is_recorded_and_starts_none(client: TestClient) -> None:
    accepted = client.post("/api/alertmanager", json=recorded("firing"), headers=ALICE).json()
    finished(client, ALICE, 1)
    response = client.post("/api/alertmanager", json=recorded("resolved"), headers=ALICE)

    assert response.status_code == 200
    assert response.json() == {
        "accepted": [],
        "resolved": [accepted["accepted"][0]["diagnosis_id"]],
    }
    (row,) = client.get("/api/alerts", headers=ALICE).json()["alerts"]
    assert row["resolved_at"] is not None
    thread = accepted["accepted"][0]["thread_id"]
    assert (
        len(client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE).json()["diagnoses"]) == 1
    )


def test_receiver_refuses_bad_input(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    unknown = {**recorded("firing"), "version": "5"}
    assert client.post("/api/alertmanager", json=unknown, headers=ALICE).status_code == 202
    wrong = client.post("/api/alertmanager", json={"status": "firing"}, headers=ALICE)
    assert wrong.status_code == 422
    assert "groupKey: Field required" in wrong.json()["error"]
    big = {**recorded("firing"), "commonAnnotations": {"description": "x" * (1024 * 1024)}}
    too_large = client.post("/api/alertmanager", json=big, headers=ALICE)
    assert too_large.status_code == 413
    assert "SUPERBIZ_ALERT_MAX_BODY_BYTES" in too_large.json()["error"]
    assert client.post("/api/alertmanager", json=recorded("firing")).status_code == 401
    assert client.get("/api/alertmanager", headers=ALICE).status_code == 405
    assert client.get("/api/alerts?limit=0", headers=ALICE).status_code == 422


def _firing_with(change: Any) -> bytes:
    body = recorded("firing")
    change(body)
    return json.dumps(body).encode()


def _nested(depth: int) -> bytes:
    body = json.dumps(recorded("firing")).encode()
    return body[:-1] + b', "commonLabels": {"team": ' + b"[" * depth + b"]" * depth + b"}}"


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def change(body: Any) -> None:
        for key in path[:-1]:
            body = body[key]
        body[path[-1]] = value

    return change


def _rename_label(body: Any) -> None:
    body["alerts"][0]["labels"]["serv\x00ice"] = body["alerts"][0]["labels"].pop("service")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            _firing_with(_set(("alerts", 0, "labels", "service"), "order\x00service")),
            "alerts[0].labels.service",
        ),
        (_firing_with(_rename_label), "alerts[0].labels.serv\\x00ice (a name)"),
        (_firing_with(_set(("groupKey",), '{}:{alertname="A\x00"}')), "groupKey"),
        (_firing_with(_set(("receiver",), "super\x00biz")), "receiver"),
        (
            _firing_with(_set(("alerts", 0, "labels", "service"), "order\ud800")),
            "alerts[0].labels.service",
        ),
        (
            _firing_with(_set(("alerts", 0, "startsAt"), "0001-01-01T00:00:00Z")),
            "alerts[0].startsAt",
        ),
        (_nested(22_000), "commonLabels.team"),
    ],
    ids=[
        "nul-label",
        "nul-label-name",
        "nul-group-key",
        "nul-receiver",
        "lone-surrogate",
        "starts-at-year-1",
        "nested-45kb",
    ],
)
def test_receiver_refuses_unstorable_input_with_422_naming_the_field(
    client: TestClient, body: bytes, field: str
) -> None:
    answer = client.post(
        "/api/alertmanager",
        content=body,
        headers={**ALICE, "Content-Type": "application/json"},
    )

    assert answer.status_code == 422, answer.text
    assert f"{field}: " in answer.json()["error"]
    assert client.get("/api/alerts", headers=ALICE).json()["alerts"] == []


def test_receiver_refuses_an_oversized_alert_name_naming_the_field(client: TestClient) -> None:
    body = recorded("firing")
    body["alerts"][0]["labels"]["alertname"] = "A" * 100_000

    answer = client.post("/api/alertmanager", json=body, headers=ALICE)

    assert answer.status_code == 422
    assert "alerts[0].labels.alertname: is 100000 characters long" in answer.json()["error"]


def test_payload_question_is_bounded_like_chat_and_counts_what_it_leaves_out() -> None:
    alerts = [(f"Alert{n}{'x' * 900}", f"f{n}", f"2026-12-01T10:{n:02d}:00Z") for n in range(40)]
    body = group("g", *alerts)
    for alert in body["alerts"]:
        alert["annotations"]["description"] = "d" * 16_000
        alert["labels"]["service"] = "s" * 1024
    notification = parse_notification(json.dumps(body).encode())

    question = build_question(notification, ("service",), timedelta(minutes=5))
    short = build_question(notification, ("service",), timedelta(minutes=5), limit=1500)

    assert len(question) <= 4000 and len(short) <= 1500
    assert question.startswith("Alertmanager reports 40 firing alert(s):")
    assert "more alert(s) of the same group not listed here" in question
    assert question.rstrip().endswith("read each alert's runbook first.")
    assert "Alert0" in short and "read each alert's runbook first." in short


SECRETS = ["hunter2hunter2", "s3cr3tpass", "abcdef1234567890", "ghp_" + "A1b2" * 6]


def test_receiver_masks_secrets_of_annotations_in_the_question_and_the_listing(
    database_url: str,
) -> None:
    body = recorded("firing")
    body["alerts"][0]["annotations"].update(
        summary=f"login fails; curl -H 'Authorization: Bearer {SECRETS[2]}' password={SECRETS[0]}",
        description=f"token: {SECRETS[3]} see https://bob:{SECRETS[1]}@grafana.example/d/1",
        runbook_url=f"https://runbooks.example/HighErrorRate?api_key={SECRETS[2]}",
    )
    app = create_app(database_url, api_keys=KEYS)
    stopped = TestClient(app)  # no lifespan: the question is stored, nothing runs it

    accepted = stopped.post("/api/alertmanager", json=body, headers=ALICE)
    listing = stopped.get("/api/alerts", headers=ALICE)
    app.state.superbiz.close()

    assert accepted.status_code == 202, accepted.text
    persistence = open_persistence(database_url)
    try:
        (row,) = AlertQueue(persistence.db, "test").list("alice", 5)
        claimed = AlertQueue(persistence.db, "test").claim(30)
    finally:
        persistence.close()
    assert claimed is not None and "password=****" in claimed.question
    assert "Bearer ****" in claimed.question and "bob:****@grafana" in claimed.question
    for text in (claimed.question, listing.text, json.dumps(row)):
        assert not [secret for secret in SECRETS if secret in text], text


def test_receiver_listing_is_bounded_whatever_the_rows_hold() -> None:
    big = {"alert_name": "A" * 100_000, "summary": "s" * 300, "fingerprint": "f"}
    rows = [
        {"diagnosis_id": f"d{n}", "alerts": [big] * 60, "error": "e" * 50_000} for n in range(40)
    ]

    page = alert_receiver.listed_page(rows)

    size = len(json.dumps(page))
    assert size <= alert_receiver.LIST_BUDGET_CHARS + 30_000, size
    assert page["truncated"] is True
    first = page["alerts"][0]
    assert len(first["alerts"]) == alert_receiver.LISTED_ALERTS and first["alerts_total"] == 60
    assert len(first["alerts"][0]["alert_name"]) <= alert_receiver.LISTED_TEXT_CHARS
    assert len(first["error"]) <= alert_receiver.LISTED_TEXT_CHARS


def test_receiver_full_queue_is_429_and_a_restart_runs_what_was_queued(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_ALERT_QUEUE_MAX", "2")
    app = create_app(database_url, api_keys=KEYS)
    stopped = TestClient(app)  # no lifespan: no workers
    bodies = [group(f"g{n}", ("HighErrorRate", f"f{n}", "2026-12-01T10:00:00Z")) for n in range(3)]
    answers = [stopped.post("/api/alertmanager", json=b, headers=ALICE) for b in bodies]

    assert [a.status_code for a in answers] == [202, 202, 429]
    assert answers[2].headers["retry-after"] == "30"
    assert "the alert queue is full" in answers[2].json()["error"]
    app.state.superbiz.close()
    with TestClient(create_app(database_url, api_keys=KEYS)) as restarted:
        rows = finished(restarted, ALICE, 2)
        assert {r["status"] for r in rows} == {"done"}
        assert restarted.post("/api/alertmanager", json=bodies[2], headers=ALICE).status_code == 202


def test_queue_claim_of_a_stopped_process_is_queued_again_then_failed(database_url: str) -> None:
    persistence = open_persistence(database_url)
    try:
        gone = AlertQueue(persistence.db, "host:1:gone")
        item = NewInvestigation(
            diagnosis_id="diag-x",
            thread_id="alert-x",
            owner="alice",
            group_key="g",
            alert_set="s",
            receiver="r",
            message_id="m",
            question="q",
            alerts=[{"fingerprint": "f", "starts_at": "t"}],
        )
        assert [e.created for e in gone.enqueue([item, item], capacity=5)] == [True, False]
        survivor = AlertQueue(persistence.db, "host:2:alive")
        claimed = gone.claim(lease_s=-1)  # its heartbeat stops at once
        assert claimed is not None and claimed.diagnosis_id == "diag-x"
        assert survivor.claim(lease_s=30) is None  # never two holders
        survivor.renew(["diag-x"], lease_s=30)  # only the holder's heartbeat counts
        gone.renew([], lease_s=30)  # and only for rows its workers still run
        assert survivor.recover(max_attempts=2) == (["diag-x"], [])
        again = gone.claim(lease_s=-1)
        assert again is not None and again.attempts == 2
        gone.renew(["diag-x"], lease_s=30)
        assert survivor.recover(max_attempts=2) == ([], [])  # renewed: still running
        gone.renew(["diag-x"], lease_s=-1)
        assert survivor.recover(max_attempts=2) == ([], ["diag-x"])
        row = survivor.get("diag-x")
        assert row is not None and row["status"] == "failed"
        assert row["error"] == "the process running it stopped 2 times without finishing it"
    finally:
        persistence.close()


def _item(diagnosis_id: str, thread_id: str) -> NewInvestigation:
    return NewInvestigation(
        diagnosis_id=diagnosis_id,
        thread_id=thread_id,
        owner="alice",
        group_key=thread_id,
        alert_set=diagnosis_id,
        receiver="r",
        message_id=f"m-{diagnosis_id}",
        question="q",
        alerts=[{"fingerprint": diagnosis_id, "starts_at": "t"}],
    )


def test_queue_busy_thread_retries_do_not_count_and_a_thread_runs_in_order(
    database_url: str,
) -> None:
    persistence = open_persistence(database_url)
    try:
        queue = AlertQueue(persistence.db, "host:1:here")
        queue.enqueue([_item("d1", "t1"), _item("d2", "t1"), _item("d3", "t2")], capacity=5)
        first = queue.claim(lease_s=30)
        assert first is not None and first.diagnosis_id == "d1"
        third = queue.claim(lease_s=30)  # d2 waits while d1 of its thread runs
        assert third is not None and third.diagnosis_id == "d3"
        assert queue.claim(lease_s=30) is None
        attempts = []
        for _ in range(5):  # another run held d3's thread, again and again
            queue.requeue("d3", delay_s=0, error=None, counted=False)
            again = queue.claim(lease_s=30)
            assert again is not None and again.diagnosis_id == "d3"
            attempts.append(again.attempts)
        assert attempts == [1] * 5
        queue.finish("d1", status="done", verdict="PASS", score=1.0, error=None, notify=False)
        second = queue.claim(lease_s=30)
        assert second is not None and second.diagnosis_id == "d2"
    finally:
        persistence.close()


@pytest.mark.parametrize("left", ["running", "abandoned"])
def test_receiver_reruns_an_investigation_killed_before_its_first_checkpoint(
    database_url: str, monkeypatch: pytest.MonkeyPatch, left: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_SWEEP_INTERVAL_S", "0.2")
    monkeypatch.setenv("SUPERBIZ_ALERT_CLAIM_S", "1")
    earlier = group("g", ("HighErrorRate", "f1", "2026-12-01T10:00:00Z"))
    later = group(
        "g",
        ("HighErrorRate", "f1", "2026-12-01T10:00:00Z"),
        ("Other", "f2", "2026-12-01T10:01:00Z"),
    )
    with TestClient(create_app(database_url, api_keys=KEYS)) as client:
        assert client.post("/api/alertmanager", json=earlier, headers=ALICE).status_code == 202
        finished(client, ALICE, 1)  # the thread's last diagnosis finished
    app = create_app(database_url, api_keys=KEYS)
    accepted = TestClient(app).post("/api/alertmanager", json=later, headers=ALICE)
    app.state.superbiz.close()
    diagnosis_id = accepted.json()["accepted"][0]["diagnosis_id"]
    # What a SIGKILL right after intake started the diagnosis leaves: the row running under a
    # dead holder, the record running (or set aside by a later run), the lease of a dead
    # process, and no checkpoint of the diagnosis.
    persistence = open_persistence(database_url)
    try:
        claimed = AlertQueue(persistence.db, "host:1:gone").claim(lease_s=-1)
        assert claimed is not None and claimed.diagnosis_id == diagnosis_id
        persistence.audit.start_diagnosis(
            diagnosis_id, thread_id=claimed.thread_id, question=claimed.question
        )
        if left == "abandoned":
            persistence.audit.abandon_running(claimed.thread_id)
        query(
            persistence.db,
            "INSERT INTO diagnosis_lease (diagnosis_id, thread_id, holder, origin, "
            "acquired_at, expires_at, attempts) "
            "VALUES (:diagnosis, :thread, 'host:1:gone', 'api', :at, 1.0, 0)",
            diagnosis=diagnosis_id,
            thread=claimed.thread_id,
            at="2026-01-01T00:00:00+00:00",
        )
    finally:
        persistence.close()

    with TestClient(create_app(database_url, api_keys=KEYS)) as client:
        rows = finished(client, ALICE, 2)
        record = client.get(f"/api/diagnoses/{diagnosis_id}", headers=ALICE).json()

    (row,) = [r for r in rows if r["diagnosis_id"] == diagnosis_id]
    assert (row["status"], row["verdict"], row["error"]) == ("done", "PASS", None), row
    assert row["attempts"] == 2
    assert record["status"] == "done" and record["verdict"] == "PASS"
    assert record["note"] == alert_receiver.RERUN_NOTE


def test_receiver_posts_the_composed_answer_to_the_notify_webhook_with_retries(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with WebhookSink(fail_first=1).running() as sink:
        monkeypatch.setenv("SUPERBIZ_NOTIFY_WEBHOOK_URL", sink.url)
        monkeypatch.setenv("SUPERBIZ_NOTIFY_RETRY_S", "0.2")
        with TestClient(create_app(database_url, api_keys=KEYS)) as client:
            accepted = client.post("/api/alertmanager", json=recorded("firing"), headers=ALICE)
            diagnosis_id = accepted.json()["accepted"][0]["diagnosis_id"]
            (body,) = sink.wait_for(1)
            record = client.get(f"/api/diagnoses/{diagnosis_id}", headers=ALICE).json()
            for _ in range(100):
                (row,) = client.get("/api/alerts", headers=ALICE).json()["alerts"]
                if row["notify_status"] == "sent":
                    break
                time.sleep(0.05)

    assert set(body) == {"text"}
    text = body["text"]
    assert text.startswith("superbiz: HighErrorRate (order-service): verdict PASS, score 0.")
    assert "\nMost likely root cause (inferred): inventory-service: " in text
    assert record["final_answer"].strip() in text
    assert text.endswith(f"Details: http://testserver/api/diagnoses/{diagnosis_id}")
    assert sink.refused == 1
    assert (row["notify_status"], row["notify_attempts"]) == ("sent", 2)


def test_receiver_misconfigured_says_which_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_ALERT_CONCURRENCY", "two")
    with TestClient(create_app(f"sqlite:///{tmp_path / 'db.sqlite'}", api_keys=KEYS)) as client:
        response = client.post("/api/alertmanager", json=recorded("firing"), headers=ALICE)

    assert response.status_code == 500
    assert (
        "SUPERBIZ_ALERT_CONCURRENCY must be a whole number, got 'two'" in response.json()["error"]
    )


def test_receiver_storm_runs_at_most_the_configured_concurrency(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_ALERT_CONCURRENCY", "1")
    with TestClient(create_app(database_url, api_keys=KEYS)) as client:
        answers = [
            client.post(
                "/api/alertmanager",
                json=group(f"storm-{n}", ("HighErrorRate", f"f{n}", "2026-12-01T10:00:00Z")),
                headers=ALICE,
            )
            for n in range(4)
        ]
        rows = finished(client, ALICE, 4)

    assert [a.status_code for a in answers] == [202] * 4
    assert {r["status"] for r in rows} == {"done"}
    spans = sorted((str(r["started_at"]), str(r["finished_at"])) for r in rows)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans  # one at a time: each starts after the one before ended
