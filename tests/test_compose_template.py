"""Safe answer template: material selection and per-verdict rendering in zh and en."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from state.records import GatekeeperResult, Material, ParseStatus
from verification.answer import render_template
from verification.answer import select_material as select_records
from verification.executor_output import read_answer

VALID: ParseStatus = {"status": "valid", "fence_stripped": False, "error": None}


def select_material(verifier: Any, structured: Any, gatekeeper: Any) -> Material:
    """``select_material`` on raw inputs, read as the graph reads them."""
    checks = [
        {**check, "model_verification": check["verification"]}
        for check in verifier["claim_checks"]
    ]
    result: GatekeeperResult = {
        "status": "pass",
        "severity": "none",
        "checked_bindings": 0,
        "failed_rules": [],
        "warnings": [],
        "errors": [],
        "rule_set_version": "test",
        "rules": [],
        **gatekeeper,
    }
    return select_records(checks, read_answer(VALID, structured), result)

TEXTS = {
    "c1": "order-service 在 10:01 返回 HTTP 500",
    "c2": "order-service 的连接池已耗尽",
    "c3": "order-service 全部实例都在报错",
    "c4": "payment-service 的 CPU 达到 95%",
    "c5": "连接池大小应设置为 50",
    "c6": "order-service 没有任何错误日志",
}
HYPOTHESIS = "慢查询长时间占用连接导致连接池耗尽"
BASIS = "连接池报错与 500 同时出现"
MISSING = "缺少数据库侧的连接数指标"
ACTION = "检查 order-service 的连接池配置"
LOG_TEXT = "2026-03-01T10:01:00Z ERROR order-service order-1: HTTP 500 Cannot acquire connection"
LABELS = {
    "c1": "direct_observation",
    "c2": "reasonable_inference",
    "c3": "overstated",
    "c4": "unsupported",
    "c5": "external_unknown",
    "c6": "contradicted",
}

CONFIRMED_HEADINGS = {
    "zh": ("已确认的事实", "结论（已确认的事实）"),
    "en": ("Confirmed facts", "Conclusion (confirmed facts)"),
}
HEADING = {"zh": re.compile(r"^【(.+)】$"), "en": re.compile(r"^## (.+)$")}


def _excerpt(inv: str, tool: str, path: str, text: str) -> dict[str, Any]:
    return {"binding": 0, "invocation_id": inv, "tool_name": tool, "raw_path": path, "text": text}


def _inputs() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    structured = {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {"claim_id": cid, "claim_type": "observation", "claim_text": text}
            for cid, text in TEXTS.items()
        ],
        "hypotheses": [{"text": HYPOTHESIS, "basis": BASIS}],
        "recommended_actions": [{"text": ACTION, "source": "runbook"}],
        "missing_info": [{"text": MISSING, "suggested_query": {"tool": "query_metrics"}}],
    }
    log = _excerpt("inv-1", "query_logs", "logs[0]", LOG_TEXT)
    gatekeeper = {
        "status": "pass",
        "severity": "none",
        "verified_excerpts": {
            "c1": [log],
            "c2": [log],
            "c3": [log],
            "c5": [_excerpt("inv-3", "lookup_knowledge", "documents[0]", "Pool runbook: 50")],
            "c6": [log],
        },
    }
    verifier = {
        "verdict": "LOW_CONFID",
        "claim_checks": [
            {"claim_id": cid, "verification": label, "detail": "", "evidence_refs": []}
            for cid, label in LABELS.items()
        ],
    }
    return verifier, structured, gatekeeper


def _material() -> dict[str, Any]:
    return select_material(*_inputs())


def _sections(answer: str, language: str) -> dict[str, list[str]]:
    """Heading -> lines under it; text before the first heading is under ''."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in answer.splitlines():
        match = HEADING[language].match(line)
        if match:
            current = match.group(1)
            sections[current] = []
        elif line.strip():
            sections[current].append(line)
    return sections


