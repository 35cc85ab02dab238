"""Offline answers answer what was asked: the offline scenario corpus, the questions a new user
tried on the bundled sample, the existing corpus run offline, and the offline rules in detail."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

import apps.cli.main as cli
from apps.eval.evaluation import Checkpointer, run_graph, run_scenario
from apps.eval.scenario import load_scenario, validate_scenario
from evidence.environment import Environment, default_environment
from evidence.sample import SampleBackend
from graph.builder import build_graph
from models.offline import OfflineExecutor, OfflinePlanner
from models.offline.rules import parse_steps, plan_steps
from state.context import Context
from state.records import LogEntry
from tests.records import document_entry, log_entry, series_entry
from tools.backend import KnowledgeOutput, LogsOutput, MetricsOutput, TimeOutput
from tools.registry import tool_specs
from verification.question import analyze_question

SCENARIOS = Path(__file__).parent / "scenarios"
OFFLINE = sorted((SCENARIOS / "offline").glob("*.json"))
CORPUS = sorted(SCENARIOS.glob("*.json"))
KINDS = {"value", "confirm", "why", "overview"}


def _id(path: Path) -> str:
    return path.stem


# --------------------------------------------------------------------------- the offline corpus


@pytest.mark.parametrize("path", OFFLINE, ids=_id)
def test_offline_scenario_meets_its_expectations(path: Path, checkpointer: Checkpointer) -> None:
    result = run_scenario(load_scenario(path), checkpointer=checkpointer)

    assert result["ok"], f"{result['id']}: " + "; ".join(result["mismatches"])


def test_offline_corpus_asks_every_kind_in_both_languages_on_four_environments() -> None:
    seen: dict[str, set[tuple[str, str]]] = {}
    for path in OFFLINE:
        scenario = load_scenario(path)
        known = SampleBackend(scenario["environment"]).services()
        kind = analyze_question(scenario["question"], known)["kind"]
        env = json.loads(path.read_text(encoding="utf-8"))["environment"]
        seen.setdefault(str(env), set()).add((kind, scenario["language"]))

    full = {(kind, language) for kind in KINDS for language in ("zh", "en")}
    assert len(seen) >= 4
    assert all(kinds >= full for kinds in seen.values()), seen
    assert any("sample_environment" in env for env in seen)


@pytest.mark.parametrize("path", OFFLINE, ids=_id)
def test_offline_scenario_states_what_it_asserts(path: Path) -> None:
    scenario = load_scenario(path)
    expect = scenario["expect"]

    assert scenario.get("offline") is True and "script" not in scenario
    for key in ("verdict", "question_coverage", "confirmed_claims", "answer_contains"):
        assert key in expect, key
    assert expect.get("answer_not_contains"), "every offline scenario names off-topic facts"


# --------------------------------------------------------------------------- the seven questions

SEVEN: list[tuple[list[str], str, list[str], list[str]]] = [
    (
        ["What is the CPU usage of inventory-service?", "--lang", "en"],
        "PASS",
        ["69.3%", "74.1%", "cpu_usage_percent"],
        ["44.7%", "Runbook: database connection pool exhaustion"],
    ),
    (
        ["order-service 的 p99 延迟是多少？"],
        "PASS",
        ["30040ms", "p99"],
        ["9650ms"],
    ),
    (
        ["Why is inventory-service slow?", "--lang", "en"],
        "PASS",
        ["WARN", "Slow query", "Lock wait", "Runbook: slow queries and lock waits on MySQL"],
        ["CannotAcquireConnectionException"],
    ),
    (
        ["order-service 为什么报 500 错误？"],
        "PASS",
        ["status=500", "最可能的根因（推断）：inventory-service", "Lock wait"],
        ["Impact:", "38 minutes"],
    ),
    (
        ["is the HighErrorRate alert firing for order-service?", "--lang", "en"],
        "LOW_CONFID",
        ["No: No alert named HighErrorRate exists"],
        ["OrderServiceHigh5xxRate", "OrderServiceDBPoolSaturated"],
    ),
    (
        ["notification-service 有错误吗？"],
        "LOW_CONFID",
        ["未找到 notification-service 的任何日志、告警或指标数据", "请检查服务名称"],
        ["CannotAcquireConnectionException", "HikariPool", "OrderServiceHigh5xxRate"],
    ),
    (
        ["order-service 为什么报 500 错误？", "--max-tool-calls", "1"],
        "PASS",
        ["【证据缺口】", "query_metrics service=order-service（未执行", "lookup_knowledge"],
        [],
    ),
]


@pytest.mark.parametrize(
    ("argv", "verdict", "present", "absent"),
    SEVEN,
    ids=["cpu", "p99", "slow", "500-trail", "no-such-alert", "unknown-service", "budget"],
)
def test_offline_sample_answers_the_questions_a_new_user_asks(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    argv: list[str],
    verdict: str,
    present: list[str],
    absent: list[str],
) -> None:
    """``superbiz diagnose --offline`` on the bundled sample, exactly as the quick start runs."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code = cli.main(["diagnose", *argv, "--offline", "--json", "--db", db])
    result = json.loads(capsys.readouterr().out)

    assert code == 0
    assert result["verdict"] == verdict
    answer = result["answer"]
    for text in present:
        assert text in answer, text
    for text in absent:
        assert text not in answer, text
    assert cli.main(["sessions", "show", result["diagnosis_id"], "--db", db]) == 0
    shown = capsys.readouterr().out
    expected = "unanswered" if verdict != "PASS" else "partial" if "1" in argv else "answered"
    assert f"coverage   {expected}" in shown
    root = result["root_cause"]
    if root is not None:  # the --json output and sessions show carry the root cause
        assert f"root cause {root['service']} (inferred, claims " in shown
        assert result["suspects"][0]["service"] == root["service"]


