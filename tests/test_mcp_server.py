"""The MCP server through the official SDK's client: over stdio (``superbiz mcp``) and over
streamable HTTP (``/mcp`` of the HTTP API, served by uvicorn on 127.0.0.1)."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from apps.auth import Limits
from apps.cli.main import main
from apps.http.api import create_app
from apps.mcp import server as mcp_server
from evidence.composed import configured_backend
from evidence.config import load_settings
from tests.prometheus_kit import free_port
from tests.serving_kit import child_env

pytestmark = pytest.mark.slow  # starts servers and programs (tests/conftest.py)

QUESTION = "order-service 为什么报 500 错误？"
KEYS = {"key-alice": "alice", "key-bob": "bob"}
TOOLS = {
    "diagnose",
    "resume_diagnosis",
    "get_diagnosis",
    "list_diagnoses",
    "get_evidence",
    "reverify",
    "search_runbooks",
}
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SUPERBIZ_OFFLINE", raising=False)
    for name in ("SUPERBIZ_API_KEYS", "SUPERBIZ_API_KEYS_FILE", "SUPERBIZ_MCP_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _stdio(database: str, key: str | None) -> StdioServerParameters:
    extra = {"SUPERBIZ_API_KEYS": ",".join(f"{k}={v}" for k, v in KEYS.items())}
    if key is not None:
        extra["SUPERBIZ_MCP_API_KEY"] = key
    return StdioServerParameters(
        command=str(VENV_BIN / "superbiz"),
        args=["mcp", "--db", database],
        env=child_env(**extra),
    )


def _sessions_show(database: str, diagnosis_id: str) -> dict[str, Any]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["sessions", "show", diagnosis_id, "--json", "--db", database]) == 0
    shown: dict[str, Any] = json.loads(out.getvalue())
    return shown


def test_mcp_stdio_diagnose_reports_progress_and_matches_sessions_show(tmp_path: Path) -> None:
    database = str(tmp_path / "mcp.sqlite")
    stages: list[str] = []

    async def scenario() -> dict[str, Any]:
        async with Client(_stdio(database, "key-alice")) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(listed) >= TOOLS
            assert all(listed[name].output_schema for name in TOOLS)
            annotations = listed["get_evidence"].annotations
            assert annotations is not None and annotations.read_only_hint is True

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                stages.append(message or "")

            result = await client.call_tool(
                "diagnose", {"question": QUESTION, "offline": True}, progress_callback=on_progress
            )
            assert not result.is_error
            view = result.structured_content
            assert view is not None
            first = view["claims"][0]["evidence"][0]
            evidence = await client.call_tool(
                "get_evidence", {"diagnosis_id": view["diagnosis_id"], "handle": first["handle"]}
            )
            table = await client.read_resource(
                f"superbiz://diagnoses/{view['diagnosis_id']}/claims"
            )
            return {
                "view": view,
                "evidence": evidence.structured_content,
                "table": table.contents[0].text,  # type: ignore[union-attr]
            }

    got = anyio.run(scenario)
    view = got["view"]
    assert view["verdict"] == "PASS" and view["status"] == "done" and view["offline"] is True
    assert view["root_cause"]["service"] == "inventory-service"  # the record names one
    names = [line.split()[0] for line in stages]
    assert names[0] == "intake" and names[-1] == "done"
    assert {"planner", "tool", "gatekeeper", "verifier", "verdict", "composer"} <= set(names)

    shown = _sessions_show(database, view["diagnosis_id"])
    stored_root = shown["self_evaluation"]["root_cause"]
    assert view["root_cause"] == {key: stored_root[key] for key in view["root_cause"]}
    assert view["answer"] == shown["final_answer"]
    assert view["score"] == shown["score"] and view["verdict"] == shown["verdict"]
    evaluation = shown["self_evaluation"]["verifier_evaluation"]
    labels = {c["claim_id"]: c["verification"] for c in evaluation["claim_checks"]}
    recorded = evaluation["executor_structured_output"]["claims"]
    assert [c["claim_id"] for c in view["claims"]] == [c["claim_id"] for c in recorded]
    refs = {
        (inv["invocation_id"], ref["raw_path"]): ref["text"]
        for inv in shown["invocations"]
        for ref in inv["retrieval_details"]["evidence_refs"]
    }
    for claim, stored in zip(view["claims"], recorded, strict=True):
        assert claim["label"] == labels[claim["claim_id"]]
        assert claim["text"] == stored["claim_text"]
        handles = [(e["invocation_id"], e["raw_path"]) for e in claim["evidence"]]
        assert handles == [
            (b["source_invocation_id"], b["raw_path"]) for b in stored["evidence_bindings"]
        ]
        for item in claim["evidence"]:
            assert item["handle"] == f"{item['invocation_id']}#{item['raw_path']}"
            assert item["ref_text"] == refs[(item["invocation_id"], item["raw_path"])]
            assert item["verified"] is True
            assert item["excerpt"] in item["ref_text"]
    first = view["claims"][0]["evidence"][0]
    evidence = got["evidence"]
    invocation = next(
        inv for inv in shown["invocations"] if inv["invocation_id"] == first["invocation_id"]
    )
    assert evidence["tool"] == invocation["tool_name"]
    assert evidence["arguments"] == invocation["arguments"]
    assert evidence["started_at"] == invocation["started_at"]
    assert evidence["text"] == first["ref_text"]
    assert view["claims"][0]["claim_id"] in got["table"] and first["handle"] in got["table"]


def test_mcp_stdio_identities_are_isolated(tmp_path: Path) -> None:
    database = str(tmp_path / "mcp.sqlite")

    async def as_alice() -> dict[str, Any]:
        async with Client(_stdio(database, "key-alice")) as client:
            result = await client.call_tool("diagnose", {"question": QUESTION, "offline": True})
            assert result.structured_content is not None
            return result.structured_content

    async def as_bob(diagnosis_id: str, thread_id: str) -> None:
        async with Client(_stdio(database, "key-bob")) as client:
            listed = await client.call_tool("list_diagnoses", {})
            assert listed.structured_content == {"diagnoses": [], "total": 0}
            for name, arguments in (
                ("get_diagnosis", {"diagnosis_id": diagnosis_id}),
                ("get_evidence", {"diagnosis_id": diagnosis_id, "handle": "inv-1"}),
                ("reverify", {"diagnosis_id": diagnosis_id, "offline": True}),
                ("list_diagnoses", {"thread": thread_id}),
            ):
                with pytest.raises(MCPError) as refused:
                    await client.call_tool(name, arguments)
                assert refused.value.code == mcp_server.NOT_FOUND
                assert refused.value.data == {"status": 404}
            with pytest.raises(MCPError) as refused:
                await client.read_resource(f"superbiz://diagnoses/{diagnosis_id}/answer")
            assert "no diagnosis" in refused.value.message
            # Continuing alice's thread is refused as the API refuses it.
            with pytest.raises(MCPError) as refused:
                await client.call_tool(
                    "diagnose", {"question": QUESTION, "thread": thread_id, "offline": True}
                )
            assert refused.value.message == f"no thread {thread_id!r}"

    view = anyio.run(as_alice)
    anyio.run(as_bob, view["diagnosis_id"], view["thread_id"])


def test_mcp_stdio_refuses_to_start_without_a_valid_key(tmp_path: Path) -> None:
    database = str(tmp_path / "mcp.sqlite")

    async def start(key: str | None) -> None:
        async with Client(_stdio(database, key)) as client:
            await client.list_tools()

    for key in (None, "key-mallory"):
        with pytest.raises(Exception):  # noqa: B017 (the child exits before the handshake)
            anyio.run(start, key)


# --------------------------------------------------------------------------- over HTTP


class GatedBackend:
    """The sample incident, whose ``query_metrics`` waits until the test opens the gate."""

    needs_timeout = True

    def __init__(self) -> None:
        self._inner = configured_backend(load_settings({}), progress=None)
        self.gate = threading.Event()
        self.gate.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def query_metrics(self, **query: Any) -> Any:
        assert self.gate.wait(60), "the test never opened the gate"
        return self._inner.query_metrics(**query)


SERVED_LIMITS = Limits(rate_per_minute=100_000, rate_burst=100_000)
"""The served fixture's limits: a rate no scenario reaches, however slow the machine."""


