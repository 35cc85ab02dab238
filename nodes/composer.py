"""Composer: the user-facing answer from Verifier-allowed material only.

Template mode renders the fixed safe template. Model mode asks the composer model for a short
summary citing confirmed claim ids; ``verification.composer_check`` accepts it or the template is
used alone. Offline runs always use the template.
"""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from models.budget import GetModel, Spend
from models.messages import message_text
from models.structured import with_schema
from nodes.common import Node, context_of, emit
from nodes.prompts import load_prompt
from state.context import Context
from state.display import one_line
from state.graph_state import DiagnosisState
from state.records import ComposerOutput, ComposerSection, JSONObject
from verification.answer import render_template, select_material
from verification.composer_check import check_composer_reply, model_material, usable_confirmed
from verification.executor_output import parse_executor_output
from verification.intent import CAUSE_KINDS, read_intent

_SUMMARY_HEADING = {"zh": "【摘要】", "en": "## Summary"}


def composer_section(verdict: str | None) -> ComposerSection:
    """The answer's sections for an effective verdict."""
    if verdict == "PASS":
        return "pass"
    if verdict == "LOW_CONFID":
        return "uncertain"
    return "degraded"


def make_composer(get_model: GetModel) -> Node:
    """Build the composer node."""
    prompt = load_prompt("composer")

    def composer(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        ctx = context_of(runtime)
        verdict = state.get("verdict") or "REJECT"
        section = composer_section(verdict)
        emit("composer", round=state.get("round", 1), mode=section, verdict=verdict)
        result = state["verifier_result"]
        question = state.get("question", "")
        kind = read_intent(question, state.get("known_services", [])).kind
        asks_cause = kind in CAUSE_KINDS
        material = select_material(
            result["claim_checks"],
            state["executor_answer"],
            state["gatekeeper_result"],
            result["unchecked"],
            result.get("question_coverage"),
            result.get("conclusion"),
            language=ctx.language,
            # The root cause leads an answer to a question about the cause, not a value's.
            root_cause=state.get("root_cause") if asks_cause else None,
        )
        offline = state["run_info"]["offline"]
        answer = render_template(
            material,
            verdict=verdict,
            score=state.get("groundedness_score", 0.0),
            language=ctx.language,
            offline=offline,
        )
        output = ComposerOutput(
            mode="template",
            parse_status="not_applicable",
            language=ctx.language,
            composer_mode=section,
        )
        spend = Spend(state, ctx)
        if (
            ctx.composer_mode == "model"
            and not offline
            and usable_confirmed(material, verdict)
            and spend.stop() is None  # a spent model budget leaves the template alone
        ):
            request: JSONObject = {"verdict": verdict, "language": ctx.language}
            request.update(model_material(material, verdict))
            reply = spend.invoke(
                with_schema(get_model("composer", ctx), "composer_sections"),
                [SystemMessage(prompt.text), HumanMessage(json.dumps(request, ensure_ascii=False))],
            )
            status, parsed = parse_executor_output(message_text(reply))
            problems = check_composer_reply(parsed, material, verdict)
            output["violations"] = problems
            if problems or parsed is None:
                output["mode"] = "fallback"
                output["parse_status"] = "invalid" if parsed is None else "valid"
            else:
                summary = one_line(str(parsed["summary"]))
                answer = f"{_SUMMARY_HEADING[ctx.language]}\n{summary}\n\n{answer}"
                output["mode"], output["parse_status"] = "model", "valid"
        return {
            "usage": spend.added,
            "model_calls": spend.calls,
            "answer": answer,
            "composer_output": output,
            "messages": [AIMessage(content=answer)],
            "route": ["composer"],
        }

    return composer
