"""Composer: the user-facing answer from Verifier-allowed material only (contracts 6).

Template mode renders the fixed safe template. Model mode asks the composer model for a short
summary that cites claim ids; code checks it (only confirmed claims, no number or name that those
claims do not state, nothing from gaps or directions, no root cause on REJECT) and renders the
final text. Any violation or unreadable reply falls back to the template.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from graph.routing import composer_mode
from nodes.common import GetModel, Node, context_of, emit, message_text
from nodes.evidence import parse_executor_output
from nodes.prompts import load_prompt
from state.context import Context
from state.graph_state import DiagnosisState
from verification.answer import render_template, select_material
from verification.gatekeeper import extract_specifics, normalize_text

_SUMMARY_HEADING = {"zh": "【摘要】", "en": "## Summary"}

SUMMARY_CHARS = 1000
"""Longest model summary accepted (the prompt asks for one or two sentences)."""

# Fragments of the executor contract: a summary carrying them leaks executor JSON.
_CONTRACT_FRAGMENTS = (
    "answer_version",
    "executor_evidence_v2",
    "evidence_bindings",
    "claim_id",
    "support_level",
    "source_invocation_id",
    "evidence_excerpt",
    "user_facing_answer",
    "diagnosis_summary",
)


def model_material(material: dict[str, Any], verdict: str) -> dict[str, Any]:
    """The material the composer model may use for this verdict.

    On REJECT the answer gives no root cause: no directions, and confirmed claims that are only
    inferences (possibly causal) are withheld, exactly as the template withholds them.
    """
    confirmed = [
        {k: v for k, v in item.items() if k != "evidence"}
        for item in material.get("confirmed", [])
        if verdict != "REJECT" or not item.get("inference")
    ]
    return {
        "confirmed": confirmed,
        "directions": [] if verdict == "REJECT" else list(material.get("directions", [])),
        "gaps": list(material.get("gaps", [])),
        "next_steps": list(material.get("next_steps", [])),
    }


def _whole_token(token: str, text: str) -> bool:
    """Whether ``token`` occurs in ``text`` not as part of a longer word or number.

    ``5`` does not occur in ``500`` or ``0.5``; ``NullPointerException`` does occur in
    ``java.lang.NullPointerException``.
    """
    before = r"(?<![A-Za-z0-9_.])" if token[:1].isdigit() else r"(?<![A-Za-z0-9_])"
    pattern = before + re.escape(token) + r"(?![A-Za-z0-9_]|\.[0-9])"
    return re.search(pattern, text) is not None


def check_composer_reply(
    reply: dict[str, Any] | None, material: dict[str, Any], verdict: str
) -> list[str]:
    """Violations of the composer contract in a parsed model reply (empty when usable).

    The summary may only state confirmed claims it cites by id (on REJECT: directly observed
    ones only), every specific it states (number, code, exception name) must be stated by one of
    those claims as a whole token, no direction or gap may appear in it, it carries no executor
    JSON, and a REJECT reply gives no directions.
    """
    if reply is None:
        return ["the reply is not one JSON object"]
    problems: list[str] = []
    summary = reply.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        return ["summary is missing or empty"]
    if len(summary) > SUMMARY_CHARS:
        problems.append(f"summary is longer than {SUMMARY_CHARS} characters")
    usable = model_material(material, verdict)
    confirmed = {str(c.get("claim_id")): str(c.get("claim_text", "")) for c in usable["confirmed"]}
    withheld = {
        str(c.get("claim_id")): str(c.get("claim_text", ""))
        for c in material.get("confirmed", [])
        if str(c.get("claim_id")) not in confirmed
    }
    cited = reply.get("summary_claim_ids")
    if not isinstance(cited, list) or not cited:
        problems.append("summary_claim_ids must list the confirmed claims the summary states")
        cited = []
    for claim_id in cited:
        if str(claim_id) in withheld:
            problems.append(
                f"summary cites {claim_id!r}, an inference that a REJECT answer must not state"
            )
        elif str(claim_id) not in confirmed:
            problems.append(f"summary cites {claim_id!r}, which is not a confirmed claim")
    presented = reply.get("confirmed")
    if presented is not None and not isinstance(presented, list):
        problems.append("confirmed must be a list")
        presented = []
    for item in presented or []:
        claim_id = item.get("claim_id") if isinstance(item, dict) else None
        if str(claim_id) not in confirmed:
            problems.append(f"{claim_id!r} is presented as confirmed but was not confirmed")
    allowed = normalize_text(" ".join(confirmed[str(c)] for c in cited if str(c) in confirmed))
    for token in extract_specifics(summary):
        if not _whole_token(normalize_text(token), allowed):
            problems.append(f"summary states {token!r}, which no cited confirmed claim states")
    norm_summary = normalize_text(summary)
    for fragment in _CONTRACT_FRAGMENTS:
        if fragment in norm_summary:
            problems.append(f"summary carries executor JSON ({fragment!r})")
    for section in ("directions", "gaps"):
        for item in material.get(section, []):
            text = normalize_text(str(item.get("text", "")))
            if len(text) >= 8 and text in norm_summary:
                problems.append(f"summary presents a {section[:-1]} as established: {text[:60]!r}")
    for claim_id, withheld_text in withheld.items():
        text = normalize_text(withheld_text)
        if len(text) >= 8 and text in norm_summary:
            problems.append(f"summary states the inference {claim_id!r} in a REJECT answer")
    if verdict == "REJECT" and reply.get("directions"):
        problems.append("a REJECT answer must not give directions or a root cause")
    return problems


def _parse_reply(text: str) -> dict[str, Any] | None:
    status, data = parse_executor_output(text)
    return data if status["status"] == "valid" else None


def make_composer(
    get_model: GetModel,
) -> Node:
    """Build the composer node."""
    prompt = load_prompt("composer")

    def composer(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = context_of(runtime)
        verdict = state.get("verdict") or "REJECT"
        score = float(state.get("groundedness_score") or 0.0)
        mode = composer_mode(verdict)
        emit("composer", round=state.get("round", 1), mode=mode, verdict=verdict)
        material = select_material(
            state.get("verifier_result") or {},
            state.get("structured_output"),
            state.get("gatekeeper_result") or {},
        )
        offline = bool((state.get("run_info") or {}).get("offline"))
        answer = render_template(
            material, verdict=verdict, score=score, language=ctx.language, offline=offline
        )
        output: dict[str, Any] = {
            "mode": "template",
            "parse_status": "not_applicable",
            "language": ctx.language,
            "composer_mode": mode,
        }
        usable = model_material(material, verdict)
        if ctx.composer_mode == "model" and not offline and usable["confirmed"]:
            request = {"verdict": verdict, "language": ctx.language, **usable}
            reply = get_model("composer", ctx).invoke(
                [SystemMessage(prompt.text), HumanMessage(json.dumps(request, ensure_ascii=False))]
            )
            parsed = _parse_reply(message_text(reply))
            problems = check_composer_reply(parsed, material, verdict)
            if problems or parsed is None:
                output.update(
                    mode="fallback",
                    parse_status="invalid" if parsed is None else "valid",
                    violations=problems,
                )
            else:
                heading = _SUMMARY_HEADING[ctx.language]
                answer = f"{heading}\n{parsed['summary'].strip()}\n\n{answer}"
                output.update(mode="model", parse_status="valid", violations=[])
        return {
            "answer": answer,
            "composer_output": output,
            "messages": [AIMessage(content=answer)],
            "route": ["composer"],
        }

    return composer
