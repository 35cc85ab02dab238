"""Fixed, safe answer template (docs/contracts.md, Composer), in Chinese (default) or English.

The template sees only Verifier-allowed material: confirmed claims (direct observations and marked
inferences) with their Gatekeeper-verified excerpts, possible directions (hypotheses and overstated
claims), evidence gaps (unsupported / external-unknown claims and missing information) and next
steps. A contradicted claim is never shown. The rendered text never contains executor JSON.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence

from state.display import one_line
from state.records import (
    CONFIRMED_LABELS,
    ClaimCheck,
    ClaimLabel,
    ConclusionCheck,
    ConfirmedItem,
    DirectionItem,
    EvidenceLine,
    ExecutorAnswer,
    GapItem,
    GapKind,
    GatekeeperResult,
    Material,
    NextStep,
    QuestionCoverage,
    RootCause,
)
from tools.registry import is_guidance
from verification.conclusion import reason_text
from verification.gatekeeper import verified_excerpts_of
from verification.question import facet_label
from verification.text import asserts_cause

LANGUAGES: tuple[str, ...] = ("zh", "en")
"""Languages the template renders."""

EXCERPT_CHARS = 300
"""Maximum length of one evidence excerpt in the answer."""

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
        "answer": "回答",
        "conclusion": "结论（已确认的事实）",
        "confirmed": "已确认的事实",
        "none_confirmed": "本次没有能够由证据确认的事实。",
        "evidence": "证据",
        "directions": "可能的方向（有待进一步排查）",
        "gaps": "证据缺口",
        "next_steps": "下一步建议",
        "inference": "（推断）",
        "root_line": "最可能的根因：{service}",
        "derived_yes": "是（由下列已确认的事实推出）",
        "derived_no": "否（由下列已确认的事实推出）",
        "root_mechanism": "，机制：{mechanism}",
        "basis": "（依据：{basis}）",
        "overstated": "（证据只支持其中一部分）",
        "unsupported": "（本次未找到支持该说法的证据）",
        "external_unknown": "（依据为知识库或经验，无法用本次证据核实）",
        "missing_info": "（缺少的信息）",
        "not_checked": "（未经校验：超出了校验器的输入范围）",
        "unanswered": "（问题问到了这一点，但没有已确认的事实回答它）",
        "conclusion_gap": "（这个结论不能由已确认的事实推出）",
        "reason": "（{reason}）",
        "not_run": "（未执行：本轮的工具调用预算已用完）",
        "failed": "（查询失败：数据源返回了错误，本回答不含它的结果）",
        "model": "（关于模型本身，而非事故）",
        "model_text": "[模型英文原文] ",
        "withheld_steps": "部分建议把未经核实的原因当作事实陈述，已略去。",
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
        "answer": "Answer",
        "conclusion": "Conclusion (confirmed facts)",
        "confirmed": "Confirmed facts",
        "none_confirmed": "No facts could be established from the evidence gathered.",
        "evidence": "Evidence",
        "directions": "Possible directions (to be investigated)",
        "gaps": "Evidence gaps",
        "next_steps": "Next steps",
        "inference": " (inference)",
        "root_line": "Most likely root cause: {service}",
        "derived_yes": "Yes (follows from the confirmed facts below)",
        "derived_no": "No (follows from the confirmed facts below)",
        "root_mechanism": ", mechanism: {mechanism}",
        "basis": " (basis: {basis})",
        "overstated": " (only partly supported by the evidence)",
        "unsupported": " (no supporting evidence found in this diagnosis)",
        "external_unknown": " (rests on runbooks or general experience; cannot be checked here)",
        "missing_info": " (missing information)",
        "not_checked": " (not checked: it did not fit the Verifier's input)",
        "unanswered": " (asked in the question; no confirmed fact answers it)",
        "conclusion_gap": " (this conclusion does not follow from the confirmed facts)",
        "reason": " ({reason})",
        "not_run": " (not run: the tool budget of the round was spent)",
        "failed": " (failed: the source answered an error; nothing from it is in this answer)",
        "model": " (about the model, not the incident)",
        "withheld_steps": "Suggestions that stated an unverified cause as fact are left out.",
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


def safe_text(text: str) -> str:
    """A displayable one-line text, or '' when it carries executor JSON."""
    line = one_line(text)
    return "" if any(key in line for key in _CONTRACT_KEYS) else line


def _labels(checks: Sequence[ClaimCheck]) -> dict[str, ClaimLabel]:
    """Final label of each checked claim id (the first check of a claim)."""
    labels: dict[str, ClaimLabel] = {}
    for check in checks:
        labels.setdefault(check["claim_id"], check["verification"])
    return labels


def _evidence(gatekeeper: GatekeeperResult, claim_id: str) -> list[EvidenceLine]:
    """The claim's verified incident excerpts (knowledge refs are not incident evidence)."""
    return [
        EvidenceLine(
            invocation_id=excerpt["invocation_id"],
            raw_path=excerpt["raw_path"],
            text=excerpt["text"],
        )
        for excerpt in verified_excerpts_of(gatekeeper, claim_id)
        if not is_guidance(excerpt["tool_name"])
    ]