@dataclass
class Served:
    url: str
    backend: GatedBackend
    database: str


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    database = f"sqlite:///{tmp_path / 'mcp-http.sqlite'}"
    backend = GatedBackend()
    # The scenarios poll get_diagnosis every 0.1 s while a run stops; on a slow machine that
    # outlasts the default 60 calls a minute per key. The limit itself is checked by
    # test_mcp_http_rate_limit_applies_per_key on a server of its own.
    app = create_app(database, api_keys=KEYS, backend=backend, limits=SERVED_LIMITS)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield Served(f"http://127.0.0.1:{port}", backend, database)
    finally:
        backend.gate.set()
        server.should_exit = True
        thread.join(30)


def _http(url: str, key: str) -> Any:
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return streamable_http_client(f"{url}/mcp", http_client=client)


def test_mcp_http_without_a_valid_key_is_401_with_the_api_message(served: Served) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream"}
    missing = httpx.post(f"{served.url}/mcp", json=ping, headers=headers)
    wrong = httpx.post(
        f"{served.url}/mcp", json=ping, headers={**headers, "Authorization": "Bearer nope"}
    )
    assert missing.status_code == 401
    assert missing.json() == {
        "error": "missing API key: send Authorization: Bearer <key> or X-API-Key: <key>"
    }
    assert wrong.status_code == 401 and wrong.json() == {"error": "invalid API key"}
    huge = {**ping, "params": {"padding": "x" * 70_000}}
    too_large = httpx.post(
        f"{served.url}/mcp", json=huge, headers={**headers, "Authorization": "Bearer key-alice"}
    )
    assert too_large.status_code == 413
    assert too_large.json() == {"error": "the request body is larger than the limit of 65536 bytes"}


