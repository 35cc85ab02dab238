"""Serving that holds, in-process, on SQLite and on a real PostgreSQL database.

One writer per thread whatever the entry point (the graph takes the lock itself), the run
settings stored with each diagnosis and reused by a resume, leases and the sweeper, checkpoint
maintenance, retention, and a database lost and recreated under a running process.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from starlette.testclient import TestClient
from typing_extensions import Unpack

import apps.cli.main as cli
from apps.http.api import create_app
from apps.sweeper import PeriodicSweeper, sweep, sweep_interval
from evidence.environment import Environment
from evidence.sample import SampleBackend, default_environment
from graph.builder import build_graph
from graph.compile import RunStores, compile_graph
from graph.failures import DiagnosisFailed
from graph.runner import run_diagnosis
from models.scripted import scripted_models
from nodes.intake import diagnosis_id_for
from persistence import checkpoint_ops
from persistence.audit import SqlAuditStore
from persistence.checkpointers import checkpointer
from persistence.checkpoints import checkpoint_saver
from persistence.database import Database, DatabaseError, open_database
from persistence.ledger import SqlLedger
from persistence.ownership import ThreadOwners
from persistence.retention import prune_finished
from persistence.runs import SqlRunLocks
from persistence.store import Persistence, open_persistence
from state.context import Context
from state.graph_state import DiagnosisState
from state.run_settings import run_settings
from tests.serving_kit import (
    QUESTION,
    child_env,
    kill_at_second_tool_call,
    resume_in_child,
)
from tools.backend import LogsOutput, LogsQuery

KEYS = {"key-alice": "alice", "key-bob": "bob"}
ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"X-API-Key": "key-bob"}
BOUND_S = 60.0


pytestmark = pytest.mark.usefixtures("no_model_or_superbiz_settings")


class GatedBackend(SampleBackend):
    """The sample backend, whose log queries wait until the test opens the gate."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        self.entered.set()
        if not self.gate.wait(BOUND_S):
            raise TimeoutError("the test never opened the gate")
        return super().query_logs(**query)


def exploding_models(role: str, ctx: Context) -> BaseChatModel:
    """A model factory that fails the run (a model endpoint that cannot be configured)."""
    raise SystemError("model endpoint exploded")


def _graph(store: Persistence, backend: SampleBackend | None = None) -> Any:
    return compile_graph(
        store, backend or SampleBackend(default_environment()), environment={"kind": "sample"}
    )


def _diagnose(
    store: Persistence,
    thread: str,
    question: str | None = QUESTION,
    *,
    backend: SampleBackend | None = None,
    resume: bool = False,
) -> DiagnosisState:
    """Run (or resume) the thread's diagnosis offline on the sample, to the end."""
    return run_diagnosis(
        _graph(store, backend),
        thread_id=thread,
        context=Context(offline=True),
        audit=store.audit,
        question=question,
        resume=resume,
    )


def _leases(store: Persistence) -> list[dict[str, Any]]:
    with store.db.transaction() as tx:
        return tx.execute("SELECT diagnosis_id, thread_id, holder FROM diagnosis_lease")


def _leaf_checkpoints(store: Persistence, thread: str) -> int:
    """Checkpoints of a thread that no other checkpoint continues: 1 unless it forked."""
    with store.db.transaction() as tx:
        rows = tx.execute(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
            "WHERE thread_id = %s AND checkpoint_ns = ''",
            (thread,),
        )
    parents = {r["parent_checkpoint_id"] for r in rows}
    return len([r for r in rows if r["checkpoint_id"] not in parents])


# --- one writer per thread --------------------------------------------------------------------


def _server_graph(saver: Any, backend: SampleBackend, url: str) -> Any:
    """The graph as the LangGraph server runs it: compiled without a checkpointer on its own
    database, then given the server's async checkpointer as the server gives it (``copy``)."""
    db = Database(url)
    stores = RunStores(
        audit=SqlAuditStore(db), ledger=SqlLedger(db), locks=SqlRunLocks(db, origin="langgraph")
    )
    graph = compile_graph(stores, backend, checkpoints=lambda: checkpoint_saver(db))
    return graph.copy(update={"checkpointer": saver})


