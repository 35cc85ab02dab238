"""Fixed, safe answer template (contracts section 6), in Chinese (default) and English.

The template sees only Verifier-allowed material: confirmed claims (direct observations and marked
inferences) with their Gatekeeper-verified excerpts, possible directions (hypotheses and overstated
claims), evidence gaps (unsupported / external-unknown claims and missing information) and next
steps. A contradicted claim is never shown. The rendered text never contains executor JSON.
"""

from __future__ import annotations

import math
from typing import Any

from verification.verdict import (
    CONFIRMED_LABELS,
    claim_text,
    claims_with_ids,
    verified_excerpts_for,
)

LANGUAGES: tuple[str, ...] = ("zh", "en")
"""Languages the template renders."""

EXCERPT_CHARS = 300
"""Maximum length of one evidence excerpt in the answer."""

KNOWLEDGE_TOOL = "lookup_knowledge"

# Items whose text carries these keys would leak executor JSON into the answer: they are dropped.
_CONTRACT_KEYS = ('"answer_version"', '"evidence_bindings"', '"claim_id"', "executor_evidence_v2")

_TEXT: dict[str, dict[str, str]] = {
    "zh": {
        "pass_intro": "根据本次诊断中已核实的证据，结论如下。",
        "low_intro": (
            "现有证据不足以给出完全确定的结论。以下分别列出已确认的事实、可能的方向和证据缺口。"
        ),
        "reject_intro": (
            "抱歉，无法根据本次收集到的证据给出可靠的回答。"
            "以下仅列出已确认的事实和证据缺口，不给出根因结论。"
        ),
        "conclusion": "结论（已确认的事实）",
        "confirmed": "已确认的事实",
        "none_confirmed": "本次没有能够由证据确认的事实。",
        "evidence": "证据",
        "directions": "可能的方向（有待进一步排查）",
        "gaps": "证据缺口",
        "next_steps": "下一步建议",
        "inference": "（推断）",
        "basis": "（依据：{basis}）",
        "overstated": "（证据只支持其中一部分）",
        "unsupported": "（本次未找到支持该说法的证据）",
        "external_unknown": "（依据为知识库或经验，无法用本次证据核实）",
        "missing_info": "（缺少的信息）",
        "source": "（来源：{source}）",
        "footer": "校验结论：{verdict}（证据支撑度 {score}）",
        "offline": "离线模式：本回答由确定性规则生成，未使用语言模型。",
        "colon": "：",
        "heading": "【{title}】",
    },
    "en": {
        "pass_intro": "Based on the evidence verified in this diagnosis:",
        "low_intro": (
            "The evidence is not sufficient for a definite answer. Established facts, possible "
            "directions and evidence gaps are listed separately below."
        ),
        "reject_intro": (
            "Sorry, a reliable answer could not be produced from the evidence gathered. Only "
            "established facts and evidence gaps are listed below; no root cause is given."
        ),
        "conclusion": "Conclusion (confirmed facts)",
        "confirmed": "Confirmed facts",
        "none_confirmed": "No facts could be established from the evidence gathered.",
        "evidence": "Evidence",
        "directions": "Possible directions (to be investigated)",
        "gaps": "Evidence gaps",
        "next_steps": "Next steps",
        "inference": " (inference)",
        "basis": " (basis: {basis})",
        "overstated": " (only partly supported by the evidence)",
        "unsupported": " (no supporting evidence found in this diagnosis)",
        "external_unknown": " (rests on runbooks or general experience; cannot be checked here)",
        "missing_info": " (missing information)",
        "source": " (source: {source})",
        "footer": "Verification: {verdict} (groundedness {score})",
        "offline": (
            "Offline mode: this answer was produced by deterministic rules, "
            "without a language model."
        ),
        "colon": ": ",
        "heading": "## {title}",
    },
}


def _one_line(text: str) -> str:
    """Put a text on one line (line breaks become spaces), stripped."""
    return " ".join(text.replace("\r", "\n").split("\n")).strip()


def _safe(text: Any) -> str:
    """Return a displayable one-line text, or '' when absent or carrying executor JSON."""
    if not isinstance(text, str):
        return ""
    line = _one_line(text)
    if any(key in line for key in _CONTRACT_KEYS):
        return ""
    return line