def select_material(
    checks: Sequence[ClaimCheck],
    answer: ExecutorAnswer,
    gatekeeper: GatekeeperResult,
    unchecked: Collection[str] = (),
    coverage: QuestionCoverage | None = None,
    conclusion: ConclusionCheck | None = None,
    language: str = "zh",
    root_cause: RootCause | None = None,
) -> Material:
    """Select the Verifier-allowed material the answer may be built from.

    Confirmed: claims whose final label is ``direct_observation`` (inference False) or
    ``reasonable_inference`` (inference True) and that have a Gatekeeper-verified binding, with
    their verified incident excerpts; a claim so labelled without any verified binding is treated
    as an evidence gap. Directions: hypotheses and overstated claims. Gaps: unsupported and
    external-unknown claims (a claim with no check counts as unsupported) and missing_info.
    Next steps: recommended_actions. A contradicted claim appears nowhere. A claim in
    ``unchecked`` (the Verifier never saw it) is a gap that says it was not checked. With a
    ``coverage``, each facet of the question left unanswered and each tool call the budget cut
    is a gap too (these two kinds are shown under every verdict). The ``conclusion``, when code
    found it follows from confirmed claims (``verification.conclusion``), is the answer's first
    line, and so is the yes or no code derived from them when the answer stated none; one that
    does not follow is a gap saying why, in ``language`` (the answer's).

    A ``root_cause`` the diagnosis kept (``verification.root_cause``: its claims confirmed) whose
    claims are all observations, as a guided answer's chosen claims are (the analysis's suspect
    line, not a sentence naming the cause), is worded as the first confirmed line, marked as an
    inference: the service, and its mechanism only when one of those claims states it word for
    word. A root cause some claim already states in words (a ``causal`` claim) adds nothing.
    """
    labels = _labels(checks)
    confirmed: list[ConfirmedItem] = []
    overstated: list[DirectionItem] = []
    gaps: list[GapItem] = []
    for claim in answer["claims"]:
        claim_id = claim["claim_id"]
        text = safe_text(claim["claim_text"])
        label = labels.get(claim_id, "unsupported")
        if label == "contradicted" or not text:
            continue
        if label in CONFIRMED_LABELS and not verified_excerpts_of(gatekeeper, claim_id):
            label = "unsupported"
        if label in CONFIRMED_LABELS:
            confirmed.append(
                ConfirmedItem(
                    claim_id=claim_id,
                    claim_text=text,
                    inference=label == "reasonable_inference",
                    evidence=_evidence(gatekeeper, claim_id),
                )
            )
        elif label == "overstated":
            overstated.append(
                DirectionItem(text=text, kind="overstated", basis="", claim_id=claim_id)
            )
        else:
            kind: GapKind = "external_unknown" if label == "external_unknown" else "unsupported"
            if claim_id in unchecked:
                kind = "not_checked"
            gaps.append(GapItem(text=text, kind=kind, claim_id=claim_id))
    hypotheses = [
        DirectionItem(text=text, kind="hypothesis", basis=safe_text(item["basis"]), claim_id=None)
        for item in answer["hypotheses"]
        if (text := safe_text(item["text"]))
    ]
    gaps += [
        GapItem(text=text, kind="model", claim_id=None)
        for item in answer["missing_info"]
        if item.get("about_model") and (text := safe_text(item["text"]))
    ]
    missing = [
        text
        for item in answer["missing_info"]
        if not item.get("about_model") and (text := safe_text(item["text"]))
    ]
    # Missing information that names a cause is a possible direction, not a gap to state as fact.
    gaps += [
        GapItem(text=t, kind="missing_info", claim_id=None) for t in missing if not asserts_cause(t)
    ]
    hypotheses += [
        DirectionItem(text=t, kind="hypothesis", basis="", claim_id=None)
        for t in missing
        if asserts_cause(t)
    ]
    if coverage is not None:
        gaps += [
            GapItem(text=text, kind="unanswered", claim_id=None)
            for item in coverage["unanswered"]
            if (text := safe_text(item))
        ]
        gaps += [
            GapItem(text=text, kind="not_run", claim_id=None)
            for item in coverage["not_run"]
            if (text := safe_text(item))
        ]
        gaps += [
            GapItem(text=text, kind="failed", claim_id=None)
            for item in coverage.get("failed", [])
            if (text := safe_text(item))
        ]
    steps = [(safe_text(item["text"]), item["source"]) for item in answer["recommended_actions"]]
    extra: dict[str, str] = {}
    if conclusion is not None and conclusion["status"] == "follows":
        said = safe_text(conclusion["text"])
        if said:
            extra["conclusion"] = said
    elif (
        conclusion is not None
        and conclusion["status"] == "derived"
        and conclusion["expected"] in ("yes", "no")
    ):
        # The answer stated no yes or no; code read the one its confirmed claims show.
        t = _TEXT["en" if language == "en" else "zh"]
        extra["conclusion"] = t[f"derived_{conclusion['expected']}"]
    elif conclusion is not None and conclusion["status"] == "does_not_follow":
        why = _TEXT["en" if language == "en" else "zh"]["reason"].format(
            reason=reason_text(conclusion, language)
        )
        text = safe_text(f"{conclusion['text']}{why}")
        if text:
            gaps.insert(
                0, GapItem(text=text, kind="conclusion_gap", claim_id=conclusion["claim_id"])
            )
    material = Material(
        confirmed=confirmed,
        directions=hypotheses + overstated,
        gaps=gaps,
        # A next step that states a cause as established would present it as a fact.
        next_steps=[
            NextStep(text=text, source=safe_text(source))
            for text, source in steps
            if text and not asserts_cause(text)
        ],
        withheld_steps=sum(1 for text, _ in steps if text and asserts_cause(text)),
    )
    if "conclusion" in extra:
        material["conclusion"] = extra["conclusion"]
    line = _root_line(root_cause, answer, confirmed, language)
    if line:
        material["root_cause"] = line
    return material


