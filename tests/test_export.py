"""Every diagnosis can become a test: record, export as a scenario, replay without the systems.

A diagnosis is run for real (offline rules on the sample, models through the local fake
OpenAI-compatible server, the real Prometheus of ``tests/prometheus_kit.py``, a backend that
fails), exported with ``superbiz sessions export`` (or ``apps.eval.export``), and the scenario is
run by ``superbiz eval`` with neither the backend nor the model: the replay must reproduce the
recorded verdict, route, score and answer exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from starlette.testclient import TestClient

from apps.eval.evaluation import ScenarioResult, run_scenario
from apps.eval.export import OFF_NOTE, Export, export_scenario
from apps.eval.scenario import load_scenario
from apps.http.api import create_app
from evidence.environment import default_environment
from evidence.replay import NotRecorded, ReplayBackend, ReplayEnvironment
from evidence.sample import SampleBackend
from graph.compile import RunStores, compile_graph
from graph.runner import run_diagnosis
from models.factory import make_model_factory
from models.messages import INVALID_ARGUMENTS
from models.recording import INVALID_ARGUMENTS as RECORDED_INVALID_ARGUMENTS
from models.recording import MAX_REPLY_CHARS, call_record, known_secrets
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from persistence.store import open_persistence
from state.context import Context
from state.records import DiagnosisRecord
from tests.prometheus_kit import Stack
from tests.serving_kit import one_call
from tests.test_models_http import (  # noqa: F401  (fixtures of the fake endpoint)
    QUESTION,
    FakeOpenAI,
    Fault,
    Waits,
    _fast_policy,
    fake_openai,
    model_env,
)
from tools.backend import BackendError, LogsOutput, LogsQuery
from tools.runner import ToolRunner

ROOT = Path(__file__).resolve().parents[1]
CUT_ANSWER = '{"answer_version": "executor_evidence_v2", "claims": [{"claim_id": "c1", "cl'


def _replays_exactly(record: DiagnosisRecord, result: ScenarioResult) -> None:
    """The replay's outcome is the recorded one: verdict, rounds, route, score, answer."""
    assert result["error"] is None, result["mismatches"]
    assert result["mismatches"] == []
    assert result["ok"] is True
    assert result["verdict"] == record["verdict"]
    assert result["rounds"] == record["rounds"]
    assert result["groundedness_score"] == record["score"]
    assert result["answer"] == record["final_answer"]
    replay: Any = (record["self_evaluation"] or {})["replay"]
    assert result["route"] == replay["route"]


def _run(
    context: Context,
    *,
    backend: Any = None,
    get_model: Any = None,
    question: str = QUESTION,
) -> tuple[DiagnosisRecord, list[Any]]:
    audit, ledger = InMemoryAuditStore(), InMemoryLedger()
    graph = compile_graph(
        RunStores(InMemorySaver(), audit=audit, ledger=ledger),
        backend or SampleBackend(default_environment()),
        get_model=get_model or make_model_factory(_fast_policy(Waits())),
    )
    values = run_diagnosis(
        graph, thread_id="thread-export", context=context, audit=audit, question=question
    )
    record = audit.get(str(values["diagnosis_id"]))
    assert record is not None
    return record, ledger.list(record["id"])


def _stored(db: str, diagnosis_id: str) -> DiagnosisRecord:
    """The diagnosis as the database ``db`` holds it."""
    persistence = open_persistence(db)
    try:
        record = persistence.audit.get(diagnosis_id)
    finally:
        persistence.close()
    assert record is not None
    return record


# --- offline, through the command line ---------------------------------------------------------


