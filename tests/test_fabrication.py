"""The fabrication line: what nothing gathered names is REJECT; what is elsewhere stays capped.

``evidence.fabricated`` (reject) fails a claim naming an entity, an error code or a cause that
none of the evidence gathered in the diagnosis holds; a name or code present in that evidence but
not in the claim's own bindings, and any number, are ``evidence.unbound_specifics`` (low_confid).
Each side of the line is tested here.
"""

from __future__ import annotations

import pytest

from state.records import (
    GatekeeperResult,
    Invocation,
    ProposedCheck,
    RawCitation,
    TraceItem,
    VerifierReply,
)
from tests import records
from tests.records import VALID
from verification.catalog import load_catalog, settings_of, validate_catalog
from verification.executor_output import read_answer
from verification.fabrication import cause_clauses, named
from verification.gatekeeper import run_gatekeeper
from verification.verdict import decide

OWN = "2026-03-01T10:01:00Z ERROR order-service order-1: HTTP 500 Cannot acquire connection"
ELSEWHERE = (
    "2026-03-01T10:03:00Z WARN inventory-service inv-2: HTTP 503 slow query on table stock_items "
    "java.sql.SQLTransactionRollbackException: lock wait timeout, pool exhausted"
)
TRACE: list[TraceItem] = [
    records.trace_item("t1", "query_logs", ["inv-1"]),
    records.trace_item("t2", "query_logs", ["inv-2"]),
]


def invocations() -> list[Invocation]:
    """Two log queries: the claim binds the first; the second holds what is 'elsewhere'."""
    return [
        records.invocation(
            "inv-1",
            "query_logs",
            {"service": "order-service", "level": "ERROR"},
            output={},
            details={"evidence_refs": records.refs(("logs[0]", OWN))},
        ),
        records.invocation(
            "inv-2",
            "query_logs",
            {"service": "inventory-service"},
            output={},
            details={"evidence_refs": records.refs(("logs[0]", ELSEWHERE))},
        ),
    ]


def gate(text: str, *, question: str = "") -> GatekeeperResult:
    claim = records.claim("c1", text, records.binding("inv-1", "logs[0]", "Cannot acquire"))
    return run_gatekeeper(VALID, records.executor_output(claim), invocations(), question=question)


def rules(result: GatekeeperResult) -> set[str]:
    return set(result["failed_rules"])


# (claim, what the finding names): found in no evidence of the diagnosis -> fabricated, reject.
FABRICATED = [
    pytest.param("order-service calls payments-db, which is down", "payments-db", id="service"),
    pytest.param("order-service runs on node-17", "node-17", id="host"),
    pytest.param("order-service lost db-primary", "db-primary", id="database"),
    pytest.param("pod order-7f9c-x2 restarted", "order-7f9c-x2", id="pod"),
    pytest.param("order-service locks table order_lines", "order_lines", id="table"),
    pytest.param("alert OrderQueueBacklog is firing", "OrderQueueBacklog", id="alert"),
    pytest.param("order-service returned HTTP 502", "502", id="http-status"),
    pytest.param("order-service 返回 504 错误", "504", id="http-status-zh"),
    pytest.param("order-service threw a NullPointerException", "NullPointerException", id="exc"),
    pytest.param("order-service failed with ORA-00060", "ORA-00060", id="vendor-code"),
    pytest.param("order-service saw ECONNREFUSED", "ECONNREFUSED", id="errno"),
    pytest.param("the worker ended with exit code 137", "137", id="exit-code"),
    pytest.param("order-service fails because of a DNS outage", "cause: a dns outage", id="cause"),
    pytest.param(
        "a certificate rotation led to the HTTP 500 of order-service",
        "cause: a certificate rotation",
        id="cause-before",
    ),
    pytest.param("order-service 报错的根因是 kernel panic", "cause: kernel panic", id="cause-zh"),
]

# (claim): present elsewhere in the diagnosis, not in the claim's binding -> capped, no reject.
ELSEWHERE_ONLY = [
    pytest.param("order-service waits on inventory-service", id="service"),
    pytest.param("order-service locks table stock_items", id="table"),
    pytest.param("order-service returned HTTP 503", id="http-status"),
    pytest.param(
        "order-service threw java.sql.SQLTransactionRollbackException", id="exception-dotted"
    ),
    pytest.param("order-service threw SQLTransactionRollbackException", id="exception-short"),
]

# (claim): a number is never fabricated (a value may be computed): capped only.
NUMBERS = [
    pytest.param("order-service returned HTTP 500 after 45s", id="duration"),
    pytest.param("order-service pool usage reached 97%", id="percentage"),
    pytest.param("order-service logged 42 errors", id="count"),
]

# (claim): no fabrication and nothing unbound (names, codes and causes its own line holds).
CLEAN = [
    pytest.param("order-service returned HTTP 500: Cannot acquire connection", id="own-line"),
    pytest.param("order-service fails because the connection pool is exhausted", id="cause-held"),
    pytest.param("order-service 因为连接池耗尽而报错", id="cause-zh-no-english-words"),
    pytest.param(
        "Most likely root cause (inferred): order-service, mechanism: slow query",
        id="cause-names-a-held-entity",
    ),
    pytest.param("a full-table, out-of-memory, long-running read-only scan", id="plain-words"),
]