def test_offline_conclusion_check_is_recorded_shown_and_worded_in_the_answer_language(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A conclusion that does not follow: its reason in the Chinese answer is Chinese, and the
    check is kept in the audit record and shown by ``sessions show``."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    question = "order-service 的 HighErrorRate 告警在触发吗？"
    assert cli.main(["diagnose", question, "--offline", "--json", "--db", db]) == 0
    result = json.loads(capsys.readouterr().out)

    assert result["verdict"] == "LOW_CONFID"
    assert "没有任何证据提到告警 HighErrorRate：数据中没有这个告警" in result["answer"]
    assert "no evidence names" not in result["answer"]
    assert "not in the data" not in result["answer"]

    shown_json = ["sessions", "show", result["diagnosis_id"], "--json", "--db", db]
    assert cli.main(shown_json) == 0
    record = json.loads(capsys.readouterr().out)
    checked = record["self_evaluation"]["verifier_evaluation"]["conclusion"]
    assert checked["status"] == "does_not_follow" and checked["kind"] == "alert_state"
    assert checked["reason_code"] == "alert_not_in_data"
    assert checked["reason"] == "no evidence names the alert HighErrorRate: it is not in the data"

    assert cli.main(["sessions", "show", result["diagnosis_id"], "--db", db]) == 0
    shown = capsys.readouterr().out.splitlines()
    (line,) = [line for line in shown if line.startswith("conclusion ")]
    assert line.startswith("conclusion does_not_follow (alert_state)  stated: no  expected: -")
    assert "  - why: no evidence names the alert HighErrorRate: it is not in the data" in shown


def test_offline_english_and_chinese_overviews_get_the_same_runbooks() -> None:
    def steps(question: str, language: str) -> list[str]:
        scenario: dict[str, Any] = {
            "id": f"overview-{language}",
            "question": question,
            "language": language,
            "environment": default_environment(),
            "offline": True,
        }
        state = run_graph(validate_scenario(scenario))
        return [a["source"] for a in state["executor_answer"]["recommended_actions"]]

    english, chinese = steps("What is wrong?", "en"), steps("出了什么问题？", "zh")
    assert english == chinese
    # At most three runbooks, after the root cause's own next step (what would confirm it).
    assert 1 <= len([source for source in english if source != "incident analysis"]) <= 3


# --------------------------------------------------------------------------- the corpus offline


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_existing_corpus_run_offline_never_presents_what_it_forbids(path: Path) -> None:
    """Each scripted scenario's question and environment, answered by the offline rules."""
    scenario = copy.deepcopy(load_scenario(path))
    offline: dict[str, Any] = {k: v for k, v in scenario.items() if k != "script"}
    offline["offline"] = True
    offline["expect"] = {
        "answer_not_contains": scenario["expect"].get("answer_not_contains", []),
    }
    result = run_scenario(validate_scenario(offline))

    assert result["error"] is None, result["error"]
    assert result["ok"], result["mismatches"]
    coverage = result["question_coverage"]
    assert coverage is not None
    if result["verdict"] == "PASS":
        assert coverage["status"] != "unanswered"


# --------------------------------------------------------------------------- the rules


KNOWN = ["api-gateway", "inventory-service", "order-service", "payment-service"]
INVENTORY = {"service": "inventory-service"}


def _plan(question: str) -> list[tuple[str, dict[str, Any]]]:
    return plan_steps({"question": question, "round": 1, "known_services": KNOWN})


def test_plan_confirmation_of_an_alert_queries_exactly_that_alert() -> None:
    steps = _plan("is the HighErrorRate alert firing for order-service?")
    assert steps == [
        (
            "query_metrics",
            {"alert": "HighErrorRate", "promql": 'ALERTS{alertname="HighErrorRate"}'},
        ),
        (
            "query_metrics",
            {
                "service": "order-service",
                "alert": "HighErrorRate",
                "promql": 'ALERTS{alertname="HighErrorRate",service="order-service"}',
            },
        ),
    ]


def test_plan_for_an_unknown_service_never_queries_the_others() -> None:
    steps = _plan("notification-service 有错误吗？")
    assert steps == [
        ("query_logs", {"service": "notification-service"}),
        ("query_metrics", {"service": "notification-service"}),
    ]


def test_plan_for_slowness_reads_warnings_first() -> None:
    assert _plan("Why is inventory-service slow?")[0] == (
        "query_logs",
        {"service": "inventory-service", "level": "WARN"},
    )
    assert _plan("Why does inventory-service fail?")[0] == (
        "query_logs",
        {"service": "inventory-service", "level": "ERROR"},
    )


def test_planner_writes_a_plan_the_executor_reads_back() -> None:
    facts = {"question": "Why is order-service failing?", "round": 1, "known_services": KNOWN}
    plan = OfflinePlanner().invoke([HumanMessage(json.dumps(facts))]).content
    assert isinstance(plan, str)
    assert parse_steps(plan) == plan_steps(facts)
    assert "follow the services" in plan


def _first_call(question: str, language: str, result: ToolMessage) -> list[Any]:
    """The executor's task for ``question``, then the tool call that ``result`` answers."""
    task = {
        "question": question,
        "round": 1,
        "language": language,
        "known_services": KNOWN,
        "plan": "",
    }
    artifact = result.artifact
    call = {
        "name": artifact["tool_name"],
        "args": artifact["arguments"],
        "id": result.tool_call_id,
        "type": "tool_call",
    }
    return [HumanMessage(json.dumps(task)), AIMessage(content="", tool_calls=[call]), result]


def _tool_message(
    call_id: str,
    invocation: str,
    tool: str,
    args: dict[str, Any],
    output: Any,
    refs: list[dict[str, str]],
) -> ToolMessage:
    status = (
        "ok" if any(output.get(k) for k in ("logs", "alerts", "series", "documents")) else "no_hit"
    )
    content = json.dumps(
        {"invocation_id": invocation, "tool_name": tool, "status": status, "evidence_refs": refs}
    )
    return ToolMessage(
        content=content,
        tool_call_id=call_id,
        artifact={
            "invocation_id": invocation,
            "tool_name": tool,
            "arguments": args,
            "status": status,
            "output": output,
        },
    )


def _one_log_found(
    args: dict[str, Any], entry: LogEntry, refs: list[dict[str, str]]
) -> ToolMessage:
    """The result of query_logs call c1 (invocation inv-1) that matched one entry."""
    output = {"logs": [entry], "total": 1, "truncated": False}
    return _tool_message("c1", "inv-1", "query_logs", args, output, refs)


def _with_tools(messages: list[Any]) -> AIMessage:
    """The offline executor's reply in a call that offers the tools (the budget lasts)."""
    return OfflineExecutor().bind_tools(tool_specs()).invoke(messages)


def _answer(messages: list[Any]) -> dict[str, Any]:
    reply = _with_tools(messages)
    assert isinstance(reply.content, str) and reply.content
    data: dict[str, Any] = json.loads(reply.content)
    return data


def test_executor_reads_log_entries_without_instance_from_the_structured_output() -> None:
    args = {"service": "payment-service", "level": "ERROR"}
    entry = log_entry(
        "card provider: answered 503 [retryable]",
        timestamp="2026-03-01T10:00:00Z",
        service="payment-service",
        instance=None,
    )
    text = "2026-03-01T10:00:00Z ERROR payment-service: card provider: answered 503 [retryable]"
    summary = "query_logs level=ERROR service=payment-service matched 1 of 1 (complete)"
    result = _one_log_found(
        args,
        entry,
        [{"raw_path": "logs[0]", "text": text}, {"raw_path": "summary", "text": summary}],
    )
    messages = _first_call("does payment-service have errors?", "en", result)
    answer = _answer(messages)

    claim = answer["claims"][0]
    assert claim["claim_text"].startswith("Yes: payment-service has 1 ERROR log entry")
    assert "answered 503 [retryable]" in claim["claim_text"]
    bound = {b["raw_path"]: b["evidence_excerpt"] for b in claim["evidence_bindings"]}
    assert bound["logs[0]"] in text
    assert bound["summary"] == summary


def test_executor_states_a_value_with_its_unit_bound_to_the_series_ref() -> None:
    args = {"service": "inventory-service"}
    series = [
        series_entry("http_request_duration_p99_ms", 41, 12280, 9650, labels=INVENTORY, unit="ms"),
        series_entry("cpu_usage_percent", 38.6, 74.1, 69.3, labels=INVENTORY, unit="%"),
    ]
    refs = [
        {
            "raw_path": "series[0]",
            "text": "http_request_duration_p99_ms{service=inventory-service} last=9650ms",
        },
        {
            "raw_path": "series[1]",
            "text": "cpu_usage_percent{service=inventory-service} max=74.1% last=69.3%",
        },
        {
            "raw_path": "summary",
            "text": "query_metrics service=inventory-service matched 2 of 2 (complete)",
        },
    ]
    result = _tool_message(
        "m1", "inv-1", "query_metrics", args, {"alerts": [], "series": series}, refs
    )
    messages = _first_call("inventory-service 的 CPU 使用率是多少？", "zh", result)
    follow = _with_tools(messages)
    assert [c["name"] for c in follow.tool_calls] == ["lookup_knowledge"]
    messages += [
        follow,
        _tool_message(
            follow.tool_calls[0]["id"] or "",
            "inv-2",
            "lookup_knowledge",
            {"query": "cpu"},
            {"documents": []},
            [],
        ),
    ]
    answer = _answer(messages)

    assert [c["claim_text"] for c in answer["claims"]] == [
        "inventory-service 的 CPU 使用率（cpu_usage_percent）最新值为 69.3%，窗口内最大值为 74.1%。"
    ]
    binding = answer["claims"][0]["evidence_bindings"][0]
    assert binding["raw_path"] == "series[1]"
    assert binding["evidence_excerpt"] == refs[1]["text"]


def test_executor_asks_once_more_for_what_the_budget_cut() -> None:
    args = {"service": "order-service", "level": "ERROR"}
    entry = log_entry("call to inventory-service failed: 503")
    result = _one_log_found(
        args,
        entry,
        [
            {"raw_path": "logs[0]", "text": "x call to inventory-service failed: 503"},
            {"raw_path": "summary", "text": "matched 1 of 1"},
        ],
    )
    messages = _first_call("Why is order-service failing?", "en", result)
    # While the tools are offered it follows the evidence ...
    follow = _with_tools(messages)
    assert not follow.content
    assert ("query_logs", {"service": "inventory-service", "level": "ERROR"}) in [
        (c["name"], c["args"]) for c in follow.tool_calls
    ]
    # ... offered none (the budget is spent), it answers and asks once more for what it wanted.
    reply = OfflineExecutor().invoke(messages)

    assert json.loads(str(reply.content))["answer_version"] == "executor_evidence_v2"
    wanted = [(c["name"], c["args"]) for c in reply.tool_calls]
    assert ("query_logs", {"service": "inventory-service", "level": "ERROR"}) in wanted
    assert any(name == "lookup_knowledge" for name, _ in wanted)


class _OtherBackend:
    """A backend that is not the sample one: its own service list and series names.

    It stands for a real metrics and logs backend (Prometheus, Loki): the offline rules must take
    the services from ``services()`` and the series names from the structured results.
    """

    needs_timeout = False

    def query_logs(self, **query: Any) -> LogsOutput:
        if query.get("service") == "checkout" and query.get("level") == "ERROR":
            logs = [
                log_entry(
                    "upstream cart-redis refused the connection", service="checkout", instance=None
                )
            ]
            return LogsOutput(logs=logs, total=1, truncated=False)
        return LogsOutput(logs=[], total=0, truncated=False)

    def query_metrics(self, **query: Any) -> MetricsOutput:
        if query.get("service") != "checkout":
            return MetricsOutput(alerts=[], series=[])
        series = [
            series_entry(
                "container_memory_working_set_bytes",
                300,
                530,
                512,
                labels={"service": "checkout", "pod": "checkout-0"},
                unit="MiB",
            ),
            series_entry(
                "process_cpu_seconds_total", 0.1, 0.9, 0.82, labels={"service": "checkout"}
            ),
        ]
        return MetricsOutput(alerts=[], series=series)

    def lookup_knowledge(self, *, query: str, top_k: int = 3) -> KnowledgeOutput:
        doc = document_entry(
            "d1", "Memory pressure", source="rb/mem.md", chunk="## Mitigation\nRaise the limit."
        )
        return KnowledgeOutput(documents=[doc])

    def get_current_time(self, *, timezone: str | None = None) -> TimeOutput:
        return TimeOutput(now="2026-03-01T10:30:00Z")

    def services(self) -> list[str]:
        return ["cart-redis", "checkout"]


def test_offline_rules_work_from_any_backend_s_services_and_series_names() -> None:
    app = build_graph(backend=_OtherBackend()).compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "other"}}
    app.invoke(
        {"messages": [HumanMessage("How much memory does checkout use?")]},
        config,
        context=Context(offline=True, language="en"),
    )
    state = app.get_state(config).values

    assert state["verdict"] == "PASS"
    assert "512MiB" in state["answer"]
    assert "container_memory_working_set_bytes" in state["answer"]
    assert "process_cpu_seconds_total" not in state["answer"]
    assert state["verifier_result"]["question_coverage"]["status"] == "answered"