def test_export_offline_sample_diagnosis_replays_through_eval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from apps.cli.main import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = f"sqlite:///{tmp_path / 'audit.sqlite'}"
    assert main(["diagnose", "--offline", "--json", "--lang", "en", "--db", db, QUESTION]) == 0
    diagnosed = json.loads(capsys.readouterr().out)
    file = tmp_path / "corpus" / "replay.json"
    file.parent.mkdir()

    code = main(
        ["sessions", "export", diagnosed["diagnosis_id"], "--scenario", str(file), "--db", db]
    )
    said = capsys.readouterr()

    assert code == 0, said.err
    assert f"to {file}" in said.out and "superbiz eval" in said.out
    scenario = json.loads(file.read_text(encoding="utf-8"))
    assert scenario["offline"] is True and "script" not in scenario
    assert scenario["question"] == QUESTION and scenario["language"] == "en"
    calls = scenario["environment"]["replay"]["calls"]
    assert [c["tool"] for c in calls] and all(c["status"] != "error" for c in calls)
    assert "order-service" in scenario["environment"]["replay"]["services"]
    expect = scenario["expect"]
    assert expect["verdict"] == diagnosed["verdict"] == "PASS"
    assert expect["route"][0] == "intake" and expect["route"][-1] == "audit"
    assert expect["answer_contains"] == [diagnosed["answer"]]
    assert expect["confirmed_claims"]

    report = tmp_path / "report.json"
    assert main(["eval", str(file.parent), "--json", str(report)]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    (result,) = json.loads(report.read_text(encoding="utf-8"))["scenarios"]
    record = _stored(db, diagnosed["diagnosis_id"])
    _replays_exactly(record, result)


def test_export_refuses_an_unknown_diagnosis_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from apps.cli.main import main

    db = f"sqlite:///{tmp_path / 'audit.sqlite'}"
    assert main(["db", "upgrade", "--db", db]) == 0
    file = tmp_path / "x.json"

    code = main(["sessions", "export", "diag-nope", "--scenario", str(file), "--db", db])

    assert code == 2
    assert "no diagnosis 'diag-nope'" in capsys.readouterr().err
    assert not file.exists()


def test_export_an_edited_expect_fails_the_replay_with_the_difference(tmp_path: Path) -> None:
    record, invocations = _run(Context(offline=True, language="en"))
    scenario = export_scenario(record, invocations).scenario
    scenario["expect"]["verdict"] = "REJECT"

    result = run_scenario(load_scenario(_write(tmp_path, scenario)))

    assert result["ok"] is False
    assert result["mismatches"] == ["verdict: expected REJECT got PASS"]


def _write(tmp_path: Path, scenario: Mapping[str, Any]) -> Path:
    file = tmp_path / f"{scenario['id']}.json"
    file.write_text(json.dumps(scenario, ensure_ascii=False), encoding="utf-8")
    return file


# --- a tool error --------------------------------------------------------------------------------


class _LogsDown(SampleBackend):
    """The sample incident whose log source fails (as a log server answering 504 would)."""

    def query_logs(self, **query: LogsQuery) -> LogsOutput:  # type: ignore[override]
        raise BackendError("Loki answered HTTP 504: context deadline exceeded")


def test_export_a_diagnosis_with_a_tool_error_replays_the_error_word_for_word(
    tmp_path: Path,
) -> None:
    record, invocations = _run(
        Context(offline=True, language="en"), backend=_LogsDown(default_environment())
    )
    failed = [row for row in invocations if row["status"] == "error"]
    assert failed, "the diagnosis must have met the log source's failure"

    export = export_scenario(record, invocations)
    recorded = [c for c in export.scenario["environment"]["replay"]["calls"] if c["error"]]
    assert [c["error"] for c in recorded] == [row["error"] for row in failed]
    assert recorded[0]["error"] == "BackendError: Loki answered HTTP 504: context deadline exceeded"

    _replays_exactly(record, run_scenario(load_scenario(_write(tmp_path, export.scenario))))


# --- model mode through the fake OpenAI-compatible endpoint ------------------------------------


def test_export_model_diagnosis_with_a_retry_round_replays_its_recorded_replies(
    model_env: FakeOpenAI,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    # Round 1's executor answer is cut (malformed): LOW_CONFID below 0.5 earns round 2. A 429 of
    # the planner is retried by the model-call layer: one call as the diagnosis sees it.
    # The cut answer is asked for once more (shaped by its schema) and comes back cut again.
    cut = Fault("content", text=CUT_ANSWER)
    model_env.fail("executor", Fault("sleep"), cut, cut)
    model_env.fail("planner", Fault("status", status=429, message="slow down"))
    model_env.fail("composer", Fault("content", text='{"summary": ""}'))
    record, invocations = _run(Context(offline=False, composer_mode="model"))
    assert record["rounds"] == 2

    export = export_scenario(record, invocations)

    assert export.notes == []
    scenario = export.scenario
    rounds = scenario["script"]["rounds"]
    assert len(rounds) == 2
    assert rounds[0]["executor"][-1] == {"content": CUT_ANSWER}
    first_call = rounds[0]["executor"][0]["tool_calls"][0]
    assert first_call["name"] == "query_logs" and first_call["id"] == "call_fake_1"
    assert [len(r["verifier"]) for r in rounds] == [1, 1]
    assert scenario["script"]["composer"] == '{"summary": ""}'
    assert scenario["expect"]["verdict"] == "PASS" and scenario["expect"]["rounds"] == 2
    replay: Any = (record["self_evaluation"] or {})["replay"]
    assert replay["model_replies"] == "recorded"
    assert [(c["role"], c["round"]) for c in replay["model_calls"]][:3] == [
        ("planner", 1),
        ("executor", 1),
        ("executor", 1),
    ]
    assert all(c["input_tokens"] == 10 and c["output_tokens"] == 10 for c in replay["model_calls"])
    assert "test-key" not in json.dumps(record["self_evaluation"])
    requests = len(model_env.requests)

    result = run_scenario(load_scenario(_write(tmp_path, scenario)))

    _replays_exactly(record, result)
    assert len(model_env.requests) == requests, "a replay never calls the model"
    assert scenario["expect"]["model_verdict"] == result["model_verdict"]


def test_export_with_model_replies_off_notes_it_and_runs_the_offline_rules(
    model_env: FakeOpenAI,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from apps.cli.main import main

    monkeypatch.setenv("SUPERBIZ_RECORD_MODEL_REPLIES", "0")
    db = f"sqlite:///{tmp_path / 'audit.sqlite'}"
    assert main(["diagnose", "--json", "--db", db, QUESTION]) == 0
    diagnosed = json.loads(capsys.readouterr().out)
    assert diagnosed["offline"] is False
    record = _stored(db, diagnosed["diagnosis_id"])
    replay: Any = (record["self_evaluation"] or {})["replay"]
    assert replay["model_replies"] == "off"
    assert [(c["role"], c["content"], c["tool_calls"]) for c in replay["model_calls"]] == [
        ("planner", None, None),
        ("executor", None, None),
        ("executor", None, None),
        ("verifier", None, None),
    ]
    assert all(c["input_tokens"] == 10 for c in replay["model_calls"])
    assert "HikariPool" not in json.dumps(replay)  # the executor's cited log line is not kept
    file = tmp_path / "off.json"

    code = main(
        ["sessions", "export", diagnosed["diagnosis_id"], "--scenario", str(file), "--db", db]
    )
    said = capsys.readouterr()

    assert code == 0
    assert f"note: {OFF_NOTE}" in said.err
    assert "offline rules" in said.out
    scenario = json.loads(file.read_text(encoding="utf-8"))
    assert OFF_NOTE in scenario["description"]
    assert scenario["offline"] is True and "script" not in scenario
    requests = len(model_env.requests)
    result = run_scenario(load_scenario(file))
    assert result["error"] is None
    assert result["verdict"] is not None and result["route"][-1] == "audit"
    assert len(model_env.requests) == requests


# --- the real Prometheus --------------------------------------------------------------------------


def test_export_diagnosis_on_real_prometheus_replays_without_it(
    prometheus_stack: Stack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from apps.cli.main import main

    monkeypatch.setenv("SUPERBIZ_PROMETHEUS_URL", prometheus_stack.prometheus_url)
    db = f"sqlite:///{tmp_path / 'audit.sqlite'}"
    question = "order-service 为什么告警？"
    assert main(["diagnose", "--offline", "--json", "--db", db, question]) == 0
    diagnosed = json.loads(capsys.readouterr().out)
    assert diagnosed["verdict"] == "PASS"
    file = tmp_path / "prometheus.json"
    assert (
        main(["sessions", "export", diagnosed["diagnosis_id"], "--scenario", str(file), "--db", db])
        == 0
    )
    capsys.readouterr()
    scenario = json.loads(file.read_text(encoding="utf-8"))
    calls = scenario["environment"]["replay"]["calls"]
    alerts = [a["alert_name"] for c in calls if c["output"] for a in c["output"].get("alerts", [])]
    assert "HighErrorRate" in alerts
    record = _stored(db, diagnosed["diagnosis_id"])

    monkeypatch.delenv("SUPERBIZ_PROMETHEUS_URL")  # the replay needs no Prometheus
    result = run_scenario(load_scenario(file))

    _replays_exactly(record, result)


# --- the HTTP API ---------------------------------------------------------------------------------


def test_api_scenario_of_a_diagnosis_is_the_export_for_its_owner_only(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keys = {"key-alice": "alice", "key-bob": "bob"}
    alice, bob = {"Authorization": "Bearer key-alice"}, {"Authorization": "Bearer key-bob"}
    with TestClient(create_app(database_url, api_keys=keys)) as client:
        body = client.post("/api/chat", json={"question": QUESTION}, headers=alice).json()
        diagnosis_id = body["diagnosis_id"]
        mine = client.get(f"/api/diagnoses/{diagnosis_id}/scenario", headers=alice)
        theirs = client.get(f"/api/diagnoses/{diagnosis_id}/scenario", headers=bob)
        record = client.get(f"/api/diagnoses/{diagnosis_id}", headers=alice).json()

    assert mine.status_code == 200
    assert theirs.status_code == 404
    invocations = record.pop("invocations")
    assert mine.json() == export_scenario(record, invocations).scenario
    assert mine.json()["expect"]["answer_contains"] == [body["answer"]]


# --- the pieces -----------------------------------------------------------------------------------


def _environment(*calls: dict[str, Any]) -> ReplayEnvironment:
    return {"services": ["order-service"], "calls": [dict(c) for c in calls]}  # type: ignore[misc]


def _logs(message: str) -> dict[str, Any]:
    entry = {"timestamp": "2026-03-01T10:00:00Z", "level": "ERROR", "service": "order-service"}
    return {"logs": [{**entry, "message": message}], "total": 1, "truncated": False}


def test_replay_serves_one_call_asked_twice_in_call_order_and_defaults_match() -> None:
    call = {"tool": "query_logs", "arguments": {"service": "order-service"}, "status": "ok"}
    backend = ReplayBackend(
        _environment(
            {**call, "output": _logs("first"), "error": None},
            {
                **call,
                "arguments": {"service": "order-service", "limit": 20},
                "output": _logs("second"),
                "error": None,
            },
        )
    )

    first = backend.query_logs(service="order-service", limit=20)
    second = backend.query_logs(service="order-service", level=None, limit=20)

    assert [first["logs"][0]["message"], second["logs"][0]["message"]] == ["first", "second"]
    with pytest.raises(
        NotRecorded, match="asked for query_logs limit=20 service=order-service 3 times"
    ):
        backend.query_logs(service="order-service", limit=20)


def test_replay_of_a_call_the_recording_lacks_is_an_error_invocation_naming_it() -> None:
    backend = ReplayBackend(
        _environment(
            {
                "tool": "query_logs",
                "arguments": {"service": "order-service"},
                "status": "ok",
                "output": _logs("x"),
                "error": None,
            }
        )
    )
    runner = ToolRunner(backend, InMemoryLedger())

    row = one_call(runner, "query_logs", {"service": "payment-service"})

    assert row["status"] == "error"
    assert row["error"] == (
        "NotRecorded: the recording has no call query_logs limit=20 service=payment-service (its "
        "query_logs calls: query_logs service=order-service); a replay serves only the calls "
        "the recorded diagnosis made: add it to environment.replay.calls or export the "
        "diagnosis again"
    )
    assert backend.services() == ["order-service"]


def test_scenario_with_a_replay_environment_and_other_keys_is_refused(tmp_path: Path) -> None:
    record, invocations = _run(Context(offline=True, language="en"))
    scenario = export_scenario(record, invocations).scenario
    scenario["environment"]["logs"] = []

    from apps.eval.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="has 'replay' and also logs"):
        load_scenario(_write(tmp_path, scenario))


def test_call_record_keeps_tool_calls_bounds_text_and_removes_secrets() -> None:
    secret = "sk-live-7f3a9c"
    reply = AIMessage(
        content=f"use {secret} " + "x" * MAX_REPLY_CHARS,
        tool_calls=[{"name": "query_logs", "args": {"service": "a"}, "id": "c1"}],
        invalid_tool_calls=[
            {"name": "query_logs", "args": '{"service": "a', "id": "c2", "error": None}
        ],
        usage_metadata={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
    )

    record = call_record(reply, role="executor", round=2, record_replies=True, secrets=[secret])
    off = call_record(reply, role="executor", round=2, record_replies=False, secrets=[secret])

    assert record["content"] is not None and secret not in record["content"]
    assert len(record["content"]) <= MAX_REPLY_CHARS
    assert record["truncated"] is True and record["redacted"] is True
    assert record["tool_calls"] == [
        {"name": "query_logs", "args": {"service": "a"}, "id": "c1"},
        {"name": "query_logs", "args": {INVALID_ARGUMENTS: '{"service": "a'}, "id": "c2"},
    ]
    assert (record["input_tokens"], record["output_tokens"]) == (7, 3)
    assert (off["content"], off["tool_calls"], off["input_tokens"]) == (None, None, 7)
    assert RECORDED_INVALID_ARGUMENTS == INVALID_ARGUMENTS


def test_known_secrets_are_the_key_tokens_passwords_and_header_values() -> None:
    environ = {
        "OPENAI_API_KEY": "sk-model-key",
        "SUPERBIZ_PROMETHEUS_TOKEN": "prom-token",
        "SUPERBIZ_LOKI_PASSWORD": "loki-pass",
        "SUPERBIZ_OPENSEARCH_HEADERS": '{"X-Key": "os-header-value"}',
        "SUPERBIZ_PROMETHEUS_URL": "http://127.0.0.1:9090",
    }

    assert set(known_secrets(environ)) == {
        "sk-model-key",
        "prom-token",
        "loki-pass",
        "os-header-value",
    }


def test_export_of_an_unfinished_diagnosis_is_refused() -> None:
    record, invocations = _run(Context(offline=True, language="en"))
    record["status"] = "running"

    from apps.eval.export import ExportError

    with pytest.raises(ExportError, match="is running: only a finished diagnosis can be exported"):
        export_scenario(record, invocations)


def test_exported_scenario_text_is_one_json_object(tmp_path: Path) -> None:
    record, invocations = _run(Context(offline=True, language="en"))
    export: Export = export_scenario(record, invocations)

    assert json.loads(export.text()) == export.scenario


REPLAY_CORPUS = sorted((ROOT / "tests" / "scenarios" / "replay").glob("*.json"))


@pytest.mark.parametrize("path", REPLAY_CORPUS, ids=[p.stem for p in REPLAY_CORPUS])
def test_exported_corpus_scenario_passes_with_its_edited_expect(path: Path) -> None:
    scenario = load_scenario(path)
    assert "replay" in scenario["environment"]

    result = run_scenario(scenario)

    assert result["ok"], result["mismatches"]
    assert result["error"] is None