@pytest.mark.parametrize(("text", "name"), FABRICATED)
def test_fabrication_name_code_or_cause_in_no_evidence_is_rejected(text: str, name: str) -> None:
    result = gate(text)

    assert "evidence.fabricated" in rules(result)
    assert result["severity"] == "reject"
    finding = next(e for e in result["errors"] if e["rule_id"] == "evidence.fabricated")
    assert name in finding["message"], finding["message"]
    assert finding["claim_id"] == "c1"


@pytest.mark.parametrize("text", ELSEWHERE_ONLY)
def test_fabrication_name_elsewhere_in_the_diagnosis_is_only_unbound(text: str) -> None:
    result = gate(text)

    assert rules(result) == {"evidence.unbound_specifics"}
    assert result["severity"] == "low_confid"


@pytest.mark.parametrize("text", NUMBERS)
def test_fabrication_numbers_are_never_fabricated(text: str) -> None:
    result = gate(text)

    assert rules(result) == {"evidence.unbound_specifics"}


@pytest.mark.parametrize("text", CLEAN)
def test_fabrication_nothing_flagged_when_the_evidence_holds_it(text: str) -> None:
    assert rules(gate(text)) == set()


def test_fabrication_names_in_the_question_are_not_made_up() -> None:
    text = "billing-service has no log entries in the queried range"

    assert "evidence.fabricated" in rules(gate(text))
    assert "evidence.fabricated" not in rules(gate(text, question="Is billing-service healthy?"))


def test_fabrication_claim_without_verified_binding_is_checked_too() -> None:
    claim = records.claim("c1", "payments-db is down", records.binding("inv-1", "x[9]", "x"))
    result = run_gatekeeper(VALID, records.executor_output(claim), invocations())

    assert {"evidence.raw_path", "evidence.fabricated"} <= rules(result)


def test_fabrication_named_reads_each_kind() -> None:
    text = (
        "order-service (pod order-7f9c-x2, host db1.prod.internal) hit HTTP 503 and "
        "java.net.SocketTimeoutException; alert HighErrorRate; table order_lines; ORA-00060"
    )

    assert named(text) == [
        "order-service",
        "order-7f9c-x2",
        "db1.prod.internal",
        "503",
        "java.net.SocketTimeoutException",
        "HighErrorRate",
        "order_lines",
        "ORA-00060",
    ]


def test_fabrication_named_leaves_out_versions_encodings_and_plain_words() -> None:
    assert named("v2.3.1 of order-service in utf-8, a full-table read-only scan, e.g. this") == [
        "order-service"
    ]


def test_fabrication_cause_clauses_after_and_before_their_cue() -> None:
    assert cause_clauses("X fails because the pool is exhausted. Y is fine") == [
        "the pool is exhausted"
    ]
    assert cause_clauses("Slow queries on stock led to 500s") == ["slow queries on stock"]
    assert cause_clauses("X is caused by lock waits") == ["lock waits"]


# --------------------------------------------------------------------------- verdict and catalog


def _decide(result: GatekeeperResult, model_label: str = "direct_observation") -> str:
    claim = records.claim(
        "c1", "order-service calls payments-db", records.binding("inv-1", "logs[0]", "x")
    )
    answer = read_answer(VALID, records.executor_output(claim))
    proposed = ProposedCheck(
        claim_id="c1",
        verification=model_label,
        detail="model",
        evidence_refs=[RawCitation(trace_ref="t1", source_invocation_ids=["inv-1"])],
    )
    verifier = VerifierReply(
        verdict="PASS", groundedness_score=1.0, claim_checks=[proposed], rationale="", notes=[]
    )
    decision = decide(answer, result, verifier, parse_status=VALID, trace=TRACE, mode="model")
    assert decision["claim_checks"][0]["verification"] == "unsupported"
    return decision["verdict"]


def test_fabrication_decide_rejects_even_a_model_pass() -> None:
    result = gate("order-service calls payments-db")

    assert _decide(result) == "REJECT"


def test_fabrication_decide_rejects_whatever_severity_the_catalog_gives() -> None:
    catalog = load_catalog()
    for rule in catalog["rules"]:
        if rule["id"] == "evidence.fabricated":
            rule["default_severity"] = "low_confid"
    claim = records.claim(
        "c1", "order-service calls payments-db", records.binding("inv-1", "logs[0]", "Cannot")
    )
    result = run_gatekeeper(VALID, records.executor_output(claim), invocations(), catalog)

    assert result["severity"] == "low_confid"
    assert _decide(result) == "REJECT"


def test_fabrication_rule_is_in_the_bundled_catalog_at_version_two() -> None:
    catalog = load_catalog()

    assert catalog["rule_set_version"] == "gatekeeper-rules.v2"
    rule = next(r for r in catalog["rules"] if r["id"] == "evidence.fabricated")
    assert rule["enabled"] and rule["default_severity"] == "reject"


def test_fabrication_catalog_recorded_before_the_rule_rechecks_without_it() -> None:
    old = load_catalog()
    old["rule_set_version"] = "gatekeeper-rules.v1"
    old["rules"] = [r for r in old["rules"] if r["id"] != "evidence.fabricated"]

    settings = settings_of(validate_catalog(old))
    claim = records.claim(
        "c1", "order-service calls payments-db", records.binding("inv-1", "logs[0]", "Cannot")
    )
    result = run_gatekeeper(VALID, records.executor_output(claim), invocations(), old)

    assert not settings.on("evidence.fabricated")
    assert "evidence.fabricated" not in rules(result)
