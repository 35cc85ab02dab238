"""The HTTP API in-process (Starlette's TestClient), on SQLite and on a real PostgreSQL database."""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.language_models import BaseChatModel
from starlette.applications import Starlette
from starlette.testclient import TestClient

from apps.auth import ApiKeys, ConfigError, Limits, RateLimiter, is_loopback
from apps.http.api import create_app
from models.factory import make_model_factory
from persistence.store import open_persistence
from state.context import Context
from tests.conftest import POSTGRES_ADMIN_URL
from tests.prometheus_kit import free_port
from tests.sql_kit import query

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "order-service 为什么报 500 错误？"
KEYS = {"key-alice": "alice", "key-bob": "bob"}
ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"X-API-Key": "key-bob"}
LOOPBACK = "http://127.0.0.1:8000"
"""Keyless mode answers requests addressed to a loopback name only (DNS rebinding)."""


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SUPERBIZ_OFFLINE", raising=False)
    for name in ("SUPERBIZ_API_KEYS", "SUPERBIZ_API_KEYS_FILE", "SUPERBIZ_LANGUAGE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(database_url, api_keys=KEYS)) as test_client:
        yield test_client


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


def chat(client: TestClient, headers: dict[str, str], **body: Any) -> Any:
    return client.post("/api/chat", json={"question": QUESTION, **body}, headers=headers)


def sse_events(text: str) -> list[tuple[str, Any]]:
    """``(event, data)`` pairs of a server-sent event stream (comments skipped)."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


# --- chat ------------------------------------------------------------------------------------


def test_api_chat_returns_the_verified_answer_for_the_sample_incident(client: TestClient) -> None:
    response = chat(client, ALICE)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "diagnosis_id",
        "thread_id",
        "verdict",
        "groundedness_score",
        "model_verdict",
        "rounds",
        "answer",
        "offline",
        "gatekeeper",
        "root_cause",
        "suspects",
    }
    assert body["diagnosis_id"].startswith("diag-")
    assert body["thread_id"].startswith("thread-")
    assert body["verdict"] == "PASS"
    assert 0.9 <= body["groundedness_score"] < 1.0  # the root cause is an inferred claim
    assert body["rounds"] == 1
    assert body["offline"] is True
    assert body["gatekeeper"]["status"] == "pass"
    assert "OrderServiceHigh5xxRate" in body["answer"]
    # The root cause is the ranked first suspect, resting on confirmed claims.
    assert body["root_cause"]["service"] == body["suspects"][0]["service"]
    assert body["root_cause"]["claim_ids"] and body["suspects"][0]["root_cause"] is True

    record = client.get(f"/api/diagnoses/{body['diagnosis_id']}", headers=ALICE).json()
    assert record["status"] == "done"
    assert record["verdict"] == "PASS"
    assert record["final_answer"] == body["answer"]
    assert [inv["invocation_id"] for inv in record["invocations"]][:1] == ["inv-1"]


def test_api_chat_answers_in_the_requested_language(client: TestClient) -> None:
    english = chat(client, ALICE, language="en").json()["answer"]
    chinese = chat(client, ALICE, language="zh").json()["answer"]

    assert "Offline mode" in english and "离线模式" not in english
    assert "离线模式" in chinese


def test_api_chat_stream_sends_stages_then_the_answer_then_done(client: TestClient) -> None:
    thread = new_thread()
    response = client.post(
        "/api/chat_stream", json={"question": QUESTION, "thread_id": thread}, headers=ALICE
    )

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    names = [name for name, _ in events]
    assert names[-2:] == ["answer", "done"]
    assert set(names[:-2]) == {"stage"} and len(names) > 4
    stages = [data["stage"] for name, data in events if name == "stage"]
    assert stages[0] == "intake" and stages[-1] == "done"
    answer = events[-2][1]
    # The inferred root cause lowers the groundedness below 1; the stage event carries it.
    assert {
        "stage": "verdict",
        "round": 1,
        "verdict": "PASS",
        "score": answer["groundedness_score"],
    } in [data for _, data in events]
    assert answer["verdict"] == "PASS"
    assert answer["thread_id"] == thread
    assert events[-1][1] == {"diagnosis_id": answer["diagnosis_id"]}
    plain = client.get(f"/api/diagnoses/{answer['diagnosis_id']}", headers=ALICE).json()
    assert plain["final_answer"] == answer["answer"]


def failing_planner() -> Any:
    models = make_model_factory()

    def get_model(role: str, ctx: Context) -> BaseChatModel:
        if role == "planner":
            raise RuntimeError("model endpoint refused the request")
        return models(role, ctx)

    return get_model


def test_api_chat_stream_reports_a_failed_run_as_an_error_event(database_url: str) -> None:
    app = create_app(database_url, api_keys=KEYS, get_model=failing_planner())
    with TestClient(app) as client:
        response = client.post("/api/chat_stream", json={"question": QUESTION}, headers=ALICE)
        events = sse_events(response.text)

        assert response.status_code == 200
        names = [name for name, _ in events]
        assert names[0] == "stage" and names[-1] == "error"
        assert "answer" not in names and "done" not in names
        assert "model endpoint refused the request" in events[-1][1]["error"]
        diagnosis_id = events[0][1]["diagnosis_id"]
        record = client.get(f"/api/diagnoses/{diagnosis_id}", headers=ALICE).json()
        assert record["status"] == "failed"

        plain = client.post("/api/chat", json={"question": QUESTION}, headers=ALICE)
        assert plain.status_code == 500
        assert "model endpoint refused the request" in plain.json()["error"]


# --- records ---------------------------------------------------------------------------------


def test_api_lists_a_threads_diagnoses_oldest_first(client: TestClient) -> None:
    thread = new_thread()
    first = chat(client, ALICE, thread_id=thread).json()
    second = chat(client, ALICE, thread_id=thread, question="is order-service alerting?").json()

    listing = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE)

    assert listing.status_code == 200
    records = listing.json()["diagnoses"]
    assert [r["id"] for r in records] == [first["diagnosis_id"], second["diagnosis_id"]]
    assert [r["question"] for r in records] == [QUESTION, "is order-service alerting?"]
    threads = client.get("/api/threads", headers=ALICE).json()["threads"]
    assert thread in [t["thread_id"] for t in threads]
    record = client.get(f"/api/diagnoses/{second['diagnosis_id']}", headers=ALICE).json()
    assert record["thread_id"] == thread
    assert record["invocations"] and all(
        inv["diagnosis_id"] == second["diagnosis_id"] for inv in record["invocations"]
    )


def test_api_unknown_diagnosis_and_thread_are_404(client: TestClient) -> None:
    missing = client.get("/api/diagnoses/diag-nothing", headers=ALICE)
    assert missing.status_code == 404
    assert missing.json() == {"error": "no diagnosis 'diag-nothing'"}
    assert client.get(f"/api/threads/{new_thread()}/diagnoses", headers=ALICE).status_code == 404


# --- identities ------------------------------------------------------------------------------


def test_api_other_users_threads_and_diagnoses_are_not_found(client: TestClient) -> None:
    thread = new_thread()
    mine = chat(client, ALICE, thread_id=thread).json()

    foreign_record = client.get(f"/api/diagnoses/{mine['diagnosis_id']}", headers=BOB)
    foreign_listing = client.get(f"/api/threads/{thread}/diagnoses", headers=BOB)
    foreign_chat = chat(client, BOB, thread_id=thread)

    assert foreign_record.status_code == 404
    assert foreign_record.json() == {"error": f"no diagnosis {mine['diagnosis_id']!r}"}
    assert foreign_listing.status_code == 404
    assert foreign_chat.status_code == 404
    bobs = chat(client, BOB).json()["thread_id"]
    bob_threads = [
        t["thread_id"] for t in client.get("/api/threads", headers=BOB).json()["threads"]
    ]
    assert bobs in bob_threads and thread not in bob_threads
    own = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE).json()["diagnoses"]
    assert [r["id"] for r in own] == [mine["diagnosis_id"]]  # bob's attempt ran nothing


def test_api_ignores_identity_fields_in_the_body(client: TestClient) -> None:
    body = chat(client, BOB, user="alice", owner="alice", identity="alice").json()

    assert client.get(f"/api/diagnoses/{body['diagnosis_id']}", headers=ALICE).status_code == 404
    assert client.get(f"/api/diagnoses/{body['diagnosis_id']}", headers=BOB).status_code == 200
    bob_threads = [
        t["thread_id"] for t in client.get("/api/threads", headers=BOB).json()["threads"]
    ]
    assert body["thread_id"] in bob_threads


def test_api_threads_created_outside_the_api_are_not_handed_out(database_url: str) -> None:
    thread = new_thread()
    persistence = open_persistence(database_url)
    try:
        persistence.audit.start_diagnosis("diag-cli-run", thread_id=thread, question="q")
    finally:
        persistence.close()
    with TestClient(create_app(database_url, api_keys=KEYS)) as client:
        assert chat(client, ALICE, thread_id=thread).status_code == 404
        assert client.get("/api/diagnoses/diag-cli-run", headers=ALICE).status_code == 404


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        pytest.param({}, "missing API key", id="no-key"),
        pytest.param({"Authorization": "Bearer nope"}, "invalid API key", id="wrong-bearer"),
        pytest.param({"X-API-Key": "nope"}, "invalid API key", id="wrong-x-api-key"),
        pytest.param({"Authorization": "Basic a2V5LWFsaWNl"}, "missing API key", id="basic"),
    ],
)
def test_api_without_a_valid_key_is_401(
    client: TestClient, headers: dict[str, str], reason: str
) -> None:
    for response in (
        client.post("/api/chat", json={"question": QUESTION}, headers=headers),
        client.get("/api/threads", headers=headers),
        client.get("/api/diagnoses/diag-x", headers=headers),
    ):
        assert response.status_code == 401
        assert reason in response.json()["error"]
        assert response.headers["www-authenticate"] == "Bearer"
    assert client.get("/healthz").status_code == 200


def test_api_without_keys_is_open_as_anonymous(database_url: str) -> None:
    with TestClient(create_app(database_url, api_keys={}), base_url=LOOPBACK) as client:
        body = client.post("/api/chat", json={"question": QUESTION}).json()

        assert body["verdict"] == "PASS"
        threads = client.get("/api/threads").json()["threads"]
        assert body["thread_id"] in [t["thread_id"] for t in threads]
    persistence = open_persistence(database_url)
    try:
        rows = query(
            persistence.db,
            "SELECT owner FROM thread_owner WHERE thread_id = :thread",
            thread=body["thread_id"],
        )
    finally:
        persistence.close()
    assert rows == [{"owner": "anonymous"}]


# --- limits ----------------------------------------------------------------------------------


def test_api_question_over_the_limit_is_422(client: TestClient) -> None:
    response = client.post("/api/chat", json={"question": "x" * 4001}, headers=ALICE)

    assert response.status_code == 422
    assert response.json() == {"error": "question is 4001 characters long; the limit is 4000"}


def test_api_body_over_the_limit_is_413(client: TestClient) -> None:
    padding = "y" * (70 * 1024)
    declared = client.post(
        "/api/chat", json={"question": QUESTION, "padding": padding}, headers=ALICE
    )
    chunked = client.post(
        "/api/chat",
        content=iter([b'{"question": "q", "padding": "', padding.encode(), b'"}']),
        headers={**ALICE, "Content-Type": "application/json"},
    )

    for response in (declared, chunked):
        assert response.status_code == 413
        assert response.json() == {
            "error": "the request body is larger than the limit of 65536 bytes"
        }


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"{not json", "the body is not valid JSON", id="not-json"),
        pytest.param(b'["q"]', "the body must be a JSON object, got an array", id="array"),
        pytest.param(b"{}", "question is required", id="missing-question"),
        pytest.param(b'{"question": 7}', "question must be a string, got a number", id="number"),
        pytest.param(b'{"question": "  "}', "question is empty", id="blank"),
        pytest.param(
            b'{"question": "q", "thread_id": ["t"]}',
            "thread_id must be a string, got an array",
            id="thread-array",
        ),
        pytest.param(
            b'{"question": "q", "thread_id": "../etc"}', "thread_id must be 1 to 128", id="path"
        ),
        pytest.param(
            b'{"question": "q", "language": "fr"}',
            "language is 'fr': it must be 'zh' or 'en'",
            id="language",
        ),
    ],
)
def test_api_invalid_chat_body_is_422_with_the_reason(
    client: TestClient, body: bytes, reason: str
) -> None:
    for path in ("/api/chat", "/api/chat_stream"):
        response = client.post(
            path, content=body, headers={**ALICE, "Content-Type": "application/json"}
        )

        assert response.status_code == 422
        assert reason in response.json()["error"]


def test_api_reports_every_problem_of_a_body_at_once(client: TestClient) -> None:
    response = client.post(
        "/api/chat", json={"question": None, "thread_id": 3, "language": 1}, headers=ALICE
    )

    error = response.json()["error"]
    assert response.status_code == 422
    assert "question is required" in error
    assert "thread_id must be a string" in error
    assert "language is 1: it must be" in error


def test_api_rate_limit_is_429_with_retry_after(database_url: str) -> None:
    limits = Limits(rate_per_minute=2, rate_burst=2)
    with TestClient(create_app(database_url, api_keys=KEYS, limits=limits)) as client:
        statuses = [client.get("/api/threads", headers=ALICE).status_code for _ in range(3)]
        limited = client.get("/api/threads", headers=ALICE)

        assert statuses == [200, 200, 429]
        assert limited.status_code == 429
        assert int(limited.headers["retry-after"]) >= 1
        assert "rate limit exceeded" in limited.json()["error"]
        assert client.get("/api/threads", headers=BOB).status_code == 200  # per key


def test_api_request_on_a_busy_thread_is_409(database_url: str) -> None:
    thread = new_thread()
    holder = open_persistence(database_url)
    try:
        with TestClient(create_app(database_url, api_keys=KEYS)) as client:
            with holder.thread_lock(thread):
                busy = chat(client, ALICE, thread_id=thread)
                busy_stream = client.post(
                    "/api/chat_stream",
                    json={"question": QUESTION, "thread_id": thread},
                    headers=ALICE,
                )
                listing = client.get(f"/api/threads/{thread}/diagnoses", headers=ALICE)
            after = chat(client, ALICE, thread_id=thread)
    finally:
        holder.close()

    for response in (busy, busy_stream):
        assert response.status_code == 409
        assert "already being diagnosed" in response.json()["error"]
    assert listing.json()["diagnoses"] == []  # nothing ran beside the holder
    assert after.status_code == 200


# --- health and failures ---------------------------------------------------------------------


def test_api_healthz_is_ok_with_a_reachable_database(client: TestClient) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["database"]) == ("ok", "ok")
    assert body["backends"]["sample"]["status"] == "ok"


def test_api_unreachable_database_is_503_with_the_reason() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/superbiz"
    with TestClient(create_app(url, api_keys=KEYS)) as client:
        health = client.get("/healthz")
        answer = chat(client, ALICE)
        stream = client.post("/api/chat_stream", json={"question": QUESTION}, headers=ALICE)
        listing = client.get("/api/threads", headers=ALICE)

    assert health.status_code == 503
    assert health.json()["status"] == "unavailable"
    assert "cannot connect to PostgreSQL" in health.json()["error"]
    for response in (answer, stream, listing):
        assert response.status_code == 503
        assert response.json()["error"].startswith("database unavailable: cannot connect")


@pytest.fixture
def doomed_database(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A PostgreSQL database of its own, which the test drops."""
    name = f"superbiz_doomed_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}", name
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_api_healthz_is_503_once_the_database_is_gone(doomed_database: tuple[str, str]) -> None:
    url, name = doomed_database
    with TestClient(create_app(url, api_keys=KEYS, health_timeout_s=1.0)) as client:
        before = client.get("/healthz")
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        after = client.get("/healthz")

    assert before.status_code == 200
    assert after.status_code == 503
    assert after.json()["database"] == "error"
    assert after.json()["error"]


def test_api_unknown_routes_and_methods_are_json_errors(client: TestClient) -> None:
    for path in ("/nowhere", "/api/nowhere", "/api/chat/extra"):
        response = client.get(path, headers=ALICE)
        assert response.status_code == 404
        assert response.json() == {"error": f"no route {path}"}
    wrong = client.get("/api/chat", headers=ALICE)
    assert wrong.status_code == 405
    assert wrong.json() == {"error": "method GET is not allowed on /api/chat"}
    assert wrong.headers["allow"] == "POST"


# --- the module the LangGraph server mounts --------------------------------------------------


def test_api_module_app_opens_nothing_until_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "lazy.sqlite"
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv("SUPERBIZ_API_KEYS", "key-carol=carol")
    # Loaded by path and not registered as a module, as the LangGraph server loads ``http.app``.
    spec = importlib.util.spec_from_file_location(
        "user_router_module", ROOT / "apps" / "http" / "api.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert isinstance(module.app, Starlette)
    assert not database.exists()
    with TestClient(module.app) as client:
        health = client.get("/healthz").json()
        assert (health["status"], health["database"]) == ("ok", "ok")
        assert client.get("/api/threads").status_code == 401
        assert client.get("/api/threads", headers={"X-API-Key": "key-carol"}).status_code == 200
    assert database.exists()


def test_api_misconfigured_keys_refuse_every_request(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "keys"
    empty.write_text("# nobody yet\n", encoding="utf-8")
    monkeypatch.setenv("SUPERBIZ_API_KEYS_FILE", str(empty))
    with TestClient(create_app(database_url)) as client:
        response = client.post("/api/chat", json={"question": QUESTION})
        health = client.get("/healthz")

    assert response.status_code == 500
    assert "holds no key=identity line" in response.json()["error"]
    assert health.status_code == 503


# --- auth units ------------------------------------------------------------------------------


def test_auth_reads_keys_from_the_variable_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# team\nkey-c = carol\n\nkey-d=dave=ops\n", encoding="utf-8")

    keys = ApiKeys.from_env(
        {"SUPERBIZ_API_KEYS": "key-a=alice, key-b=bob", "SUPERBIZ_API_KEYS_FILE": str(path)}
    )

    assert len(keys) == 4 and not keys.open
    assert keys.identity_of("key-a") == "alice"
    assert keys.identity_of("key-c") == "carol"
    assert keys.identity_of("key-d") == "dave=ops"
    assert keys.identity_of("key-x") is None
    assert ApiKeys.from_env({}).open


@pytest.mark.parametrize(
    ("environ", "reason"),
    [
        pytest.param({"SUPERBIZ_API_KEYS": "lonely"}, "without '='", id="no-equals"),
        pytest.param({"SUPERBIZ_API_KEYS": "k=alice,k=bob"}, "both 'alice' and 'bob'", id="dup"),
        pytest.param({"SUPERBIZ_API_KEYS": "=alice"}, "empty key", id="empty-key"),
        pytest.param({"SUPERBIZ_API_KEYS_FILE": "/nonexistent/keys"}, "cannot read", id="file"),
    ],
)
def test_auth_rejects_malformed_key_configuration(environ: dict[str, str], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        ApiKeys.from_env(environ)


def test_auth_limits_read_from_the_environment() -> None:
    limits = Limits.from_env({"SUPERBIZ_API_RATE_PER_MIN": "30", "SUPERBIZ_API_MAX_RUNS": "2"})

    assert (limits.rate_per_minute, limits.rate_burst, limits.max_runs) == (30, 30, 2)
    assert Limits.from_env({}) == Limits()
    with pytest.raises(ConfigError, match="SUPERBIZ_API_MAX_BODY_BYTES must be a whole number"):
        Limits.from_env({"SUPERBIZ_API_MAX_BODY_BYTES": "lots"})


def test_auth_rate_limiter_refills_with_time() -> None:
    now = [100.0]
    limiter = RateLimiter(rate_per_minute=60, burst=2, clock=lambda: now[0])

    assert [limiter.take("k"), limiter.take("k")] == [None, None]
    wait = limiter.take("k")
    assert wait == pytest.approx(1.0)
    assert limiter.take("other") is None
    now[0] += 1.0
    assert limiter.take("k") is None
    assert limiter.take("k") is not None
    assert RateLimiter(rate_per_minute=0, burst=1).take("k") is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("::", False),
        ("example.com", False),
    ],
)
def test_auth_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_api_threads_counts_the_command_lines_threads_it_does_not_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import apps.cli.main as cli

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SUPERBIZ_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    database = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    assert cli.main(["diagnose", "--offline", "--json", "--db", database, QUESTION]) == 0
    with TestClient(create_app(database, api_keys=KEYS)) as client:
        thread = chat(client, ALICE, thread_id=new_thread()).json()["thread_id"]

        body = client.get("/api/threads", headers=ALICE).json()

    assert [t["thread_id"] for t in body["threads"]] == [thread]
    assert body["unowned"] == 1