def _heading_of(answer: str, language: str, text: str) -> list[str]:
    return [
        h for h, lines in _sections(answer, language).items() if any(text in ln for ln in lines)
    ]


def _is_confirmed_heading(heading: str, language: str) -> bool:
    return heading in CONFIRMED_HEADINGS[language]


# --- material --------------------------------------------------------------------------------


def test_select_material_sorts_claims_by_final_label() -> None:
    material = _material()
    assert [(c["claim_id"], c["inference"]) for c in material["confirmed"]] == [
        ("c1", False),
        ("c2", True),
    ]
    assert material["confirmed"][0]["claim_text"] == TEXTS["c1"]
    assert material["confirmed"][0]["evidence"] == [
        {"invocation_id": "inv-1", "raw_path": "logs[0]", "text": LOG_TEXT}
    ]
    assert [(d["text"], d["kind"]) for d in material["directions"]] == [
        (HYPOTHESIS, "hypothesis"),
        (TEXTS["c3"], "overstated"),
    ]
    assert material["directions"][0]["basis"] == BASIS
    assert [(g["text"], g["kind"]) for g in material["gaps"]] == [
        (TEXTS["c4"], "unsupported"),
        (TEXTS["c5"], "external_unknown"),
        (MISSING, "missing_info"),
    ]
    assert material["next_steps"] == [{"text": ACTION, "source": "runbook"}]


def test_select_material_never_includes_contradicted_claims() -> None:
    dumped = json.dumps(_material(), ensure_ascii=False)
    assert TEXTS["c6"] not in dumped


def test_select_material_confirmed_label_without_verified_binding_is_a_gap() -> None:
    verifier, structured, gatekeeper = _inputs()
    del gatekeeper["verified_excerpts"]["c1"]
    material = select_material(verifier, structured, gatekeeper)
    assert "c1" not in [c["claim_id"] for c in material["confirmed"]]
    assert {"text": TEXTS["c1"], "kind": "unsupported", "claim_id": "c1"} in material["gaps"]


def test_select_material_unchecked_claim_is_a_gap() -> None:
    verifier, structured, gatekeeper = _inputs()
    verifier["claim_checks"] = [c for c in verifier["claim_checks"] if c["claim_id"] != "c1"]
    material = select_material(verifier, structured, gatekeeper)
    assert TEXTS["c1"] in [g["text"] for g in material["gaps"]]


def test_select_material_knowledge_excerpts_are_not_listed_as_evidence() -> None:
    verifier, structured, gatekeeper = _inputs()
    gatekeeper["verified_excerpts"]["c1"].append(
        _excerpt("inv-3", "lookup_knowledge", "documents[0]", "Pool runbook: 50")
    )
    material = select_material(verifier, structured, gatekeeper)
    assert [e["invocation_id"] for e in material["confirmed"][0]["evidence"]] == ["inv-1"]


@pytest.mark.parametrize(
    "structured",
    [None, "text", {"claims": "x", "hypotheses": 3}, {"claims": [None, 5, {"claim_text": 1}]}],
    ids=["none", "string", "wrong-types", "junk-claims"],
)
def test_select_material_from_garbage_output_confirms_nothing(structured: Any) -> None:
    material = select_material({"claim_checks": []}, structured, {"verified_excerpts": {}})
    assert material["confirmed"] == []
    assert material["directions"] == []


def test_select_material_drops_text_carrying_executor_json() -> None:
    verifier, structured, gatekeeper = _inputs()
    leaked = json.dumps(structured)
    structured["hypotheses"].append({"text": leaked, "basis": ""})
    structured["recommended_actions"].append({"text": leaked, "source": ""})
    material = select_material(verifier, structured, gatekeeper)
    answer = render_template(material, verdict="LOW_CONFID", score=0.5)
    assert "answer_version" not in answer
    assert "evidence_bindings" not in answer


