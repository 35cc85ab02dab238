"""Durable, auditable persistence: one test body against SQLite and a real PostgreSQL database."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig

import apps.cli.main as cli
from evidence.sample import SampleBackend, default_environment
from graph.compile import compile_graph
from graph.runner import run_diagnosis
from models.budget import GetModel
from models.scripted import scripted_models
from persistence.database import (
    DatabaseError,
    SchemaTooNew,
    migrate,
    open_database,
    resolve_target,
)
from persistence.locks import ThreadBusy
from persistence.migrations import latest_version
from persistence.store import Persistence, open_persistence
from state.context import ComposerMode, Context
from state.graph_state import DiagnosisState
from tests.records import (
    binding,
    claim,
    evaluation_of,
    json_list,
    json_object,
    rule_evaluation_of,
)
from tests.scenario_kit import ERROR_LOGS_CALL, executor_answer, final
from tests.serving_kit import (
    QUESTION,
    child_env,
    kill_at_second_tool_call,
    resume_in_child,
)
from tests.sql_kit import query


def diagnose(
    store: Persistence,
    thread: str,
    question: str = QUESTION,
    get_model: GetModel | None = None,
    *,
    composer_mode: ComposerMode | None = None,
) -> DiagnosisState:
    app = compile_graph(store, SampleBackend(default_environment()), get_model=get_model)
    offline = get_model is None
    context = (
        Context(offline=offline)
        if composer_mode is None
        else Context(offline=offline, composer_mode=composer_mode)
    )
    return run_diagnosis(  # the graph holds the thread's lock itself
        app,
        thread_id=thread,
        context=context,
        audit=store.audit,
        question=question,
    )


# --- rows, channels --------------------------------------------------------------------------


def test_persistence_writes_rows_and_checkpoints_per_diagnosis(store: Persistence) -> None:
    values = diagnose(store, "rows")

    record = store.audit.get(values["diagnosis_id"])
    assert record is not None
    assert record["status"] == "done"
    assert record["verdict"] == "PASS"
    assert record["rounds"] == 1
    assert record["final_answer"] == values["answer"]
    evaluation = evaluation_of(record)
    for key in (
        "verdict",
        "model_verdict",
        "groundedness_score",
        "critical_fact_count",
        "claim_checks",
        "facts_checked",
        "rationale",
        "executor_output_parse_status",
        "tool_trace_summary",
        "traceability_version",
        "gatekeeper_result",
        "composer_output",
        "prompt_audit",
        "rounds",
        "conclusion",
    ):
        assert key in evaluation, key
    assert rule_evaluation_of(record)["formula_version"]
    rows = store.ledger.list(values["diagnosis_id"])
    # The plan (ERROR, metrics, WARN, the incident analysis), the runbooks: the service its
    # warnings name is the root cause the analysis singled out and quoted, so no hop queries it.
    assert [r["invocation_id"] for r in rows] == [f"inv-{i}" for i in range(1, 6)]
    assert [r["tool_name"] for r in rows][3:] == ["analyze_incident", "lookup_knowledge"]
    assert [r["tool_name"] for r in rows].count("analyze_incident") == 1
    assert all(r["retrieval_details"]["evidence_refs"] for r in rows)
    config: RunnableConfig = {"configurable": {"thread_id": "rows"}}
    assert list(store.checkpointer.list(config))


def test_persistence_channels_are_preserved_both_ways(store: Persistence) -> None:
    store.audit.start_diagnosis("d-a", thread_id="t", question="q")
    store.audit.start_diagnosis("d-b", thread_id="t", question="q")

    store.audit.update_channel("d-a", "rule_evaluation", {"score": 0.5})
    store.audit.update_channel("d-a", "verifier_evaluation", {"verdict": "PASS"})
    store.audit.update_channel("d-b", "verifier_evaluation", {"verdict": "REJECT"})
    store.audit.update_channel("d-b", "rule_evaluation", {"score": 0.1})
    store.audit.update_channel("d-a", "rule_evaluation", {"score": 0.9})

    a = store.audit.get("d-a")
    b = store.audit.get("d-b")
    assert a is not None and b is not None
    assert a["self_evaluation"] == {
        "rule_evaluation": {"score": 0.9},
        "verifier_evaluation": {"verdict": "PASS"},
    }
    assert b["self_evaluation"] == {
        "verifier_evaluation": {"verdict": "REJECT"},
        "rule_evaluation": {"score": 0.1},
    }


def test_persistence_self_evaluation_starts_null_and_is_created_once(store: Persistence) -> None:
    store.audit.start_diagnosis("d-null", thread_id="t", question="q")
    fresh = store.audit.get("d-null")
    assert fresh is not None and fresh["self_evaluation"] is None

    store.audit.update_channel("d-null", "verifier_evaluation", {"verdict": "LOW_CONFID"})
    store.audit.start_diagnosis("d-null", thread_id="t", question="other")  # no-op

    record = store.audit.get("d-null")
    assert record is not None
    assert record["self_evaluation"] == {"verifier_evaluation": {"verdict": "LOW_CONFID"}}
    assert record["question"] == "q"


def _fallback_models() -> GetModel:
    answer = executor_answer(
        claim(
            "c1",
            "order-service logs show connection timeouts",
            binding("inv-1", "logs[0]", "Connection is not available"),
        )
    )
    return scripted_models(
        {
            "planner": ["check order-service ERROR logs"],
            "executor": [ERROR_LOGS_CALL, final(answer)],
            "verifier": ["not json", "still not json", "never json"],
            "composer": ["no JSON either"],
        }
    )


def test_persistence_prompt_audit_is_kept_on_fallback_paths(store: Persistence) -> None:
    values = diagnose(store, "fallback", get_model=_fallback_models(), composer_mode="model")

    assert values["verifier_result"]["verifier_mode"] == "fallback"
    assert values["composer_output"]["mode"] == "fallback"
    record = store.audit.get(values["diagnosis_id"])
    evaluation = evaluation_of(record)
    assert evaluation["verifier_mode"] == "fallback"
    assert evaluation["composer_output"]["mode"] == "fallback"
    audit = evaluation["prompt_audit"]
    assert audit["version"]
    assert set(audit["prompts"]) >= {"planner", "executor", "verifier", "composer"}
    # Each prompt is stored by name and version only: checked on the JSON as stored, since
    # reading it into records would drop any other key.
    assert record is not None and record["self_evaluation"] is not None
    stored = json_object(record["self_evaluation"]["verifier_evaluation"])
    prompts = json_object(json_object(stored["prompt_audit"])["prompts"])
    assert all(set(json_object(p)) == {"name", "version"} for p in prompts.values())


def test_persistence_ledger_is_idempotent_when_a_node_re_executes(store: Persistence) -> None:
    values = diagnose(store, "replay")
    diagnosis_id = values["diagnosis_id"]
    before = store.ledger.list(diagnosis_id)
    app = compile_graph(store, SampleBackend(default_environment()))
    config: RunnableConfig = {"configurable": {"thread_id": "replay"}}
    # The checkpoint taken just before the tools node ran: replaying from it re-executes tools.
    before_tools = next(s for s in app.get_state_history(config) if s.next == ("tools",))

    app.invoke(None, before_tools.config, context=Context(offline=True))

    after = store.ledger.list(diagnosis_id)
    assert [r["invocation_id"] for r in after] == [r["invocation_id"] for r in before]
    assert [r["idempotency_key"] for r in after] == [r["idempotency_key"] for r in before]


# --- crash safety, one writer ------------------------------------------------------------------


def test_persistence_resumes_after_sigkill_with_the_same_verdict(
    database_url: str, tmp_path: Path
) -> None:
    returncode = kill_at_second_tool_call(
        database_url, "crash", tmp_path / "stalled", env=child_env()
    )
    assert returncode == -signal.SIGKILL

    persistence = open_persistence(database_url)
    try:
        running = [r for r in persistence.audit.list("crash") if r["status"] == "running"]
        assert len(running) == 1
        crashed_id = running[0]["id"]
        assert [r["invocation_id"] for r in persistence.ledger.list(crashed_id)] == ["inv-1"]
    finally:
        persistence.close()

    resumed = resume_in_child(database_url, "crash", "--offline", "--json")
    assert resumed.returncode == 0, resumed.stderr.decode(errors="replace")
    result = json.loads(resumed.stdout)

    persistence = open_persistence(database_url)
    try:
        reference = diagnose(persistence, "reference")
        record = persistence.audit.get(crashed_id)
        rows = persistence.ledger.list(crashed_id)
        reference_rows = persistence.ledger.list(reference["diagnosis_id"])
    finally:
        persistence.close()
    assert result["diagnosis_id"] == crashed_id
    assert result["verdict"] == reference["verdict"] == "PASS"
    assert result["groundedness_score"] == reference["groundedness_score"]
    assert record is not None
    assert record["status"] == "done"
    assert record["note"] == "resumed after an interrupted run"
    ids = [r["invocation_id"] for r in rows]
    assert ids == [r["invocation_id"] for r in reference_rows]
    assert len(set(ids)) == len(ids)
    assert len({r["idempotency_key"] for r in rows}) == len(rows)


def test_persistence_new_question_marks_an_interrupted_diagnosis_abandoned(
    store: Persistence,
) -> None:
    store.audit.start_diagnosis("diag-dead", thread_id="dead", question="q")

    values = diagnose(store, "dead")

    old = store.audit.get("diag-dead")
    assert old is not None and old["status"] == "abandoned"
    new = store.audit.get(values["diagnosis_id"])
    assert new is not None and new["status"] == "done"


def test_persistence_refuses_a_second_concurrent_run_on_a_thread(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with store.thread_lock("busy"):
        with pytest.raises(ThreadBusy):
            with store.thread_lock("busy"):
                pass
        code = cli.main(["diagnose", QUESTION, "--thread", "busy", "--db", database_url])
    err = capsys.readouterr().err
    assert code == 2
    assert "already being diagnosed" in err
    assert store.audit.list("busy") == []
    with store.thread_lock("busy"):  # released again
        pass


def test_persistence_resume_without_interruption_is_refused(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    diagnose(store, "finished")

    code = cli.main(["diagnose", "--resume", "--thread", "finished", "--db", database_url])

    assert code == 2
    assert "no interrupted diagnosis" in capsys.readouterr().err


# --- schema, configuration ---------------------------------------------------------------------


def test_persistence_migrations_applied_twice_are_a_no_op(database_url: str) -> None:
    db = open_database(database_url)
    try:
        latest = latest_version()
        assert migrate(db) == (latest, latest)
        assert migrate(db) == (latest, latest)
        assert query(db, "SELECT version FROM superbiz_schema") == [{"version": latest}]
    finally:
        db.close()


def test_persistence_refuses_a_database_newer_than_the_code(database_url: str) -> None:
    db = open_database(database_url)
    try:
        query(db, "UPDATE superbiz_schema SET version = :v", v=latest_version() + 1)
    finally:
        db.close()

    with pytest.raises(SchemaTooNew, match="newer than this superbiz"):
        open_database(database_url)


@pytest.mark.parametrize(
    ("url", "message", "exit_code"),
    [
        ("postgresql://postgres@127.0.0.1:1/nowhere", "cannot connect to PostgreSQL", 3),
        ("postgresql://postgres@127.0.0.1:5432/superbiz_no_such_db", "does not exist", 3),
        ("mysql://root@127.0.0.1/x", "unsupported database URL scheme 'mysql'", 2),
        ("postgresql://postgres@127.0.0.1:5432", "names no database", 2),
        ("postgresql://postgres@127.0.0.1:5432/", "names no database", 2),
        ("sqlite://", "names no SQLite file", 2),
        ("sqlite:///:memory:", "names no SQLite file", 2),
    ],
    ids=[
        "refused",
        "unknown-database",
        "bad-scheme",
        "postgres-no-name",
        "postgres-slash",
        "sqlite-memory",
        "sqlite-memory-path",
    ],
)
def test_persistence_bad_url_fails_with_a_readable_message(
    url: str, message: str, exit_code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(DatabaseError, match=message):
        open_persistence(url)
    code = cli.main(["diagnose", QUESTION, "--db", url])
    err = capsys.readouterr().err.strip()
    assert code == exit_code  # 3: the database is unavailable; 2: the setting is wrong
    assert message in err
    assert len(err.splitlines()) == 1


def test_persistence_postgres_url_without_a_name_says_how_to_fix_it() -> None:
    with pytest.raises(DatabaseError) as info:
        resolve_target("postgresql://app:secret@db.example:5432")

    message = str(info.value)
    assert "'postgres' system database" in message
    assert "postgresql://app:***@db.example:5432/superbiz" in message
    assert "secret" not in message
    # A name given as a parameter counts.
    assert resolve_target("postgresql://app@db.example/?dbname=audit").dialect == "postgres"


def test_persistence_sqlite_urls_follow_sqlalchemy_and_say_which_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)

    relative = resolve_target("sqlite:///tmp/x.sqlite")
    absolute = resolve_target(f"sqlite:///{tmp_path / 'abs.sqlite'}")  # four slashes in all
    plain = resolve_target("plain.sqlite")

    assert relative.path == tmp_path / "tmp" / "x.sqlite"
    assert absolute.path == tmp_path / "abs.sqlite"
    assert plain.path == tmp_path / "plain.sqlite"
    assert relative.display == f"SQLite file {tmp_path / 'tmp' / 'x.sqlite'}"
    # diagnose says which file it uses.
    code = cli.main(["diagnose", QUESTION, "--db", "sqlite:///tmp/x.sqlite"])
    err = capsys.readouterr().err
    assert code == 0
    assert f"database: SQLite file {tmp_path / 'tmp' / 'x.sqlite'}" in err.splitlines()
    assert (tmp_path / "tmp" / "x.sqlite").is_file()


def test_persistence_default_is_an_sqlite_file_in_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    target = resolve_target(None)
    assert target.dialect == "sqlite"
    assert target.path == tmp_path / "data" / "superbiz" / "superbiz.sqlite"

    assert cli.main(["diagnose", QUESTION, "--thread", "local", "--json"]) == 0
    capsys.readouterr()

    assert target.path.exists()
    assert cli.main(["sessions", "list", "--thread", "local", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["verdict"] for r in listed] == ["PASS"]


def test_persistence_env_variable_selects_the_database(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", f"sqlite:///{tmp_path / 'x.sqlite'}")
    assert resolve_target(None).path == tmp_path / "x.sqlite"
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", "postgresql://u:secret@db.example/prod")
    target = resolve_target(None)
    assert target.dialect == "postgres"
    assert "secret" not in target.display


# --- inspection --------------------------------------------------------------------------------


def test_persistence_sessions_and_reverify_read_the_stored_evidence(
    store: Persistence, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    passed = diagnose(store, "inspect")
    diagnose(store, "inspect", "notification-service 有错误吗？")

    assert cli.main(["sessions", "list", "--db", database_url, "--verdict", "PASS"]) == 0
    listing = capsys.readouterr().out
    assert passed["diagnosis_id"] in listing
    assert "notification-service" not in listing

    assert cli.main(["sessions", "show", passed["diagnosis_id"], "--db", database_url]) == 0
    shown = capsys.readouterr().out
    for text in ("question", "PASS", "gatekeeper pass", "claim checks", "inv-1", "answer"):
        assert text in shown, text
    assert "coverage   answered (floor)  asked: order-service  unanswered: none" in shown

    assert cli.main(["reverify", passed["diagnosis_id"], "--db", database_url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["after"]["verdict"] == "PASS"
    assert report["changes"] == []
    assert report["invocations"] == 5  # the plan (4 calls with the analysis), the runbooks

    assert cli.main(["sessions", "show", "diag-missing", "--db", database_url]) == 2
    assert "no diagnosis 'diag-missing'" in capsys.readouterr().err


def test_persistence_reverify_reports_what_changed(store: Persistence) -> None:
    values = diagnose(store, "changed")
    diagnosis_id = values["diagnosis_id"]
    evaluation = evaluation_of(store.audit.get(diagnosis_id))
    # Tamper with the stored executor output: its first claim now cites a path that never existed.
    structured = evaluation["executor_structured_output"]
    assert structured is not None
    first_claim = json_object(json_list(structured["claims"])[0])
    json_object(json_list(first_claim["evidence_bindings"])[0])["raw_path"] = "logs[99]"
    store.audit.update_channel(diagnosis_id, "verifier_evaluation", evaluation)

    from graph.reverify import reverify
    from models.factory import make_model_factory

    report = reverify(
        diagnosis_id,
        audit=store.audit,
        ledger=store.ledger,
        get_model=make_model_factory(),
        context=Context(offline=True),
    )

    assert report["before"]["verdict"] == "PASS"
    assert report["after"]["verdict"] == "REJECT"
    assert "evidence.raw_path" in report["after"]["failed_rules"]
    assert any(c.startswith("verdict: 'PASS' -> 'REJECT'") for c in report["changes"])


def test_persistence_concurrent_first_setups_of_postgres_all_succeed(
    own_database: tuple[str, str],
) -> None:
    import threading

    url, _ = own_database
    errors: list[BaseException] = []

    def open_once() -> None:
        try:
            open_persistence(url).close()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    workers = [threading.Thread(target=open_once) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers)
    assert errors == []


def test_persistence_update_channel_of_an_unknown_diagnosis_raises(store: Persistence) -> None:
    with pytest.raises(KeyError, match="unknown diagnosis 'nope'"):
        store.audit.update_channel("nope", "usage", {"calls": 0})
    assert store.audit.get("nope") is None
