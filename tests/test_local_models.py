"""A small local model in the loop: tool calls written as text, bounded plans, repairs.

The replies of ``tests/recorded/qwen2.5-coder-1.5b.json`` were recorded from
Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) behind llama.cpp's server; they are replayed here through
the local fake OpenAI-compatible endpoint of ``tests/test_models_http.py``. The text tool-call
parser is tested on both sides of its line: calls recognised, look-alikes left as text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from langchain_core.messages import AIMessage

from models.offline.planner import draft_plan
from models.text_tool_calls import (
    read_text_calls,
    step_call,
    text_tool_calls,
    tool_call_source,
)
from nodes.planner import bounded_plan
from state.records import Invocation
from tests import test_models_http as models_http
from tests.records import VALID
from tests.test_models_http import (  # noqa: F401 (fixtures)
    FakeOpenAI,
    Fault,
    _diagnose,
    fake_openai,
    model_env,
    user_texts,
)
from verification.conclusion import check_conclusion
from verification.executor_output import parse_executor_output, read_answer
from verification.gatekeeper import run_gatekeeper
from verification.intent import unasked_window
from verification.output_schemas import (
    MAX_CITABLE_REFS,
    MAX_EXCERPT_CHARS,
    MAX_PLAN_STEPS,
    MAX_REFS_PER_INVOCATION,
    SCHEMAS,
    CitableRef,
    citable_refs,
    executor_schema_for,
    ref_key,
    ref_menu,
    verifier_schema_for,
    written_out,
)
from verification.relevance import by_relevance
from verification.verdict import decide

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "recorded" / "qwen2.5-coder-1.5b.json").read_text(encoding="utf-8")
)


def _recorded(name: str) -> str:
    return str(RECORDED[name]["content"])


# --------------------------------------------------------------------------- the parser

RECOGNISED = {
    "recorded-fenced-json": (_recorded("fenced_tool_call"), "query_logs"),
    "tool-call-tags": (
        '<tool_call>\n{"name": "query_metrics", "arguments": {"service": "order-service"}}\n'
        "</tool_call>",
        "query_metrics",
    ),
    "tags-unclosed-at-end": (
        'Checking.\n<tool_call>{"name": "get_current_time", "arguments": {}}',
        "get_current_time",
    ),
    "whole-reply-object": ('{"name": "lookup_knowledge", "arguments": {"query": "pool"}}', None),
    "arguments-as-json-string": (
        '```\n{"name": "query_logs", "arguments": "{\\"service\\": \\"order-service\\"}"}\n```',
        "query_logs",
    ),
    "openai-function-form": (
        '```json\n{"type": "function", "function": {"name": "query_logs", '
        '"arguments": {"service": "order-service"}}}\n```',
        "query_logs",
    ),
    "tool-and-parameters-keys": (
        '```json\n{"tool": "query_logs", "parameters": {"service": "order-service"}}\n```',
        "query_logs",
    ),
    "mistral-prefix": (
        '[TOOL_CALLS] [{"name": "query_logs", "arguments": {"service": "order-service"}}]',
        "query_logs",
    ),
}


@pytest.mark.parametrize("text,name", list(RECOGNISED.values()), ids=list(RECOGNISED))
def test_text_tool_calls_recognises_a_call_written_in_the_text(text: str, name: str | None) -> None:
    found = text_tool_calls(text)

    assert len(found.calls) == 1
    call = found.calls[0]
    assert call.name == (name or "lookup_knowledge")
    assert call.problem is None
    assert "{" not in found.remaining


def test_text_tool_calls_reads_an_array_in_order_and_keeps_the_prose() -> None:
    text = (
        "First the logs, then the alerts.\n```json\n"
        '[{"name": "query_logs", "arguments": {"service": "order-service", "level": "ERROR"}},'
        ' {"name": "query_metrics", "arguments": {"service": "order-service"}}]\n```\nDone.'
    )

    found = text_tool_calls(text)

    assert [call.name for call in found.calls] == ["query_logs", "query_metrics"]
    assert found.calls[0].args == {"service": "order-service", "level": "ERROR"}
    assert found.remaining == "First the logs, then the alerts.\n\nDone."


def test_text_tool_calls_keeps_a_call_whose_arguments_fail_the_schema_with_the_problem() -> None:
    text = '```json\n{"name": "query_logs", "arguments": {"service": "x", "when": "now"}}\n```'

    (call,) = text_tool_calls(text).calls

    assert call.name == "query_logs"
    assert call.problem is not None and "when" in call.problem


LOOK_ALIKES = {
    "recorded-final-answer": _recorded("answer_without_tool_call"),
    "prose-mention": "I will call query_logs with service order-service and level ERROR next.",
    "python-style-inline": 'Next: `query_logs(service="order-service", level="ERROR")`.',
    "inline-json-in-prose": (
        'The call would be {"name": "query_logs", "arguments": {"service": "a"}} if needed.'
    ),
    "unknown-tool": '```json\n{"name": "restart_service", "arguments": {"service": "a"}}\n```',
    "extra-key": (
        '```json\n{"name": "query_logs", "arguments": {}, "reason": "to see errors"}\n```'
    ),
    "arguments-not-an-object": '```json\n{"name": "query_logs", "arguments": ["a"]}\n```',
    "array-with-one-stranger": (
        '```json\n[{"name": "query_logs", "arguments": {}}, {"claim_id": "c1"}]\n```'
    ),
    "verifier-reply": _recorded("verifier_fenced"),
    "not-json": "```json\n{name: query_logs}\n```",
}


@pytest.mark.parametrize("text", list(LOOK_ALIKES.values()), ids=list(LOOK_ALIKES))
def test_text_tool_calls_leaves_a_look_alike_as_text(text: str) -> None:
    found = text_tool_calls(text)

    assert found.calls == []
    assert found.remaining == text


def test_read_text_calls_makes_tool_calls_with_stable_ids_and_marks_the_source() -> None:
    reply = AIMessage(content=_recorded("fenced_tool_call"), id="r1")

    read = read_text_calls(reply, "text-r1-m3")

    assert [call["id"] for call in read.tool_calls] == ["text-r1-m3-1"]
    assert read.tool_calls[0]["args"]["service"] == "inventory-service"
    assert tool_call_source(read) == "text"
    assert read_text_calls(reply, "text-r1-m3").tool_calls == read.tool_calls
    native = AIMessage(content="", tool_calls=[{"name": "query_logs", "args": {}, "id": "c"}])
    assert read_text_calls(native, "p") is native
    assert tool_call_source(native) == "native"
    assert tool_call_source(AIMessage(content="plain")) is None


def test_bounded_plan_keeps_at_most_six_steps_of_a_rambling_plan() -> None:
    rambling = _recorded("rambling_plan")
    assert len([line for line in rambling.splitlines() if line.strip()]) > 20

    plan = bounded_plan(rambling)

    assert len(plan.splitlines()) == MAX_PLAN_STEPS


def test_bounded_plan_numbers_the_steps_of_a_schema_reply() -> None:
    plan = bounded_plan(_recorded("schema_plan"))

    assert plan.splitlines()[0].startswith("1. query_logs(")
    assert len(plan.splitlines()) == 4


# --------------------------------------------------------------------------- replayed diagnoses


def test_local_model_fenced_tool_call_is_run_after_an_answer_without_calls(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    model_env.fail(
        "executor",
        Fault("content", text=_recorded("answer_without_tool_call")),
        Fault("content", text=_recorded("fenced_tool_call")),
    )

    values, _ = _diagnose()

    executor = model_env.by_role("executor")
    # The answer without a tool call was answered by the no-call prompt, once.
    assert "You have not called any tool yet" in user_texts(executor[1])[-1]
    assert sum("You have not called" in t for t in user_texts(executor[-1])) == 1
    sources = [
        (call["role"], call.get("tool_call_source"))
        for call in values["model_calls"]
        if call["role"] == "executor"
    ]
    assert sources[:3] == [("executor", None), ("executor", "text"), ("executor", "native")]
    text_call = values["model_calls"][2]["tool_calls"][0]
    assert text_call["name"] == "query_logs" and text_call["id"].startswith("text-r1-")
    assert text_call["args"]["service"] == "inventory-service"
    # The text call ran as an invocation; the fake's native call then found the cited logs.
    assert values["verdict"] == "PASS"


def test_local_model_rambling_plan_reaches_the_executor_bounded(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    model_env.fail("planner", Fault("content", text=_recorded("rambling_plan")))

    values, _ = _diagnose()

    assert len(values["plan"].splitlines()) == MAX_PLAN_STEPS
    assert values["verdict"] == "PASS"


STRAY_BRACE = _recorded("verifier_fenced").rstrip("`\n") + "}\n```"
"""The recorded Verifier reply with the one stray closing brace the issue reports."""


def test_local_model_stray_brace_verifier_reply_is_repaired_not_resent(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    model_env.fail("verifier", Fault("content", text=STRAY_BRACE))

    values, _ = _diagnose()

    first, repair = model_env.by_role("verifier")
    # The repair quotes the parse error and is asked at another temperature than the first.
    assert "Extra data" in user_texts(repair)[-1]
    assert repair.get("temperature") != first.get("temperature")
    assert repair["messages"] != first["messages"]
    assert values["verifier_result"]["reply_parse"]["repair_attempts"] == 1
    assert values["verifier_result"]["verifier_mode"] == "model"


def test_local_model_no_tool_call_is_said_in_one_line_with_the_likely_cause(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    answer = Fault("content", text=_recorded("answer_without_tool_call"))
    model_env.fail("executor", answer, answer, answer, answer)
    model_env.fail("verifier", *[Fault("content", text=_recorded("verifier_fenced"))] * 2)

    values, _ = _diagnose(language="en")

    lines = [line for line in values["answer"].splitlines() if "made no tool call" in line]
    assert len(lines) == 1
    assert "does not call tools" in lines[0] and "superbiz doctor" in lines[0]
    assert values["verdict"] != "PASS"


def test_local_model_chinese_answer_marks_the_models_english_gaps(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    answer = Fault("content", text=_recorded("answer_without_tool_call"))
    model_env.fail("executor", answer, answer, answer, answer)
    model_env.fail("verifier", *[Fault("content", text=_recorded("verifier_fenced"))] * 2)

    values, _ = _diagnose(language="zh")

    text = values["answer"]
    assert "执行模型没有调用任何工具" in text
    assert "[模型英文原文] Check the order service's configuration and dependencies." in text
    assert "[模型英文原文] 执行模型" not in text


def test_local_model_reply_cut_at_its_limit_names_the_setting_to_raise(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    cut = '{"answer_version": "executor_evidence_v2", "claims": [{"claim_id": "c1", "cl'
    model_env.fail("executor", Fault("sleep"), *[Fault("content", text=cut, finish="length")] * 2)

    values, _ = _diagnose(language="en")

    cut_calls = [c for c in values["model_calls"] if c.get("finish_reason") == "length"]
    assert cut_calls and all(c["max_tokens"] == 2000 for c in cut_calls)
    assert "(raise SUPERBIZ_EXECUTOR_MAX_TOKENS)" in values["answer"]


# --------------------------------------------------------------------------- the diagnosis's schema


def _invocation(invocation_id: str, tool: str, refs: list[tuple[str, str, str]]) -> Invocation:
    return Invocation(
        invocation_id=invocation_id,
        diagnosis_id="d1",
        thread_id="t1",
        round=1,
        tool_name=tool,
        arguments={},
        status="ok" if refs else "error",
        output={} if refs else None,
        retrieval_details={
            "evidence_refs": [
                {"raw_path": path, "text": text, "source_type": kind} for path, text, kind in refs
            ]
        },
        idempotency_key=invocation_id,
        started_at="2026-03-01T10:00:00Z",
        duration_ms=1.0,
        error=None if refs else "backend down",
    )


LOG_LINE = "2026-03-01T10:14:02Z ERROR order-service: POST /orders status=500 upstream timeout"
LEDGER = [
    _invocation(
        "inv-1",
        "query_logs",
        [("logs[0]", LOG_LINE, "log"), ("summary", "1 ERROR log of order-service", "summary")],
    ),
    _invocation(
        "inv-2", "query_metrics", [("series[0]", "cpu inventory-service last 69.3%", "metric")]
    ),
    _invocation("inv-3", "query_traces", []),
]


def _answer(*bindings: dict[str, str], text: str = "order-service answered status=500") -> Any:
    return {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {
                "claim_id": "c1",
                "claim_type": "observation",
                "evidence_bindings": list(bindings),
                "claim_text": text,
                "support_level": "direct",
            }
        ],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }


def _binding(invocation_id: str, raw_path: str, excerpt: str, tool: str, kind: str) -> Any:
    return {
        "source_invocation_id": invocation_id,
        "raw_path": raw_path,
        "evidence_excerpt": excerpt,
        "tool_name": tool,
        "source_type": kind,
    }


def test_citable_refs_lists_the_recorded_refs_with_excerpts_contained_in_them() -> None:
    refs = citable_refs(LEDGER)

    assert [(r["invocation_id"], r["raw_path"]) for r in refs] == [
        ("inv-1", "logs[0]"),
        ("inv-1", "summary"),
        ("inv-2", "series[0]"),
    ]
    texts = {
        (row["invocation_id"], ref["raw_path"]): ref["text"]
        for row in LEDGER
        for ref in row["retrieval_details"]["evidence_refs"]
    }
    assert all(r["excerpt"] in texts[(r["invocation_id"], r["raw_path"])] for r in refs)


def test_citable_refs_is_bounded_per_invocation_and_in_all_and_keeps_each_summary() -> None:
    long_line = "x" * (MAX_EXCERPT_CHARS + 50)
    many = [
        _invocation(
            f"inv-{n}",
            "query_logs",
            [(f"logs[{i}]", f"{long_line} {n}/{i}", "log") for i in range(30)]
            + [("summary", f"30 logs {n}", "summary")],
        )
        for n in range(1, 6)
    ]

    refs = citable_refs(many)

    assert len(refs) == MAX_CITABLE_REFS
    first = [r for r in refs if r["invocation_id"] == "inv-1"]
    assert len(first) == MAX_REFS_PER_INVOCATION + 1 and first[-1]["raw_path"] == "summary"
    assert all(len(r["excerpt"]) <= MAX_EXCERPT_CHARS for r in refs)


def test_executor_schema_for_allows_only_the_recorded_citations() -> None:
    schema = executor_schema_for(citable_refs(LEDGER))
    real = _binding("inv-1", "logs[0]", LOG_LINE, "query_logs", "log")

    jsonschema.validate(_answer(real), schema)
    jsonschema.validate(
        _answer(
            real,
            _binding("inv-1", "summary", "1 ERROR log of order-service", "query_logs", "summary"),
        ),
        schema,
    )


@pytest.mark.parametrize(
    "binding",
    [
        pytest.param(
            _binding("inv-4", "logs[0]", LOG_LINE, "query_logs", "log"), id="invocation-never-made"
        ),
        pytest.param(
            _binding("inv-3", "logs[0]", LOG_LINE, "query_traces", "log"),
            id="invocation-without-refs",
        ),
        pytest.param(
            _binding("inv-1", "logs[0]", "POST /orders status=500 p99 123 ms", "query_logs", "log"),
            id="invented-excerpt",
        ),
        pytest.param(
            _binding("inv-2", "logs[0]", LOG_LINE, "query_logs", "log"),
            id="ref-of-another-invocation",
        ),
        pytest.param(
            _binding("inv-1", "logs[1]", LOG_LINE, "query_logs", "log"), id="raw-path-not-recorded"
        ),
    ],
)
def test_executor_schema_for_refuses_a_citation_the_ledger_does_not_hold(
    binding: dict[str, str],
) -> None:
    schema = executor_schema_for(citable_refs(LEDGER))

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_answer(binding), schema)


def test_executor_schema_for_refuses_a_claim_without_bindings_and_is_plain_without_refs() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_answer(), executor_schema_for(citable_refs(LEDGER)))

    assert executor_schema_for(citable_refs([LEDGER[2]])) == SCHEMAS["executor_evidence_v2"]
    jsonschema.validate(_answer(), SCHEMAS["executor_evidence_v2"])


# --------------------------------------------------------------------------- the local profile

TWO_STEP_PLAN = json.dumps(
    {"steps": ["query_logs(inventory-service, ERROR)", "query_logs(order-service, ERROR)"]}
)


def _bindings_of(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The (invocation id, raw path) pairs a request's final-answer schema allows."""
    schema = body["response_format"]["json_schema"]["schema"]
    claim = schema["properties"]["claims"]["items"]
    if "ref" in claim["properties"]:
        # A guided answer's claims are refs chosen by key (``<invocation id> <raw path>``).
        keys = claim["properties"]["ref"]["enum"]
        return [(key.split(" ", 1)[0], key.split(" ", 1)[1]) for key in keys]
    choices = claim["properties"]["evidence_bindings"]["items"]["anyOf"]
    return [
        (c["properties"]["source_invocation_id"]["enum"][0], c["properties"]["raw_path"]["enum"][0])
        for c in choices
    ]


