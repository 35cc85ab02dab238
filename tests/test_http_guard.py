"""What a browser may do with the HTTP API (``apps/http/guard.py``), and streams that end early."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient
from starlette.types import Message

from apps.http.api import DiagnosisStream, create_app
from apps.http.guard import GuardSettings, host_name, is_loopback_name

QUESTION = "order-service 为什么报 500 错误？"
KEYS = {"key-alice": "alice"}
ALICE = {"Authorization": "Bearer key-alice"}
PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization",
}


pytestmark = pytest.mark.usefixtures("no_model_or_superbiz_settings")


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'superbiz.sqlite'}"


def test_guard_cors_is_off_by_default(db: str) -> None:
    with TestClient(create_app(db, api_keys=KEYS)) as client:
        preflight = client.options(
            "/api/chat", headers={**PREFLIGHT, "Origin": "https://evil.example"}
        )
        cross = client.get("/api/threads", headers={**ALICE, "Origin": "https://evil.example"})
        same = client.get("/api/threads", headers={**ALICE, "Origin": "http://testserver"})
        plain = client.get("/api/threads", headers=ALICE)

    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    assert "SUPERBIZ_API_CORS_ORIGINS" in preflight.json()["error"]
    assert cross.status_code == 403
    assert same.status_code == 200 and "access-control-allow-origin" not in same.headers
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers


def test_guard_cors_allow_list_grants_exactly_the_listed_origin(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_API_CORS_ORIGINS", "https://ops.example.com")
    origin = {"Origin": "https://ops.example.com"}
    with TestClient(create_app(db, api_keys=KEYS)) as client:
        preflight = client.options("/api/chat", headers={**PREFLIGHT, **origin})
        listing = client.get("/api/threads", headers={**ALICE, **origin})
        other = client.get("/api/threads", headers={**ALICE, "Origin": "https://ops.example.org"})

    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "https://ops.example.com"
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    assert listing.status_code == 200
    assert listing.headers["access-control-allow-origin"] == "https://ops.example.com"
    assert other.status_code == 403


def test_guard_cors_wildcard_is_refused_as_configuration(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_API_CORS_ORIGINS", "*")
    with TestClient(create_app(db, api_keys=KEYS)) as client:
        response = client.get("/api/threads", headers=ALICE)

    assert response.status_code == 500
    assert "a wildcard is not accepted" in response.json()["error"]


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_guard_post_bodies_must_be_json(db: str, content_type: str | None) -> None:
    headers = {**ALICE, **({"Content-Type": content_type} if content_type else {})}
    body = json.dumps({"question": QUESTION}).encode()
    with TestClient(create_app(db, api_keys=KEYS)) as client:
        refused = client.post("/api/chat", content=body, headers=headers)
        accepted = client.post(
            "/api/chat", content=body, headers={**ALICE, "Content-Type": "application/json"}
        )

    assert refused.status_code == 415
    assert "Content-Type: application/json" in refused.json()["error"]
    assert accepted.status_code == 200


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8000", True),
        ("localhost:8000", True),
        ("[::1]:8000", True),
        ("rebind.evil.example:8000", False),
        ("10.0.0.5:8000", False),
    ],
)
def test_guard_keyless_mode_answers_only_loopback_host_names(
    db: str, host: str, allowed: bool
) -> None:
    with TestClient(create_app(db, api_keys={}), base_url=f"http://{host}") as client:
        response = client.get("/api/threads")
        health = client.get("/healthz")

    assert (response.status_code == 200) is allowed, response.text
    assert (health.status_code == 200) is allowed
    if not allowed:
        assert "DNS rebinding" in response.json()["error"]


def test_guard_keyless_host_allow_list_and_keyed_mode(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_API_ALLOWED_HOSTS", "diag.internal")
    with TestClient(create_app(db, api_keys={}), base_url="http://diag.internal:8000") as client:
        listed = client.get("/api/threads")
    with TestClient(create_app(db, api_keys=KEYS), base_url="http://any.example") as client:
        keyed = client.get("/api/threads", headers=ALICE)

    assert listed.status_code == 200
    assert keyed.status_code == 200  # with keys, the key is what counts


def test_guard_leaves_paths_outside_the_api_alone(db: str) -> None:
    async def other(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"access-control-allow-origin", b"*")],
            }
        )
        await send({"type": "http.response.body", "body": b"ok"})

    app = create_app(db, api_keys=KEYS, standalone=False)
    app.mount("/threads", other)
    with TestClient(app) as client:
        outside = client.get("/threads/x", headers={"Origin": "https://smith.langchain.com"})

    assert outside.status_code == 200
    assert outside.headers["access-control-allow-origin"] == "*"


def test_guard_host_names_and_settings() -> None:
    assert host_name("[::1]:8000") == "::1"
    assert host_name("LOCALHOST:80") == "localhost"
    assert host_name("::1") == "::1"
    assert is_loopback_name("127.9.9.9") and is_loopback_name("app.localhost")
    assert not is_loopback_name("127.0.0.1.evil.example")
    assert GuardSettings().cors_origins == ()


# --- streams that end without an answer -------------------------------------------------------


async def _relay(items: list[tuple[str, Any]], *, cancel_after: int | None = None) -> bytes:
    """Run ``DiagnosisStream._relay`` over ``items`` and return every byte it sent."""
    sent: list[bytes] = []
    sender, receiver = anyio.create_memory_object_stream[tuple[str, Any]](100)
    for item in items:
        sender.send_nowait(item)
    stream = DiagnosisStream(None, "alice", None, None)  # type: ignore[arg-type]

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body":
            sent.append(message["body"])

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    if cancel_after is None:
        sender.close()
        await stream._relay(receiver, {}, receive, send)
    else:
        task = asyncio.create_task(stream._relay(receiver, {}, receive, send))
        while len(sent) < cancel_after:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return b"".join(sent)


def _events(raw: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in raw.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_stream_ending_without_an_answer_ends_with_an_error_event() -> None:
    started = ("started", None)
    stage = ("stage", {"stage": "intake", "round": 1, "diagnosis_id": "diag-x"})

    raw = asyncio.run(_relay([started, stage]))

    events = _events(raw)
    assert [name for name, _ in events] == ["stage", "error"]
    assert "POST /api/diagnoses/diag-x/resume" in events[-1][1]["error"]


def test_stream_cut_by_a_stopping_server_ends_with_an_error_event() -> None:
    started = ("started", None)
    stage = ("stage", {"stage": "intake", "round": 1, "diagnosis_id": "diag-y"})

    raw = asyncio.run(_relay([started, stage], cancel_after=1))

    events = _events(raw)
    assert [name for name, _ in events] == ["stage", "error"]
    assert "the server is stopping" in events[-1][1]["error"]


def test_stream_with_an_answer_sends_no_extra_error() -> None:
    answer = ("answer", {"diagnosis_id": "diag-z", "verdict": "PASS"})

    events = _events(asyncio.run(_relay([("started", None), answer])))

    assert [name for name, _ in events] == ["answer", "done"]


def test_guard_api_answers_are_neither_cached_nor_sniffed(db: str) -> None:
    with TestClient(create_app(db, api_keys=KEYS)) as client:
        answers = [
            client.get("/api/threads", headers=ALICE),
            client.get("/api/threads"),  # 401
            client.get("/api/threads", headers={**ALICE, "Origin": "https://evil.example"}),
            client.post("/api/chat", content=b"x", headers={**ALICE, "Content-Type": "text/plain"}),
            client.get("/api/nothing-here", headers=ALICE),
            client.get("/healthz"),
        ]

    for answer in answers:
        assert answer.headers["cache-control"] == "no-store", answer.request.url
        assert answer.headers["x-content-type-options"] == "nosniff", answer.request.url


def test_guard_metrics_path_needs_the_api_key(db: str) -> None:
    with TestClient(create_app(db, api_keys=KEYS)) as client:
        missing = client.get("/metrics")
        wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
        passed = client.get("/metrics", headers=ALICE)  # on to the app (no metrics of its own)

    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert "API key" in missing.json()["error"]
    assert passed.status_code == 404


@pytest.mark.parametrize("path", ["/api/chat", "/mcp"])
def test_guard_slow_request_body_is_408_after_the_timeout(
    db: str, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_API_BODY_TIMEOUT_S", "0.3")
    app = create_app(db, api_keys=KEYS)
    sent: list[dict[str, Any]] = []
    body = json.dumps({"question": QUESTION}).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"authorization", b"Bearer key-alice"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    chunks = [{"type": "http.request", "body": body[:5], "more_body": True}]

    async def receive() -> dict[str, Any]:
        if chunks:
            return chunks.pop()
        await anyio.sleep(3600)  # the rest of the body never comes
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(dict(message))

    async def serve() -> None:
        with anyio.fail_after(10):
            await app(scope, receive, send)

    anyio.run(serve)

    start = sent[0]
    assert start["status"] == 408
    assert (b"connection", b"close") in start["headers"]
    assert b"SUPERBIZ_API_BODY_TIMEOUT_S" in sent[1]["body"]
