"""Mechanisms and ranks-lower reasons worded in the answer's language (``models.offline.phrases``).

Each kind the analysis gives in Chinese with its values quoted verbatim; English, a phrase missing
or of an unknown kind, or a value the cut English text does not show leave the English text.
"""

from __future__ import annotations

from typing import Any

import pytest

from models.offline.phrases import worded
from verification.text import grounded, specifics

CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "change: job at 2026-03-01T09:58:12Z: Started stock reconciliation job run=rec-7",
        {
            "kind": "change",
            "values": {
                "category": "job",
                "time": "2026-03-01T09:58:12Z",
                "text": "Started stock reconciliation job run=rec-7",
            },
        },
        "变更（job，2026-03-01T09:58:12Z）：“Started stock reconciliation job run=rec-7”",
    ),
    (
        "new Payment gateway timeout after <*>ms",
        {
            "kind": "new_template",
            "values": {
                "level": "ERROR",
                "lines": "12",
                "template": "Payment gateway timeout after <*>ms",
            },
        },
        "新出现的消息：“Payment gateway timeout after <*>ms”",
    ),
    (
        "surge of Retrying ledger write, attempt <*>",
        {
            "kind": "template_jump",
            "values": {
                "rate_before": "0.1",
                "rate_after": "2",
                "per": "minute",
                "level": "WARN",
                "template": "Retrying ledger write, attempt <*>",
            },
        },
        "某类消息突增：“Retrying ledger write, attempt <*>”",
    ),
    (
        "error surge, 0.03/min -> 0.8/min (2 -> 12 lines)",
        {
            "kind": "error_surge",
            "values": {
                "level": "error",
                "rate_before": "0.03",
                "rate_after": "0.8",
                "per": "minute",
                "lines_before": "2",
                "lines_after": "12",
            },
        },
        "错误日志突增，每分钟 0.03 -> 0.8 条（共 2 -> 12 条）",
    ),
    (
        "warning surge, 0.01 per request -> 0.4 per request (3 -> 40 lines, 300 -> 100 requests"
        " served)",
        {
            "kind": "error_surge",
            "values": {
                "level": "warning",
                "rate_before": "0.01",
                "rate_after": "0.4",
                "per": "request",
                "requests_before": "300",
                "requests_after": "100",
                "lines_before": "3",
                "lines_after": "40",
            },
        },
        "警告日志突增，每个请求 0.01 -> 0.4 条（共 3 -> 40 条，所服务的请求 300 -> 100 个）",
    ),
    (
        "db_pool_pending_threads 0.7 -> 71 (rise) (also on 2 other services)",
        {
            "kind": "series",
            "values": {
                "metric": "db_pool_pending_threads",
                "baseline": "0.7",
                "peak": "71",
                "direction": "rise",
                "shared": "2",
            },
        },
        "db_pool_pending_threads 0.7 -> 71（上升）（另有 2 个服务同样如此）",
    ),
    (
        "own time p90 12 ms -> 410 ms",
        {
            "kind": "trace_latency",
            "values": {"measure": "own", "baseline": "12", "incident": "410"},
        },
        "自身耗时 p90 12 ms -> 410 ms",
    ),
    (
        "time between services on calls in and out of it: p50 2 ms -> 300 ms on 2 of 3 edges"
        " (orders -> db-proxy, users -> db-proxy)",
        {
            "kind": "call_gap",
            "values": {
                "baseline": "2",
                "incident": "300",
                "slow": "2",
                "measured": "3",
                "edges": ["orders -> db-proxy", "users -> db-proxy"],
            },
        },
        "进出它的调用在服务之间耗费的时间：p50 2 ms -> 300 ms，3 条调用边中有 2 条如此"
        "（orders -> db-proxy、users -> db-proxy）",
    ),
    (
        "span error ratio 0% -> 100%",
        {"kind": "trace_errors", "values": {"baseline": "0%", "incident": "100%"}},
        "span 错误率 0% -> 100%",
    ),
    (
        "alert OrderServiceHigh5xxRate firing",
        {"kind": "alert", "values": {"name": "OrderServiceHigh5xxRate"}},
        "告警 OrderServiceHigh5xxRate 正在触发",
    ),
    (
        "orders POST /orders: 0 of 15 visits (baseline 60 of 60) make the call to billing"
        " POST /charge; 15 requests depart from the baseline's call pattern, cut short after"
        " calling stock",
        {
            "kind": "call_pattern",
            "values": {
                "event": "call",
                "name": "billing",
                "extra": "POST /charge",
                "service": "orders",
                "operation": "POST /orders",
                "incident": "0",
                "incident_visits": "15",
                "baseline": "60",
                "baseline_visits": "60",
                "requests": "15",
                "cut_after": "stock",
            },
        },
        "orders POST /orders：15 次访问中有 0 次调用 billing POST /charge（基线 60 次中有 60 次）；"
        "15 个请求偏离了基线的调用模式，在调用 stock 后中断",
    ),
    (
        "POST /trips: 0 of 35 visits (baseline 7 of 14) write 2 times the log line"
        " 'route priced'; 15 requests depart from the baseline's call pattern; so since"
        " 2026-05-04T09:56:00Z, before the stated start",
        {
            "kind": "call_pattern",
            "values": {
                "event": "log",
                "name": "route priced",
                "operation": "POST /trips",
                "incident": "0",
                "incident_visits": "35",
                "baseline": "7",
                "baseline_visits": "14",
                "requests": "15",
                "repeat": "2",
                "since": "2026-05-04T09:56:00Z",
            },
        },
        "POST /trips：35 次访问中有 0 次写出日志“route priced” 2 次（基线 14 次中有 7 次）；"
        "15 个请求偏离了基线的调用模式；自 2026-05-04T09:56:00Z 起已如此，早于所述的开始时间",
    ),
    (
        "a symptom: it calls inventory-service, payment-service, whose anomaly began no later"
        " than its own",
        {"kind": "symptom", "values": {"causes": ["inventory-service", "payment-service"]}},
        "是症状：它调用 inventory-service、payment-service，而后者的异常开始得不晚于它自己",
    ),
    (
        "weaker evidence than inventory-service (score 0.41 against 0.97)",
        {
            "kind": "weaker_evidence",
            "values": {"leader": "inventory-service", "score": "0.41", "leader_score": "0.97"},
        },
        "证据弱于 inventory-service（得分 0.41，对方 0.97）",
    ),
]