ORDER_CALL = (
    '```json\n{"name": "query_logs", "arguments": {"service": "order-service", "level": "ERROR"}}'
    "\n```"
)


def test_local_profile_asks_for_each_steps_call_then_answers_under_the_ledger_schema(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    model_env.fail("planner", Fault("content", text=TWO_STEP_PLAN))
    model_env.fail(
        "executor",
        Fault("content", text=_recorded("fenced_tool_call")),
        Fault("content", text=ORDER_CALL),
    )

    values, _ = _diagnose(language="en")

    executor = model_env.by_role("executor")
    assert len(executor) == 3
    # Each tool turn ends with the step to call, so the model has no turn to answer early in.
    first, second = (user_texts(body)[-1] for body in executor[:2])
    assert "0 of them" in first and "1. query_logs(inventory-service, ERROR)" in first
    assert "1 of them" in second and "2. query_logs(order-service, ERROR)" in second
    final = executor[-1]
    assert "Every step of the plan has had its tool call" in user_texts(final)[-1]
    # Offered the same tools as before (the server reuses the evaluated prompt), answering by
    # the schema, under its token limit.
    assert [t["function"]["name"] for t in final["tools"]] == [
        t["function"]["name"] for t in executor[0]["tools"]
    ]
    assert final["max_tokens"] > 0
    made = {
        json.loads(m["content"])["invocation_id"] for m in final["messages"] if m["role"] == "tool"
    }
    assert made == {"inv-1", "inv-2"}
    assert {invocation for invocation, _ in _bindings_of(final)} == made
    assert not any(call.get("superseded") for call in values["model_calls"])
    assert values["verdict"] == "PASS"


@pytest.mark.parametrize("recorded", ["answer_without_tool_call", "guided_blank_reply"])
def test_local_profile_answer_given_instead_of_a_call_is_asked_again_under_the_schema(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
    recorded: str,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    model_env.fail("planner", Fault("content", text=TWO_STEP_PLAN))
    early = _recorded(recorded)
    model_env.fail(
        "executor",
        Fault("content", text=_recorded("fenced_tool_call")),
        Fault("content", text=early),
    )

    values, _ = _diagnose(language="en")

    executor = model_env.by_role("executor")
    final = executor[2]
    assert "Every step of the plan has had its tool call" in user_texts(final)[-1]
    # The reply that is no call is superseded and not sent with the constrained request.
    assert not any(m.get("content") == early for m in final["messages"] if m["role"] != "user")
    assert _bindings_of(final) and {i for i, _ in _bindings_of(final)} == {"inv-1"}
    executor_calls = [c for c in values["model_calls"] if c["role"] == "executor"]
    assert [bool(c.get("superseded")) for c in executor_calls[:3]] == [False, True, False]


WRITTEN_OUT_PLAN = json.dumps(
    {
        "steps": [
            'query_logs {"level": "ERROR", "service": "inventory-service"}',
            'query_logs {"level": "ERROR", "service": "order-service"}',
        ]
    }
)
"""A plan whose steps write their calls out, as the rules' draft plan does."""


@pytest.mark.parametrize("plan", [WRITTEN_OUT_PLAN, TWO_STEP_PLAN], ids=["written-out", "prose"])
def test_local_profile_runs_a_written_out_step_the_model_made_no_call_for(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
    plan: str,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    model_env.fail("planner", Fault("content", text=plan))
    # The first step's call in the text, then the real model's blank reply for the second.
    model_env.fail(
        "executor",
        Fault("content", text=_recorded("fenced_tool_call")),
        Fault("content", text=_recorded("guided_blank_reply")),
    )

    values, _ = _diagnose(language="en")

    executor = model_env.by_role("executor")
    calls = [c for c in values["model_calls"] if c["role"] == "executor"]
    # The model's blank reply is recorded as it was: no tool call.
    assert calls[1]["tool_calls"] == [] and calls[1].get("tool_call_source") is None
    after = executor[2]["messages"]
    tools_run = [m for m in after if m["role"] == "tool"]
    if plan == TWO_STEP_PLAN:
        # A step in prose is no call: the blank reply ends the calls, as before.
        assert len(tools_run) == 1
        assert "Every step of the plan has had its tool call" in user_texts(executor[2])[-1]
        return
    # The written-out step ran as written, its call marked as the plan's.
    assert len(tools_run) == 2
    planned = [m for m in after if m["role"] == "assistant" and m.get("tool_calls")][-1]
    call = planned["tool_calls"][0]
    assert call["id"].startswith("plan-")
    assert json.loads(call["function"]["arguments"]) == {
        "level": "ERROR",
        "service": "order-service",
    }
    assert "order-service" in tools_run[-1]["content"]


def test_step_call_reads_only_a_valid_written_out_call() -> None:
    good = step_call('2. query_logs {"service": "order-service", "level": "ERROR"}')
    assert good is not None and good.name == "query_logs"
    assert good.args == {"service": "order-service", "level": "ERROR"}
    for step in (
        "query_logs(order-service, ERROR)",  # prose
        'query_logs {"service": "order-service", "limit": "all"}',  # refused by the schema
        'restart_service {"service": "order-service"}',  # no such tool
        'query_logs {"service": "order-service"',  # no JSON
        'Check query_logs {"service": "order-service"} first',  # a call inside prose
    ):
        assert step_call(step) is None, step


def test_hosted_profile_takes_the_early_answer_as_it_is(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SUPERBIZ_MODEL_PROFILE", raising=False)
    model_env.fail("planner", Fault("content", text=TWO_STEP_PLAN))
    model_env.fail(
        "executor",
        Fault("content", text=_recorded("fenced_tool_call")),
        Fault("content", text=_recorded("answer_without_tool_call")),
    )
    model_env.fail("verifier", *[Fault("content", text=_recorded("verifier_fenced"))] * 2)

    values, _ = _diagnose(language="en")

    executor = model_env.by_role("executor")
    assert len(executor) == 2
    assert not any("too early" in t for body in executor for t in user_texts(body))
    assert values["verdict"] != "PASS"


def _chosen(*items: tuple[str, str]) -> Any:
    """A guided answer choosing refs by key, each with its claim type."""
    return {
        "answer_version": "executor_evidence_v2",
        "claims": [{"ref": ref, "claim_type": kind} for ref, kind in items],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }


def test_executor_schema_for_guided_has_the_model_choose_refs_stated_in_their_own_words() -> None:
    refs = citable_refs(LEDGER)
    schema = executor_schema_for(refs, guided=True)
    chosen = _chosen(("inv-1 logs[0]", "observation"), ("inv-2 series[0]", "state"))
    jsonschema.validate(chosen, schema)

    # Written out, each choice is the claim stating its ref in the ref's own words.
    claims = json.loads(written_out(json.dumps(chosen), refs))["claims"]
    real = _binding("inv-1", "logs[0]", LOG_LINE, "query_logs", "log")
    assert claims[0] == {
        **_answer(real, text=LOG_LINE)["claims"][0],
        "claim_id": "c1",
    }
    assert claims[1]["claim_text"] == "cpu inventory-service last 69.3%"
    assert claims[1]["claim_type"] == "state" and claims[1]["claim_id"] == "c2"

    worded = _answer(real)  # a claim the model words itself
    unknown = _chosen(("inv-3 logs[0]", "observation"))  # no such ref recorded
    causal = _chosen(("inv-1 logs[0]", "causal"))
    concluded = {**chosen, "conclusion": {"text": "yes", "answer": "yes", "rests_on": []}}
    for answer in (worded, unknown, causal, concluded):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(answer, schema)
    # Unguided, the model writes its claims (only the citations are bound).
    jsonschema.validate(worded, executor_schema_for(refs))
    # A choice naming no recorded ref is left as written (it is no claim; the reader flags it).
    assert json.loads(written_out(json.dumps(unknown), refs))["claims"] == unknown["claims"]
    assert written_out("not json", refs) == "not json"


def test_local_profile_answer_is_asked_again_without_the_schema_an_endpoint_refuses(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    refused = "Unrecognized request argument supplied: response_format"
    model_env.fail("planner", Fault("status", status=400, message=refused))
    # The first turn calls a tool as scripted; the answer's request carries the schema.
    model_env.fail("executor", Fault("sleep"), Fault("status", status=400, message=refused))

    values, _ = _diagnose(language="en")

    executor = model_env.by_role("executor")
    assert "response_format" in executor[1] and "tools" in executor[1]
    assert "response_format" not in executor[2] and "tools" in executor[2]
    assert executor[2]["messages"] == executor[1]["messages"]
    assert values["verdict"] == "PASS"


REFUSED_CALL = (
    '```json\n{"name": "query_logs", "arguments": {"service": "order-service", '
    '"level": "ERROR", "limit": "all"}}\n```'
)
"""A call the tools refuse (a limit that is no number)."""


def test_local_profile_counts_a_refused_call_as_a_step_still_to_do(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    # The refused call, then the fake's scripted native call of the ERROR logs.
    model_env.fail("executor", Fault("content", text=REFUSED_CALL))

    values, _ = _diagnose(language="en")

    executor = model_env.by_role("executor")
    asks = [user_texts(body)[-1] for body in executor if "too early" in user_texts(body)[-1]]
    assert len(asks) == 2 and all("0 of them have a tool result" in ask for ask in asks)
    # The refused call (inv-1) has no refs: only the call made after the ask can be cited.
    assert {invocation for invocation, _ in _bindings_of(executor[-1])} == {"inv-2"}
    assert values["verdict"] == "PASS"


INVENTED_WINDOWS = {
    # Calls as the real model wrote them: a window of its own invention, years from the data,
    # and relative times the tools refuse.
    "dates": '"start": "2023-04-01T00:00:00Z", "end": "2023-04-01T01:00:00Z", "limit": 10',
    "relative": '"start": "now-1h", "end": "now"',
}


@pytest.mark.parametrize("window", list(INVENTED_WINDOWS.values()), ids=list(INVENTED_WINDOWS))
def test_local_profile_runs_a_call_without_a_window_the_question_does_not_name(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
    window: str,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    call = (
        '```json\n{"name": "query_logs", "arguments": {"service": "order-service", '
        f'"level": "ERROR", {window}}}}}\n```'
    )
    model_env.fail("executor", Fault("content", text=call))

    values, audit = _diagnose(language="en")

    executor = model_env.by_role("executor")
    results = [json.loads(m["content"]) for m in executor[-1]["messages"] if m["role"] == "tool"]
    first = results[0]
    assert first["invocation_id"] == "inv-1"
    # Run over the tool's default window (the latest data), so the ERROR lines are found.
    assert "2023-04-01" not in json.dumps(first) and "now-1h" not in json.dumps(first)
    assert "status=500" in json.dumps(first)
    assert values["verdict"] == "PASS"
    # The model's reply, with the window it wrote, stays on record.
    record = audit.get(values["diagnosis_id"])
    written = window.split('"')[3]
    assert record is not None and written in json.dumps(record, ensure_ascii=False)


def test_unasked_window_keeps_a_window_the_question_names() -> None:
    invented = {"service": "a", "start": "2023-04-01T00:00:00Z", "end": "", "limit": 5}
    assert unasked_window("Why is order-service returning 500 errors?", invented) == ["start"]
    assert unasked_window("order-service 为什么报 500？", {"end": "now"}) == ["end"]
    named = "What did order-service log from 2026-03-01T10:00:00Z to 2026-03-01T10:15:00Z?"
    assert unasked_window(named, invented) == []
    assert unasked_window("order-service 过去 30 分钟为什么报错？", invented) == []


def _planner_task(body: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = json.loads(user_texts(body)[-1])
    return task


def test_local_profile_planner_starts_from_the_rules_draft_plan(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")

    _diagnose(language="en")

    task = _planner_task(model_env.by_role("planner")[0])
    draft = task["draft_plan"]
    # The rules' plan for a why question about order-service: its ERROR lines first, with the
    # arguments written out, and no time window the question does not name.
    first = draft.splitlines()[0]
    assert first.startswith("1. ") and "order-service" in first
    assert "start" not in draft and "end" not in draft.replace("order-service", "")
    system = model_env.by_role("planner")[0]["messages"][0]["content"]
    assert "draft_plan" in system


@pytest.mark.parametrize(
    "question",
    [
        "Something went wrong from 2023-01-30 12:15:00 UTC: which service is the root cause?",
        "2023-01-30 12:15:00 UTC 起系统出现异常，哪个服务是根因？",
        "What has been wrong since 2023-01-30T12:15:00Z?",
    ],
)
def test_draft_plan_of_a_cause_question_naming_a_time_runs_the_analysis_from_it(
    question: str,
) -> None:
    """The rules start such a question with the current time alone; the draft goes on to the
    analysis from the time named (a 1.5B model given only the first step invented a trace
    query over an empty window for a service that does not exist, and the answer named no
    cause)."""
    task = {"question": question, "known_services": ["order-service"], "round": 1}
    steps = draft_plan(task).splitlines()
    assert steps == [
        "1. get_current_time {}",
        '2. analyze_incident {"start": "2023-01-30T12:15:00Z"}',
    ]
    # A question about a value is not a cause question: no analysis is added.
    value = {**task, "question": "What is the CPU of order-service since 2023-01-30 12:15 UTC?"}
    assert "analyze_incident" not in draft_plan(value)


def test_hosted_profile_planner_gets_no_draft_plan(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SUPERBIZ_MODEL_PROFILE", raising=False)

    _diagnose(language="en")

    assert "draft_plan" not in _planner_task(model_env.by_role("planner")[0])


POOL_LINE = (
    "2026-03-01T10:07:14Z ERROR order-service order-service-5f7b9c-2xkqz: HikariPool-1 - "
    "Connection is not available, request timed out after 30000ms."
)
ONE_STEP_PLAN = json.dumps({"steps": ['query_logs {"level": "ERROR", "service": "order-service"}']})


def _echoing_answer() -> str:
    """The real model's final answer: it states the question's 500 and binds only a pool line."""
    return json.dumps(
        {
            "answer_version": "executor_evidence_v2",
            "claims": [
                {
                    "claim_id": "c1",
                    "claim_type": "observation",
                    "claim_text": "order-service is returning 500 errors due to a connection "
                    "timeout in the HikariPool-1 pool.",
                    "support_level": "direct",
                    "evidence_bindings": [
                        {
                            "source_invocation_id": "inv-1",
                            "raw_path": "logs[0]",
                            "evidence_excerpt": POOL_LINE,
                            "tool_name": "query_logs",
                            "source_type": "log",
                        }
                    ],
                }
            ],
            "hypotheses": [],
            "recommended_actions": [],
            "missing_info": [],
        }
    )


@pytest.mark.parametrize("profile", ["local", "hosted"])
def test_local_profile_binds_the_ref_of_a_cited_result_that_states_the_claims_value(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
    profile: str,
) -> None:
    if profile == "local":
        monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    else:
        monkeypatch.delenv("SUPERBIZ_MODEL_PROFILE", raising=False)
    model_env.fail("planner", Fault("content", text=ONE_STEP_PLAN))
    model_env.fail(
        "executor",
        Fault("content", text=ORDER_CALL),
        Fault("content", text=_echoing_answer()),
        Fault("content", text=_echoing_answer()),
    )

    values, _ = _diagnose(language="en")

    claim = values["executor_answer"]["claims"][0]
    errors = [e for e in values["gatekeeper_result"]["errors"] if e.get("claim_id") == "c1"]
    if profile == "hosted":
        # Unrepaired: the 500 is unbound, as before.
        assert len(claim["evidence_bindings"]) == 1
        assert any("500" in e["message"] for e in errors)
        return
    first, added = claim["evidence_bindings"]
    assert first.get("added_by") is None and added["added_by"] == "citation_repair"
    assert added["source_invocation_id"] == "inv-1" and added["raw_path"] != "logs[0]"
    assert "status=500" in str(added["evidence_excerpt"])
    assert not errors


def _recorded_ledger(name: str) -> list[Invocation]:
    """The ledger rows a recorded answer was given, from the refs kept with the recording."""
    rows: dict[str, list[tuple[str, str, str]]] = {}
    tools: dict[str, str] = {}
    for ref in RECORDED[name]["ledger_refs"]:
        rows.setdefault(ref["invocation_id"], []).append(
            (ref["raw_path"], ref["text"], ref["source_type"])
        )
        tools[ref["invocation_id"]] = ref["tool_name"]
    return [_invocation(key, tools[key], refs) for key, refs in rows.items()]


def test_local_model_recorded_worded_claim_is_no_guided_answer_now() -> None:
    # The real model's answer under the earlier guided schema, which let it word its claims: a
    # real citation, and a text joining the summary's start and end into a range.
    answer = json.loads(_recorded("constrained_answer"))
    ledger = _recorded_ledger("constrained_answer")
    binding = answer["claims"][0]["evidence_bindings"][0]
    assert (binding["source_invocation_id"], binding["raw_path"]) == ("inv-1", "summary")
    schema = executor_schema_for(citable_refs(ledger), guided=True)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(answer, schema)
    # The same choice named by its ref is one the schema admits, written out in the ref's words.
    choice = _chosen(("inv-1 summary", "negative_observation"))
    jsonschema.validate(choice, schema)
    claim = json.loads(written_out(json.dumps(choice), citable_refs(ledger)))["claims"][0]
    assert claim["claim_text"] == binding["evidence_excerpt"]
    assert claim["evidence_bindings"] == [binding]


def test_local_model_recorded_chosen_answer_is_what_its_choice_writes_out_and_passes() -> None:
    # The real model's answer when the guided schema had it write the chosen ref out whole: the
    # claim stated its ref in the ref's own words. Named by key, the same choice writes out to it.
    content = _recorded("chosen_answer")
    ledger = _recorded_ledger("chosen_answer")
    recorded = json.loads(content)
    claim = recorded["claims"][0]
    binding = claim["evidence_bindings"][0]
    assert claim["claim_text"] == binding["evidence_excerpt"]
    choice = _chosen((f"{binding['source_invocation_id']} {binding['raw_path']}", "observation"))
    refs = citable_refs(ledger)
    jsonschema.validate(choice, executor_schema_for(refs, guided=True))
    written = json.loads(written_out(json.dumps(choice), refs))
    assert written["claims"] == recorded["claims"]

    status, structured = parse_executor_output(json.dumps(written))
    result = run_gatekeeper(status, structured, ledger)

    assert result["status"] == "pass", result["errors"]
    assert set(result["verified_excerpts"]) == {"c1"}


def _script_logs_then(model_env: FakeOpenAI, *chosen: tuple[str, str]) -> None:  # noqa: F811
    """A one-step plan (order-service's ERROR logs), its call, then the guided ``chosen``."""
    plan = json.dumps({"steps": ['query_logs {"level": "ERROR", "service": "order-service"}']})
    model_env.fail("planner", Fault("content", text=plan))
    choice = json.dumps(_chosen(*chosen))
    model_env.fail("executor", Fault("content", text=ORDER_CALL), Fault("content", text=choice))


def _script_analysis_then(model_env: FakeOpenAI, *chosen: tuple[str, str]) -> None:  # noqa: F811
    """A plan of order-service's ERROR logs and the incident analysis, both steps run as
    written after the real model's blank replies, then a guided answer of ``chosen``."""
    steps = ['query_logs {"level": "ERROR", "service": "order-service"}', "analyze_incident {}"]
    model_env.fail("planner", Fault("content", text=json.dumps({"steps": steps})))
    blank = Fault("content", text=_recorded("guided_blank_reply"))
    choice = Fault("content", text=json.dumps(_chosen(*chosen)))
    model_env.fail("executor", blank, blank, choice)


def test_local_profile_writes_out_the_refs_a_guided_answer_chooses(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    _script_logs_then(model_env, ("inv-1 logs[0]", "observation"), ("inv-9 logs[0]", "state"))

    values, _ = _diagnose(language="en")

    # The answer request named the recorded refs and listed what each says; the reply chose
    # by name.
    final = model_env.by_role("executor")[-1]
    assert ("inv-1", "logs[0]") in _bindings_of(final)
    asked = user_texts(final)[-1]
    assert "- inv-1 logs[0]: 2026-03-01T10:07:14Z ERROR order-service" in asked
    assert "- inv-1 summary: query_logs" in asked and "{refs}" not in asked
    first, unknown = values["executor_answer"]["claims"]
    binding = first["evidence_bindings"][0]
    assert (binding["source_invocation_id"], binding["raw_path"]) == ("inv-1", "logs[0]")
    assert first["claim_text"] == binding["evidence_excerpt"]
    assert "ERROR order-service" in first["claim_text"]
    # The ref no call recorded is no claim: it cites nothing and is not confirmed.
    assert unknown["evidence_bindings"] == []
    gatekeeper = values["gatekeeper_result"]
    assert first["claim_id"] in gatekeeper["verified_excerpts"]
    assert unknown["claim_id"] not in gatekeeper["verified_excerpts"]
    assert values["verdict"] != "PASS"


def test_ref_menu_lists_each_key_with_the_start_of_its_text() -> None:
    refs = citable_refs(
        [
            _invocation(
                "inv-4", "query_logs", [("logs[0]", "x" * 300, "log"), ("summary", "s", "summary")]
            )
        ]
    )
    lines = ref_menu(refs).splitlines()
    assert lines[0].startswith("- inv-4 logs[0]: xxx") and lines[0].endswith("…")
    assert len(lines[0]) == len("- inv-4 logs[0]: ") + 120
    assert lines[1] == "- inv-4 summary: s"
    assert ref_menu([]) == "(none)"


def test_verifier_request_asks_for_one_check_per_claim_shown(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    values, _ = _diagnose(language="en")

    claims = [c["claim_id"] for c in values["executor_answer"]["claims"]]
    assert claims
    schema = model_env.by_role("verifier")[0]["response_format"]["json_schema"]["schema"]
    checks = schema["properties"]["claim_checks"]
    assert checks["minItems"] == checks["maxItems"] == len(claims)
    assert checks["items"]["properties"]["claim_id"]["enum"] == claims

    def reply(ids: list[str]) -> Any:
        check = {"detail": "d", "verification": "direct_observation", "evidence_refs": []}
        return {
            "rationale": "r",
            "claim_checks": [{"claim_id": claim_id, **check} for claim_id in ids],
            "question_coverage": {"status": "answered", "asked": [], "unanswered": []},
            "critical_fact_count": len(ids),
            "groundedness_score": 1.0,
            "verdict": "PASS",
        }

    jsonschema.validate(reply(claims), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(reply(claims[:-1]), schema)  # a claim skipped
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(reply([*claims[:-1], "c99"]), schema)  # one that does not exist
    assert verifier_schema_for([]) is SCHEMAS["verifier_claim_checks"]


def _analysis(invocation_id: str) -> Invocation:
    """An ``analyze_incident`` call whose second suspect is the root cause."""
    refs = [
        ("suspects[0]", "#1 order-service score=0.8: error surge", "analysis"),
        ("suspects[1]", "#2 inventory-service score=0.9 root cause: lock waits", "analysis"),
        ("signals[0]", "order-service error_surge 1 -> 40", "analysis"),
        ("signals[1]", "inventory-service new_template: Lock wait on table stock", "analysis"),
        ("signals[1].evidence[0]", "10:02:20Z WARN inventory-service: Lock wait", "log"),
    ]
    invocation = _invocation(invocation_id, "analyze_incident", refs)
    invocation["output"] = {
        "suspects": [
            {"service": "order-service", "root_cause": False, "signals": [0]},
            {"service": "inventory-service", "root_cause": True, "signals": [1]},
        ],
        "signals": [{"service": "order-service"}, {"service": "inventory-service"}],
    }
    return invocation


def _keys(refs: list[CitableRef]) -> list[str]:
    return [ref_key(ref) for ref in refs]


def test_by_relevance_puts_the_root_cause_and_its_evidence_first_for_a_why_question() -> None:
    ledger = [*LEDGER, _analysis("inv-4")]
    refs = citable_refs(ledger)
    services = ["order-service", "inventory-service"]

    ranked = by_relevance(refs, ledger, "Why is order-service returning 500 errors?", services)

    assert sorted(_keys(ranked)) == sorted(_keys(refs))  # the same refs, none lost
    assert _keys(ranked)[:3] == [
        "inv-4 suspects[1]",  # the root cause the analysis named
        "inv-1 logs[0]",  # the symptom asked about: the service and the status code
        "inv-4 signals[1].evidence[0]",  # the observation the cause rests on
    ]
    # Not a why question: no root cause is pushed, the asked metric's series leads.
    value = by_relevance(refs, ledger, "What is the CPU usage of inventory-service?", services)
    assert _keys(value)[0] == "inv-2 series[0]"
    assert _keys(value)[1:3] == ["inv-4 suspects[1]", "inv-4 signals[1]"]


def test_by_relevance_keeps_the_ledger_order_when_nothing_is_named() -> None:
    refs = citable_refs(LEDGER)
    assert by_relevance(refs, LEDGER, "anything odd today?", []) == refs


def test_local_profile_answer_request_lists_the_root_cause_first_for_a_why_question(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    _script_analysis_then(model_env, ("inv-2 suspects[0]", "observation"))

    values, _ = _diagnose(language="en")

    final = model_env.by_role("executor")[-1]
    menu = [line for line in user_texts(final)[-1].splitlines() if line.startswith("- inv-")]
    # The analysis ran second, yet its root-cause suspect is listed (and offered) first.
    assert menu[0].startswith("- inv-2 suspects[0]: #1 inventory-service")
    assert "root cause" in menu[0]
    offered = _bindings_of(final)
    assert offered[0] == ("inv-2", "suspects[0]")
    # Chosen, it states the root cause like any confirmed claim, worded first in the answer.
    assert values["root_cause"]["service"] == "inventory-service"
    facts = [line for line in values["answer"].splitlines() if line.startswith("- ")]
    assert facts[0].startswith("- Most likely root cause: inventory-service, mechanism: change: ")
    assert facts[1].startswith("- #1 inventory-service score=")


def test_local_profile_verbatim_claims_stand_against_the_real_verifiers_unsupported(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    _script_logs_then(model_env, ("inv-1 logs[0]", "observation"), ("inv-1 logs[1]", "state"))
    # The real model's reply: every claim "unsupported", each detail saying it is stated, the
    # question "unanswered", its verdict LOW_CONFID.
    model_env.fail("verifier", Fault("content", text=_recorded("verifier_unsupported_verbatim")))

    values, _ = _diagnose(language="en")

    result = values["verifier_result"]
    checks = {check["claim_id"]: check for check in result["claim_checks"]}
    assert set(checks) == {"c1", "c2"}
    for check in checks.values():
        # Each claim is its verified log line word for word: nothing to judge between them.
        assert check["model_verification"] == "unsupported"
        assert check["verification"] == "direct_observation"
        assert check["evidence_refs"] and check["evidence_refs"][0]["source_invocation_ids"]
    assert result["model_verdict"] == "LOW_CONFID"
    # Under the local profile the model's own verdict and coverage are recorded, not applied.
    assert result["verdict"] == values["verdict"] == "PASS"
    assert result["question_coverage"]["status"] == "answered"


def _verbatim_case(text: str, label: str) -> tuple[Any, Any, list[Any], Any]:
    """A one-claim answer stating ``text`` from a verified log ref of ``LOG_LINE``."""
    status, structured = parse_executor_output(
        json.dumps(_answer(_binding("inv-1", "logs[0]", LOG_LINE, "query_logs", "log"), text=text))
    )
    answer = read_answer(status, structured)
    gatekeeper = run_gatekeeper(status, structured, LEDGER)
    trace = [
        {
            "trace_ref": "t1",
            "tool_name": "query_logs",
            "round": 1,
            "success": True,
            "evidence_level": "direct",
            "input_summary": "order-service ERROR",
            "output_summary": "1 line",
            "source_invocation_ids": ["inv-1"],
        }
    ]
    reply = {
        "rationale": "",
        "claim_checks": [
            {"claim_id": "c1", "verification": label, "detail": "d", "evidence_refs": []}
        ],
        "groundedness_score": None,
        "critical_fact_count": 1,
        "verdict": "LOW_CONFID",
        "question_coverage": {"status": "unanswered", "asked": ["x"], "unanswered": ["x"]},
        "notes": [],
    }
    return answer, gatekeeper, trace, reply


@pytest.mark.parametrize(
    ("text", "label", "expected"),
    [
        (LOG_LINE, "unsupported", "direct_observation"),  # the line itself
        (LOG_LINE, "overstated", "direct_observation"),
        (LOG_LINE, "contradicted", "contradicted"),  # a stricter label stands
        ("POST /orders status=500 upstream timeout", "unsupported", "unsupported"),  # a piece
        ("order-service answered status=500", "unsupported", "unsupported"),  # worded
    ],
)
def test_decide_raises_only_a_word_for_word_claim_to_direct_observation(
    text: str, label: str, expected: str
) -> None:
    answer, gatekeeper, trace, reply = _verbatim_case(text, label)
    assert gatekeeper["verified_excerpts"].get("c1")
    decision = decide(
        answer,
        gatekeeper,
        reply,
        parse_status=VALID,
        trace=trace,
        mode="model",
        question="Why is order-service failing?",
        known_services=["order-service"],
    )
    assert decision["claim_checks"][0]["verification"] == expected


def test_decide_applies_the_models_verdict_and_coverage_unless_it_does_not_judge() -> None:
    answer, gatekeeper, trace, reply = _verbatim_case(LOG_LINE, "direct_observation")
    common: Any = {
        "parse_status": VALID,
        "trace": trace,
        "mode": "model",
        "question": "Why is order-service failing?",
        "known_services": ["order-service"],
    }
    judged = decide(answer, gatekeeper, reply, **common)
    assert judged["verdict"] == "LOW_CONFID"
    assert judged["question_coverage"]["status"] == "unanswered"
    recorded = decide(answer, gatekeeper, reply, model_judges=False, **common)
    assert recorded["verdict"] == "PASS" and recorded["model_verdict"] == "LOW_CONFID"
    assert recorded["question_coverage"]["status"] == "answered"
    assert any("recorded, not applied" in note for note in recorded["notes"])


def test_by_relevance_puts_the_asked_services_alerts_before_another_services_alert() -> None:
    # "Is order-service alerting?" as the real model saw it: it chose the analysis's line about
    # inventory-service's alert (listed first, since it says "alert") and no order-service alert.
    ledger = [
        _invocation(
            "inv-1",
            "query_metrics",
            [
                (
                    "alerts[0]",
                    "OrderServiceHigh5xxRate service=order-service state=firing",
                    "alert",
                ),
                ("summary", "query_metrics service=order-service alerts 1 of 1", "summary"),
            ],
        ),
        _invocation(
            "inv-2",
            "analyze_incident",
            [
                (
                    "signals[2]",
                    "inventory-service alert: InventoryServiceSlowQueries firing",
                    "analysis",
                )
            ],
        ),
    ]
    refs = citable_refs(list(reversed(ledger)))  # the analysis's line recorded first
    services = ["order-service", "inventory-service"]

    ranked = by_relevance(refs, ledger, "Is order-service alerting?", services)

    assert _keys(ranked) == ["inv-1 alerts[0]", "inv-1 summary", "inv-2 signals[2]"]


def test_a_firing_alert_chosen_as_a_negative_observation_still_shows_the_alert_firing() -> None:
    # The real model typed the firing alert it chose as "negative_observation"; code derived
    # "no" for "is the alert firing?" from that type alone.
    line = "LagHigh service=billing-consumer severity=critical state=firing value=9 threshold=1"
    ledger = [_invocation("inv-1", "query_metrics", [("alerts[0]", line, "alert")])]
    chosen = json.dumps(_chosen(("inv-1 alerts[0]", "negative_observation")))
    status, structured = parse_executor_output(written_out(chosen, citable_refs(ledger)))
    answer = read_answer(status, structured)
    gatekeeper = run_gatekeeper(status, structured, ledger)
    checks: Any = [
        {
            "claim_id": "c1",
            "verification": "direct_observation",
            "detail": "",
            "evidence_refs": [],
            "model_verification": "direct_observation",
        }
    ]

    found = check_conclusion(
        "Is the LagHigh alert firing for billing-consumer?",
        ["billing-consumer"],
        answer,
        checks,
        gatekeeper,
    )

    assert found["status"] == "derived" and found["expected"] == "yes"


def test_local_profile_root_cause_line_leads_only_an_answer_about_the_cause(
    model_env: FakeOpenAI,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_MODEL_PROFILE", "local")
    monkeypatch.setattr(models_http, "QUESTION", "Is order-service logging errors?")
    _script_analysis_then(
        model_env, ("inv-2 suspects[0]", "observation"), ("inv-1 logs[0]", "state")
    )

    values, _ = _diagnose(language="en")

    # The root cause is kept as data, but a yes/no question about errors is not led by it.
    assert values["root_cause"]["service"] == "inventory-service"
    assert "Most likely root cause" not in values["answer"]