def test_mcp_http_identities_progress_cancel_and_resume(served: Served) -> None:
    async def scenario() -> None:
        async with Client(_http(served.url, "key-alice")) as alice:
            # A finished diagnosis first: bob cannot see it.
            done = await alice.call_tool("diagnose", {"question": QUESTION, "offline": True})
            view = done.structured_content
            assert view is not None and view["verdict"] == "PASS"

            # Then one cancelled while its metrics call waits.
            served.backend.gate.clear()
            seen: list[str] = []
            first_tool = anyio.Event()

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                seen.append(message or "")
                if (message or "").startswith("tool"):
                    first_tool.set()

            thread = "t-mcp-cancel"
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:

                    async def call() -> None:
                        await alice.call_tool(
                            "diagnose",
                            {"question": QUESTION, "offline": True, "thread": thread},
                            progress_callback=on_progress,
                        )

                    group.start_soon(call)
                    with anyio.fail_after(60):
                        await first_tool.wait()
                    scope.cancel()
            assert scope.cancelled_caught
            intake = next(line for line in seen if line.startswith("intake"))
            diagnosis_id = next(
                part.split("=", 1)[1] for part in intake.split() if part.startswith("diagnosis_id=")
            )
            served.backend.gate.set()  # the tool returns; the run stops at its next stage
            with anyio.fail_after(60):
                while True:
                    record = (
                        await alice.call_tool("get_diagnosis", {"diagnosis_id": diagnosis_id})
                    ).structured_content
                    assert record is not None
                    if record["note"] and record["note"].startswith("interrupted"):
                        break
                    await anyio.sleep(0.1)
            assert record["status"] == "running" and record["verdict"] is None
            resumed = await alice.call_tool("resume_diagnosis", {"diagnosis_id": diagnosis_id})
            finished = resumed.structured_content
            assert finished is not None
            assert finished["diagnosis_id"] == diagnosis_id and finished["status"] == "done"
            assert finished["verdict"] == "PASS" and finished["claims"]
            passed = await alice.call_tool("list_diagnoses", {"verdict": "PASS"})
            assert passed.structured_content is not None
            assert passed.structured_content["total"] == 2
            only = await alice.call_tool("list_diagnoses", {"thread": thread})
            assert [d["diagnosis_id"] for d in only.structured_content["diagnoses"]] == [
                diagnosis_id
            ]
            by_service = await alice.call_tool("list_diagnoses", {"service": "no-such-service"})
            assert by_service.structured_content["total"] == 0

        async with Client(_http(served.url, "key-bob")) as bob:
            listed = await bob.call_tool("list_diagnoses", {})
            assert listed.structured_content == {"diagnoses": [], "total": 0}
            with pytest.raises(MCPError) as refused:
                await bob.call_tool("get_diagnosis", {"diagnosis_id": diagnosis_id})
            assert refused.value.message == f"no diagnosis {diagnosis_id!r}"
            with pytest.raises(MCPError) as refused:
                await bob.read_resource(f"superbiz://diagnoses/{view['diagnosis_id']}/claims")

    anyio.run(scenario)


