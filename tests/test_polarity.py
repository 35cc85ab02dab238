"""Polarity: a negation read with its whole scope, in claims and in the evidence they quote.

Both directions in both languages: a claim denying what its evidence shows is contradicted (and
the verdict REJECT); a negation that agrees with its evidence, or a claim quoting an evidence line
that itself holds a negation, stays confirmed.
"""

from __future__ import annotations

import pytest

from state.records import Decision, TraceItem
from tests.records import VALID, binding, claim, excerpt, executor_output, gatekeeper_result
from tests.records import trace_item as item
from verification.claim_checker import check_claims
from verification.executor_output import read_answer
from verification.polarity import asserted_text, denies, key_terms, same_denial, scopes
from verification.verdict import decide

TRACE: list[TraceItem] = [item("t1", "query_logs", ["inv-1"])]
CONFIRMED = ("direct_observation", "reasonable_inference")


def _decide(text: str, ref_text: str, *, raw_path: str = "logs[0]") -> Decision:
    """The offline decision on claim c1 bound to one verified ref whose text is ``ref_text``."""
    output = executor_output(claim("c1", text, binding("inv-1", raw_path, ref_text[-12:])))
    gatekeeper = gatekeeper_result({"c1": [excerpt("inv-1", "query_logs", raw_path, ref_text)]})
    answer = read_answer(VALID, output)
    reply = check_claims(answer, gatekeeper, TRACE)
    return decide(answer, gatekeeper, reply, parse_status=VALID, trace=TRACE, mode="offline")


def log(message: str, *, level: str = "ERROR", service: str = "order-service") -> str:
    """A log ref's text as the sample backend renders it."""
    return f"2026-03-01T10:05:00Z {level} {service} {service[:5]}-1: {message}"


ALERT_FIRING = (
    "OrderLatencyHigh service=order-service severity=warning state=firing value=2.4 "
    "threshold=1 active_at=2026-03-01T10:02:00Z: p99 latency above 1s"
)
ALERT_RESOLVED = ALERT_FIRING.replace("state=firing", "state=resolved")

# (claim, evidence ref text): the claim denies what the evidence shows.
DENIED = [
    pytest.param(
        "order-service never returned HTTP 500",
        log("HTTP 500 POST /api/orders"),
        id="en-never-vs-shown",
    ),
    pytest.param(
        "order-service did not return any 500 on POST /api/orders",
        log("HTTP 500 POST /api/orders"),
        id="en-not-any",
    ),
    pytest.param(
        "OrderLatencyHigh is no longer firing for order-service",
        ALERT_FIRING,
        id="en-no-longer-firing-vs-firing",
    ),
    pytest.param("OrderLatencyHigh is not firing", ALERT_FIRING, id="en-not-firing-vs-firing"),
    pytest.param(
        "order-service has no ERROR log entries",
        log("HTTP 500 POST /api/orders"),
        id="en-no-error-entries-vs-error-line",
    ),
    pytest.param(
        "none of the order-service requests hit a timeout",
        log("request timeout after 30s", level="WARN"),
        id="en-none",
    ),
    pytest.param(
        "order-service completed POST /api/orders without a SocketTimeoutException",
        log("POST /api/orders java.net.SocketTimeoutException: read timed out"),
        id="en-without",
    ),
    pytest.param(
        "order-service 从未返回 HTTP 500",
        log("HTTP 500 POST /api/orders"),
        id="zh-never-vs-shown",
    ),
    pytest.param(
        "order-service 没有 ERROR 日志", log("HTTP 500 POST /api/orders"), id="zh-no-error-logs"
    ),
    pytest.param("告警 OrderLatencyHigh 已不再触发", ALERT_FIRING, id="zh-no-longer-firing"),
    pytest.param(
        "order-service 未出现超时",
        log("request timeout after 30s", level="WARN"),
        id="zh-no-timeout-vs-timeout",
    ),
    pytest.param(
        "order-service 并非返回 HTTP 503", log("HTTP 503 upstream unavailable"), id="zh-bingfei"
    ),
    pytest.param("order-service 不是 HTTP 502 错误", log("HTTP 502 bad gateway"), id="zh-bushi"),
    pytest.param("order-service 没返回 HTTP 504", log("HTTP 504 gateway timeout"), id="zh-mei"),
    pytest.param(
        "order-service 无 SocketTimeoutException",
        log("java.net.SocketTimeoutException: read timed out"),
        id="zh-wu",
    ),
]

