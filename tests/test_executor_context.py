"""What the executor model reads per turn is bounded: seen tool results are compacted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from models.messages import content_chars, message_text
from models.offline import OfflineVerifier
from nodes.executor_context import (
    COMPACTED_NOTE,
    bounded_history,
    fitted_content,
    raw_path_ranges,
)
from state.context import Context
from state.records import Invocation, JSONObject, LogEntry
from state.settings import SettingsError
from tests.records import binding, claim, invocation
from tests.records import log_entry as log
from tests.scenario_kit import environment, executor_answer, final, run_diagnosis, self_evaluation
from tools.refs import build_evidence_refs

SERVICES = [f"svc-{index}" for index in range(8)]


def many_logs() -> list[LogEntry]:
    """100 ERROR lines for each of eight services, each line about 150 characters."""
    return [
        log(
            f"request {service}/{line} failed: upstream payment-gateway answered HTTP 503 "
            f"after 30000ms (retry {line % 3} of 3, pool exhausted, queue depth {line})",
            service=service,
            instance=f"{service}-pod-{line % 4}",
            timestamp=f"2026-03-01T10:{line % 60:02d}:00Z",
        )
        for service in SERVICES
        for line in range(100)
    ]


def eight_calls() -> list[Any]:
    """Eight sequential query_logs calls (limit 100), one per executor turn."""
    return [
        {
            "tool_calls": [
                {"name": "query_logs", "args": {"service": s, "level": "ERROR", "limit": 100}}
            ]
        }
        for s in SERVICES
    ]


def ledger_row(index: int, lines: int) -> Invocation:
    logs = [
        log(f"line {n} of call {index}: HTTP 503 after 30000ms", service="svc-0")
        for n in range(lines)
    ]
    args: JSONObject = {"service": "svc-0", "level": "ERROR", "limit": 100}
    output: Any = {"logs": logs, "total": lines}
    refs = build_evidence_refs("query_logs", args, output)
    return invocation(
        f"inv-{index}", "query_logs", args, output=output, details={"evidence_refs": refs}
    )


def conversation(count: int) -> list[Any]:
    """A plan, then ``count`` turns of one tool call each, every result as its reference."""
    messages: list[Any] = [HumanMessage("plan")]
    for index in range(1, count + 1):
        call_id = f"call-{index}"
        messages.append(
            AIMessage(content="", tool_calls=[{"name": "query_logs", "args": {}, "id": call_id}])
        )
        messages.append(
            ToolMessage(content=json.dumps({"invocation_id": f"inv-{index}"}), tool_call_id=call_id)
        )
    return messages


def test_raw_path_ranges_collapse_consecutive_indices() -> None:
    paths = ["logs[0]", "logs[1]", "logs[2]", "logs[4]", "alerts[0]", "summary"]
    assert raw_path_ranges(paths) == "logs[0]..logs[2], logs[4], alerts[0], summary"


def test_bounded_history_compacts_seen_results_and_keeps_the_fresh_one_in_full() -> None:
    rows = [ledger_row(1, 50), ledger_row(2, 50)]
    out = bounded_history(conversation(2), rows, limit_chars=48_000)
    seen = json.loads(str(out[2].content))
    fresh = json.loads(str(out[4].content))
    assert seen["invocation_id"] == "inv-1"
    assert seen["raw_paths"] == "logs[0]..logs[49], summary"
    assert seen["texts"] == COMPACTED_NOTE
    assert "evidence_refs" not in seen
    assert seen["summary"].startswith("query_logs")
    assert len(fresh["evidence_refs"]) == 51  # 50 lines and the summary, texts included
    assert "line 0 of call 2" in fresh["evidence_refs"][0]["text"]
    # The structured result stays beside every message (read by rule-based stand-ins).
    assert isinstance(out[2], ToolMessage) and isinstance(out[2].artifact, dict)


def test_bounded_history_fits_fresh_results_that_exceed_the_bound() -> None:
    rows = [ledger_row(1, 100)]
    out = bounded_history(conversation(1), rows, limit_chars=6000, fixed_chars=1000)
    assert content_chars(out) + 1000 <= 6000
    data = json.loads(str(out[2].content))
    kept = [ref["raw_path"] for ref in data["evidence_refs"]]
    assert kept[-1] == "summary" and 0 < len(kept) < 101
    assert data["omitted_refs"].endswith("logs[99]")
    assert data["omitted_refs"].startswith(f"logs[{len(kept) - 1}]")


def test_fitted_content_is_the_full_message_when_it_fits() -> None:
    row = ledger_row(1, 3)
    assert "omitted_refs" not in fitted_content(row, 100_000)


def test_executor_context_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPERBIZ_EXECUTOR_CONTEXT_CHARS", "100")
    with pytest.raises(SettingsError, match="SUPERBIZ_EXECUTOR_CONTEXT_CHARS is '100'"):
        Context()
    monkeypatch.setenv("SUPERBIZ_EXECUTOR_CONTEXT_CHARS", "20000")
    assert Context().executor_context_chars == 20000
    monkeypatch.delenv("SUPERBIZ_EXECUTOR_CONTEXT_CHARS")
    assert Context().executor_context_chars == 48_000


def sent(messages: list[BaseMessage]) -> int:
    return sum(len(message_text(m)) for m in messages)


def test_eight_sequential_log_queries_stay_bounded_and_earlier_results_stay_citable() -> None:
    first_line = many_logs()[0]
    cited = "request svc-0/0 failed: upstream payment-gateway answered HTTP 503"
    answer = executor_answer(
        claim(
            "c1",
            "svc-0 requests failed with HTTP 503 from payment-gateway",
            binding("inv-1", "logs[0]", cited),
        )
    )
    run = run_diagnosis(
        environment(logs=many_logs()),
        {"planner": ["query every service"], "executor": [*eight_calls(), final(answer)]},
        question="Why are requests failing with HTTP 503?",
        overrides={"verifier": OfflineVerifier()},
    )
    calls = run.models["executor"].calls
    assert len(calls) == 9
    per_turn = [sent(messages) for messages in calls]
    assert max(per_turn) <= 48_000, per_turn
    assert sum(per_turn) <= 250_000, per_turn
    assert message_text(calls[-1][-1]).startswith("The tool budget for this round is spent")
    last = message_text(calls[-1][-2])
    assert "svc-7/99" in last  # the fresh result is read in full
    earlier = " ".join(message_text(m) for m in calls[-1][:-2])
    assert first_line["message"] not in earlier  # seen results are compacted ...
    assert '"invocation_id":"inv-1"' in earlier and "logs[0]..logs[99]" in earlier
    # ... yet a claim citing the first result is checked against the ledger and passes.
    gate = run.state["gatekeeper_result"]
    assert gate["verified_excerpts"].get("c1"), gate
    usage: Any = self_evaluation(run.audit, run.state["diagnosis_id"])["usage"]
    assert usage["input_chars"] >= sum(per_turn)
    assert usage["budgets"]["executor_context_chars"] == 48_000