def test_mcp_http_served_fixture_outlasts_the_default_rate(served: Served) -> None:
    """More calls on one key than the default rate allows at once all answer: the polling
    scenarios above never meet a 429 however long a run takes to stop."""
    calls = Limits().rate_burst + 10

    async def scenario() -> None:
        async with Client(_http(served.url, "key-alice")) as alice:
            for _ in range(calls):
                listed = await alice.call_tool("list_diagnoses", {})
                assert listed.structured_content == {"diagnoses": [], "total": 0}

    anyio.run(scenario)


def test_mcp_http_errors_carry_the_api_messages(served: Served) -> None:
    async def scenario() -> None:
        async with Client(_http(served.url, "key-alice")) as alice:
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("diagnose", {"question": "   "})
            assert refused.value.message == "question is empty"
            assert refused.value.data == {"status": 422}
            with pytest.raises(MCPError) as refused:
                await alice.call_tool(
                    "diagnose", {"question": QUESTION, "options": {"no_such_setting": 1}}
                )
            assert "no_such_setting" in refused.value.message
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("diagnose", {"question": "x" * 5000})
            assert refused.value.message == ("question is 5000 characters long; the limit is 4000")
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("get_diagnosis", {"diagnosis_id": "diag-nope"})
            assert refused.value.code == mcp_server.NOT_FOUND
            hits = await alice.call_tool("search_runbooks", {"query": "connection pool"})
            assert hits.structured_content is not None
            assert hits.structured_content["documents"]

    anyio.run(scenario)


def test_mcp_http_rate_limit_applies_per_key(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'rate.sqlite'}"
    limits = Limits(rate_per_minute=1, rate_burst=2)
    app = create_app(database, api_keys=KEYS, limits=limits)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)

    async def scenario() -> None:
        async with Client(_http(f"http://127.0.0.1:{port}", "key-alice")) as alice:
            for _ in range(2):
                await alice.call_tool("list_diagnoses", {})
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("list_diagnoses", {})
            assert refused.value.code == mcp_server.RATE_LIMITED
            assert refused.value.message.startswith("rate limit exceeded: 1 requests per minute")
        async with Client(_http(f"http://127.0.0.1:{port}", "key-bob")) as bob:
            await bob.call_tool("list_diagnoses", {})

    try:
        anyio.run(scenario)
    finally:
        server.should_exit = True
        thread.join(30)


def test_mcp_stdio_cancelled_diagnosis_is_resumable(tmp_path: Path) -> None:
    """Model mode on a gated endpoint: the run waits in its planner, the client cancels the
    call, the gate opens, the run stops at its next stage; resume_diagnosis finishes it."""
    from tests.gated_openai import gated_openai

    database = str(tmp_path / "mcp.sqlite")
    with gated_openai() as endpoint:
        parameters = _stdio(database, "key-alice")
        assert parameters.env is not None
        parameters.env.update(endpoint.env())

        async def scenario() -> dict[str, Any]:
            async with Client(parameters) as client:
                started: list[str] = []
                intake = anyio.Event()

                async def on_progress(
                    progress: float, total: float | None, message: str | None
                ) -> None:
                    started.append(message or "")
                    if (message or "").startswith("intake"):
                        intake.set()

                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as group:

                        async def call() -> None:
                            await client.call_tool(
                                "diagnose", {"question": QUESTION}, progress_callback=on_progress
                            )

                        group.start_soon(call)
                        with anyio.fail_after(60):
                            await intake.wait()
                            await anyio.to_thread.run_sync(endpoint.received.wait, 60)
                        scope.cancel()
                assert scope.cancelled_caught
                diagnosis_id = next(
                    part.split("=", 1)[1] for part in started[0].split() if "diagnosis_id=" in part
                )
                endpoint.gate.set()
                with anyio.fail_after(60):
                    while True:
                        found = await client.call_tool(
                            "get_diagnosis", {"diagnosis_id": diagnosis_id}
                        )
                        record = found.structured_content
                        assert record is not None
                        if (record["note"] or "").startswith("interrupted"):
                            break
                        await anyio.sleep(0.1)
                assert record["status"] == "running" and record["verdict"] is None
                resumed = await client.call_tool("resume_diagnosis", {"diagnosis_id": diagnosis_id})
                assert resumed.structured_content is not None
                return resumed.structured_content

        finished = anyio.run(scenario)
    assert finished["status"] == "done" and finished["verdict"] == "PASS"
    assert finished["offline"] is False
    assert finished["claims"][0]["evidence"][0]["verified"] is True
