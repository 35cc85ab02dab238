"""Safe answer template: material selection and per-verdict rendering in zh and en."""

from __future__ import annotations

import json
import re

import pytest

from state.records import (
    ClaimCheck,
    ClaimLabel,
    GatekeeperResult,
    JSONObject,
    Material,
    RootCause,
)
from tests.records import VALID, excerpt, gatekeeper_result, json_list, json_object
from verification.answer import render_template
from verification.answer import select_material as select_records
from verification.executor_output import read_answer


def select_material(
    checks: list[ClaimCheck], structured: object, gatekeeper: GatekeeperResult
) -> Material:
    """``select_material`` on a raw executor object, read as the graph reads it."""
    return select_records(checks, read_answer(VALID, structured), gatekeeper)


CLAIMS: dict[str, tuple[str, ClaimLabel]] = {
    "c1": ("order-service 在 10:01 返回 HTTP 500", "direct_observation"),
    "c2": ("order-service 的连接池已耗尽", "reasonable_inference"),
    "c3": ("order-service 全部实例都在报错", "overstated"),
    "c4": ("payment-service 的 CPU 达到 95%", "unsupported"),
    "c5": ("连接池大小应设置为 50", "external_unknown"),
    "c6": ("order-service 没有任何错误日志", "contradicted"),
}
"""Each claim of the executor answer, by id: its text and the label the Verifier gave it."""
TEXTS = {cid: text for cid, (text, _) in CLAIMS.items()}
LABELS = {cid: label for cid, (_, label) in CLAIMS.items()}
HYPOTHESIS = "慢查询长时间占用连接导致连接池耗尽"
BASIS = "连接池报错与 500 同时出现"
MISSING = "缺少数据库侧的连接数指标"
ACTION = "检查 order-service 的连接池配置"
LOG_TEXT = "2026-03-01T10:01:00Z ERROR order-service order-1: HTTP 500 Cannot acquire connection"

CONFIRMED_HEADINGS = {
    "zh": ("已确认的事实", "结论（已确认的事实）"),
    "en": ("Confirmed facts", "Conclusion (confirmed facts)"),
}
HEADING = {"zh": re.compile(r"^【(.+)】$"), "en": re.compile(r"^## (.+)$")}


def _inputs() -> tuple[list[ClaimCheck], JSONObject, GatekeeperResult]:
    structured: JSONObject = {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {"claim_id": cid, "claim_type": "observation", "claim_text": text}
            for cid, text in TEXTS.items()
        ],
        "hypotheses": [{"text": HYPOTHESIS, "basis": BASIS}],
        "recommended_actions": [{"text": ACTION, "source": "runbook"}],
        "missing_info": [{"text": MISSING, "suggested_query": {"tool": "query_metrics"}}],
    }
    log = excerpt("inv-1", "query_logs", "logs[0]", LOG_TEXT)
    runbook = excerpt("inv-3", "lookup_knowledge", "documents[0]", "Pool runbook: 50")
    gatekeeper = gatekeeper_result(
        {"c1": [log], "c2": [log], "c3": [log], "c5": [runbook], "c6": [log]}
    )
    checks = [
        ClaimCheck(
            claim_id=cid, verification=label, detail="", evidence_refs=[], model_verification=label
        )
        for cid, label in LABELS.items()
    ]
    return checks, structured, gatekeeper


def _material() -> Material:
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
    checks, structured, gatekeeper = _inputs()
    del gatekeeper["verified_excerpts"]["c1"]
    material = select_material(checks, structured, gatekeeper)
    assert "c1" not in [c["claim_id"] for c in material["confirmed"]]
    assert {"text": TEXTS["c1"], "kind": "unsupported", "claim_id": "c1"} in material["gaps"]


def test_select_material_unchecked_claim_is_a_gap() -> None:
    checks, structured, gatekeeper = _inputs()
    unchecked = [c for c in checks if c["claim_id"] != "c1"]
    material = select_material(unchecked, structured, gatekeeper)
    assert TEXTS["c1"] in [g["text"] for g in material["gaps"]]


def test_select_material_knowledge_excerpts_are_not_listed_as_evidence() -> None:
    checks, structured, gatekeeper = _inputs()
    gatekeeper["verified_excerpts"]["c1"].append(
        excerpt("inv-3", "lookup_knowledge", "documents[0]", "Pool runbook: 50")
    )
    material = select_material(checks, structured, gatekeeper)
    assert [e["invocation_id"] for e in material["confirmed"][0]["evidence"]] == ["inv-1"]


@pytest.mark.parametrize(
    "structured",
    [None, "text", {"claims": "x", "hypotheses": 3}, {"claims": [None, 5, {"claim_text": 1}]}],
    ids=["none", "string", "wrong-types", "junk-claims"],
)
def test_select_material_from_garbage_output_confirms_nothing(structured: object) -> None:
    material = select_material([], structured, gatekeeper_result({}))
    assert material["confirmed"] == []
    assert material["directions"] == []


def test_select_material_drops_text_carrying_executor_json() -> None:
    checks, structured, gatekeeper = _inputs()
    leaked = json.dumps(structured)
    json_list(structured["hypotheses"]).append({"text": leaked, "basis": ""})
    json_list(structured["recommended_actions"]).append({"text": leaked, "source": ""})
    material = select_material(checks, structured, gatekeeper)
    answer = render_template(material, verdict="LOW_CONFID", score=0.5)
    assert "answer_version" not in answer
    assert "evidence_bindings" not in answer


# --- rendering -------------------------------------------------------------------------------


