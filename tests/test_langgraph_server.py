"""What the LangGraph server loads, driven in-process: the exported graph and its checkpointer.

``apps/langgraph_server/server.py`` opens the configured database only when a run first needs it,
records audit rows and invocations there, and fails a run with the reason when the database
cannot be used.
``persistence/checkpointers.py`` yields the checkpointer of the same database.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from apps.langgraph_server import server as server_app
from graph.builder import build_graph
from persistence.audit import SqlAuditStore
from persistence.checkpointers import checkpointer
from persistence.database import DatabaseError, default_sqlite_path, open_database
from persistence.ledger import SqlLedger
from state.graph_state import InputState

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "order-service 为什么报 500？"
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/superbiz"
BOUND_S = 60.0


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "SUPERBIZ_")):
            monkeypatch.delenv(name)


@pytest.fixture
def fresh_app_database() -> Iterator[None]:
    """The exported graph's database is closed before and after, so each test opens its own."""
    server_app.database.close()
    try:
        yield
    finally:
        server_app.database.close()


@pytest.mark.parametrize("url", ["", UNREACHABLE], ids=["default-sqlite", "unreachable-postgres"])
def test_graph_app_import_opens_no_database(tmp_path: Path, url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SUPERBIZ_"))}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    if url:
        env["SUPERBIZ_DATABASE_URL"] = url
    code = (
        "import apps.langgraph_server.server as a; "
        "print(a.graph.name, sorted(a.graph.get_graph().nodes)[0])"
    )

    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "superbiz"
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (UNREACHABLE, "cannot connect to PostgreSQL at postgresql://postgres@127.0.0.1:1"),
        ("mysql://db.example/superbiz", "unsupported database URL scheme 'mysql'"),
    ],
    ids=["unreachable", "unsupported-scheme"],
)
@pytest.mark.usefixtures("offline", "fresh_app_database")
def test_graph_app_unusable_database_fails_every_run_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", url)
    payload = InputState(messages=[HumanMessage(QUESTION)])

    for _ in range(2):  # no fall-back to memory after the first failure either
        with pytest.raises(DatabaseError, match=reason):
            server_app.graph.invoke(payload, {"configurable": {"thread_id": "t-unusable"}})


@pytest.mark.usefixtures("offline", "fresh_app_database")
def test_graph_app_records_audit_and_invocations_in_the_configured_database(
    monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", database_url)
    thread = f"t-app-{uuid.uuid4().hex[:8]}"

    result = server_app.graph.invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"configurable": {"thread_id": thread}}
    )

    assert result["verdict"] == "PASS"
    db = open_database(database_url)
    try:
        records = SqlAuditStore(db).list(thread)
        invocations = SqlLedger(db).list(result["diagnosis_id"])
    finally:
        db.close()
    assert [(r["id"], r["status"], r["verdict"]) for r in records] == [
        (result["diagnosis_id"], "done", "PASS")
    ]
    assert records[0]["final_answer"] == result["messages"][-1].content
    assert [row["invocation_id"] for row in invocations][:1] == ["inv-1"]
    assert {row["thread_id"] for row in invocations} == {thread}


async def _diagnose_twice(thread: str) -> tuple[type[Any], list[Any], list[Any]]:
    """One diagnosis through a checkpointer, then the thread read back through a new one."""
    config: Any = {"configurable": {"thread_id": thread}}
    async with checkpointer() as saver:
        kind = type(saver)
        app = build_graph().compile(checkpointer=saver)
        await app.ainvoke({"messages": [HumanMessage(QUESTION)]}, config)
        first = (await app.aget_state(config)).values["messages"]
    async with checkpointer() as saver:
        app = build_graph().compile(checkpointer=saver)
        again = (await app.aget_state(config)).values["messages"]
    return kind, first, again