def _root_line(
    root_cause: RootCause | None,
    answer: ExecutorAnswer,
    confirmed: Sequence[ConfirmedItem],
    language: str,
) -> str:
    """The root cause worded for the answer, or "" (see ``select_material``)."""
    if root_cause is None:
        return ""
    ids = set(root_cause["claim_ids"])
    claims = [claim for claim in answer["claims"] if claim["claim_id"] in ids]
    stated = [item["claim_text"] for item in confirmed if item["claim_id"] in ids]
    if not claims or len(stated) < len(ids) or any(c["claim_type"] == "causal" for c in claims):
        return ""
    t = _TEXT["en" if language == "en" else "zh"]
    line = t["root_line"].format(service=root_cause["service"])
    mechanism = root_cause["mechanism"].strip()
    if mechanism and any(mechanism in text for text in stated):
        line += t["root_mechanism"].format(mechanism=mechanism)
    return safe_text(line)


def _section(t: dict[str, str], title: str, lines: list[str]) -> str:
    """A heading followed by its bullet lines."""
    return "\n".join([t["heading"].format(title=title), *(f"- {line}" for line in lines)])


def _confirmed_lines(t: dict[str, str], confirmed: Sequence[ConfirmedItem]) -> list[str]:
    """One line per confirmed claim, inferences marked."""
    return [
        text + (t["inference"] if item["inference"] else "")
        for item in confirmed
        if (text := safe_text(item["claim_text"]))
    ]


