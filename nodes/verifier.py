"""Verifier: the model classifies each claim; code derives score and verdicts (contracts 5).

The model sees only the bounded, sanitised payload of ``verification.verifier_payload``.
Its reply is parsed strictly (one surrounding fence tolerated), repaired at most
``MAX_REPAIRS`` times, and replaced by the deterministic claim checker when still unreadable
(verdict capped at LOW_CONFID).
Besides the rules of ``verification.verdict``, a claim the Gatekeeper flagged with
``evidence.unbound_specifics`` (a number, code or exception name in none of its verified
evidence) is at most ``overstated``, so it is never presented as a confirmed fact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from nodes.common import GetModel, Node, context_of, emit, message_text, model_label
from nodes.evidence import executor_final_text
from nodes.prompts import load_prompt
from state.context import Context
from state.graph_state import DiagnosisState
from verification.claim_checker import check_claims
from verification.verdict import (
    CONFIRMED_LABELS,
    VERDICTS,
    claims_with_ids,
    finalize,
    normalize_claim_checks,
)
from verification.verifier_payload import build_payload, render_payload

MAX_REPAIRS = 2

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*)\n```$", re.DOTALL)

UNBOUND_RULE = "evidence.unbound_specifics"
UNBOUND_LABEL = "overstated"
_CLAIM_TARGET = re.compile(r"^claims\[(\d+)\]")


def parse_verifier_reply(text: str) -> tuple[dict[str, Any] | None, bool, str | None]:
    """Strictly parse one Verifier reply.

    Returns:
        ``(object, fence_stripped, error)``: the object when the reply is exactly one JSON
        object with a ``claim_checks`` list and a known ``verdict``; otherwise None and the
        reason, worded for the model to repair its reply.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    if not body:
        return None, bool(fenced), "the reply was empty"
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return (
            None,
            bool(fenced),
            (f"not a single JSON object ({exc.msg} at line {exc.lineno} column {exc.colno})"),
        )
    if not isinstance(data, dict):
        return None, bool(fenced), f"expected a JSON object, got {type(data).__name__}"
    if not isinstance(data.get("claim_checks"), list):
        return None, bool(fenced), "the object has no claim_checks array"
    if data.get("verdict") not in VERDICTS:
        return None, bool(fenced), "verdict must be one of PASS, LOW_CONFID, REJECT"
    return data, bool(fenced), None


def unbound_claim_ids(
    structured_output: dict[str, Any] | None, gatekeeper_result: dict[str, Any]
) -> list[str]:
    """Ids of the claims the Gatekeeper flagged with ``evidence.unbound_specifics``.

    Such a claim states a number, code or exception name found in none of its verified evidence.
    """
    ids = [claim_id for claim_id, _ in claims_with_ids(structured_output)]
    errors = gatekeeper_result.get("errors") if isinstance(gatekeeper_result, dict) else None
    flagged: list[str] = []
    for error in errors if isinstance(errors, list) else []:
        if not isinstance(error, dict) or error.get("rule_id") != UNBOUND_RULE:
            continue
        found = _CLAIM_TARGET.match(str(error.get("target", "")))
        if found and int(found.group(1)) < len(ids):
            claim_id = ids[int(found.group(1))]
            if claim_id not in flagged:
                flagged.append(claim_id)
    return flagged


def _label_key(value: Any) -> str:
    return str(value).strip().lower().replace("-", "_").replace(" ", "_")


def cap_unbound_claims(
    raw: dict[str, Any],
    structured_output: dict[str, Any] | None,
    gatekeeper_result: dict[str, Any],
    trace_summary: list[dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, str]]:
    """Cap the labels of claims with unbound specifics at ``overstated`` before scoring.

    A claim the Gatekeeper flagged with ``evidence.unbound_specifics`` states a number, code or
    exception name found in none of its verified evidence: it overstates that evidence, so it can
    be neither a direct observation nor a reasonable inference, whatever the model said. Only a
    label that would still be confirmed after the code-side rules is capped; a stricter outcome
    (e.g. ``unsupported`` for a direct observation without a valid evidence ref) stands.

    Returns:
        The adjusted raw output and ``{claim_id: model label}`` of the capped claims.
    """
    flagged = unbound_claim_ids(structured_output, gatekeeper_result)
    checks = raw.get("claim_checks")
    if not flagged or not isinstance(checks, list):
        return raw, {}
    normalized, _ = normalize_claim_checks(
        checks, structured_output, gatekeeper_result, trace_summary
    )
    still_confirmed = {
        str(check["claim_id"]).strip()
        for check in normalized
        if check["verification"] in CONFIRMED_LABELS
    }
    capped: dict[str, str] = {}
    adjusted: list[Any] = []
    for check in checks:
        if isinstance(check, dict):
            claim_id = str(check.get("claim_id", "")).strip()
            label = check.get("verification")
            if (
                claim_id in flagged
                and claim_id in still_confirmed
                and _label_key(label) in CONFIRMED_LABELS
            ):
                capped[claim_id] = str(label)
                detail = check.get("detail")
                reason = "states specifics found in none of its verified evidence"
                check = {
                    **check,
                    "verification": UNBOUND_LABEL,
                    "detail": f"{detail} [{reason}]" if isinstance(detail, str) else reason,
                }
        adjusted.append(check)
    return {**raw, "claim_checks": adjusted}, capped