# --- rendering -------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_pass_sections(language: str) -> None:
    answer = render_template(_material(), verdict="PASS", score=0.8, language=language)
    sections = _sections(answer, language)
    headings = [h for h in sections if h]
    if language == "zh":
        assert headings == ["结论（已确认的事实）", "证据", "下一步建议"]
        assert "校验结论：PASS（证据支撑度 0.80）" in answer
        assert "- [inv-1] logs[0]：" + LOG_TEXT in answer
    else:
        assert headings == ["Conclusion (confirmed facts)", "Evidence", "Next steps"]
        assert "Verification: PASS (groundedness 0.80)" in answer
        assert "- [inv-1] logs[0]: " + LOG_TEXT in answer
    assert TEXTS["c1"] in answer and TEXTS["c2"] in answer
    for absent in (HYPOTHESIS, TEXTS["c3"], TEXTS["c4"], TEXTS["c5"], TEXTS["c6"], MISSING):
        assert absent not in answer
    assert ACTION in answer


@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_low_confid_sections(language: str) -> None:
    answer = render_template(_material(), verdict="LOW_CONFID", score=0.4333, language=language)
    sections = _sections(answer, language)
    headings = [h for h in sections if h]
    if language == "zh":
        assert headings == [
            "已确认的事实",
            "可能的方向（有待进一步排查）",
            "证据缺口",
            "下一步建议",
        ]
        assert "校验结论：LOW_CONFID（证据支撑度 0.43）" in answer
    else:
        assert headings == [
            "Confirmed facts",
            "Possible directions (to be investigated)",
            "Evidence gaps",
            "Next steps",
        ]
        assert "Verification: LOW_CONFID (groundedness 0.43)" in answer
    assert _heading_of(answer, language, HYPOTHESIS) == [headings[1]]
    assert _heading_of(answer, language, TEXTS["c3"]) == [headings[1]]
    assert _heading_of(answer, language, TEXTS["c4"]) == [headings[2]]
    assert _heading_of(answer, language, TEXTS["c5"]) == [headings[2]]
    assert _heading_of(answer, language, MISSING) == [headings[2]]
    assert _heading_of(answer, language, TEXTS["c1"]) == [headings[0]]
    assert BASIS in answer
    # the evidence list belongs to PASS only
    assert LOG_TEXT not in answer


@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_reject_sections(language: str) -> None:
    answer = render_template(_material(), verdict="REJECT", score=0.0, language=language)
    sections = _sections(answer, language)
    headings = [h for h in sections if h]
    if language == "zh":
        assert "无法根据本次收集到的证据给出可靠的回答" in answer
        assert headings == ["已确认的事实", "证据缺口", "下一步建议"]
        assert "校验结论：REJECT（证据支撑度 0.00）" in answer
    else:
        assert "a reliable answer could not be produced" in answer
        assert headings == ["Confirmed facts", "Evidence gaps", "Next steps"]
        assert "Verification: REJECT (groundedness 0.00)" in answer
    assert _heading_of(answer, language, TEXTS["c1"]) == [headings[0]]
    assert TEXTS["c4"] in answer and MISSING in answer and ACTION in answer


@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_reject_has_no_directions_or_inference(language: str) -> None:
    answer = render_template(_material(), verdict="REJECT", score=0.0, language=language)
    assert HYPOTHESIS not in answer
    assert BASIS not in answer
    assert TEXTS["c3"] not in answer
    # an inference (possibly causal) could amount to a root cause
    assert TEXTS["c2"] not in answer


@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID", "REJECT"])
@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_contradicted_claim_text_absent(verdict: str, language: str) -> None:
    answer = render_template(_material(), verdict=verdict, score=0.0, language=language)
    assert TEXTS["c6"] not in answer


