"""``langgraph dev`` behind the HTTP API's keys, one writer per thread with ``/api``, no orphans.

Real ``langgraph dev`` subprocesses (fixtures of ``tests/test_langgraph_dev.py``) on the embedded
SQLite file of a throw-away data directory; the cross-identity tests run again on a throw-away
PostgreSQL database (checkpoints, owners and audit rows there). Model mode talks to a local
OpenAI-compatible endpoint (``tests/gated_openai.py``) whose answers wait behind a gate, so a run
can be held in its planner for as long as a test needs; runs that should not wait are sent with
``offline: true``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client

from tests.gated_openai import GatedOpenAI, gated_openai
from tests.test_langgraph_dev import (
    CHAT_INPUT,
    QUESTION,
    ROOT,
    Server,
    _assert_pass_answer,
    _final_values,
    _offline_env,
    _running_server,
)

ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"X-API-Key": "key-bob"}
OFFLINE: dict[str, Any] = {"offline": True}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def endpoint() -> Iterator[GatedOpenAI]:
    with gated_openai() as gated:
        gated.gate.set()  # open unless a test holds a run
        yield gated


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, endpoint: GatedOpenAI) -> Iterator[Server]:
    """``langgraph dev`` with API keys for alice and bob, model mode on the gated endpoint."""
    workdir = tmp_path_factory.mktemp("langgraph-keyed")
    env = _offline_env(
        XDG_DATA_HOME=str(workdir / "data"),
        SUPERBIZ_API_KEYS="key-alice=alice,key-bob=bob",
        **endpoint.env(),
    )
    with _running_server(workdir, env) as running:
        yield running


@pytest.fixture(scope="module")
def keyed_postgres(
    tmp_path_factory: pytest.TempPathFactory, endpoint: GatedOpenAI, postgres_url: str
) -> Iterator[Server]:
    """The keyed server with ``SUPERBIZ_DATABASE_URL`` on a PostgreSQL database of its own."""
    base, _, name = postgres_url.rpartition("/")
    own = f"{name}_keyed_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{own}"')
    try:
        workdir = tmp_path_factory.mktemp("langgraph-keyed-postgres")
        env = _offline_env(
            XDG_DATA_HOME=str(workdir / "data"),
            SUPERBIZ_DATABASE_URL=f"{base}/{own}",
            SUPERBIZ_API_KEYS="key-alice=alice,key-bob=bob",
            **endpoint.env(),
        )
        with _running_server(workdir, env) as running:
            yield running
    finally:
        with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{own}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_keyed(request: pytest.FixtureRequest) -> Server:
    """The keyed server on SQLite, then on PostgreSQL."""
    server: Server = request.getfixturevalue(
        "keyed" if request.param == "sqlite" else "keyed_postgres"
    )
    return server


def _assert_checkpointer(server: Server, request: pytest.FixtureRequest) -> None:
    """The server runs on the database its ``any_keyed`` parameter names (once it has run)."""
    kind = request.node.callspec.params["any_keyed"]
    saver = {"sqlite": "MaintainedAsyncSqliteSaver", "postgres": "MaintainedAsyncPostgresSaver"}
    assert f"Using custom checkpointer: {saver[kind]}" in server.output()


def _client(server: Server, headers: dict[str, str] | None) -> Any:
    return get_sync_client(url=server.url, headers=headers, timeout=120)


def _status(call: Any) -> int:
    try:
        call()
    except httpx.HTTPStatusError as exc:
        return int(exc.response.status_code)
    return 200


def _database(server: Server) -> Path:
    return server.workdir / "data" / "superbiz" / "superbiz.sqlite"


def test_langgraph_auth_without_or_with_a_wrong_key_is_401(keyed: Server) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"x-auth-scheme": "langsmith"}):
        response = httpx.post(f"{keyed.url}/threads/search", json={}, headers=headers, timeout=30)
        assert response.status_code == 401, (headers, response.text)
    studio = httpx.post(
        f"{keyed.url}/threads/search", json={}, headers={"x-auth-scheme": "langsmith"}, timeout=30
    )
    assert "SUPERBIZ_STUDIO_IDENTITY" in studio.text
    assert "auth of type=noop" not in keyed.output()
    assert "Using auth of type=custom" in keyed.output()


def test_langgraph_auth_another_identity_cannot_read_write_delete_or_find_a_thread(
    any_keyed: Server, request: pytest.FixtureRequest
) -> None:
    alice, bob = _client(any_keyed, ALICE), _client(any_keyed, BOB)
    thread = alice.threads.create(metadata={"owner": "bob", "topic": "password hunter2"})
    thread_id = thread["thread_id"]
    assert thread["metadata"]["owner"] == "alice"  # a client's own owner is overwritten
    result = _final_values(
        alice.runs.wait(thread_id, "superbiz", input=CHAT_INPUT, context=OFFLINE)
    )
    _assert_pass_answer(result)

    assert _status(lambda: bob.threads.get(thread_id)) == 404
    assert _status(lambda: bob.threads.get_state(thread_id)) == 404
    assert _status(lambda: bob.threads.get_history(thread_id)) == 404
    assert _status(lambda: bob.runs.list(thread_id)) == 404
    assert (
        _status(lambda: bob.runs.create(thread_id, "superbiz", input=CHAT_INPUT, context=OFFLINE))
        == 404
    )
    assert _status(lambda: bob.threads.update(thread_id, metadata={"owner": "bob"})) == 404
    assert _status(lambda: bob.threads.delete(thread_id)) == 404
    assert thread_id not in [t["thread_id"] for t in bob.threads.search(limit=100)]
    # Untouched, and still alice's.
    assert alice.threads.get(thread_id)["metadata"]["owner"] == "alice"
    assert thread_id in [t["thread_id"] for t in alice.threads.search(limit=100)]
    assert _status(lambda: alice.threads.update(thread_id, metadata={"owner": "bob"})) == 200
    assert alice.threads.get(thread_id)["metadata"]["owner"] == "alice"
    _assert_checkpointer(any_keyed, request)


def test_langgraph_auth_an_api_thread_of_another_identity_is_out_of_reach(
    any_keyed: Server,
) -> None:
    thread_id = str(uuid.uuid4())
    question = {
        "question": "order-service 为什么报 500？我的密码是 hunter2",
        "thread_id": thread_id,
    }
    chat = httpx.post(f"{any_keyed.url}/api/chat", json=question, headers=ALICE, timeout=120)
    assert chat.status_code == 200, chat.text
    bob = _client(any_keyed, BOB)

    assert _status(lambda: bob.threads.create(thread_id=thread_id)) == 404
    assert (
        _status(
            lambda: bob.runs.create(
                thread_id, "superbiz", input=CHAT_INPUT, context=OFFLINE, if_not_exists="create"
            )
        )
        == 404
    )
    assert _status(lambda: bob.threads.get_state(thread_id)) == 404
    assert thread_id not in [t["thread_id"] for t in bob.threads.search(limit=100)]
    # The owner may open it through the LangGraph endpoints too.
    alice = _client(any_keyed, ALICE)
    assert alice.threads.create(thread_id=thread_id)["metadata"]["owner"] == "alice"


def test_langgraph_auth_assistants_crons_and_store_are_per_identity(keyed: Server) -> None:
    alice, bob = _client(keyed, ALICE), _client(keyed, BOB)
    system = [a["assistant_id"] for a in bob.assistants.search(graph_id="superbiz")]
    assert system, "the graph's own assistant is visible to everyone"
    mine = alice.assistants.create("superbiz", name="alice-only")
    assert mine["metadata"]["owner"] == "alice"
    assert mine["assistant_id"] not in [a["assistant_id"] for a in bob.assistants.search()]
    assert _status(lambda: bob.assistants.get(mine["assistant_id"])) == 404
    assert _status(lambda: bob.assistants.delete(mine["assistant_id"])) == 404

    thread_id = alice.threads.create()["thread_id"]
    cron = alice.crons.create_for_thread(
        thread_id, "superbiz", schedule="0 0 1 1 *", input=CHAT_INPUT
    )
    assert cron["cron_id"] in [c["cron_id"] for c in alice.crons.search()]
    assert cron["cron_id"] not in [c["cron_id"] for c in bob.crons.search()]
    assert _status(lambda: bob.crons.delete(cron["cron_id"])) == 404
    assert (
        _status(lambda: bob.crons.create_for_thread(thread_id, "superbiz", schedule="0 0 1 1 *"))
        == 404
    )

    alice.store.put_item(["notes"], "k1", {"secret": "alice's"})
    assert bob.store.search_items(["notes"])["items"] == []
    found = alice.store.search_items(["notes"])["items"]
    assert [item["value"] for item in found] == [{"secret": "alice's"}]


def test_langgraph_run_and_api_chat_on_one_thread_never_fork(
    keyed: Server, endpoint: GatedOpenAI
) -> None:
    alice = _client(keyed, ALICE)
    thread_id = alice.threads.create()["thread_id"]
    endpoint.gate.clear()
    endpoint.received.clear()
    try:
        run = alice.runs.create(thread_id, "superbiz", input=CHAT_INPUT)  # model mode: waits
        assert endpoint.received.wait(WAIT_S), "the LangGraph run never called its model"
        second = {"question": "inventory-service 为什么变慢？", "thread_id": thread_id}
        busy = httpx.post(f"{keyed.url}/api/chat", json=second, headers=ALICE, timeout=120)
    finally:
        endpoint.gate.set()
    assert busy.status_code == 409, busy.text
    assert "already being diagnosed" in busy.json()["error"]
    alice.runs.join(thread_id, run["run_id"])
    assert alice.runs.get(thread_id, run["run_id"])["status"] == "success"
    after = httpx.post(f"{keyed.url}/api/chat", json=second, headers=ALICE, timeout=120)
    assert after.status_code == 200, after.text

    values = alice.threads.get_state(thread_id)["values"]
    humans = [m["content"] for m in values["messages"] if m["type"] == "human"]
    assert humans == [CHAT_INPUT["messages"][0]["content"], second["question"]]
    with sqlite3.connect(_database(keyed)) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = ''",
            (thread_id,),
        ).fetchall()
        statuses = conn.execute(
            "SELECT status FROM diagnosis_session WHERE thread_id = ? ORDER BY created_at",
            (thread_id,),
        ).fetchall()
    parents = {parent for _, parent in rows}
    assert len([cid for cid, _ in rows if cid not in parents]) == 1  # one line, no fork
    assert statuses == [("done",), ("done",)]


def test_langgraph_mounted_api_has_no_wildcard_cors_while_studio_keeps_its_own(
    keyed: Server,
) -> None:
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    refused = httpx.options(f"{keyed.url}/api/chat", headers=preflight, timeout=30)
    cross = httpx.post(
        f"{keyed.url}/api/chat",
        content=b'{"question": "q"}',
        headers={**ALICE, "Origin": "https://evil.example", "Content-Type": "text/plain"},
        timeout=30,
    )
    studio = httpx.options(
        f"{keyed.url}/threads/search",
        headers={"Origin": "https://smith.langchain.com", "Access-Control-Request-Method": "POST"},
        timeout=30,
    )

    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    assert "access-control-allow-private-network" not in refused.headers
    assert cross.status_code == 403
    assert studio.headers.get("access-control-allow-origin") in ("*", "https://smith.langchain.com")


def test_langgraph_mounted_api_serves_the_web_pages_with_their_policy(keyed: Server) -> None:
    from apps.http.web import CSP

    for path in ("/", "/history", "/diagnoses/diag-x", "/assets/app.js"):
        response = httpx.get(f"{keyed.url}{path}", timeout=30)
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == CSP
    assert "/assets/app.js" in httpx.get(f"{keyed.url}/", timeout=30).text
    assert httpx.get(f"{keyed.url}/api/threads", timeout=30).status_code == 401


def test_langgraph_mounted_api_serves_mcp_per_identity(keyed: Server) -> None:
    import anyio
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import MCPError

    def connect(headers: dict[str, str]) -> Client:
        http = create_mcp_http_client(headers=headers)
        return Client(streamable_http_client(f"{keyed.url}/mcp", http_client=http))

    async def scenario() -> None:
        async with connect(ALICE) as alice:
            done = await alice.call_tool("diagnose", {"question": QUESTION, "offline": True})
            view = done.structured_content
            assert view is not None and view["verdict"] == "PASS" and view["claims"]
        async with connect(BOB) as bob:
            with pytest.raises(MCPError) as refused:
                await bob.call_tool("get_diagnosis", {"diagnosis_id": view["diagnosis_id"]})
            assert refused.value.message == f"no diagnosis {view['diagnosis_id']!r}"

    anyio.run(scenario)
    assert httpx.post(f"{keyed.url}/mcp", json={}, timeout=30).status_code == 401


# --- a killed server --------------------------------------------------------------------------


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SUPERBIZ_"))}
    return subprocess.run(
        [sys.executable, "-m", "apps.cli", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_langgraph_failed_run_is_recorded_and_a_run_without_input_resumes_it(
    keyed: Server, endpoint: GatedOpenAI
) -> None:
    """The run guard on the server: a failed run is recorded ``failed`` and frees its thread;
    a run without input resumes its diagnosis, leased and noted, to the end."""
    alice = _client(keyed, ALICE)
    thread_id = alice.threads.create()["thread_id"]
    endpoint.refuse = True
    try:
        failed = alice.runs.create(thread_id, "superbiz", input=CHAT_INPUT)  # model mode
        alice.runs.join(thread_id, failed["run_id"])
    finally:
        endpoint.refuse = False
    assert alice.runs.get(thread_id, failed["run_id"])["status"] == "error"
    [(diagnosis_id, status, note)] = _sessions(keyed, thread_id)
    assert status == "failed"
    assert note.startswith("failed: ") and "401" in note
    assert _held(keyed, thread_id) == (0, 0)  # no lock, no lease left behind

    resumed = alice.runs.create(thread_id, "superbiz", input=None)
    alice.runs.join(thread_id, resumed["run_id"])

    assert alice.runs.get(thread_id, resumed["run_id"])["status"] == "success"
    assert _sessions(keyed, thread_id) == [
        (diagnosis_id, "done", "resumed after an interrupted run")
    ]
    assert _held(keyed, thread_id) == (0, 0)
    values = alice.threads.get_state(thread_id)["values"]
    assert values["diagnosis_id"] == diagnosis_id and values["verdict"] == "PASS"


def _sessions(server: Server, thread_id: str) -> list[tuple[str, str, str]]:
    with sqlite3.connect(_database(server)) as conn:
        return conn.execute(
            "SELECT id, status, note FROM diagnosis_session WHERE thread_id = ? "
            "ORDER BY created_at",
            (thread_id,),
        ).fetchall()


def _held(server: Server, thread_id: str) -> tuple[int, int]:
    """The thread's lock rows and lease rows."""
    with sqlite3.connect(_database(server)) as conn:
        locks = conn.execute(
            "SELECT COUNT(*) FROM thread_lock WHERE thread_id = ?", (thread_id,)
        ).fetchone()[0]
        leases = conn.execute(
            "SELECT COUNT(*) FROM diagnosis_lease WHERE thread_id = ?", (thread_id,)
        ).fetchone()[0]
    return int(locks), int(leases)