def _bounded(text: str, limit: int = EXCERPT_CHARS) -> str:
    """Bound a text to `limit` characters (an ellipsis marks the cut)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _labels(verifier_result: Any) -> dict[str, str]:
    """Final label of each checked claim id."""
    labels: dict[str, str] = {}
    checks = verifier_result.get("claim_checks") if isinstance(verifier_result, dict) else None
    for check in checks if isinstance(checks, list) else []:
        if isinstance(check, dict):
            cid, label = check.get("claim_id"), check.get("verification")
            if isinstance(cid, str) and isinstance(label, str) and cid not in labels:
                labels[cid] = label
    return labels


def _items(structured_output: Any, key: str) -> list[dict[str, Any]]:
    """The dict (or bare-string) items of one list field of the executor output."""
    if not isinstance(structured_output, dict):
        return []
    raw = structured_output.get(key)
    items: list[dict[str, Any]] = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict):
            items.append(item)
        elif isinstance(item, str):
            items.append({"text": item})
    return items


def _evidence(gatekeeper_result: Any, claim_id: str) -> list[dict[str, str]]:
    """The claim's verified incident excerpts (knowledge refs are not incident evidence)."""
    evidence: list[dict[str, str]] = []
    for excerpt in verified_excerpts_for(gatekeeper_result, claim_id):
        if excerpt.get("tool_name") == KNOWLEDGE_TOOL:
            continue
        inv, path = excerpt.get("invocation_id"), excerpt.get("raw_path")
        evidence.append(
            {
                "invocation_id": inv if isinstance(inv, str) else "",
                "raw_path": path if isinstance(path, str) else "",
                "text": excerpt["text"],
            }
        )
    return evidence


def select_material(
    verifier_result: dict[str, Any],
    structured_output: dict[str, Any] | None,
    gatekeeper_result: dict[str, Any],
) -> dict[str, Any]:
    """Select the Verifier-allowed material the answer may be built from.

    Confirmed: claims whose final label is `direct_observation` (inference False) or
    `reasonable_inference` (inference True) and that have a Gatekeeper-verified binding, with
    their verified incident excerpts; a claim so labelled without any verified binding is treated
    as an evidence gap. Directions: hypotheses and overstated claims. Gaps: unsupported and
    external-unknown claims (a claim with no check counts as unsupported) and missing_info.
    Next steps: recommended_actions. A contradicted claim appears nowhere.

    Args:
        verifier_result: The final verifier result (its `claim_checks` give each claim's label).
        structured_output: The executor's structured output.
        gatekeeper_result: The Gatekeeper result (its `verified_excerpts`).

    Returns:
        `{confirmed: [{claim_id, claim_text, inference, evidence: [{invocation_id, raw_path,
        text}]}], directions: [{text, kind, basis?, claim_id?}], gaps: [{text, kind,
        claim_id?}], next_steps: [{text, source}]}`.
    """
    labels = _labels(verifier_result)
    confirmed: list[dict[str, Any]] = []
    directions: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    for claim_id, claim in claims_with_ids(structured_output):
        text = _safe(claim_text(claim))
        label = labels.get(claim_id, "unsupported")
        if label == "contradicted" or not text:
            continue
        has_verified = bool(verified_excerpts_for(gatekeeper_result, claim_id))
        if label in CONFIRMED_LABELS and not has_verified:
            label = "unsupported"
        if label in CONFIRMED_LABELS:
            confirmed.append(
                {
                    "claim_id": claim_id,
                    "claim_text": text,
                    "inference": label == "reasonable_inference",
                    "evidence": _evidence(gatekeeper_result, claim_id),
                }
            )
        elif label == "overstated":
            directions.append({"text": text, "kind": "overstated", "claim_id": claim_id})
        else:
            kind = "external_unknown" if label == "external_unknown" else "unsupported"
            gaps.append({"text": text, "kind": kind, "claim_id": claim_id})
    for hypothesis in _items(structured_output, "hypotheses"):
        text = _safe(hypothesis.get("text"))
        if text:
            directions.insert(
                sum(1 for d in directions if d["kind"] == "hypothesis"),
                {"text": text, "kind": "hypothesis", "basis": _safe(hypothesis.get("basis"))},
            )
    for info in _items(structured_output, "missing_info"):
        text = _safe(info.get("text"))
        if text:
            gaps.append({"text": text, "kind": "missing_info"})
    next_steps: list[dict[str, Any]] = []
    for action in _items(structured_output, "recommended_actions"):
        text = _safe(action.get("text"))
        if text:
            next_steps.append({"text": text, "source": _safe(action.get("source"))})
    return {
        "confirmed": confirmed,
        "directions": directions,
        "gaps": gaps,
        "next_steps": next_steps,
    }


def _list(material: Any, key: str) -> list[dict[str, Any]]:
    """One list of the material, dict items only."""
    value = material.get(key) if isinstance(material, dict) else None
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _section(t: dict[str, str], title: str, lines: list[str]) -> str:
    """A heading followed by its bullet lines."""
    return "\n".join([t["heading"].format(title=title), *(f"- {line}" for line in lines)])


def _confirmed_lines(t: dict[str, str], confirmed: list[dict[str, Any]]) -> list[str]:
    """One line per confirmed claim, inferences marked."""
    lines = []
    for item in confirmed:
        text = _safe(item.get("claim_text"))
        if text:
            lines.append(text + (t["inference"] if item.get("inference") else ""))
    return lines


