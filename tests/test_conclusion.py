"""The answer a question wants (verification/intent.py) and its conclusion checked by code
(verification/conclusion.py), in Chinese and English, through ``decide``.

A conclusion whose yes/no does not follow from the refs its claims cite is never a PASS; a
metric question is answered from its series, never from logs; a nonexistent alert is said so.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from state.records import ClaimLabel, ConclusionCheck, Decision, Material, VerifiedExcerpt
from tests import records
from tests.records import VALID
from verification.answer import render_template, select_material
from verification.conclusion import excerpt_signal, reason_text, stated_answer
from verification.executor_output import read_answer
from verification.fabrication import named
from verification.intent import read_intent, time_spec
from verification.question import analyze_question
from verification.verdict import decide
from verification.verifier_reply import read_verifier_reply

KNOWN = ["ledger-api", "ledger-db", "fx-rates-worker", "notify-gateway"]
NOW = datetime(2026, 5, 12, 10, 0, tzinfo=UTC)

ERROR_LINE = "2026-05-12T09:41:02Z ERROR ledger-api ledger-api-1: POST /v1/entries timed out"
INFO_LINE = "2026-05-12T09:40:00Z INFO ledger-db: Running migration 0042_entries_index"
NO_ERRORS = "query_logs level=ERROR service=notify-gateway matched 0 of 0 (complete)"
CPU_HIGH = "cpu_usage_percent{service=ledger-api} min=40% max=97% last=94% points=30"
CPU_LOW = "cpu_usage_percent{service=notify-gateway} min=8% max=22% last=12% points=30"
FIRING = (
    "LedgerApiHighLatency service=ledger-api severity=critical state=firing value=2300 "
    "threshold=800 active_at=2026-05-12T09:44:00Z: p99 above 800ms"
)
LATENCY = "http_request_duration_p99_ms{service=ledger-api} min=120ms max=2400ms last=700ms"


@pytest.mark.parametrize(
    ("question", "kind", "polarity"),
    [
        ("Is notify-gateway healthy?", "health", "ok"),
        ("notify-gateway 现在正常吗？", "health", "ok"),
        ("Is ledger-api's CPU saturated?", "metric_check", "problem"),
        ("ledger-api 的 CPU 是否打满了？", "metric_check", "problem"),
        ("Is the connection pool full?", "metric_check", "problem"),
        ("ledger-db 的日志里有连接池错误吗？", "errors", "problem"),
        ("Does ledger-api have errors?", "errors", "problem"),
        ("Which is higher, the CPU of ledger-api or notify-gateway?", "compare", None),
        ("ledger-api 和 notify-gateway 哪个内存更高？", "compare", None),
        ("What changed at 09:40?", "changes", None),
        ("09:40 左右有什么变更？", "changes", None),
        ("What should I do about ledger-db?", "action", None),
        ("what does alert etcdHighFsyncDurations mean and how do I handle it?", "action", None),
        ("LedgerApiHighLatency 告警怎么处理？", "action", None),
        ("Is LedgerApiHighLatency firing?", "alert_state", "problem"),
        ("Why is ledger-api slow?", "why", None),
        ("What is wrong right now?", "overview", None),
        ("What is the p99 of ledger-api?", "value", None),
    ],
)
def test_read_intent_kind_in_both_languages(question: str, kind: str, polarity: str | None) -> None:
    intent = read_intent(question, KNOWN)
    assert (intent.kind, intent.polarity) == (kind, polarity)


@pytest.mark.parametrize(
    ("question", "start", "end"),
    [
        ("What changed at 09:40?", "2026-05-12T09:25", "2026-05-12T09:55"),
        ("any errors in the last 30 minutes?", "2026-05-12T09:30", "2026-05-12T10:00"),
        ("过去 2 小时有什么变更？", "2026-05-12T08:00", "2026-05-12T10:00"),
        ("what changed since 09:00?", "2026-05-12T09:00", "2026-05-12T10:00"),
        ("ledger-db 自 09:15 以来有什么变化？", "2026-05-12T09:15", "2026-05-12T10:00"),
        ("what was deployed yesterday 16:00-17:00?", "2026-05-11T16:00", "2026-05-11T17:00"),
        ("昨天 16:00-17:00 发布了什么？", "2026-05-11T16:00", "2026-05-11T17:00"),
        ("Look at the evidence from 2026-05-12T09:25:00Z until now", "2026-05-12T09:25", ""),
    ],
)
def test_time_window_resolves_to_absolute_times(question: str, start: str, end: str) -> None:
    spec = time_spec(question)
    assert spec is not None
    first, last = spec.resolve(NOW)
    assert first.strftime("%Y-%m-%dT%H:%M") == start
    assert last.strftime("%Y-%m-%dT%H:%M") == (end or "2026-05-12T10:00")


def test_alert_context_is_not_question_words() -> None:
    question = (
        "Alertmanager reports 1 firing alert(s):\n- LedgerApiHighLatency for ledger-api "
        "(severity critical), firing since 2026-05-12T09:44:00Z; summary: timeouts and "
        "memory pressure\nWhy is LedgerApiHighLatency firing and what is the cause?"
    )
    found = analyze_question(question, KNOWN)
    assert found["error_level"] == "ERROR"  # severity critical is no log level
    assert "timeout" not in found["symptoms"] and "memory" not in found["metrics"]
    assert found["services"] == ["ledger-api"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("Yes: it is", "yes"),
        ("No: none", "no"),
        ("是：有", "yes"),
        ("否：没有", "no"),
        ("It is", None),
    ],
)
def test_stated_answer(text: str, said: str | None) -> None:
    assert stated_answer(text) == said


@pytest.mark.parametrize(
    ("path", "text", "signal"),
    [
        ("logs[0]", ERROR_LINE, ("log", "problem")),
        ("logs[0]", INFO_LINE, None),
        ("summary", NO_ERRORS, ("log", "clean")),
        ("alerts[0]", FIRING, ("alert", "problem")),
        ("alerts[0]", FIRING.replace("state=firing", "state=resolved"), ("alert", "clean")),
        ("series[0]", CPU_HIGH, ("series:cpu", "problem")),  # 94% >= the 80% default
        ("series[0]", CPU_LOW, ("series:cpu", "clean")),
        ("series[0]", "db_pool_active_connections{service=x} last=20", None),  # no scale
    ],
)
def test_excerpt_signal(path: str, text: str, signal: tuple[str, str] | None) -> None:
    excerpt = records.excerpt("inv-1", "query_logs", path, text)
    assert excerpt_signal(excerpt, []) == signal


def test_series_threshold_comes_from_the_alert_of_the_same_concept() -> None:
    excerpt = records.excerpt("inv-1", "query_metrics", "series[0]", LATENCY)
    assert excerpt_signal(excerpt, [FIRING]) == ("series:latency", "clean")  # 700 < 800
    assert excerpt_signal(excerpt, []) == ("series:latency", "clean")  # 700 < 1000 default


def _decide(
    question: str,
    claims: list[tuple[str, str, str, str]],
    *,
    conclusion: dict[str, Any] | None = None,
    label: ClaimLabel = "direct_observation",
) -> Decision:
    """Claims ``(id, text, raw_path, ref text)``, each bound and verified, all labelled alike."""
    excerpts: dict[str, list[VerifiedExcerpt]] = {}
    written = []
    for claim_id, text, path, ref in claims:
        kind = "negative_observation" if path == "summary" else "observation"
        written.append(
            records.claim(claim_id, text, records.binding("inv-1", path, ref), claim_type=kind)
        )
        excerpts[claim_id] = [records.excerpt("inv-1", "query_logs", path, ref)]
    output = records.executor_output(*written)
    if conclusion is not None:
        output["conclusion"] = conclusion
    reply = read_verifier_reply(
        {
            "verdict": "PASS",
            "claim_checks": [
                {
                    "claim_id": claim_id,
                    "verification": label,
                    "detail": "",
                    "evidence_refs": [
                        {"trace_ref": "t1", "tool_name": "query_logs", "source_invocation_ids": []}
                    ],
                }
                for claim_id, *_ in claims
            ],
        }
    )
    return decide(
        read_answer(VALID, output),
        records.gatekeeper_result(excerpts),
        reply,
        parse_status=VALID,
        trace=[records.trace_item("t1", "query_logs", ["inv-1"])],
        mode="model",
        question=question,
        known_services=KNOWN,
    )


@pytest.mark.parametrize(
    ("question", "text"),
    [
        ("Is notify-gateway healthy?", "No: notify-gateway has no ERROR log entries."),
        ("notify-gateway 现在正常吗？", "否：notify-gateway 没有 ERROR 日志。"),
    ],
)
def test_decide_inverted_health_answer_is_never_pass(question: str, text: str) -> None:
    decision = _decide(question, [("c1", text, "summary", NO_ERRORS)])
    assert decision["conclusion"]["status"] == "does_not_follow"
    assert decision["conclusion"]["expected"] == "yes"
    assert decision["verdict"] == "LOW_CONFID"
    assert decision["question_coverage"]["status"] == "unanswered"


@pytest.mark.parametrize(
    ("question", "text"),
    [
        ("Is notify-gateway healthy?", "Yes: notify-gateway has no ERROR log entries."),
        ("notify-gateway 现在正常吗？", "是：notify-gateway 没有 ERROR 日志。"),
    ],
)
def test_decide_right_health_answer_passes(question: str, text: str) -> None:
    decision = _decide(question, [("c1", text, "summary", NO_ERRORS)])
    assert decision["conclusion"]["status"] == "follows"
    assert decision["verdict"] == "PASS"


def test_decide_health_with_errors_is_yes_only_when_clean() -> None:
    claims = [("c1", "ledger-api logs timeouts", "logs[0]", ERROR_LINE)]
    says_yes = {"text": "Yes: ledger-api is healthy", "answer": "yes", "rests_on": ["c1"]}
    says_no = {"text": "No: ledger-api logs errors", "answer": "no", "rests_on": ["c1"]}
    assert _decide("ledger-api 正常吗？", claims, conclusion=says_yes)["verdict"] == "LOW_CONFID"
    assert _decide("ledger-api 正常吗？", claims, conclusion=says_no)["verdict"] == "PASS"


def test_decide_metric_question_is_not_answered_from_logs() -> None:
    claims = [("c1", "Yes: ledger-api has ERROR log entries", "logs[0]", ERROR_LINE)]
    decision = _decide("Is ledger-api's CPU saturated?", claims)
    assert decision["conclusion"]["status"] == "does_not_follow"
    assert "series" in decision["conclusion"]["reason"]
    assert decision["verdict"] == "LOW_CONFID"


def test_decide_metric_question_answered_from_its_series() -> None:
    claims = [("c1", "The CPU usage of ledger-api is 94%", "series[0]", CPU_HIGH)]
    right = {"text": "Yes: 94% is above 80%", "answer": "yes", "rests_on": ["c1"]}
    wrong = {"text": "No: CPU is fine", "answer": "no", "rests_on": ["c1"]}
    assert _decide("Is ledger-api's CPU saturated?", claims, conclusion=right)["verdict"] == "PASS"
    assert _decide("ledger-api 的 CPU 打满了吗？", claims, conclusion=wrong)["verdict"] == (
        "LOW_CONFID"
    )


def test_decide_conclusion_resting_on_an_unconfirmed_claim_does_not_follow() -> None:
    claims = [("c1", "The CPU usage of ledger-api is 94%", "series[0]", CPU_HIGH)]
    conclusion = {"text": "Yes", "answer": "yes", "rests_on": ["c1"]}
    decision = _decide(
        "Is ledger-api's CPU saturated?", claims, conclusion=conclusion, label="unsupported"
    )
    assert decision["conclusion"]["status"] == "does_not_follow"


def test_decide_yes_no_without_conclusion_is_derived_from_confirmed_claims() -> None:
    claims = [("c1", "ledger-api logs timeouts", "logs[0]", ERROR_LINE)]
    decision = _decide("Does ledger-api have errors?", claims)
    assert decision["conclusion"]["status"] == "derived"
    assert decision["conclusion"]["expected"] == "yes"
    assert decision["verdict"] == "PASS"


def test_decide_compare_names_the_higher_first() -> None:
    claims = [
        ("c1", "ledger-api CPU 94%", "series[0]", CPU_HIGH),
        ("c2", "notify-gateway CPU 12%", "series[1]", CPU_LOW),
    ]
    question = "Which is higher, the CPU of ledger-api or notify-gateway?"
    right = {"text": "ledger-api is higher", "answer": "value", "rests_on": ["c1", "c2"]}
    wrong = {"text": "notify-gateway is higher", "answer": "value", "rests_on": ["c1", "c2"]}
    assert _decide(question, claims, conclusion=right)["verdict"] == "PASS"
    assert _decide(question, claims, conclusion=wrong)["verdict"] == "LOW_CONFID"
    lower = "ledger-api 和 notify-gateway 哪个 CPU 更低？"
    turned = {"text": "notify-gateway 更低", "answer": "value", "rests_on": ["c1", "c2"]}
    assert _decide(lower, claims, conclusion=turned)["verdict"] == "PASS"


def test_decide_nonexistent_alert_is_never_pass() -> None:
    summary = "query_metrics alert=LedgerDiskFull alerts 0 of 0, series 0 of 0 (complete)"
    claims = [("c1", "No: no alert named LedgerDiskFull exists", "summary", summary)]
    decision = _decide("Is LedgerDiskFull firing?", claims)
    assert decision["conclusion"]["status"] == "does_not_follow"
    assert decision["verdict"] == "LOW_CONFID"


def test_decide_changes_question_is_answered_only_by_a_change() -> None:
    unrelated = [("c1", "ledger-api logs timeouts at 2026-05-12 09:41", "logs[0]", ERROR_LINE)]
    change = [("c1", "ledger-db logged at 2026-05-12 09:40:00 a migration", "logs[0]", INFO_LINE)]
    assert _decide("What changed at 09:40?", unrelated)["verdict"] == "LOW_CONFID"
    assert _decide("What changed at 09:40?", change)["verdict"] == "PASS"
    no_time = [("c1", "ledger-db logged a migration", "logs[0]", INFO_LINE)]
    decision = _decide("What changed at 09:40?", no_time)
    assert decision["question_coverage"]["unanswered"] == ["time window"]


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        ('"Migration 0042 finished in 590s"', []),
        ("the job took 120s", []),
        ("order-service returned 500s", ["500"]),
    ],
)
def test_a_duration_is_no_status_code(text: str, codes: list[str]) -> None:
    """A change line quoting a duration names no error code (its claim stays confirmable)."""
    assert [name for name in named(text) if name.isdigit()] == codes


def _does_not_follow(case: str) -> Decision:
    """A decision whose conclusion does not follow, for each kind of reason."""
    cpu = [
        ("c1", "ledger-api CPU 94%", "series[0]", CPU_HIGH),
        ("c2", "notify-gateway CPU 12%", "series[1]", CPU_LOW),
    ]
    if case == "says_otherwise":
        return _decide(
            "notify-gateway 现在正常吗？", [("c1", "否：没有 ERROR 日志。", "summary", NO_ERRORS)]
        )
    if case == "metric_no_series":
        return _decide(
            "ledger-api 的 CPU 打满了吗？", [("c1", "是：有错误日志", "logs[0]", ERROR_LINE)]
        )
    if case == "rests_on_unconfirmed":
        conclusion = {"text": "是", "answer": "yes", "rests_on": ["c1"]}
        return _decide(
            "ledger-api 的 CPU 打满了吗？", cpu[:1], conclusion=conclusion, label="unsupported"
        )
    if case == "alert_not_in_data":
        summary = "query_metrics alert=LedgerDiskFull alerts 0 of 0, series 0 of 0 (complete)"
        return _decide(
            "LedgerDiskFull 告警在触发吗？", [("c1", "否：没有这个告警", "summary", summary)]
        )
    wrong = {"text": "notify-gateway 更高", "answer": "value", "rests_on": ["c1", "c2"]}
    return _decide("ledger-api 和 notify-gateway 哪个 CPU 更高？", cpu, conclusion=wrong)


@pytest.mark.parametrize(
    ("case", "english", "chinese"),
    [
        (
            "says_otherwise",
            "it says no where the claims it rests on show yes",
            "它的回答是“否”，而它依据的论断显示应为“是”",
        ),
        (
            "metric_no_series",
            "a metric question is answered from its series; the claims cite none",
            "指标问题要用指标序列回答；这些论断没有引用任何序列",
        ),
        (
            "rests_on_unconfirmed",
            "it rests on claims that are not confirmed (c1)",
            "它依据的论断未经确认（c1）",
        ),
        (
            "alert_not_in_data",
            "no evidence names the alert LedgerDiskFull: it is not in the data",
            "没有任何证据提到告警 LedgerDiskFull：数据中没有这个告警",
        ),
        (
            "compare_first",
            "ledger-api has the highest value; the conclusion names notify-gateway first",
            "ledger-api 的值最高；结论首先提到的是 notify-gateway",
        ),
    ],
    ids=["says-otherwise", "metric-no-series", "unconfirmed", "no-such-alert", "compare"],
)
def test_conclusion_reason_is_stated_in_the_answer_language(
    case: str, english: str, chinese: str
) -> None:
    checked = _does_not_follow(case)["conclusion"]
    assert checked["status"] == "does_not_follow"
    assert checked["reason_code"] == case
    assert checked["reason"] == english  # the audit record and the notes keep English
    assert reason_text(checked, "en") == english
    assert reason_text(checked, "zh") == chinese

    no_claims = read_answer(VALID, records.executor_output())
    for language, reason in (("zh", f"（{chinese}）"), ("en", f" ({english})")):
        material = select_material(
            [], no_claims, records.gatekeeper_result({}), conclusion=checked, language=language
        )
        (gap,) = [g for g in material["gaps"] if g["kind"] == "conclusion_gap"]
        assert gap["text"] == checked["text"] + reason
    answer = render_template(material_zh(checked), verdict="LOW_CONFID", score=1.0, language="zh")
    assert chinese in answer and english not in answer


def material_zh(checked: ConclusionCheck) -> Material:
    no_claims = read_answer(VALID, records.executor_output())
    return select_material(
        [], no_claims, records.gatekeeper_result({}), conclusion=checked, language="zh"
    )


def test_conclusion_reason_of_an_older_check_is_its_english_reason() -> None:
    checked = _does_not_follow("says_otherwise")["conclusion"]
    older = {k: v for k, v in checked.items() if k not in ("reason_code", "reason_args")}
    assert reason_text(older, "zh") == checked["reason"]  # type: ignore[arg-type]


def test_conclusion_reason_without_a_named_service() -> None:
    cpu = [
        ("c1", "ledger-api CPU 94%", "series[0]", CPU_HIGH),
        ("c2", "notify-gateway CPU 12%", "series[1]", CPU_LOW),
    ]
    vague = {"text": "它们差不多", "answer": "value", "rests_on": ["c1", "c2"]}
    checked = _decide("ledger-api 和 notify-gateway 哪个 CPU 更高？", cpu, conclusion=vague)[
        "conclusion"
    ]
    assert checked["reason"] == (
        "ledger-api has the highest value; the conclusion names none of them first"
    )
    assert reason_text(checked, "zh") == "ledger-api 的值最高；结论没有提到其中任何一个服务"


@pytest.mark.parametrize(
    ("language", "first"),
    [
        ("en", "Yes (follows from the confirmed facts below)"),
        ("zh", "是（由下列已确认的事实推出）"),
    ],
)
def test_derived_yes_or_no_opens_the_answer(language: str, first: str) -> None:
    claims = [("c1", "ledger-api logs timeouts", "logs[0]", ERROR_LINE)]
    checked = _decide("Does ledger-api have errors?", claims)["conclusion"]
    assert checked["status"] == "derived"
    no_claims = read_answer(VALID, records.executor_output())
    material = select_material(
        [], no_claims, records.gatekeeper_result({}), conclusion=checked, language=language
    )
    answer = render_template(material, verdict="PASS", score=1.0, language=language)
    heading = "## Answer" if language == "en" else "【回答】"
    assert answer.splitlines()[:2] == [heading, f"- {first}"]