# (claim, evidence ref text): the negation agrees with the evidence, or quotes it.
AGREEING = [
    pytest.param(
        "order-service POST /api/orders completed in 20ms without a timeout",
        log("POST /api/orders: no timeout, completed in 20ms", level="INFO"),
        id="en-without-agrees",
    ),
    pytest.param(
        "OrderLatencyHigh is no longer firing for order-service",
        ALERT_RESOLVED,
        id="en-no-longer-firing-vs-resolved",
    ),
    pytest.param(
        "ts-contacts-service logged No contacts according to contactsId",
        log("No contacts according to contactsId", service="ts-contacts-service"),
        id="en-quotes-a-negated-line",
    ),
    pytest.param(
        "ts-contacts-service found no contacts for the contactsId it was asked for",
        log("No contacts according to contactsId", service="ts-contacts-service"),
        id="en-restates-a-negated-line",
    ),
    pytest.param(
        "order-service answered 404 Not Found for order 42",
        log("GET /api/orders/42 404 Not Found", level="WARN"),
        id="en-quotes-not-found",
    ),
    pytest.param(
        "order-service returned HTTP 500: Cannot acquire connection from pool",
        log("HTTP 500 Cannot acquire connection from pool"),
        id="en-quotes-cannot",
    ),
    pytest.param(
        "ts-order-service 日志显示 未找到订单 42",
        log("未找到订单 42", service="ts-order-service"),
        id="zh-quotes-a-negated-line",
    ),
    pytest.param(
        "order-service 的告警 OrderLatencyHigh 已不再触发",
        ALERT_RESOLVED,
        id="zh-no-longer-firing-vs-resolved",
    ),
    pytest.param(
        "order-service 没有超时，POST /api/orders 在 20ms 内完成",
        log("POST /api/orders: no timeout, completed in 20ms", level="INFO"),
        id="zh-no-timeout-agrees",
    ),
]


@pytest.mark.parametrize(("text", "ref_text"), DENIED)
def test_polarity_claim_denying_what_its_evidence_shows_is_contradicted(
    text: str, ref_text: str
) -> None:
    result = _decide(text, ref_text)
    checked = result["claim_checks"][0]

    assert checked["verification"] == "contradicted", checked["detail"]
    assert result["verdict"] == "REJECT"


@pytest.mark.parametrize(("text", "ref_text"), AGREEING)
def test_polarity_negation_agreeing_with_its_evidence_stays_confirmed(
    text: str, ref_text: str
) -> None:
    result = _decide(text, ref_text)
    checked = result["claim_checks"][0]

    assert checked["verification"] in CONFIRMED, checked["detail"]
    assert result["verdict"] == "PASS"


def test_polarity_negated_specific_missing_from_the_evidence_is_no_contradiction() -> None:
    # The 500 a claim denies cannot be in evidence of 200s; it stays capped, never contradicted.
    result = _decide(
        "order-service never returned HTTP 500; every POST /api/orders answered 200",
        log("POST /api/orders 200 in 20ms", level="INFO"),
    )

    assert result["claim_checks"][0]["verification"] == "overstated"


def test_polarity_claim_stating_what_the_evidence_denies_is_contradicted() -> None:
    result = _decide(
        "POST /api/orders hit a timeout after 20ms",
        log("POST /api/orders: no timeout, completed in 20ms", level="INFO"),
    )

    assert result["claim_checks"][0]["verification"] == "contradicted"


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    ("text", "denied"),
    [
        ("no longer firing", "firing"),
        ("never returned http 500 and it recovered", "returned http 500"),
        ("no errors, but 3 warnings", "errors"),
        ("did not return any 500 errors", "return any 500 errors"),
        ("从未返回 http 500，但有超时", "返回 http 500"),
        ("未找到订单 42", "找到订单 42"),
        ("value 0.05 was not exceeded.", "exceeded"),
        ("0 errors in the window", "errors in the window"),
    ],
)
def test_polarity_scope_runs_to_the_end_of_the_clause(text: str, denied: str) -> None:
    (scope,) = scopes(text)

    assert scope.body.strip() == denied


@pytest.mark.parametrize(
    "text",
    [
        "not only errors but timeouts",
        "no more than 3 retries",
        "not less than 5 pods",
        "ticket no. 5 is open",
        "未来十分钟",
        "两个服务的延迟不同",
        "错误不断增加",
        "非常慢",
        "latency idle=0 waiting=57",
        "the no-op handler ran",
    ],
)
def test_polarity_phrases_that_deny_nothing(text: str) -> None:
    assert not denies(text), scopes(text)


def test_polarity_key_terms_leave_out_function_and_form_words() -> None:
    assert key_terms(" returned any http 500 log entries") == ("500", "http")
    assert key_terms(" errors from order-service") == ("error", "order-service")
    assert key_terms(" 出现超时") == ("超时",)


def test_polarity_asserted_text_blanks_denied_clauses_only() -> None:
    text = "no timeout, completed in 20ms"

    assert asserted_text(text).strip() == ", completed in 20ms".strip()


def test_polarity_same_denial_reads_a_quoted_or_restated_negation() -> None:
    (quoted,) = scopes("it logged no contacts according to contactsid")
    (restated,) = scopes("found no contacts for the contactsid")
    (other,) = scopes("no orders")
    line = "ERROR ts-contacts-service: No contacts according to contactsId"

    assert same_denial(quoted, line)
    assert same_denial(restated, line)
    assert not same_denial(other, line)