def _evidence_lines(t: dict[str, str], confirmed: list[dict[str, Any]]) -> list[str]:
    """One line per distinct verified excerpt of the confirmed claims."""
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for item in confirmed:
        evidence = item.get("evidence")
        for excerpt in evidence if isinstance(evidence, list) else []:
            if not isinstance(excerpt, dict) or not isinstance(excerpt.get("text"), str):
                continue
            inv = (
                excerpt.get("invocation_id")
                if isinstance(excerpt.get("invocation_id"), str)
                else ""
            )
            path = excerpt.get("raw_path") if isinstance(excerpt.get("raw_path"), str) else ""
            key = (str(inv), str(path))
            if key in seen:
                continue
            seen.add(key)
            where = " ".join(part for part in (f"[{inv}]" if inv else "", str(path)) if part)
            text = _bounded(excerpt["text"])
            lines.append(f"{where}{t['colon']}{text}" if where else text)
    return lines


def _direction_lines(t: dict[str, str], directions: list[dict[str, Any]]) -> list[str]:
    """One line per possible direction."""
    lines = []
    for item in directions:
        text = _safe(item.get("text"))
        if not text:
            continue
        if item.get("kind") == "overstated":
            lines.append(text + t["overstated"])
        else:
            basis = _safe(item.get("basis"))
            lines.append(text + (t["basis"].format(basis=basis) if basis else ""))
    return lines


def _gap_lines(t: dict[str, str], gaps: list[dict[str, Any]]) -> list[str]:
    """One line per evidence gap, saying what kind of gap it is."""
    lines = []
    for item in gaps:
        text = _safe(item.get("text"))
        if not text:
            continue
        kind = item.get("kind")
        suffix = t[kind] if kind in ("external_unknown", "missing_info") else t["unsupported"]
        lines.append(text + suffix)
    return lines


def _step_lines(t: dict[str, str], steps: list[dict[str, Any]]) -> list[str]:
    """One line per next step, with its source when stated."""
    lines = []
    for item in steps:
        text = _safe(item.get("text"))
        if text:
            source = _safe(item.get("source"))
            lines.append(text + (t["source"].format(source=source) if source else ""))
    return lines


def _score_text(score: Any) -> str:
    """The score with two decimals (0.00 when unreadable)."""
    if isinstance(score, bool) or not isinstance(score, int | float) or math.isnan(score):
        return "0.00"
    return f"{min(1.0, max(0.0, float(score))):.2f}"


def render_template(
    material: dict[str, Any],
    *,
    verdict: str,
    score: float,
    language: str = "zh",
    offline: bool = False,
) -> str:
    """Render the user-facing answer from Verifier-allowed material.

    PASS: conclusion from confirmed facts, evidence list, next steps. LOW_CONFID: confirmed facts,
    possible directions, evidence gaps, next steps. REJECT (and any unknown verdict): a statement
    that no reliable answer could be produced, directly observed facts only (no inferences, which
    could amount to a root cause), evidence gaps, next steps, and no directions. Inferences are
    marked; empty sections are left out, except that the absence of
    confirmed facts is stated. A footer gives the verdict and score, and the offline mode when set.

    Args:
        material: The output of `select_material`.
        verdict: The effective verdict.
        score: The groundedness score.
        language: `zh` (readable zh-CN) or `en`.
        offline: Whether the answer was produced by deterministic rules without a language model.

    Returns:
        The answer text.

    Raises:
        ValueError: If `language` is not `zh` or `en`.
    """
    if language not in LANGUAGES:
        raise ValueError(f"unsupported answer language {language!r}; expected zh or en")
    t = _TEXT[language]
    confirmed = _list(material, "confirmed")
    confirmed_lines = _confirmed_lines(t, confirmed)
    blocks: list[str] = []
    if verdict == "PASS":
        if confirmed_lines:
            blocks.append(t["pass_intro"])
            blocks.append(_section(t, t["conclusion"], confirmed_lines))
        else:
            blocks.append(t["none_confirmed"])
        evidence_lines = _evidence_lines(t, confirmed)
        if evidence_lines:
            blocks.append(_section(t, t["evidence"], evidence_lines))
    else:
        blocks.append(t["low_intro"] if verdict == "LOW_CONFID" else t["reject_intro"])
        if verdict != "LOW_CONFID":
            # Degraded answer: facts only. An inference (possibly causal) could be a root cause.
            confirmed_lines = _confirmed_lines(t, [c for c in confirmed if not c.get("inference")])
        if confirmed_lines:
            blocks.append(_section(t, t["confirmed"], confirmed_lines))
        else:
            blocks.append(t["none_confirmed"])
        if verdict == "LOW_CONFID":
            direction_lines = _direction_lines(t, _list(material, "directions"))
            if direction_lines:
                blocks.append(_section(t, t["directions"], direction_lines))
        gap_lines = _gap_lines(t, _list(material, "gaps"))
        if gap_lines:
            blocks.append(_section(t, t["gaps"], gap_lines))
    step_lines = _step_lines(t, _list(material, "next_steps"))
    if step_lines:
        blocks.append(_section(t, t["next_steps"], step_lines))
    footer = [t["footer"].format(verdict=verdict, score=_score_text(score))]
    if offline:
        footer.append(t["offline"])
    blocks.append("\n".join(footer))
    return "\n\n".join(blocks)
