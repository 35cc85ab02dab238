"""Verifier: the model labels each claim; code decides the score and the verdicts.

The model sees only the bounded, sanitised payload of ``verification.verifier_payload``. Its reply
is parsed strictly, repaired at most ``MAX_REPAIRS`` times, and replaced by the deterministic
claim checker when still unreadable (the verdict is then capped at LOW_CONFID). Everything after
the reply is ``verification.verdict.decide``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from langgraph.runtime import Runtime

from models.budget import INTERNAL_CALL, GetModel, Spend, model_label
from models.messages import final_text, message_text, render_call
from models.structured import from_endpoint, with_schema
from nodes.common import Node, context_of, emit
from nodes.prompts import load_prompt
from state.catalog import local_profile
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import (
    CallNotRun,
    ExecutorAnswer,
    GatekeeperResult,
    JSONObject,
    ParseStatus,
    ReplyParse,
    RetryContext,
    RoundSummary,
    TraceItem,
    VerifierInput,
    VerifierMode,
    VerifierReply,
    VerifierResult,
)
from verification.claim_checker import check_claims
from verification.output_schemas import verifier_schema_for
from verification.root_cause import confirmed_root_cause
from verification.verdict import decide
from verification.verifier_payload import (
    build_payload,
    clipped_claims,
    render_payload,
    unseen_claims,
)
from verification.verifier_reply import parse_verifier_reply, read_verifier_reply

MAX_REPAIRS = 2
REPAIR_TEMPERATURE = 0.4
"""Temperature of a repair request: at temperature 0 a model asked again tends to send the same
unreadable reply, even with the parse error quoted."""


def ask_model(
    model: BaseChatModel, attempt: int, claim_ids: Sequence[str] = ()
) -> Runnable[Any, Any]:
    """The Verifier model for one attempt.

    Shaped by its JSON schema where the endpoint takes one (``models.structured``): one check
    per claim of ``claim_ids`` (``verifier_schema_for``), the plain schema without them; a
    repair (``attempt`` > 0) is also asked at ``REPAIR_TEMPERATURE``.
    """
    asked = with_schema(
        model,
        "verifier_claim_checks",
        verifier_schema_for(claim_ids) if claim_ids else None,
    )
    if attempt > 0 and from_endpoint(model):
        asked = asked.bind(temperature=REPAIR_TEMPERATURE)
    return asked


def _ask(
    model: BaseChatModel, payload: JSONObject, spend: Spend | None
) -> tuple[VerifierReply | None, ReplyParse]:
    """The model's reply read into records.

    None when it is unreadable after the repairs, or when the diagnosis's model budget is
    spent before a readable reply came.
    """
    repair = load_prompt("verifier_repair")
    messages: list[BaseMessage] = [
        SystemMessage(load_prompt("verifier").text),
        HumanMessage(render_payload(payload)),
    ]
    errors: list[str] = []
    fence_stripped = False
    for attempt in range(MAX_REPAIRS + 1):
        stopped = spend.stop() if spend is not None else None
        if stopped is not None:
            errors.append(f"not asked: {stopped}")
            return None, ReplyParse(
                fence_stripped=fence_stripped, repair_attempts=attempt, errors=errors
            )
        asked = ask_model(model, attempt, shown_claim_ids(payload))
        if spend is not None:
            reply = spend.invoke(asked, messages)
        else:
            reply = asked.invoke(messages, config=INTERNAL_CALL)
        text = message_text(reply)
        data, fenced, error = parse_verifier_reply(text)
        fence_stripped = fence_stripped or fenced
        if data is not None:
            return read_verifier_reply(data), ReplyParse(
                fence_stripped=fence_stripped, repair_attempts=attempt, errors=errors
            )
        errors.append(str(error))
        if attempt < MAX_REPAIRS:
            messages = [
                *messages,
                AIMessage(content=text),
                HumanMessage(repair.text.replace("{error}", str(error))),
            ]
    return None, ReplyParse(
        fence_stripped=fence_stripped, repair_attempts=MAX_REPAIRS, errors=errors
    )


def shown_claim_ids(payload: JSONObject) -> list[str]:
    """The ids of the claims the Verifier payload shows."""
    block = payload.get("executor_structured_output")
    claims = block.get("claims") if isinstance(block, dict) else None
    if not isinstance(claims, list):
        return []
    return [str(c["claim_id"]) for c in claims if isinstance(c, dict) and c.get("claim_id")]


def verifier_input(
    *,
    question: str,
    round: int,
    final_answer: str,
    parse_status: ParseStatus,
    structured_output: JSONObject | None,
    answer: ExecutorAnswer,
    gatekeeper_result: GatekeeperResult,
    trace_summary: list[TraceItem],
    retry_context: RetryContext | None,
    not_run: Iterable[str],
) -> VerifierInput:
    """What the Verifier is given for one round: the one builder of its input.

    The graph node gives it the round's state; ``superbiz reverify`` gives it the same items as
    the diagnosis's record keeps them, re-checked on the invocation ledger (``graph.reverify``).

    Args:
        question: The user's question.
        round: The round checked (1 or 2).
        final_answer: The executor's final message, raw.
        parse_status: How that message parsed.
        structured_output: The object it held, as written (None when it did not parse).
        answer: That object read into records.
        gatekeeper_result: The Gatekeeper's result on ``answer``.
        trace_summary: The tool trace summary of the diagnosis.
        retry_context: What round 1 lacked (round 2 only).
        not_run: The tool calls the tool budget kept from running, rendered; repeats are
            listed once.
    """
    return VerifierInput(
        question=question,
        final_answer=final_answer,
        parse_status=parse_status,
        structured_output=structured_output,
        answer=answer,
        trace_summary=trace_summary,
        gatekeeper_result=gatekeeper_result,
        retry_context=retry_context,
        round=round,
        not_run=list(dict.fromkeys(not_run)),
    )


def rendered_not_run(calls: Iterable[CallNotRun]) -> list[str]:
    """The calls not run as the Verifier and the answer list them (``render_call``)."""
    return [render_call(call["tool_name"], call["arguments"]) for call in calls]


def verify(
    model: BaseChatModel,
    inputs: VerifierInput,
    known_services: Sequence[str],
    spend: Spend | None = None,
    *,
    recheck_of: VerifierMode | None = None,
) -> VerifierResult:
    """Ask ``model`` to check the claims and decide the round (``verification.verdict.decide``).

    Used by the graph node (with the diagnosis's ``spend``) and by ``superbiz reverify`` (on
    stored evidence, with ``recheck_of`` the mode that judged the recorded diagnosis). A reply
    still unreadable after the repairs, or a model budget spent before one came, hands the
    claims to the deterministic claim checker (``fallback``).
    """
    offline = bool(getattr(model, "offline", False))
    payload = build_payload(inputs)
    reply, parse = _ask(model, payload, spend)
    mode: VerifierMode = "offline" if offline else "model"
    answer, gatekeeper = inputs["answer"], inputs["gatekeeper_result"]
    trace = inputs["trace_summary"]
    if reply is None:
        mode = "fallback"
        reply = check_claims(answer, gatekeeper, trace, known_services=known_services)
    decision = decide(
        answer,
        gatekeeper,
        reply,
        parse_status=inputs["parse_status"],
        trace=trace,
        mode=mode,
        # The claim checker stands in with the whole answer; a model saw only the payload.
        unseen=() if mode == "fallback" else unseen_claims(payload, answer),
        clipped=None if mode == "fallback" else clipped_claims(payload, answer),
        question=inputs["question"],
        known_services=known_services,
        not_run=inputs.get("not_run", []),
        recheck_of=recheck_of,
        # A small local model's own verdict and coverage are recorded, not applied.
        model_judges=not local_profile(),
    )
    return VerifierResult(
        **decision, reply_parse=parse, model="offline-rules" if offline else model_label(model)
    )


def make_verifier(get_model: GetModel, services: Callable[[], list[str]]) -> Node:
    """Build the verifier node (``services`` lists the services the backend knows)."""

    def verifier(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        ctx = context_of(runtime)
        round_no = state.get("round", 1)
        emit("verifier", round=round_no)
        parse_status = state["parse_status"]
        gatekeeper = state["gatekeeper_result"]
        inputs = verifier_input(
            question=state.get("question", ""),
            round=round_no,
            final_answer=final_text(state.get("executor_messages", [])),
            parse_status=parse_status,
            structured_output=state.get("structured_output"),
            answer=state["executor_answer"],
            gatekeeper_result=gatekeeper,
            trace_summary=state["trace_summary"],
            retry_context=state.get("retry_context"),
            not_run=rendered_not_run(state.get("calls_not_run", [])),
        )
        spend = Spend(state, ctx)
        result = verify(get_model("verifier", ctx), inputs, services(), spend)
        stopped = spend.stop()
        summary = RoundSummary(
            round=round_no,
            verdict=result["verdict"],
            model_verdict=result["model_verdict"],
            derived_verdict=result["derived_verdict"],
            groundedness_score=result["groundedness_score"],
            verifier_mode=result["verifier_mode"],
            executor_output_parse_status=parse_status["status"],
            gatekeeper_status=gatekeeper["status"],
            gatekeeper_severity=gatekeeper["severity"],
            failed_rules=gatekeeper["failed_rules"],
            claims=len(result["claim_checks"]),
        )
        score = result["groundedness_score"]
        emit("verdict", round=round_no, verdict=result["verdict"], score=score)
        return {
            "usage": spend.added,
            "model_calls": spend.calls,
            **({"budget_note": stopped} if stopped and not state.get("budget_note") else {}),
            "verifier_result": result,
            "verdict": result["verdict"],
            "groundedness_score": result["groundedness_score"],
            "root_cause": confirmed_root_cause(
                state["executor_answer"],
                result["claim_checks"],
                result["verdict"],
                state.get("suspects", []),
            ),
            "rounds": [summary],
            "route": ["verifier"],
        }

    return verifier
