"""Composer node through the real graph: only Verifier-allowed material reaches the answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models.messages import final_text, message_text
from state.context import Language
from state.records import JSONObject
from tests.records import binding, claim
from tests.scenario_kit import (
    Checkpointer,
    Run,
    check,
    executor_answer,
    one_round,
    same_answer_twice,
    sections,
    verifier_reply,
)

C1 = "order-service logged HTTP 500 errors"
C2 = "order-service CPU reached 95% during the incident"
C3 = "the connection pool exhaustion caused the HTTP 500 errors"
C4 = "order-service instance order-2 logged Cannot acquire connection from pool"
HYPOTHESIS = "slow database queries hold pool connections too long"
ACTION = "check the order-service connection pool settings"
MISSING = "database-side connection metrics were not queried"
RAW_JSON_FRAGMENTS = (
    '"answer_version"',
    '"evidence_bindings"',
    "executor_evidence_v2",
    '"claim_id"',
)

CONFIRMED_HEADINGS = {
    "en": ("Confirmed facts", "Conclusion (confirmed facts)"),
    "zh": ("已确认的事实", "结论（已确认的事实）"),
}
GAPS_HEADING = {"en": "Evidence gaps", "zh": "证据缺口"}
DIRECTIONS_HEADING = {
    "en": "Possible directions (to be investigated)",
    "zh": "可能的方向（有待进一步排查）",
}
SUMMARY_HEADING = {"en": "## Summary", "zh": "【摘要】"}


def c1() -> JSONObject:
    return claim("c1", C1, binding("inv-1", "logs[0]", "HTTP 500 Cannot acquire connection"))


def c2() -> JSONObject:
    """Bound to a real log line, but nothing there says 95% (the Gatekeeper flags it)."""
    return claim("c2", C2, binding("inv-1", "logs[1]", "Cannot acquire connection"))


def c3() -> JSONObject:
    """A causal claim: at most a reasonable inference."""
    return claim(
        "c3",
        C3,
        binding("inv-1", "logs[0]", "Cannot acquire connection from pool"),
        claim_type="causal",
        support_level="indirect",
    )


def c4() -> JSONObject:
    return claim("c4", C4, binding("inv-1", "logs[1]", "Cannot acquire connection from pool"))


def answer_with(*claims: JSONObject) -> str:
    return executor_answer(
        *claims,
        hypotheses=[{"text": HYPOTHESIS, "basis": "pool errors and 500s together"}],
        actions=[{"text": ACTION, "source": "runbook"}],
        missing=[{"text": MISSING, "suggested_query": {"tool": "query_metrics", "arguments": {}}}],
    )


CLAIMS = {"c1": c1, "c2": c2, "c3": c3, "c4": c4}


def judged_run(
    verdict: str,
    labels: dict[str, str],
    *,
    checkpointer: Checkpointer,
    composer: list[Any] | None = None,
    language: Language = "en",
) -> Run:
    """The claims named in `labels` (with `answer_with` extras), each labelled by the verifier."""
    return one_round(
        answer_with(*(CLAIMS[cid]() for cid in labels)),
        verifier_reply(verdict, *(check(cid, label) for cid, label in labels.items())),
        composer=composer,
        language=language,
        checkpointer=checkpointer,
    )


def low_confid_run(
    *, checkpointer: Checkpointer, composer: list[Any] | None = None, language: Language = "en"
) -> Run:
    """c1 direct, c2 unsupported (and Gatekeeper-flagged), c3 inference: LOW_CONFID, score 0.53."""
    labels = {"c1": "direct_observation", "c2": "unsupported", "c3": "reasonable_inference"}
    return judged_run(
        "LOW_CONFID", labels, checkpointer=checkpointer, composer=composer, language=language
    )


def reject_run(*, checkpointer: Checkpointer, composer: list[Any] | None = None) -> Run:
    """c1 direct, c3 inference, c4 contradicted: REJECT."""
    labels = {"c1": "direct_observation", "c3": "reasonable_inference", "c4": "contradicted"}
    return judged_run("REJECT", labels, checkpointer=checkpointer, composer=composer)


def confirmed_text(answer: str, language: Language) -> str:
    found = sections(answer, language)
    return "\n".join(found.get(title, "") for title in CONFIRMED_HEADINGS[language])


def composer_request(run: Run) -> dict[str, Any]:
    (messages,) = run.models["composer"].calls
    request: dict[str, Any] = json.loads(message_text(messages[-1]))
    return request


def summary_reply(summary: str, cited: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "summary": summary,
        "summary_claim_ids": cited,
        "confirmed": [{"claim_id": cid, "text": "restated"} for cid in cited],
        "directions": [],
        "gaps": [],
        "next_steps": [],
        **extra,
    }


# --------------------------------------------------------------------------- template mode


@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID", "REJECT"])
def test_composer_answer_never_contains_raw_executor_json(
    verdict: str, checkpointer: Checkpointer
) -> None:
    label = {"PASS": "direct_observation", "LOW_CONFID": "overstated", "REJECT": "contradicted"}
    leaky = executor_answer(
        c1(),
        c4(),
        hypotheses=[{"text": '{"claim_id": "c9", "evidence_bindings": []}', "basis": "x"}],
        actions=[{"text": ACTION, "source": '{"answer_version": "executor_evidence_v2"}'}],
    )

    run = one_round(
        leaky,
        verifier_reply(verdict, check("c1", "direct_observation"), check("c4", label[verdict])),
        checkpointer=checkpointer,
    )

    assert run.state["verdict"] == verdict
    assert run.answer == message_text(run.state["messages"][-1])
    for fragment in RAW_JSON_FRAGMENTS:
        assert fragment not in run.answer
    assert final_text(run.state["executor_messages"]) not in run.answer


def test_composer_answer_never_contains_a_malformed_executor_output(
    checkpointer: Checkpointer,
) -> None:
    malformed = '{"answer_version": "executor_evidence_v2", "claims": [{"claim_text": "pool leak"'
    run = same_answer_twice(malformed, verifier_reply("PASS"), checkpointer=checkpointer)

    assert run.state["verdict"] == "LOW_CONFID"
    assert "pool leak" not in run.answer
    for fragment in RAW_JSON_FRAGMENTS:
        assert fragment not in run.answer


@pytest.mark.parametrize("language", ["en", "zh"])
def test_composer_never_shows_an_unsupported_claim_as_confirmed(
    language: Language, checkpointer: Checkpointer
) -> None:
    no_path = claim("c4", C4, binding("inv-1", None, "Cannot acquire connection from pool"))
    run = one_round(
        answer_with(c1(), c2(), no_path),
        verifier_reply(
            "PASS",
            check("c1", "direct_observation"),
            check("c2", "direct_observation"),  # the model says so; the evidence has no 95%
            check("c4", "direct_observation"),  # the model says so; no binding was verified
        ),
        language=language,
        checkpointer=checkpointer,
    )

    assert run.state["verdict"] == "LOW_CONFID"
    confirmed = confirmed_text(run.answer, language)
    assert C1 in confirmed
    assert C2 not in confirmed
    assert C4 not in confirmed
    assert C4 in sections(run.answer, language)[GAPS_HEADING[language]]
    assert C2 in sections(run.answer, language)[DIRECTIONS_HEADING[language]]
    assert run.state["composer_output"]["language"] == language
    assert run.state["composer_output"]["mode"] == "template"


def test_composer_reject_answer_gives_no_root_cause(checkpointer: Checkpointer) -> None:
    run = reject_run(checkpointer=checkpointer)

    assert run.state["verdict"] == "REJECT"
    assert "a reliable answer could not be produced" in run.answer
    assert C1 in confirmed_text(run.answer, "en")
    assert HYPOTHESIS not in run.answer
    assert C3 not in run.answer  # an inference (causal) is withheld on REJECT
    assert C4 not in run.answer  # a contradicted claim is never shown
    assert MISSING in run.answer
    assert ACTION in run.answer


def test_composer_gatekeeper_reject_answer_gives_no_root_cause(checkpointer: Checkpointer) -> None:
    wrong_path = claim("c4", C4, binding("inv-1", "logs[9]", "Cannot acquire connection"))
    run = one_round(
        answer_with(c1(), c3(), wrong_path),
        verifier_reply(
            "PASS",
            check("c1", "direct_observation"),
            check("c3", "reasonable_inference"),
            check("c4", "direct_observation"),
        ),
        checkpointer=checkpointer,
    )

    assert run.state["gatekeeper_result"]["severity"] == "reject"
    assert run.state["verdict"] == "REJECT"
    assert HYPOTHESIS not in run.answer
    assert C3 not in run.answer
    assert C4 not in confirmed_text(run.answer, "en")


# --------------------------------------------------------------------------- model mode


@pytest.mark.parametrize("language", ["en", "zh"])
def test_composer_model_summary_citing_confirmed_claims_is_used(
    language: Language, checkpointer: Checkpointer
) -> None:
    summary = "order-service logged HTTP 500 errors (checked)."
    run = low_confid_run(
        composer=[summary_reply(summary, ["c1"])], language=language, checkpointer=checkpointer
    )

    output = run.state["composer_output"]
    assert output == {
        "mode": "model",
        "parse_status": "valid",
        "language": language,
        "composer_mode": "uncertain",
        "violations": [],
    }
    assert run.answer.startswith(f"{SUMMARY_HEADING[language]}\n{summary}")
    assert C2 not in confirmed_text(run.answer, language)
    request = composer_request(run)
    assert request["language"] == language
    assert [c["claim_id"] for c in request["confirmed"]] == ["c1", "c3"]
    assert "answer_version" not in json.dumps(request)


def test_composer_model_summary_citing_an_unsupported_claim_falls_back(
    checkpointer: Checkpointer,
) -> None:
    summary = "order-service logged HTTP 500 errors."
    run = low_confid_run(composer=[summary_reply(summary, ["c1", "c2"])], checkpointer=checkpointer)

    output = run.state["composer_output"]
    assert output["mode"] == "fallback"
    assert output["parse_status"] == "valid"
    assert any("'c2'" in v for v in output["violations"])
    assert summary not in run.answer
    assert "## Summary" not in run.answer
    assert C1 in confirmed_text(run.answer, "en")


def test_composer_model_summary_stating_an_unsupported_number_falls_back(
    checkpointer: Checkpointer,
) -> None:
    summary = "order-service logged HTTP 500 errors while CPU reached 95%."
    run = low_confid_run(composer=[summary_reply(summary, ["c1"])], checkpointer=checkpointer)

    output = run.state["composer_output"]
    assert output["mode"] == "fallback"
    assert any("95%" in v for v in output["violations"])
    assert summary not in run.answer


def test_composer_model_summary_stating_a_gap_as_established_falls_back(
    checkpointer: Checkpointer,
) -> None:
    summary = f"order-service logged HTTP 500 errors; {HYPOTHESIS}."
    run = low_confid_run(composer=[summary_reply(summary, ["c1"])], checkpointer=checkpointer)

    assert run.state["composer_output"]["mode"] == "fallback"
    assert summary not in run.answer


def test_composer_model_summary_with_a_partial_number_falls_back(
    checkpointer: Checkpointer,
) -> None:
    summary = "order-service logged HTTP 5 errors."  # 5 is not 500
    run = low_confid_run(composer=[summary_reply(summary, ["c1"])], checkpointer=checkpointer)

    assert run.state["composer_output"]["mode"] == "fallback"
    assert any("'5'" in v for v in run.state["composer_output"]["violations"])


def test_composer_model_summary_carrying_executor_json_falls_back(
    checkpointer: Checkpointer,
) -> None:
    summary = 'order-service logged HTTP 500 errors {"evidence_bindings": []}'
    run = low_confid_run(composer=[summary_reply(summary, ["c1"])], checkpointer=checkpointer)

    assert run.state["composer_output"]["mode"] == "fallback"
    assert "evidence_bindings" not in run.answer


@pytest.mark.parametrize(
    "reply",
    ["Here is the answer: order-service is failing.", '["c1"]', "", '{"summary": 42}'],
    ids=["prose", "array", "empty", "summary-not-text"],
)
def test_composer_unparseable_model_reply_falls_back(
    reply: str, checkpointer: Checkpointer
) -> None:
    run = low_confid_run(composer=[reply], checkpointer=checkpointer)

    output = run.state["composer_output"]
    assert output["mode"] == "fallback"
    assert output["violations"]
    assert C1 in confirmed_text(run.answer, "en")
    assert "## Summary" not in run.answer


def test_composer_model_on_reject_may_not_state_an_inference(checkpointer: Checkpointer) -> None:
    run = reject_run(composer=[summary_reply(C3, ["c3"])], checkpointer=checkpointer)

    request = composer_request(run)
    assert [c["claim_id"] for c in request["confirmed"]] == ["c1"]
    assert request["directions"] == []
    assert HYPOTHESIS not in json.dumps(request)
    assert run.state["composer_output"]["mode"] == "fallback"
    assert C3 not in run.answer


def test_composer_model_on_reject_may_state_a_direct_observation(
    checkpointer: Checkpointer,
) -> None:
    run = one_round(
        answer_with(c1(), c4()),
        verifier_reply("REJECT", check("c1", "direct_observation"), check("c4", "contradicted")),
        composer=[summary_reply("order-service logged HTTP 500 errors.", ["c1"])],
        checkpointer=checkpointer,
    )

    assert run.state["composer_output"]["mode"] == "model"
    assert run.state["composer_output"]["composer_mode"] == "degraded"
    assert C4 not in run.answer


def test_composer_model_is_not_asked_without_confirmed_claims(checkpointer: Checkpointer) -> None:
    run = one_round(
        answer_with(c1()),
        verifier_reply("REJECT", check("c1", "contradicted")),
        composer=[summary_reply("order-service logged HTTP 500 errors.", ["c1"])],
        checkpointer=checkpointer,
    )

    assert run.models["composer"].calls == []
    assert run.state["composer_output"]["mode"] == "template"
    assert C1 not in run.answer