@pytest.mark.parametrize(
    ("text", "phrase", "chinese"), CASES, ids=[str(c[1]["kind"]) for c in CASES]
)
def test_phrases_worded_in_chinese_quote_the_english_values(
    text: str, phrase: dict[str, Any], chinese: str
) -> None:
    limit = max(160, len(text))
    assert worded(text, phrase, "zh", limit) == chinese
    assert worded(text, phrase, "en", limit) == text
    # What the Gatekeeper checks: every specific the Chinese states, the English states.
    assert all(grounded(token, [text]) for token in specifics(chinese))


def test_phrases_a_value_past_the_cut_leaves_the_english() -> None:
    text, phrase, _ = next(case for case in CASES if case[1]["kind"] == "call_pattern")
    limit = text.index(" after calling")
    assert worded(text, phrase, "zh", limit) == worded(text, phrase, "en", limit)
    assert worded(text, phrase, "zh", limit).endswith("call pattern, cut …")
    assert len(text) > 160  # cut before "stock": the part naming the callee blamed is needed


def test_phrases_a_droppable_part_past_the_cut_is_left_out() -> None:
    """The start of an early absence is said when shown, and otherwise only it is left out."""
    text, phrase, chinese = [case for case in CASES if case[1]["kind"] == "call_pattern"][1]
    assert worded(text, phrase, "zh", len(text)) == chinese
    cut = text.index("2026-05-04T09:56:00Z")  # the time itself is past the cut
    assert worded(text, phrase, "zh", cut) == chinese[: chinese.index("；自")]
    cut = text.index("; 15 requests") + 2  # so is the number of requests
    assert worded(text, phrase, "zh", cut) == chinese[: chinese.index("；15")]
    # A value that is not in a droppable part still leaves the English.
    assert worded(text, phrase, "zh", 40) == worded(text, phrase, "en", 40)


def test_phrases_a_quoted_line_is_cut_where_the_english_cut_cuts_it() -> None:
    text, phrase, _ = CASES[0]
    assert worded(text, phrase, "en", 60) == "change: job at 2026-03-01T09:58:12Z: Started stock …"
    assert worded(text, phrase, "zh", 60) == "变更（job，2026-03-01T09:58:12Z）：“Started stock …”"


def test_phrases_a_value_the_cut_english_hides_leaves_the_english() -> None:
    text, phrase, _ = CASES[-1]
    assert worded(text, phrase, "zh", 40) == "weaker evidence than inventory-service …"


@pytest.mark.parametrize(
    "phrase",
    [
        None,
        {"kind": "unknown", "values": {}},
        {"kind": "alert", "values": {}},
        {"kind": "alert", "values": {"name": "SomethingElse"}},
        {"kind": "series", "values": {"metric": "m", "baseline": "1", "peak": "2"}},
    ],
    ids=["none", "unknown-kind", "value-missing", "value-not-in-text", "term-missing"],
)
def test_phrases_that_cannot_be_worded_leave_the_english(phrase: object) -> None:
    assert worded("alert OrderServiceHigh5xxRate firing", phrase, "zh", 160) == (
        "alert OrderServiceHigh5xxRate firing"
    )