HEADINGS = {
    "PASS": {
        "zh": ["结论（已确认的事实）", "证据", "下一步建议"],
        "en": ["Conclusion (confirmed facts)", "Evidence", "Next steps"],
    },
    "LOW_CONFID": {
        "zh": ["已确认的事实", "可能的方向（有待进一步排查）", "证据缺口", "下一步建议"],
        "en": [
            "Confirmed facts",
            "Possible directions (to be investigated)",
            "Evidence gaps",
            "Next steps",
        ],
    },
    "REJECT": {
        "zh": ["已确认的事实", "证据缺口", "下一步建议"],
        "en": ["Confirmed facts", "Evidence gaps", "Next steps"],
    },
}
"""The section headings of the answer to ``_material()``, by verdict and language."""


def _verification_line(verdict: str, score: str, language: str) -> str:
    if language == "zh":
        return f"校验结论：{verdict}（证据支撑度 {score}）"
    return f"Verification: {verdict} (groundedness {score})"


def _rendered(verdict: str, score: float, language: str) -> tuple[str, list[str]]:
    """The answer to ``_material()`` and its section headings."""
    answer = render_template(_material(), verdict=verdict, score=score, language=language)
    return answer, [h for h in _sections(answer, language) if h]


@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_pass_sections(language: str) -> None:
    answer, headings = _rendered("PASS", 0.8, language)
    assert headings == HEADINGS["PASS"][language]
    assert _verification_line("PASS", "0.80", language) in answer
    evidence_line = "- [inv-1] logs[0]：" if language == "zh" else "- [inv-1] logs[0]: "
    assert evidence_line + LOG_TEXT in answer
    assert TEXTS["c1"] in answer and TEXTS["c2"] in answer
    for absent in (HYPOTHESIS, TEXTS["c3"], TEXTS["c4"], TEXTS["c5"], TEXTS["c6"], MISSING):
        assert absent not in answer
    assert ACTION in answer


@pytest.mark.parametrize("language", ["zh", "en"])
def test_render_template_low_confid_sections(language: str) -> None:
    answer, headings = _rendered("LOW_CONFID", 0.4333, language)
    assert headings == HEADINGS["LOW_CONFID"][language]
    assert _verification_line("LOW_CONFID", "0.43", language) in answer
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
    answer, headings = _rendered("REJECT", 0.0, language)
    refusal = (
        "无法根据本次收集到的证据给出可靠的回答"
        if language == "zh"
        else "a reliable answer could not be produced"
    )
    assert refusal in answer
    assert headings == HEADINGS["REJECT"][language]
    assert _verification_line("REJECT", "0.00", language) in answer
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
    material = Material(confirmed=[], directions=[], gaps=[], next_steps=[], withheld_steps=0)
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
    answer = render_template(select_material(*_inputs()), verdict="PASS", score=1.0)
    assert "answer_version" not in answer
    assert "claim_id" not in answer
    assert "{" not in answer


def test_render_template_default_language_is_chinese() -> None:
    answer = render_template(_material(), verdict="PASS", score=0.92)
    assert "校验结论：PASS（证据支撑度 0.92）" in answer


def _root_material(
    claim_type: str, root: RootCause, language: str = "zh", first: str = "c1"
) -> Material:
    """The material of the usual answer with claim c1 stating a suspect line, and ``root``."""
    checks, structured, gatekeeper = _inputs()
    first_claim = json_object(json_list(structured["claims"])[0])
    first_claim["claim_type"] = claim_type
    first_claim["claim_text"] = "#1 order-service score=0.9: root cause: error surge of HTTP 500"
    answer = read_answer(VALID, structured)
    return select_records(checks, answer, gatekeeper, language=language, root_cause=root)


@pytest.mark.parametrize(("language", "verdict"), [("zh", "PASS"), ("en", "LOW_CONFID")])
def test_kept_root_cause_of_observation_claims_leads_the_confirmed_facts(
    language: str, verdict: str
) -> None:
    root = RootCause(service="order-service", mechanism="error surge of HTTP 500", claim_ids=["c1"])
    material = _root_material("observation", root, language)

    answer = render_template(material, verdict=verdict, score=0.8, language=language)

    heading = CONFIRMED_HEADINGS[language][1 if verdict == "PASS" else 0]
    first = _sections(answer, language)[heading][0]
    if language == "zh":
        assert first == "- 最可能的根因：order-service，机制：error surge of HTTP 500（推断）"
    else:
        line = "Most likely root cause: order-service, mechanism: error surge of HTTP 500"
        assert first == f"- {line} (inference)"


def test_root_cause_line_leaves_out_what_no_claim_states_and_is_not_repeated() -> None:
    made_up = RootCause(service="order-service", mechanism="a bad deploy", claim_ids=["c1"])
    material = _root_material("observation", made_up)
    # The mechanism is in none of its claims: the line names the service only.
    assert material.get("root_cause") == "最可能的根因：order-service"
    # A causal claim already states the cause in words: nothing is added.
    stated = RootCause(
        service="order-service", mechanism="error surge of HTTP 500", claim_ids=["c1"]
    )
    assert "root_cause" not in _root_material("causal", stated)
    # A root cause whose claim is not confirmed (c4 is unsupported) is never worded.
    unconfirmed = RootCause(service="payment-service", mechanism="CPU", claim_ids=["c4"])
    assert "root_cause" not in _root_material("observation", unconfirmed)
    # REJECT shows no root cause.
    assert "最可能的根因" not in render_template(material, verdict="REJECT", score=0.0)