@pytest.mark.usefixtures("offline")
def test_server_checkpointer_keeps_a_thread_in_the_configured_database(
    monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", database_url)

    thread = f"t-ckpt-{uuid.uuid4().hex[:8]}"
    kind, first, again = asyncio.run(asyncio.wait_for(_diagnose_twice(thread), timeout=BOUND_S))

    expected = AsyncPostgresSaver if database_url.startswith("postgresql") else AsyncSqliteSaver
    assert issubclass(kind, expected)
    assert [m.type for m in first] == ["human", "ai"]
    assert "校验结论：PASS" in first[-1].content
    assert [m.content for m in again] == [m.content for m in first]


@pytest.mark.usefixtures("offline")
def test_server_checkpointer_default_is_the_cli_sqlite_file() -> None:
    async def enter() -> type[Any]:
        async with checkpointer() as saver:
            return type(saver)

    assert not default_sqlite_path().exists()

    assert issubclass(asyncio.run(enter()), AsyncSqliteSaver)
    assert default_sqlite_path().is_file()


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL database that has never seen a checkpoint table, dropped afterwards."""
    base, _, name = postgres_url.rpartition("/")
    fresh = f"{name}_fresh_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{fresh}"')
    try:
        yield f"{base}/{fresh}"
    finally:
        with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')


@pytest.mark.postgres
@pytest.mark.usefixtures("offline")
def test_server_checkpointer_concurrent_first_setup_succeeds(
    monkeypatch: pytest.MonkeyPatch, fresh_postgres_url: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", fresh_postgres_url)

    async def enter() -> None:
        async with checkpointer() as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": "none"}}) is None

    async def several() -> list[BaseException | None]:
        gathered = asyncio.gather(*(enter() for _ in range(4)), return_exceptions=True)
        return await asyncio.wait_for(gathered, timeout=BOUND_S)

    # Without the setup lock, concurrent first setups collide on the migration versions.
    assert asyncio.run(several()) == [None] * 4
    with psycopg.connect(fresh_postgres_url, connect_timeout=5) as conn:
        versions = conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v").fetchall()
    assert [row[0] for row in versions] == list(range(len(AsyncPostgresSaver.MIGRATIONS)))


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (UNREACHABLE, "cannot connect to PostgreSQL at postgresql://postgres@127.0.0.1:1"),
        ("mysql://db.example/superbiz", "unsupported database URL scheme"),
    ],
    ids=["unreachable", "unsupported-scheme"],
)
def test_server_checkpointer_unusable_database_is_an_error(
    monkeypatch: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", url)

    async def enter() -> None:
        async with checkpointer():
            pass

    with pytest.raises(DatabaseError, match=reason):
        asyncio.run(enter())


def test_graph_app_records_the_configured_backends_so_a_resume_accepts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from apps.resuming import backend_for
    from tests.prometheus_kit import free_port

    prometheus = f"http://127.0.0.1:{free_port()}"  # nothing listens: the queries are gaps
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SUPERBIZ_"))}
    env.update(
        XDG_DATA_HOME=str(tmp_path / "data"),
        SUPERBIZ_DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite'}",
        SUPERBIZ_PROMETHEUS_URL=prometheus,
    )
    code = (
        "import json; from langchain_core.messages import HumanMessage; "
        "import apps.langgraph_server.server as a; "
        "from persistence.audit import SqlAuditStore; "
        "r = a.graph.invoke({'messages': [HumanMessage('is order-service failing?')]}, "
        "{'configurable': {'thread_id': 't-lg'}}); "
        "rec = SqlAuditStore(a.database).get(r['diagnosis_id']); "
        "print(json.dumps(rec['run_settings']['environment']))"
    )

    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads(done.stdout.strip().splitlines()[-1])
    assert recorded == {"kind": "sample", "backends": ["prometheus"]}
    for name in [n for n in os.environ if n.startswith("SUPERBIZ_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SUPERBIZ_PROMETHEUS_URL", prometheus)
    backend_for(recorded)  # the server's sweep resumes it on the same backends