def verify(
    model: BaseChatModel,
    *,
    question: str,
    final_answer: str,
    parse_status: dict[str, Any],
    structured: dict[str, Any] | None,
    trace_summary: list[dict[str, Any]],
    gatekeeper_result: dict[str, Any],
    retry_context: dict[str, Any] | None,
    round_no: int,
    known_services: list[str],
) -> dict[str, Any]:
    """Ask ``model`` to check the claims and turn its reply into the verifier result.

    Used by the graph node and by ``superbiz reverify`` (on stored evidence).
    """
    prompt = load_prompt("verifier")
    repair = load_prompt("verifier_repair")
    payload = build_payload(
        question=question,
        final_answer=final_answer,
        parse_status=parse_status,
        structured_output=structured,
        trace_summary=trace_summary,
        gatekeeper_result=gatekeeper_result,
        retry_context=retry_context,
        round_no=round_no,
    )
    offline = bool(getattr(model, "offline", False))
    messages: list[BaseMessage] = [
        SystemMessage(prompt.text),
        HumanMessage(render_payload(payload)),
    ]
    errors: list[str] = []
    fence_stripped = False
    raw: dict[str, Any] | None = None
    for attempt in range(MAX_REPAIRS + 1):
        reply = model.invoke(messages)
        text = message_text(reply)
        raw, fenced, error = parse_verifier_reply(text)
        fence_stripped = fence_stripped or fenced
        if raw is not None:
            break
        errors.append(str(error))
        if attempt < MAX_REPAIRS:
            messages = [
                *messages,
                AIMessage(content=text),
                HumanMessage(repair.text.replace("{error}", str(error))),
            ]
    if raw is None:
        raw = check_claims(
            structured, gatekeeper_result, trace_summary, known_services=known_services
        )
        mode = "fallback"
    else:
        mode = "offline" if offline else "model"
    raw, capped = cap_unbound_claims(raw, structured, gatekeeper_result, trace_summary)
    result = finalize(
        raw,
        structured_output=structured,
        parse_status=parse_status,
        gatekeeper_result=gatekeeper_result,
        trace_summary=trace_summary,
        mode=mode,
    )
    for check in result.get("claim_checks", []):
        if check.get("claim_id") in capped:
            check["model_verification"] = capped[check["claim_id"]]
            result["notes"].append(
                f"{check['claim_id']}: {UNBOUND_RULE} failed, "
                f"{capped[check['claim_id']]} -> {check['verification']}"
            )
    if mode == "fallback":
        # The model's verdict could not be read; it is not reported as the model's.
        result["model_verdict"] = None
    result["reply_parse"] = {
        "fence_stripped": fence_stripped,
        "repair_attempts": min(len(errors), MAX_REPAIRS),
        "errors": errors,
    }
    result["model"] = "offline-rules" if offline else model_label(model)
    return result


def make_verifier(get_model: GetModel, services: Callable[[], list[str]]) -> Node:
    """Build the verifier node."""

    def verifier(state: DiagnosisState, *, runtime: Runtime[Context]) -> dict[str, Any]:
        ctx = context_of(runtime)
        round_no = state.get("round", 1)
        emit("verifier", round=round_no)
        parse_status = state.get("parse_status") or {"status": "missing"}
        gatekeeper_result = state.get("gatekeeper_result") or {}
        result = verify(
            get_model("verifier", ctx),
            question=state.get("question", ""),
            final_answer=executor_final_text(state),
            parse_status=parse_status,
            structured=state.get("structured_output"),
            trace_summary=state.get("trace_summary") or [],
            gatekeeper_result=gatekeeper_result,
            retry_context=state.get("retry_context"),
            round_no=round_no,
            known_services=services(),
        )
        summary = {
            "round": round_no,
            "verdict": result["verdict"],
            "model_verdict": result.get("model_verdict"),
            "derived_verdict": result.get("derived_verdict"),
            "groundedness_score": result["groundedness_score"],
            "verifier_mode": result["verifier_mode"],
            "executor_output_parse_status": parse_status.get("status"),
            "gatekeeper_status": gatekeeper_result.get("status"),
            "gatekeeper_severity": gatekeeper_result.get("severity"),
            "failed_rules": gatekeeper_result.get("failed_rules", []),
            "claims": len(result.get("claim_checks", [])),
        }
        emit(
            "verdict", round=round_no, verdict=result["verdict"], score=result["groundedness_score"]
        )
        return {
            "verifier_result": result,
            "verdict": result["verdict"],
            "groundedness_score": result["groundedness_score"],
            "rounds": [summary],
            "route": ["verifier"],
        }

    return verifier