def test_serving_langgraph_run_and_api_chat_on_one_thread_never_run_at_once(
    store: Persistence, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LangGraph-server run (async, its own locks) holds the thread; /api/chat gets 409."""
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", database_url)
    thread = str(uuid.uuid4())
    assert ThreadOwners(store.db).claim(thread, "alice")  # as the LangGraph auth handler does
    gated = GatedBackend(default_environment())
    config: RunnableConfig = {"configurable": {"thread_id": thread}}

    async def server_run() -> dict[str, Any]:
        async with checkpointer() as saver:
            server_graph = _server_graph(saver, gated, database_url)
            payload = {"messages": [HumanMessage(QUESTION)]}
            async for _ in server_graph.astream(payload, config, context=Context(offline=True)):
                pass
            return dict((await server_graph.aget_state(config)).values)

    outcome: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: outcome.update(asyncio.run(server_run())))
    runner.start()
    try:
        assert gated.entered.wait(BOUND_S), "the LangGraph run never reached its first tool"
        with TestClient(create_app(database_url, api_keys=KEYS)) as client:
            busy = client.post(
                "/api/chat",
                json={"question": "second question", "thread_id": thread},
                headers=ALICE,
            )
            assert busy.status_code == 409, busy.text
            assert "already being diagnosed" in busy.json()["error"]
            gated.gate.set()
            runner.join(BOUND_S)
            assert outcome["verdict"] == "PASS"
            after = client.post(
                "/api/chat",
                json={"question": "second question", "thread_id": thread},
                headers=ALICE,
            )
            assert after.status_code == 200, after.text
    finally:
        gated.gate.set()
        runner.join(BOUND_S)
    humans = [
        m.content for m in _graph(store).get_state(config).values["messages"] if m.type == "human"
    ]
    assert humans == [QUESTION, "second question"]
    assert _leaf_checkpoints(store, thread) == 1
    assert [r["status"] for r in store.audit.list(thread)] == ["done", "done"]
    assert _leases(store) == []


def test_serving_cli_is_refused_while_a_server_run_holds_the_thread(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    with store.locks.hold(thread):
        code = cli.main(["diagnose", QUESTION, "--thread", thread, "--db", database_url])
    assert code == 2
    assert "already being diagnosed" in capsys.readouterr().err
    assert store.audit.list(thread) == []


def test_serving_failed_run_is_recorded_and_releases_its_thread(store: Persistence) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    app = compile_graph(store, get_model=exploding_models)
    with pytest.raises(DiagnosisFailed, match="model endpoint exploded") as raised:
        run_diagnosis(
            app,
            thread_id=thread,
            context=Context(offline=True, language="en"),
            audit=store.audit,
            question=QUESTION,
        )
    assert isinstance(raised.value.cause, SystemError)
    [record] = store.audit.list(thread)
    assert record["status"] == "failed"
    assert record["note"] == "failed: SystemError: model endpoint exploded"
    assert record["final_answer"] == raised.value.answer
    assert "could not finish" in raised.value.answer
    assert _leases(store) == []
    with store.locks.hold(thread):  # released
        pass


def test_serving_cancelled_server_run_is_failed_not_left_running(
    store: Persistence, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LangGraph run cancelled mid-way (interrupt, rollback) fails its diagnosis, frees it."""
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", database_url)
    thread = f"t-{uuid.uuid4().hex[:12]}"
    gated = GatedBackend(default_environment())
    config: RunnableConfig = {"configurable": {"thread_id": thread}}

    async def cancel_mid_run() -> None:
        async with checkpointer() as saver:
            app = _server_graph(saver, gated, database_url)

            async def consume() -> None:
                payload = {"messages": [HumanMessage(QUESTION)]}
                async for _ in app.astream(payload, config, context=Context(offline=True)):
                    pass

            task = asyncio.create_task(consume())
            await asyncio.to_thread(gated.entered.wait, BOUND_S)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            gated.gate.set()

    try:
        asyncio.run(asyncio.wait_for(cancel_mid_run(), BOUND_S))
    finally:
        gated.gate.set()
    [record] = store.audit.list(thread)
    assert record["status"] == "failed"
    assert (record["note"] or "").startswith("failed: the run was cancelled before it finished")
    assert _leases(store) == []
    with store.locks.hold(thread):
        pass


# --- run settings and resume ------------------------------------------------------------------


def _interrupted(
    store: Persistence, thread: str, context: Context, *, backend: SampleBackend | None = None
) -> str:
    """A diagnosis stopped after its planner (a resumable checkpoint), as a crash would leave it."""
    app = _graph(store, backend)
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    payload = {"messages": [HumanMessage(QUESTION)]}
    for _ in app.stream(payload, config, context=context, interrupt_after=["planner"]):
        pass
    assert app.get_state(config).next == ("executor",)
    return str(app.get_state(config).values["diagnosis_id"])


def test_serving_run_settings_are_stored_with_the_diagnosis(store: Persistence) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    diagnosis_id = _interrupted(store, thread, Context(offline=True, language="en"))

    record = store.audit.get(diagnosis_id)

    assert record is not None and record["run_settings"] is not None
    settings: Any = record["run_settings"]
    assert settings["version"] == "run-settings.v1"
    assert settings["context"]["language"] == "en"
    assert settings["context"]["offline"] is True
    assert settings["context"]["max_tool_calls_per_round"] == 8
    assert settings["environment"] == {"kind": "sample"}


def test_serving_model_mode_resume_without_a_key_is_refused(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"

    app = compile_graph(
        store,
        SampleBackend(default_environment()),
        get_model=scripted_models(
            {"planner": ["PLAN: read the logs"], "executor": [], "verifier": []}
        ),
    )
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    context = Context(offline=False, model="gpt-4o-mini")
    for _ in app.stream(
        {"messages": [HumanMessage(QUESTION)]}, config, context=context, interrupt_after=["planner"]
    ):
        pass
    diagnosis_id = app.get_state(config).values["diagnosis_id"]

    code = cli.main(["diagnose", "--resume", "--thread", thread, "--db", database_url])

    err = capsys.readouterr().err
    assert code == 2
    assert "ran in model mode" in err and "set OPENAI_API_KEY" in err
    record = store.audit.get(diagnosis_id)
    assert record is not None and record["status"] == "running"  # untouched, still resumable
    assert app.get_state(config).next == ("executor",)


def test_serving_resume_refuses_a_setting_that_differs_from_the_stored_one(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    _interrupted(store, thread, Context(offline=True, language="en"))

    code = cli.main(
        ["diagnose", "--resume", "--thread", thread, "--lang", "zh", "--db", database_url]
    )

    assert code == 2
    assert "started with language='en'" in capsys.readouterr().err


def _crash(database_url: str, thread: str, tmp_path: Path, *args: str, ttl: str = "60") -> str:
    """Run tests/crash_child.py until its second tool call, SIGKILL it; the diagnosis id."""
    marker = tmp_path / f"stalled-{thread}"
    kill_at_second_tool_call(
        database_url, thread, marker, *args, env=child_env(SUPERBIZ_LEASE_TTL_S=ttl)
    )
    persistence = open_persistence(database_url)
    try:
        [running] = [r for r in persistence.audit.list(thread) if r["status"] == "running"]
    finally:
        persistence.close()
    return running["id"]


def test_serving_killed_lang_en_env_run_resumes_in_english_on_its_environment(
    database_url: str, tmp_path: Path
) -> None:
    environment: dict[str, Any] = json.loads(json.dumps(default_environment()))
    logs: list[dict[str, Any]] = environment.get("logs", [])
    marker_text = "PaymentGatewayUnreachable marker-7c1"
    for entry in logs:
        if entry.get("service") == "order-service" and entry.get("level") == "ERROR":
            entry["message"] = f"{marker_text}: upstream payment-service refused the call"
    env_file = tmp_path / "incident.json"
    env_file.write_text(json.dumps(environment), encoding="utf-8")
    thread = f"t-{uuid.uuid4().hex[:12]}"
    crashed = _crash(database_url, thread, tmp_path, "--lang", "en", "--env", str(env_file))

    resumed = resume_in_child(database_url, thread, "--json")

    assert resumed.returncode == 0, resumed.stderr.decode(errors="replace")
    result = json.loads(resumed.stdout)
    assert result["diagnosis_id"] == crashed
    assert "Conclusion (confirmed facts)" in result["answer"]
    assert "【结论" not in result["answer"]
    assert marker_text in result["answer"]  # the --env file's evidence, not the bundled sample


# --- leases and the sweeper -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"), [("", 30.0), ("  ", 30.0), ("2.5", 2.5), ("-1", 0.0), ("0", 0.0)]
)
def test_serving_sweep_interval_reads_its_variable(
    value: str, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_SWEEP_INTERVAL_S", value)
    assert sweep_interval() == seconds


def test_serving_sweep_interval_that_is_no_number_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_SWEEP_INTERVAL_S", "soon")
    with pytest.raises(DatabaseError) as caught:
        sweep_interval()
    assert str(caught.value) == "SUPERBIZ_SWEEP_INTERVAL_S must be a number of seconds, got 'soon'"


def test_serving_sweep_after_sigkill_marks_the_orphan_failed_with_the_reason(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    crashed = _crash(database_url, thread, tmp_path, ttl="0.5")
    time.sleep(1.0)  # the killed child's lease has expired

    persistence = open_persistence(database_url)  # what every command does when it starts
    try:
        swept = sweep(persistence)
        record = persistence.audit.get(crashed)
        leases = _leases(persistence)
    finally:
        persistence.close()

    assert [(s.diagnosis_id, s.action) for s in swept] == [(crashed, "failed")]
    assert record is not None and record["status"] == "failed"
    note = record["note"] or ""
    assert "stopped without finishing it; its lease expired at" in note
    assert f"superbiz diagnose --resume --thread {thread}" in note
    assert leases == []


def test_serving_server_start_sweep_resumes_the_orphan_to_its_verdict(
    database_url: str, tmp_path: Path
) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    crashed = _crash(database_url, thread, tmp_path, ttl="0.5")
    time.sleep(1.0)

    with TestClient(create_app(database_url, api_keys=KEYS)) as client:  # its sweeper starts
        service = client.app.state.superbiz  # type: ignore[attr-defined]
        persistence, _ = service.open()
        deadline = time.monotonic() + BOUND_S
        while (leases := _leases(persistence)) or (
            (record := persistence.audit.get(crashed)) and record["status"] == "running"
        ):
            assert time.monotonic() < deadline, "the server never finished the orphan"
            time.sleep(0.1)
        record = persistence.audit.get(crashed)
        again = sweep(persistence, resume=lambda d: service.resume(None, d))

    assert record is not None and record["status"] == "done"
    assert record["verdict"] == "PASS"
    assert record["note"] == "resumed after an interrupted run"
    assert leases == []
    assert again == []  # nothing left to sweep


def test_serving_lease_is_renewed_while_the_run_is_alive(
    store: Persistence, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_LEASE_TTL_S", "0.6")
    persistence = open_persistence(database_url)
    thread = f"t-{uuid.uuid4().hex[:12]}"
    gated = GatedBackend(default_environment())
    app = _graph(persistence, gated)
    runner = threading.Thread(
        target=run_diagnosis,
        kwargs={
            "app": app,
            "thread_id": thread,
            "context": Context(offline=True),
            "audit": persistence.audit,
            "question": QUESTION,
        },
    )
    runner.start()
    try:
        assert gated.entered.wait(BOUND_S)
        time.sleep(1.5)  # more than twice the time to live: only a heartbeat keeps it
        swept = sweep(store)
        leased = _leases(store)
    finally:
        gated.gate.set()
        runner.join(BOUND_S)
        persistence.close()
    assert swept == []
    assert [row["thread_id"] for row in leased] == [thread]


# --- HTTP API resume --------------------------------------------------------------------------


def test_serving_api_resume_finishes_an_interrupted_diagnosis_of_the_caller(
    database_url: str,
) -> None:
    thread = str(uuid.uuid4())
    with TestClient(create_app(database_url, api_keys=KEYS)) as client:
        service = client.app.state.superbiz  # type: ignore[attr-defined]
        persistence, _ = service.open()
        assert ThreadOwners(persistence.db).claim(thread, "alice")
        diagnosis_id = _interrupted(persistence, thread, Context(offline=True, language="en"))

        foreign = client.post(f"/api/diagnoses/{diagnosis_id}/resume", headers=BOB)
        resumed = client.post(f"/api/diagnoses/{diagnosis_id}/resume", headers=ALICE)
        again = client.post(f"/api/diagnoses/{diagnosis_id}/resume", headers=ALICE)

    assert foreign.status_code == 404
    assert resumed.status_code == 200, resumed.text
    body = resumed.json()
    assert body["diagnosis_id"] == diagnosis_id and body["verdict"] == "PASS"
    assert "Conclusion (confirmed facts)" in body["answer"]  # the stored language
    assert again.status_code == 409
    assert "no interrupted diagnosis" in again.json()["error"]


# --- checkpoint maintenance -------------------------------------------------------------------


def test_serving_checkpoint_maintenance_deletes_prunes_and_copies(
    monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", database_url)
    thread, copy = str(uuid.uuid4()), str(uuid.uuid4())

    async def exercise() -> dict[str, Any]:
        async with checkpointer() as saver:
            app = build_graph().compile(checkpointer=saver)
            first: RunnableConfig = {"configurable": {"thread_id": thread}, "run_id": uuid.uuid4()}
            await app.ainvoke({"messages": [HumanMessage(QUESTION)]}, first)
            history_one = [c async for c in saver.alist({"configurable": {"thread_id": thread}})]
            second_run = uuid.uuid4()
            second: RunnableConfig = {"configurable": {"thread_id": thread}, "run_id": second_run}
            await app.ainvoke({"messages": [HumanMessage("second question")]}, second)
            # Tag the second run's checkpoints as the LangGraph server does (metadata run_id).
            await asyncio.to_thread(_tag_run, database_url, thread, history_one, str(second_run))
            await saver.acopy_thread(thread, copy)
            copied = (await app.aget_state({"configurable": {"thread_id": copy}})).values
            await saver.aprune([copy], strategy="keep_latest")
            pruned = (await app.aget_state({"configurable": {"thread_id": copy}})).values
            left = [c async for c in saver.alist({"configurable": {"thread_id": copy}})]
            await saver.adelete_for_runs([str(second_run)])  # a rollback of the second run
            rolled_back = (await app.aget_state({"configurable": {"thread_id": thread}})).values
            return {
                "copied": copied,
                "rolled_back": rolled_back,
                "pruned": pruned,
                "left": len(left),
                "before": len(history_one),
            }

    got = asyncio.run(asyncio.wait_for(exercise(), BOUND_S))

    def humans(values: dict[str, Any]) -> list[str]:
        return [m.content for m in values["messages"] if m.type == "human"]

    assert humans(got["copied"]) == [QUESTION, "second question"]
    assert humans(got["rolled_back"]) == [QUESTION]  # the second run's checkpoints are gone
    assert humans(got["pruned"]) == [QUESTION, "second question"]  # newest state kept
    assert got["left"] == 1 < got["before"]


def _tag_run(url: str, thread: str, earlier: list[Any], run_id: str) -> None:
    """Mark the checkpoints written after ``earlier`` with ``run_id`` in their metadata."""
    keep = [c.config["configurable"]["checkpoint_id"] for c in earlier]
    db = open_database(url)
    try:
        with db.transaction() as tx:
            rows = tx.execute(
                "SELECT checkpoint_id, metadata FROM checkpoints WHERE thread_id = %s", (thread,)
            )
            for row in rows:
                if row["checkpoint_id"] in keep:
                    continue
                raw = row["metadata"]
                metadata = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
                metadata["run_id"] = run_id
                value = tx.json(metadata) if tx.dialect == "postgres" else json.dumps(metadata)
                tx.execute(
                    "UPDATE checkpoints SET metadata = %s WHERE thread_id = %s AND "
                    "checkpoint_id = %s",
                    (value, thread, row["checkpoint_id"]),
                )
    finally:
        db.close()


def test_serving_unknown_prune_strategy_is_refused(store: Persistence) -> None:
    with pytest.raises(ValueError, match="unknown prune strategy 'oldest'"):
        checkpoint_ops.prune(store.db.target, ["t"], "oldest")


# --- retention --------------------------------------------------------------------------------


def test_serving_db_prune_keeps_audit_rows_and_the_newest_checkpoint(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    finished = f"t-{uuid.uuid4().hex[:12]}"
    values = _diagnose(store, finished)
    interrupted = f"t-{uuid.uuid4().hex[:12]}"
    _interrupted(store, interrupted, Context(offline=True))

    def checkpoints(thread: str) -> int:
        with store.db.transaction() as tx:
            rows = tx.execute(
                "SELECT COUNT(*) AS n FROM checkpoints WHERE thread_id = %s", (thread,)
            )
        return int(rows[0]["n"])

    before = checkpoints(finished), checkpoints(interrupted)
    code = cli.main(["db", "prune", "--keep-days", "0", "--db", database_url])

    out = capsys.readouterr().out
    assert code == 0
    assert "pruned 1 thread(s)" in out and "audit rows kept" in out
    assert before[0] > 1
    assert checkpoints(finished) == 1
    assert checkpoints(interrupted) == before[1]  # still running: untouched
    record = store.audit.get(str(values["diagnosis_id"]))
    assert record is not None and record["status"] == "done"
    assert store.ledger.list(str(values["diagnosis_id"]))
    # The thread goes on from its newest checkpoint.
    again = _diagnose(store, finished, "second question")
    assert [m.type for m in again["messages"]] == ["human", "ai", "human", "ai"]


def test_serving_db_prune_keeps_recent_threads(store: Persistence) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    _diagnose(store, thread)

    report = prune_finished(store.db, keep_days=1)

    assert report.threads == 0 and report.removed.checkpoints == 0


# --- database lost and recreated --------------------------------------------------------------


@pytest.mark.postgres
def test_serving_lost_database_fails_with_the_reason_and_a_recreated_one_is_used(
    own_database: tuple[str, str],
) -> None:
    url, admin = own_database
    name = url.rsplit("/", 1)[1]
    persistence = open_persistence(url)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        with pytest.raises(DatabaseError, match=f'database "{name}" does not exist'):
            persistence.audit.list()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        assert persistence.db.check_schema() >= 3  # set up again, no restart
        values = _diagnose(persistence, "after")
        assert values["verdict"] == "PASS"
        assert [r["status"] for r in persistence.audit.list("after")] == ["done"]
    finally:
        persistence.close()


def test_serving_server_prunes_when_retention_is_set(
    store: Persistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    _diagnose(store, thread)
    monkeypatch.setenv("SUPERBIZ_RETENTION_DAYS", "0")

    PeriodicSweeper(lambda: store, lambda d: None, 0).run_once()

    with store.db.transaction() as tx:
        rows = tx.execute("SELECT COUNT(*) AS n FROM checkpoints WHERE thread_id = %s", (thread,))
    assert int(rows[0]["n"]) == 1
    assert [r["status"] for r in store.audit.list(thread)] == ["done"]


def test_serving_an_orphan_is_resumed_once_then_failed(store: Persistence) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    diagnosis_id = _interrupted(store, thread, Context(offline=True))
    leases = store.locks.leases
    leases.release_thread(thread)
    resumed: list[str] = []

    for attempts in (0, 1):  # a process that died holding it, then a resume that died too
        with store.db.transaction() as tx:
            tx.execute(
                "INSERT INTO diagnosis_lease (diagnosis_id, thread_id, holder, origin, "
                "acquired_at, expires_at, attempts) "
                "VALUES (%s, %s, 'gone:1:x', 'api', %s, 1.0, %s)",
                (diagnosis_id, thread, "2026-01-01T00:00:00+00:00", attempts),
            )
        swept = sweep(store, resume=resumed.append)
        leases.release(diagnosis_id)

    assert resumed == [diagnosis_id]  # the first sweep resumed it (here: recorded the call)
    assert [s.action for s in swept] == ["failed"]
    record = store.audit.get(diagnosis_id)
    assert record is not None and record["status"] == "failed"
    assert "(after an automatic resume)" in (record["note"] or "")


class InterruptingBackend(SampleBackend):
    """The sample backend, where the user presses Ctrl-C during the first log query."""

    def query_logs(self, **query: Unpack[LogsQuery]) -> LogsOutput:
        raise KeyboardInterrupt


def test_serving_ctrl_c_leaves_a_resumable_diagnosis_that_no_sweep_touches(
    store: Persistence,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    with pytest.raises(KeyboardInterrupt):
        _diagnose(store, thread, backend=InterruptingBackend(default_environment()))

    [record] = store.audit.list(thread)
    assert record["status"] == "running"
    assert (
        record["note"] == f"interrupted; resume with superbiz diagnose --resume --thread {thread}"
    )
    assert _leases(store) == []  # given back: not an orphan
    assert sweep(store) == []
    values = _diagnose(store, thread, None, resume=True)
    assert values["verdict"] == "PASS" and values["diagnosis_id"] == record["id"]


def test_serving_resume_after_intake_whose_checkpoint_was_lost_uses_its_record(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process killed after intake ran but before its writes were saved: intake is pending."""
    thread = f"t-{uuid.uuid4().hex[:12]}"
    app = _graph(store)
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    payload = {"messages": [HumanMessage(QUESTION)]}
    for _ in app.stream(
        payload, config, context=Context(offline=True), interrupt_before=["intake"]
    ):
        pass
    snapshot = app.get_state(config)
    assert snapshot.next == ("intake",)

    never_started = cli.main(["diagnose", "--resume", "--thread", thread, "--db", database_url])
    assert never_started == 2
    assert "stopped before its diagnosis started" in capsys.readouterr().err

    # What the killed intake had recorded: its row, with the settings of its run.
    human = snapshot.values["messages"][-1]
    diagnosis_id = diagnosis_id_for(thread, str(human.id))
    settings = run_settings(Context(offline=True, language="en"), {"kind": "sample"})
    store.audit.start_diagnosis(
        diagnosis_id, thread_id=thread, question=QUESTION, settings=dict(settings)
    )

    code = cli.main(["diagnose", "--resume", "--thread", thread, "--db", database_url, "--json"])

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["diagnosis_id"] == diagnosis_id
    assert "Conclusion (confirmed facts)" in result["answer"]  # its stored language


def test_serving_an_orphan_on_a_busy_thread_waits_for_the_next_sweep(store: Persistence) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    diagnosis_id = _interrupted(store, thread, Context(offline=True))
    store.locks.leases.release_thread(thread)
    with store.db.transaction() as tx:
        tx.execute(
            "INSERT INTO diagnosis_lease (diagnosis_id, thread_id, holder, origin, acquired_at, "
            "expires_at, attempts) VALUES (%s, %s, 'gone:1:x', 'api', %s, 1.0, 0)",
            (diagnosis_id, thread, "2026-01-01T00:00:00+00:00"),
        )

    def resume(diagnosis: str) -> None:
        _diagnose(store, thread, None, resume=True)

    with store.locks.hold(thread):  # another run has the thread right now
        busy = sweep(store, resume=resume)
    later = sweep(store, resume=resume)

    assert [s.action for s in busy] == ["busy"]
    assert [s.action for s in later] == ["resumed"]
    record = store.audit.get(diagnosis_id)
    assert record is not None and record["status"] == "done"
    assert _leases(store) == []
