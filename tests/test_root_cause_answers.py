"""Answers that state the root cause: the offline answer opens with it, the state carries it.

The bundled sample's "order-service 为什么报 500 错误？" states inventory-service's stock
reconciliation job as the most likely root cause and the chain to the 500s, each link a claim
bound to its evidence; the root cause is kept only when the claims stating it are confirmed; an
analysis that singles out no cause is told as such, with the candidates and no root cause.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

import analysis.incident
from analysis.report import IncidentReport
from graph.compile import RunStores, compile_graph
from graph.runner import summary_of
from models.offline.answers import overview
from models.offline.evidence import Result
from models.offline.rules import analysis_step
from models.offline.writer import Writer
from persistence.audit import InMemoryAuditStore
from persistence.ledger import InMemoryLedger
from state.context import Context
from state.records import ClaimCheck, ExecutorAnswer, RootCause, SuspectBrief, VerifierInput
from verification.intent import time_spec
from verification.question import analyze_question
from verification.root_cause import confirmed_root_cause
from verification.verifier_payload import build_payload, unseen_claims

QUESTION = "order-service 为什么报 500 错误？"


def _ask(question: str, language: str = "zh") -> tuple[dict[str, Any], InMemoryAuditStore]:
    audit = InMemoryAuditStore()
    app = compile_graph(RunStores(InMemorySaver(), audit=audit, ledger=InMemoryLedger()))
    config: RunnableConfig = {"configurable": {"thread_id": "rc"}}
    app.invoke({"messages": [HumanMessage(question)]}, config, context=Context(language=language))
    return dict(app.get_state(config).values), audit


def _confirmed_texts(state: dict[str, Any]) -> list[str]:
    labels = {c["claim_id"]: c["verification"] for c in state["verifier_result"]["claim_checks"]}
    return [
        claim["claim_text"]
        for claim in state["executor_answer"]["claims"]
        if labels[claim["claim_id"]] in ("direct_observation", "reasonable_inference")
    ]


CHAIN = [
    "Started stock reconciliation job run=rec-20260301-0958",  # the job (09:58)
    "Slow query: UPDATE stock",  # slow queries on table stock
    "Lock wait on table stock",  # lock waits
    "Inventory reservation call to inventory-service",  # holding HikariPool-1 connections
    "HikariPool-1 - Connection is not available",  # the pool exhausted
    "status=500",  # the 500s
    "502 Bad Gateway",  # api-gateway's 502s
]
RUNNER_UP = {
    "zh": ("次要嫌疑 order-service", "排名较低"),
    "en": ("Runner-up suspect order-service", "ranks lower"),
}
CONFIRM = {"zh": "确认方法：核对 inventory-service", "en": "To confirm: check inventory-service"}
SYMPTOM = {
    "zh": "是症状：它调用 inventory-service，而后者的异常开始得不晚于它自己",
    "en": "a symptom: it calls inventory-service, whose anomaly began no later than its own",
}
MECHANISM = {
    "zh": "机制：变更（job，2026-03-01T09:58:12Z）：“Started stock reconciliation job",
    "en": "mechanism: change: job at 2026-03-01T09:58:12Z: Started stock reconciliation job",
}
ENGLISH_FRAMING = ("a symptom: it calls", "change: job at", "whose anomaly began", "(rise)")


def _assert_chain(state: dict[str, Any], language: str) -> None:
    """The chain in order, each link a confirmed claim; the runner-up and how to confirm."""
    texts = _confirmed_texts(state)
    where = [next(i for i, text in enumerate(texts) if link in text) for link in CHAIN]
    assert where == sorted(where), texts
    assert "09:58:12Z" in texts[where[0]]  # the job's start
    runner = next(text for text in texts if text.startswith(RUNNER_UP[language][0]))
    assert RUNNER_UP[language][1] in runner and SYMPTOM[language] in runner
    assert where[-1] < texts.index(runner)
    actions = state["executor_answer"]["recommended_actions"]
    assert actions[0]["text"].startswith(CONFIRM[language]), actions


def test_sample_why_500_states_the_reconciliation_job_as_root_cause_and_the_chain() -> None:
    state, _ = _ask(QUESTION)

    assert state["verdict"] == "PASS"
    root = state["root_cause"]
    assert root is not None and root["service"] == "inventory-service"
    assert "stock reconciliation job" in root["mechanism"]
    texts = _confirmed_texts(state)
    assert texts[0].startswith("最可能的根因（推断）：inventory-service")
    _assert_chain(state, "zh")
    causal = state["executor_answer"]["claims"][0]
    assert causal["claim_type"] == "causal" and causal["support_level"] == "indirect"
    labels = {c["claim_id"]: c["verification"] for c in state["verifier_result"]["claim_checks"]}
    assert labels[causal["claim_id"]] == "reasonable_inference"
    assert all(
        labels[claim_id] in ("direct_observation", "reasonable_inference")
        for claim_id in root["claim_ids"]
    )
    answer = state["answer"]
    assert answer.index("最可能的根因") < answer.index("Lock wait on table stock")
    assert MECHANISM["zh"] in texts[0]
    summary = summary_of(state, "rc")  # type: ignore[arg-type]
    assert summary["root_cause"] == root
    assert summary["suspects"][0]["service"] == "inventory-service"
    assert summary["suspects"][0]["root_cause"] is True


def test_sample_why_500_in_english_states_the_same_root_cause() -> None:
    state, audit = _ask("Why is order-service returning HTTP 500 errors?", "en")

    assert state["verdict"] == "PASS"
    assert state["root_cause"]["service"] == "inventory-service"
    assert _confirmed_texts(state)[0].startswith("Most likely root cause (inferred): inventory-")
    assert MECHANISM["en"] in _confirmed_texts(state)[0]
    _assert_chain(state, "en")
    record = audit.get(state["diagnosis_id"])
    assert record is not None and record["self_evaluation"] is not None
    assert record["self_evaluation"]["root_cause"] == state["root_cause"]
    suspects = record["self_evaluation"]["suspects"]
    assert isinstance(suspects, dict) and suspects["suspects"] == state["suspects"]


def test_sample_why_500_in_chinese_words_the_mechanism_and_reasons_in_chinese() -> None:
    """The analysis's mechanism and ranks-lower reason are worded in the answer's language:
    in Chinese only the quoted evidence (the job's line, names, numbers) stays as written."""
    state, _ = _ask(QUESTION)

    assert state["verdict"] == "PASS"
    claims = [claim["claim_text"] for claim in state["executor_answer"]["claims"]]
    actions = [action["text"] for action in state["executor_answer"]["recommended_actions"]]
    worded = [text for text in claims + actions if "根因" in text or "嫌疑" in text]
    worded.append(actions[0])  # how to confirm the root cause, with its mechanism
    assert len(worded) >= 3, worded
    for text in worded:
        assert not any(phrase in text for phrase in ENGLISH_FRAMING), text
    assert "order-service（db_pool_pending_threads 0.7 -> 71（上升））" in state["answer"]
    assert MECHANISM["zh"] in state["answer"] and SYMPTOM["zh"] in state["answer"]
    # What the analysis recorded stays in English: it is the evidence the claims cite.
    suspects = state["suspects"]
    assert suspects[0]["mechanism"].startswith("change: job at 2026-03-01T09:58:12Z")
    assert suspects[1]["mechanism"] == "db_pool_pending_threads 0.7 -> 71 (rise)"
    assert "ranks lower: " + SYMPTOM["en"] in state["answer"]  # the ref the claim cites


def _answer(*claims: tuple[str, str]) -> ExecutorAnswer:
    return ExecutorAnswer(
        claims=[
            {
                "claim_id": claim_id,
                "claim_type": "causal",
                "claim_text": text,
                "support_level": "indirect",
                "evidence_bindings": [],
            }  # type: ignore[typeddict-item]
            for claim_id, text in claims
        ],
        hypotheses=[],
        recommended_actions=[],
        missing_info=[],
        schema_findings=[],
        root_cause=RootCause(service="db", mechanism="lock waits", claim_ids=["c1", "c2"]),
    )


def _checks(**labels: str) -> list[ClaimCheck]:
    return [
        ClaimCheck(
            claim_id=claim_id,
            verification=label,  # type: ignore[typeddict-item]
            detail="",
            evidence_refs=[],
            model_verification=None,
        )
        for claim_id, label in labels.items()
    ]


@pytest.mark.parametrize(
    ("labels", "verdict", "kept"),
    [
        ({"c1": "reasonable_inference", "c2": "direct_observation"}, "PASS", True),
        ({"c1": "reasonable_inference", "c2": "direct_observation"}, "LOW_CONFID", True),
        ({"c1": "reasonable_inference", "c2": "direct_observation"}, "REJECT", False),
        ({"c1": "reasonable_inference", "c2": "unsupported"}, "PASS", False),
        ({"c1": "overstated", "c2": "direct_observation"}, "PASS", False),
        ({"c1": "reasonable_inference"}, "PASS", False),
    ],
    ids=["confirmed", "low-confid", "reject", "one-unsupported", "overstated", "claim-missing"],
)
def test_root_cause_is_kept_only_when_its_claims_are_confirmed(
    labels: dict[str, str], verdict: str, kept: bool
) -> None:
    answer = _answer(("c1", "Most likely root cause: db, lock waits"), ("c2", "db waits"))
    found = confirmed_root_cause(answer, _checks(**labels), verdict)
    assert (found is not None) is kept


def test_root_cause_not_named_by_its_claims_is_not_kept() -> None:
    answer = _answer(("c1", "Most likely root cause: cache"), ("c2", "cache misses"))
    checks = _checks(c1="reasonable_inference", c2="direct_observation")
    assert confirmed_root_cause(answer, checks, "PASS") is None


def _suspect(rank: int, service: str, root: bool) -> SuspectBrief:
    return SuspectBrief(
        rank=rank, service=service, score=0.9, mechanism="lock waits", onset=None, root_cause=root
    )


def _citing(claim_id: str, text: str, tool: str, raw_path: str) -> ExecutorAnswer:
    answer = _answer((claim_id, text))
    answer["claims"][0]["evidence_bindings"] = [
        {"tool_name": tool, "raw_path": raw_path}  # type: ignore[typeddict-item]
    ]
    del answer["root_cause"]
    return answer


@pytest.mark.parametrize(
    ("tool", "raw_path", "label", "verdict", "kept"),
    [
        ("analyze_incident", "suspects[0]", "direct_observation", "PASS", True),
        ("analyze_incident", "suspects[0]", "direct_observation", "LOW_CONFID", True),
        ("analyze_incident", "suspects[0]", "unsupported", "PASS", False),
        ("analyze_incident", "suspects[0]", "direct_observation", "REJECT", False),
        ("analyze_incident", "suspects[1]", "direct_observation", "PASS", False),
        ("query_logs", "suspects[0]", "direct_observation", "PASS", False),
    ],
    ids=["confirmed", "low-confid", "unsupported", "reject", "not-the-root", "other-tool"],
)
def test_a_confirmed_claim_stating_the_root_cause_suspect_proposes_it(
    tool: str, raw_path: str, label: str, verdict: str, kept: bool
) -> None:
    # An answer with no root_cause object (a guided model cannot write one) that states the
    # analysis's root-cause suspect by citing its ref.
    answer = _citing("c1", "#1 db score=0.9 root cause: lock waits", tool, raw_path)
    suspects = [_suspect(1, "db", True), _suspect(2, "api", False)]

    found = confirmed_root_cause(answer, _checks(c1=label), verdict, suspects)

    if kept:
        assert found == RootCause(service="db", mechanism="lock waits", claim_ids=["c1"])
    else:
        assert found is None
    # Without the analysis's suspects nothing is proposed.
    assert confirmed_root_cause(answer, _checks(c1=label), verdict) is None


def test_an_analysis_without_a_single_cause_lists_candidates_and_states_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    analyze = analysis.incident.analyze

    def undecided(inputs: Any, settings: Any = None) -> IncidentReport:
        report = analyze(inputs, settings)
        report["root_cause"] = None
        report["ambiguity"] = "two services deviate alike"
        return report

    monkeypatch.setattr("evidence.incident.analyze", undecided)
    state, _ = _ask("Why is order-service returning HTTP 500 errors?", "en")

    assert state["root_cause"] is None
    assert state["executor_answer"].get("root_cause") is None
    first = state["executor_answer"]["claims"][0]
    assert first["claim_text"].startswith("The evidence does not single out one root cause")
    assert "inventory-service" in first["claim_text"]
    assert "payment-service" not in first["claim_text"]  # it cannot explain order-service


@pytest.mark.parametrize(
    ("question", "language", "opening"),
    [
        (
            "Which service is the root cause of the errors?",
            "en",
            "The evidence does not single out one root cause; candidates: ",
        ),
        ("哪个服务是根因？", "zh", "证据未能确定单一根因，候选："),
        ("What is wrong?", "en", "The evidence does not single out one root cause; candidates: "),
    ],
)
def test_a_question_naming_no_service_is_told_the_candidates_when_none_is_singled_out(
    monkeypatch: pytest.MonkeyPatch, question: str, language: str, opening: str
) -> None:
    """Asked for the cause without naming a service, an undecided analysis is said as such.

    The candidates are the suspects no other suspect explains (order-service's pool is a symptom
    of inventory-service here, so a second independent suspect is made to tie).
    """
    analyze = analysis.incident.analyze

    def undecided(inputs: Any, settings: Any = None) -> IncidentReport:
        report = analyze(inputs, settings)
        report["root_cause"] = None
        report["ambiguity"] = "two services deviate alike"
        for suspect in report["suspects"]:
            if suspect["service"] == "payment-service":
                suspect["explained_by"] = []
        return report

    monkeypatch.setattr("evidence.incident.analyze", undecided)
    state, _ = _ask(question, language)

    assert state["root_cause"] is None
    first = state["executor_answer"]["claims"][0]
    assert first["claim_text"].startswith(opening)
    candidates = re.findall(r"(?:：|: |、|, )([a-z-]+) ?[（(]", first["claim_text"])
    # order-service, explained by inventory-service, is no candidate.
    assert candidates == ["inventory-service", "payment-service"]


@pytest.mark.parametrize(
    "question",
    [
        "Something went wrong from 2023-01-29 08:58:16 UTC: which service is the root cause?",
        "2023-01-29 08:58:16 UTC 起系统出现异常，哪个服务是根因？",
        "What broke since 2023-01-29T08:58:16Z?",
    ],
)
def test_root_cause_question_naming_its_start_is_read_from_that_moment(question: str) -> None:
    """A question that names when it started is asked from then until now, not around then."""
    spec = time_spec(question)
    assert spec is not None and spec.form == "from"
    now = datetime(2023, 1, 29, 9, 0, 9, tzinfo=UTC)
    assert spec.resolve(now) == (datetime(2023, 1, 29, 8, 58, 16, tzinfo=UTC), now)
    step = analysis_step(analyze_question(question, [], stems=True), question)
    assert step == ("analyze_incident", {"start": "2023-01-29T08:58:16Z"})


def test_overview_lists_services_only_while_the_verifier_sees_every_claim() -> None:
    """Long log lines (traced Java services) after a long root-cause section: the overview's
    per-service lines stop where the Verifier's block would cut a claim (it would count as
    unsupported, and the answer fall to LOW_CONFID)."""
    writer = Writer("en")
    while writer.fits():  # a root-cause section that leaves little room
        writer.claim("observation", "x" * 100, [])
    writer.drop_claims_from(len(writer.claims) - 1)  # less room than one listed line takes
    before = len(writer.claims)
    kinds = ("request failed", "payment declined", "stock lookup timed out")
    logs = [
        {
            "timestamp": "2026-03-01T10:00:00Z",
            "level": "ERROR",
            "service": f"svc-{i}",
            "message": f"{kind}: TraceID: {'ab' * 60} " + " ".join(kind.split() * 12),
        }
        for i, kind in enumerate(kinds)
    ]
    refs = {
        f"logs[{i}]": f"{e['timestamp']} ERROR {e['service']}: {e['message']}"
        for i, e in enumerate(logs)
    }
    result = Result("query_logs", {"level": "ERROR"}, "inv-1", "ok", {"logs": logs}, refs)
    found = analyze_question("What is wrong right now?", [], stems=True)
    overview(writer, found, [result])
    assert len(writer.claims) == before  # the line would not fit: not listed
    assert writer.fits()
    payload = build_payload(
        VerifierInput(  # type: ignore[typeddict-item]
            question="What is wrong right now?",
            final_answer="",
            parse_status={"status": "valid"},
            structured_output=json.loads(writer.json()),
            trace_summary=[],
            gatekeeper_result={},
            retry_context=None,
            round=1,
        )
    )
    answer = json.loads(writer.json())
    assert unseen_claims(payload, answer) == []