def test_environment_files_are_shared_by_reference() -> None:
    data = json.loads((OFFLINE[0]).read_text(encoding="utf-8"))
    assert isinstance(data["environment"], str)
    scenario = load_scenario(OFFLINE[0])
    environment: Environment = scenario["environment"]
    assert environment.get("logs")


# --------------------------------------------------------------------------- scenario format


def _scenario_file(tmp_path: Path, **changes: Any) -> Path:
    data = json.loads(OFFLINE[0].read_text(encoding="utf-8"))
    data["environment"] = str((OFFLINE[0].parent / data["environment"]).resolve())
    data.update(changes)
    for key, value in list(data.items()):
        if value is None:
            del data[key]
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"script": json.loads((SCENARIOS / "pass-basic-zh.json").read_text("utf-8"))["script"]},
            "an offline scenario has no 'script'",
        ),
        ({"offline": None}, "needs a 'script' of model replies, or \"offline\": true"),
        ({"environment": "missing.json"}, "environment names 'missing.json', which cannot be read"),
        ({"max_tool_calls": 0}, "max_tool_calls must be a whole number of at least 1"),
        ({"expect": {"question_coverage": "done"}}, "expect.question_coverage"),
    ],
    ids=["offline-and-script", "neither", "missing-environment", "budget", "coverage"],
)
def test_load_offline_scenario_says_what_is_wrong(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    from apps.eval.scenario import ScenarioError

    path = _scenario_file(tmp_path, **changes)
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    assert message in str(raised.value)
    assert str(path) in str(raised.value)


def test_env_option_reads_the_environment_a_scenario_names(tmp_path: Path) -> None:
    from evidence.environment import load_environment

    assert load_environment(OFFLINE[0]) == load_scenario(OFFLINE[0])["environment"]


def test_eval_reports_question_coverage_and_counts_it(tmp_path: Path) -> None:
    import io

    from apps.eval.evaluation import eval_command

    report = tmp_path / "report.json"
    files = [str(p) for p in OFFLINE if "unknown" in p.name or "budget" in p.name]
    out = io.StringIO()
    assert eval_command(files, str(report), out, io.StringIO()) == 0
    data = json.loads(report.read_text(encoding="utf-8"))

    statuses = {r["id"]: r["question_coverage"]["status"] for r in data["scenarios"]}
    assert set(statuses.values()) == {"partial", "unanswered"}
    metrics = data["metrics"]
    assert metrics["coverage_accuracy"] == 1.0
    assert metrics["partial_count"] == sum(s == "partial" for s in statuses.values())
    assert metrics["unanswered_count"] == sum(s == "unanswered" for s in statuses.values())
    assert "coverage_accuracy=1.000" in out.getvalue()


def test_eval_counts_a_coverage_mismatch(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, expect={"question_coverage": "unanswered"})
    result = run_scenario(load_scenario(path))
    assert not result["ok"]
    assert any(m.startswith("question_coverage: expected unanswered") for m in result["mismatches"])