def _evidence_lines(t: dict[str, str], confirmed: Sequence[ConfirmedItem]) -> list[str]:
    """One line per distinct verified excerpt of the confirmed claims."""
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for item in confirmed:
        for excerpt in item["evidence"]:
            key = (excerpt["invocation_id"], excerpt["raw_path"])
            if key in seen:
                continue
            seen.add(key)
            inv, path = key
            where = " ".join(part for part in (f"[{inv}]" if inv else "", path) if part)
            text = one_line(excerpt["text"], EXCERPT_CHARS)
            lines.append(f"{where}{t['colon']}{text}" if where else text)
    return lines


def _direction_lines(t: dict[str, str], directions: Sequence[DirectionItem]) -> list[str]:
    """One line per possible direction."""
    lines = []
    for item in directions:
        text = safe_text(item["text"])
        if not text:
            continue
        if item["kind"] == "overstated":
            lines.append(text + t["overstated"])
        else:
            basis = safe_text(item["basis"])
            lines.append(text + (t["basis"].format(basis=basis) if basis else ""))
    return lines


ALWAYS_SHOWN_GAPS: tuple[GapKind, ...] = (
    "model",
    "unanswered",
    "not_run",
    "failed",
    "conclusion_gap",
)
"""Gaps shown under every verdict: what limited the model (it made no tool call, a reply reached
its token limit), what the question asked and no fact answers, what was not looked at because
the tool budget was spent, what could not be looked at because the source failed, and a
conclusion that does not follow from the confirmed facts."""