def test_langgraph_dev_sigkill_then_the_sweep_fails_the_orphan_and_it_resumes_later(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``langgraph dev`` killed mid-run loses the run; the diagnosis is swept, not left running."""
    workdir = tmp_path_factory.mktemp("langgraph-killed")
    with gated_openai() as endpoint:
        env = _offline_env(
            XDG_DATA_HOME=str(workdir / "data"), SUPERBIZ_LEASE_TTL_S="1", **endpoint.env()
        )
        with _running_server(workdir, env) as server:
            client = get_sync_client(url=server.url, timeout=60)
            thread_id = client.threads.create()["thread_id"]
            client.runs.create(thread_id, "superbiz", input=CHAT_INPUT)  # model mode: waits
            assert endpoint.received.wait(WAIT_S), "the run never called its model"
            _wait_for_checkpoint_after_intake(_database(server), thread_id)
            with sqlite3.connect(_database(server)) as conn:
                leased = conn.execute(
                    "SELECT diagnosis_id, origin FROM diagnosis_lease WHERE thread_id = ?",
                    (thread_id,),
                ).fetchall()
            os.killpg(server.pid, signal.SIGKILL)  # the server and its workers, no clean-up
            _wait_gone(server)
        assert len(leased) == 1 and leased[0][1] == "langgraph"
        diagnosis_id = leased[0][0]
        time.sleep(1.5)  # past the lease's time to live: nobody renews it
        url = f"sqlite:///{_database(server)}"

        # a command that writes sweeps first (the read-only `sessions` does not)
        refused = _cli("diagnose", "--resume", "--thread", thread_id, "--db", url)
        assert refused.returncode == 2
        assert "ran in model mode" in refused.stderr

        listing = _cli("sessions", "list", "--json", "--db", url)
        assert listing.returncode == 0, listing.stderr
        [record] = [r for r in json.loads(listing.stdout) if r["id"] == diagnosis_id]
        assert record["status"] == "failed"
        assert "stopped without finishing it" in record["note"]

        endpoint.gate.set()
        resumed = _cli(
            "diagnose", "--resume", "--thread", thread_id, "--db", url, "--json", **endpoint.env()
        )
    assert resumed.returncode == 0, resumed.stderr
    body = json.loads(resumed.stdout)
    assert body["diagnosis_id"] == diagnosis_id and body["verdict"] == "PASS"
    assert body["offline"] is False


def _wait_for_checkpoint_after_intake(database: Path, thread_id: str) -> None:
    """Checkpoints are written in the background: wait for the one the planner runs from."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with sqlite3.connect(database) as conn:
            steps = conn.execute(
                "SELECT MAX(json_extract(CAST(metadata AS TEXT), '$.step')) FROM checkpoints "
                "WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()[0]
        if steps is not None and steps >= 1:
            return
        time.sleep(0.05)
    pytest.fail("the checkpoint after intake was never written")


def _wait_gone(server: Server) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{server.url}/ok", timeout=1)
        except httpx.TransportError:
            return
        time.sleep(0.1)
    pytest.fail("the killed server still answers")


def test_langgraph_metrics_need_an_api_key(keyed: Server) -> None:
    refused = [
        httpx.get(f"{keyed.url}/metrics", headers=headers, timeout=30)
        for headers in ({}, {"Authorization": "Bearer nope"}, {"x-auth-scheme": "langsmith"})
    ]
    allowed = httpx.get(f"{keyed.url}/metrics", headers=ALICE, timeout=30)

    assert [r.status_code for r in refused] == [401, 401, 401], [r.text for r in refused]
    assert allowed.status_code == 200, allowed.text
    assert httpx.get(f"{keyed.url}/ok", timeout=30).status_code == 200  # health stays open