@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID", "REJECT"])
@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_unsupported_claim_never_under_confirmed_heading(
    verdict: str, language: str
) -> None:
    answer = render_template(_material(), verdict=verdict, score=0.5, language=language)
    for text in (TEXTS["c3"], TEXTS["c4"], TEXTS["c5"], HYPOTHESIS, MISSING):
        for heading in _heading_of(answer, language, text):
            assert not _is_confirmed_heading(heading, language), (text, heading)


@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID", "REJECT"])
@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_other_headings_never_say_confirmed(verdict: str, language: str) -> None:
    answer = render_template(_material(), verdict=verdict, score=0.5, language=language)
    words = ("确认", "证实", "结论") if language == "zh" else ("confirm", "conclusion", "verified")
    for heading in _sections(answer, language):
        if heading and not _is_confirmed_heading(heading, language):
            assert not any(w in heading.lower() for w in words), heading


@pytest.mark.parametrize(
    ("language", "marked"),
    [("zh", TEXTS["c2"] + "（推断）"), ("en", TEXTS["c2"] + " (inference)")],
)
@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID"])
def test_render_template_marks_inference(language: str, marked: str, verdict: str) -> None:
    answer = render_template(_material(), verdict=verdict, score=0.8, language=language)
    assert f"- {marked}" in answer.splitlines()
    # the direct observation is not marked
    assert f"- {TEXTS['c1']}" in answer.splitlines()


@pytest.mark.parametrize(
    ("language", "offline_text"),
    [("zh", "离线模式"), ("en", "Offline mode")],
)
def test_render_template_offline_label(language: str, offline_text: str) -> None:
    online = render_template(_material(), verdict="PASS", score=1.0, language=language)
    offline = render_template(
        _material(), verdict="PASS", score=1.0, language=language, offline=True
    )
    assert offline_text not in online
    assert offline_text in offline
    assert offline.splitlines()[-1].startswith(offline_text)


@pytest.mark.parametrize("language", ["fr", "zh-CN", "", "EN"])
def test_render_template_invalid_language_raises(language: str) -> None:
    with pytest.raises(ValueError, match="language"):
        render_template(_material(), verdict="PASS", score=1.0, language=language)


@pytest.mark.parametrize(
    ("language", "statement"),
    [("zh", "本次没有能够由证据确认的事实。"), ("en", "No facts could be established")],
)
@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID", "REJECT"])
def test_render_template_says_when_nothing_is_confirmed(
    language: str, statement: str, verdict: str
) -> None:
    material = _material()
    material["confirmed"] = []
    answer = render_template(material, verdict=verdict, score=0.0, language=language)
    assert statement in answer


def test_render_template_omits_empty_sections() -> None:
    material: dict[str, Any] = {"confirmed": [], "directions": [], "gaps": [], "next_steps": []}
    answer = render_template(material, verdict="LOW_CONFID", score=0.0, language="en")
    assert [h for h in _sections(answer, "en") if h] == []
    assert "No facts could be established" in answer
    assert answer.splitlines()[-1] == "Verification: LOW_CONFID (groundedness 0.00)"


def test_render_template_bounds_evidence_excerpts() -> None:
    material = _material()
    material["confirmed"][0]["evidence"][0]["text"] = "x" * 1000
    answer = render_template(material, verdict="PASS", score=1.0, language="en")
    line = next(ln for ln in answer.splitlines() if ln.startswith("- [inv-1]"))
    assert "x" * 290 in line
    assert "x" * 301 not in line
    assert line.endswith("…")


def test_render_template_never_contains_executor_json() -> None:
    verifier, structured, gatekeeper = _inputs()
    answer = render_template(
        select_material(verifier, structured, gatekeeper), verdict="PASS", score=1.0
    )
    assert "answer_version" not in answer
    assert "claim_id" not in answer
    assert "{" not in answer


def test_render_template_default_language_is_chinese() -> None:
    answer = render_template(_material(), verdict="PASS", score=0.92)
    assert "校验结论：PASS（证据支撑度 0.92）" in answer