MODEL_WORDED: tuple[GapKind, ...] = (
    "unsupported",
    "external_unknown",
    "missing_info",
    "not_checked",
)
"""Gaps whose text a model wrote: in a Chinese answer, such a text written in English is marked."""
_CJK = re.compile("[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile("[A-Za-z]{3,}")


def _gap_lines(t: dict[str, str], gaps: Sequence[GapItem], language: str) -> list[str]:
    """One line per evidence gap, saying what kind of gap it is."""
    lines = []
    for item in gaps:
        text = safe_text(item["text"])
        if item["kind"] == "unanswered":
            text = facet_label(text, language)
        if text and "model_text" in t and item["kind"] in MODEL_WORDED and model_english(text):
            text = t["model_text"] + text
        if text:
            lines.append(text + t[item["kind"]])
    return lines


def model_english(text: str) -> bool:
    """Whether a text is English words with no Chinese (a model's English in a Chinese answer)."""
    return not _CJK.search(text) and _LATIN_WORD.search(text) is not None


def _step_lines(t: dict[str, str], steps: Sequence[NextStep]) -> list[str]:
    """One line per next step, with its source when stated."""
    lines = []
    for item in steps:
        text = safe_text(item["text"])
        if text:
            source = safe_text(item["source"])
            lines.append(text + (t["source"].format(source=source) if source else ""))
    return lines


def _score_text(score: float) -> str:
    """The score with two decimals (0.00 when not a number)."""
    if math.isnan(score):
        return "0.00"
    return f"{min(1.0, max(0.0, score)):.2f}"


def render_template(
    material: Material,
    *,
    verdict: str,
    score: float,
    language: str = "zh",
    offline: bool = False,
) -> str:
    """Render the user-facing answer from Verifier-allowed material.

    PASS: conclusion from confirmed facts, evidence list, the question's unanswered facets and the
    tool calls the budget cut (when any), next steps. LOW_CONFID: confirmed facts,
    possible directions, evidence gaps, next steps. REJECT (and any unknown verdict): a statement
    that no reliable answer could be produced, directly observed facts only (no inferences, which
    could amount to a root cause), evidence gaps, next steps, and no directions. Inferences are
    marked; empty sections are left out, except that the absence of confirmed facts is stated.
    A footer gives the verdict and score, and the offline mode when set.

    Raises:
        ValueError: If ``language`` is not ``zh`` or ``en``.
    """
    if language not in LANGUAGES:
        raise ValueError(f"unsupported answer language {language!r}; expected zh or en")
    t = _TEXT[language]
    confirmed = material["confirmed"]
    confirmed_lines = _confirmed_lines(t, confirmed)
    if material.get("root_cause") and verdict in ("PASS", "LOW_CONFID"):
        # The root cause the diagnosis kept leads the confirmed facts, marked as an inference.
        confirmed_lines.insert(0, material.get("root_cause", "") + t["inference"])
    blocks: list[str] = []
    if verdict == "PASS" and material.get("conclusion"):
        blocks.append(_section(t, t["answer"], [material.get("conclusion", "")]))
    if verdict == "PASS":
        if confirmed_lines:
            blocks.append(t["pass_intro"])
            blocks.append(_section(t, t["conclusion"], confirmed_lines))
        else:
            blocks.append(t["none_confirmed"])
        evidence_lines = _evidence_lines(t, confirmed)
        if evidence_lines:
            blocks.append(_section(t, t["evidence"], evidence_lines))
        shown = [gap for gap in material["gaps"] if gap["kind"] in ALWAYS_SHOWN_GAPS]
        gap_lines = _gap_lines(t, shown, language)
        if gap_lines:
            blocks.append(_section(t, t["gaps"], gap_lines))
    else:
        blocks.append(t["low_intro"] if verdict == "LOW_CONFID" else t["reject_intro"])
        if verdict != "LOW_CONFID":
            # Degraded answer: facts only. An inference (possibly causal) could be a root cause.
            confirmed_lines = _confirmed_lines(t, [c for c in confirmed if not c["inference"]])
        blocks.append(
            _section(t, t["confirmed"], confirmed_lines) if confirmed_lines else t["none_confirmed"]
        )
        if verdict == "LOW_CONFID":
            direction_lines = _direction_lines(t, material["directions"])
            if direction_lines:
                blocks.append(_section(t, t["directions"], direction_lines))
        gap_lines = _gap_lines(t, material["gaps"], language)
        if gap_lines:
            blocks.append(_section(t, t["gaps"], gap_lines))
    step_lines = _step_lines(t, material["next_steps"])
    if material["withheld_steps"]:
        step_lines.append(t["withheld_steps"])
    if step_lines:
        blocks.append(_section(t, t["next_steps"], step_lines))
    footer = [t["footer"].format(verdict=verdict, score=_score_text(score))]
    if offline:
        footer.append(t["offline"])
    blocks.append("\n".join(footer))
    return "\n\n".join(blocks)


_FAILED: dict[str, str] = {
    "zh": (
        "抱歉，本次诊断未能完成：{reason}\n\n"
        "没有得出任何经过核实的结论；请根据上面的原因处理后重新提问。"
        "已收集到的证据记录在诊断 {diagnosis} 中。"
    ),
    "en": (
        "Sorry, the diagnosis could not finish: {reason}\n\n"
        "No verified conclusion was reached; fix the cause above and ask again. The evidence "
        "gathered so far is recorded in diagnosis {diagnosis}."
    ),
}


def failed_answer(reason: str, language: str, diagnosis_id: str | None) -> str:
    """The degraded answer of a diagnosis that could not finish: the reason, nothing else."""
    text = _FAILED["en" if language == "en" else "zh"]
    return text.format(reason=safe_text(reason), diagnosis=diagnosis_id or "-")
