from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from state.records import (
    Finding,
    GatekeeperResult,
    Invocation,
    InvocationStatus,
    JSONObject,
    JSONValue,
    ParseStatus,
    ParseStatusName,
    RetrievalDetails,
)
from tests import records
from tests.records import VALID, json_list, json_object, refs
from verification import gatekeeper
from verification.catalog import (
    DEFAULT_RULE_SET_VERSION,
    KNOWN_RULE_IDS,
    Catalog,
    CatalogError,
    load_catalog,
)
from verification.gatekeeper import fallback_pass, run_gatekeeper

LOG_TEXT_0 = (
    "2026-03-01T10:05:00Z ERROR order-service order-1: "
    "Cannot acquire connection from pool after 30s, HTTP 500 returned, pool usage 12%"
)
LOG_TEXT_1 = (
    "2026-03-01T10:06:00Z ERROR order-service order-2: "
    "java.lang.NullPointerException at OrderController.create"
)
LOG_SUMMARY = "query_logs level=ERROR service=order-service matched 2 of 2 (complete)"
ALERT_TEXT = (
    "HighErrorRate service=order-service severity=critical state=firing value=0.12 "
    "threshold=0.05 active_at=2026-03-01T10:04:00Z: error rate above 5%"
)


def make_invocation(
    number: int,
    tool_name: str,
    ref_pairs: list[tuple[str, str]] | None,
    *,
    arguments: JSONObject | None = None,
    status: InvocationStatus = "ok",
    round_number: int = 1,
) -> Invocation:
    """``ref_pairs`` None gives an invocation recorded without evidence refs."""
    details = (
        RetrievalDetails()
        if ref_pairs is None
        else RetrievalDetails(evidence_refs=refs(*ref_pairs))
    )
    return records.invocation(
        f"inv-{number}",
        tool_name,
        arguments,
        status=status,
        output={},
        details=details,
        round=round_number,
    )


def default_invocations() -> list[Invocation]:
    return [
        make_invocation(1, "get_current_time", None),
        make_invocation(
            2,
            "query_logs",
            [("logs[0]", LOG_TEXT_0), ("logs[1]", LOG_TEXT_1), ("summary", LOG_SUMMARY)],
            arguments={"service": "order-service", "level": "ERROR"},
        ),
        make_invocation(
            3,
            "query_metrics",
            [
                ("alerts[0]", ALERT_TEXT),
                ("summary", "query_metrics alerts 1 of 1, series 0 of 0 (complete)"),
            ],
        ),
    ]


ELSEWHERE_TEXT = (
    "2026-03-01T10:09:00Z WARN payment-service pay-1: HTTP 503 from bank-gateway: "
    "IllegalStateException"
)


def with_elsewhere() -> list[Invocation]:
    """The default invocations and one more whose log names 503 and IllegalStateException.

    A detail present somewhere in the diagnosis but not in a claim's own evidence is unbound
    (capped); one present nowhere is fabricated (``evidence.fabricated``, tested apart).
    """
    return [*default_invocations(), make_invocation(4, "query_logs", [("logs[0]", ELSEWHERE_TEXT)])]


def binding(
    invocation_id: str | None = "inv-2",
    raw_path: str | None = "logs[0]",
    excerpt: str = "Cannot acquire connection from pool",
    tool_name: str = "query_logs",
    **extra: JSONValue,
) -> JSONObject:
    found = records.binding(invocation_id, raw_path, excerpt, tool_name=tool_name)
    found.update(extra)
    return found


def claim(
    claim_id: str = "c1",
    text: str = "order-service logs show it cannot acquire connections from its pool",
    bindings: list[JSONValue] | None = None,
) -> JSONObject:
    found = records.claim(claim_id, text)
    found["evidence_bindings"] = [binding()] if bindings is None else bindings
    return found


def output(*claims: JSONObject, **overrides: JSONValue) -> JSONObject:
    result = records.executor_output(*claims) if claims else records.executor_output(claim())
    result.update(overrides)
    return result


def check(structured: JSONObject, invocations: list[Invocation] | None = None) -> GatekeeperResult:
    return run_gatekeeper(
        VALID, structured, default_invocations() if invocations is None else invocations
    )


def rule_ids(items: list[Finding]) -> list[str]:
    return [item["rule_id"] for item in items]


# --------------------------------------------------------------------------- pass path


def test_gatekeeper_precise_binding_passes_with_full_shape() -> None:
    result = check(output())

    assert result["status"] == "pass"
    assert result["severity"] == "none"
    assert result["failed_rules"] == []
    assert result["errors"] == []
    assert result["warnings"] == []
    assert result["checked_bindings"] == 1
    assert result["rule_set_version"] == DEFAULT_RULE_SET_VERSION
    assert [rule["id"] for rule in result["rules"]] == list(KNOWN_RULE_IDS)
    assert all(set(rule) == {"id", "enabled", "default_severity"} for rule in result["rules"])


def test_gatekeeper_verified_excerpts_carry_full_ref_text() -> None:
    second = binding(raw_path="logs[1]", excerpt="NullPointerException")
    result = check(output(claim(bindings=[binding(), second])))

    assert result["verified_excerpts"] == {
        "c1": [
            {
                "binding": 0,
                "invocation_id": "inv-2",
                "tool_name": "query_logs",
                "raw_path": "logs[0]",
                "text": LOG_TEXT_0,
            },
            {
                "binding": 1,
                "invocation_id": "inv-2",
                "tool_name": "query_logs",
                "raw_path": "logs[1]",
                "text": LOG_TEXT_1,
            },
        ]
    }
    assert result["checked_bindings"] == 2


def test_gatekeeper_negative_observation_binds_to_summary() -> None:
    negative = claim(
        text="No other ERROR logs in the window",
        bindings=[binding(raw_path="summary", excerpt="matched 2 of 2")],
    )
    negative["claim_type"] = "negative_observation"

    result = check(output(negative))

    assert result["status"] == "pass"
    assert result["verified_excerpts"]["c1"][0]["text"] == LOG_SUMMARY


def test_gatekeeper_recommended_action_bindings_are_not_checked() -> None:
    structured = output(
        recommended_actions=[
            {
                "text": "restart the pool",
                "source": "runbook",
                "evidence_bindings": [binding(invocation_id="inv-99", raw_path="nowhere")],
            }
        ]
    )

    result = check(structured)

    assert result["status"] == "pass"
    assert result["checked_bindings"] == 1


# --------------------------------------------------------------------------- schema.executor_v2


def _without(data: JSONObject, key: str) -> JSONObject:
    return {k: v for k, v in data.items() if k != key}


SCHEMA_FAILURES = [
    pytest.param(output(diagnosis_summary="x"), "diagnosis_summary", id="forbidden-summary"),
    pytest.param(output(user_facing_answer="x"), "user_facing_answer", id="forbidden-answer"),
    pytest.param(output(answer_version="executor_evidence_v1"), "answer_version", id="version"),
    pytest.param(_without(output(), "answer_version"), "answer_version", id="no-version"),
    pytest.param(output(claims={"c1": {}}), "claims", id="claims-not-array"),
    pytest.param(_without(output(), "claims"), "claims", id="claims-missing"),
    pytest.param(_without(output(), "hypotheses"), "hypotheses", id="hypotheses-missing"),
    pytest.param(output(missing_info="none"), "missing_info", id="missing-info-not-array"),
    pytest.param(output(recommended_actions=None), "recommended_actions", id="actions-not-array"),
    pytest.param(output(claim(bindings=[])), "claims[0].evidence_bindings", id="empty-bindings"),
    pytest.param(
        output(_without(claim(), "evidence_bindings")),
        "claims[0].evidence_bindings",
        id="no-bindings",
    ),
    pytest.param(output(_without(claim(), "claim_id")), "claims[0].claim_id", id="no-claim-id"),
    pytest.param(
        output(_without(claim(), "claim_type")), "claims[0].claim_type", id="no-claim-type"
    ),
    pytest.param(
        output(_without(claim(), "claim_text")), "claims[0].claim_text", id="no-claim-text"
    ),
    pytest.param(
        output(_without(claim(), "support_level")),
        "claims[0].support_level",
        id="no-support-level",
    ),
    pytest.param(
        output({**claim(), "claim_type": "root_cause"}), "claims[0].claim_type", id="bad-type"
    ),
    pytest.param(
        output({**claim(), "support_level": "strong"}),
        "claims[0].support_level",
        id="bad-support-level",
    ),
    pytest.param(output(claim(), claim()), "claims[1].claim_id", id="repeated-claim-id"),
    pytest.param(output(claims=["c1"]), "claims[0]", id="claim-not-object"),
    pytest.param(
        output(claim(bindings=["inv-2"])), "claims[0].evidence_bindings[0]", id="binding-string"
    ),
    pytest.param(
        cast(JSONObject, ["not", "an", "object"]),  # no object, as a model may send
        "executor_output",
        id="output-not-object",
    ),
]


@pytest.mark.parametrize(("structured", "target"), SCHEMA_FAILURES)
def test_gatekeeper_schema_rule_fails_with_low_confid(structured: JSONObject, target: str) -> None:
    result = check(structured)

    assert result["status"] == "fail"
    assert result["failed_rules"] == ["schema.executor_v2"]
    assert result["severity"] == "low_confid"
    assert target in [error["target"] for error in result["errors"]]


@pytest.mark.parametrize("status", ["missing", "malformed"])
def test_gatekeeper_schema_rule_fails_when_parse_not_valid(status: ParseStatusName) -> None:
    parse_status = ParseStatus(status=status, fence_stripped=False, error="Expecting value")

    result = run_gatekeeper(parse_status, None, default_invocations())

    assert result["status"] == "fail"
    assert result["severity"] == "low_confid"
    assert result["failed_rules"] == ["schema.executor_v2"]
    assert result["errors"][0]["target"] == "executor_output"
    assert status in result["errors"][0]["message"]


def test_gatekeeper_schema_rule_fails_when_valid_status_has_no_object() -> None:
    result = run_gatekeeper(VALID, None, default_invocations())

    assert result["failed_rules"] == ["schema.executor_v2"]
    assert result["checked_bindings"] == 0


def test_gatekeeper_schema_failure_still_checks_other_claims() -> None:
    broken = claim("c1", bindings=[])
    good = claim("c2")
    fabricated = claim("c3", bindings=[binding(invocation_id="inv-42")])

    result = check(output(broken, good, fabricated))

    assert result["failed_rules"] == ["schema.executor_v2", "evidence.invocation_ref"]
    assert result["severity"] == "reject"
    assert list(result["verified_excerpts"]) == ["c2"]
    assert result["checked_bindings"] == 2
    ref_error = next(e for e in result["errors"] if e["rule_id"] == "evidence.invocation_ref")
    assert ref_error["target"] == "claims[2].evidence_bindings[0]"


def test_gatekeeper_garbage_types_fail_schema_without_raising() -> None:
    structured = output(
        claims=[None, 7, {"claim_id": 3, "evidence_bindings": "inv-2"}, claim(bindings=[None, 1])]
    )

    result = check(structured)

    assert result["failed_rules"] == ["schema.executor_v2"]
    targets = {error["target"] for error in result["errors"]}
    assert {
        "claims[0]",
        "claims[1]",
        "claims[2].claim_id",
        "claims[2].evidence_bindings",
    } <= targets
    assert "claims[3].evidence_bindings[1]" in targets
    assert result["checked_bindings"] == 2


# ---------------------------------------------------------------------- evidence.invocation_ref


@pytest.mark.parametrize(
    ("bad_binding", "fragment"),
    [
        pytest.param(binding(invocation_id="inv-99"), "inv-99", id="unknown-id"),
        pytest.param(binding(tool_name="query_metrics"), "query_metrics", id="tool-mismatch"),
        pytest.param(binding(source_invocation_id=42), "string", id="id-not-string"),
    ],
)
def test_gatekeeper_invocation_ref_fails_with_reject(
    bad_binding: JSONObject, fragment: str
) -> None:
    result = check(output(claim(bindings=[bad_binding])))

    assert result["status"] == "fail"
    assert result["severity"] == "reject"
    assert "evidence.invocation_ref" in result["failed_rules"]
    assert result["verified_excerpts"] == {}
    error = next(e for e in result["errors"] if e["rule_id"] == "evidence.invocation_ref")
    assert error["target"] == "claims[0].evidence_bindings[0]"
    assert fragment in error["message"]


def test_gatekeeper_backfills_id_from_single_candidate_with_warning() -> None:
    result = check(output(claim(bindings=[binding(invocation_id=None)])))

    assert result["status"] == "warn"
    assert result["severity"] == "none"
    assert result["failed_rules"] == []
    assert rule_ids(result["warnings"]) == ["evidence.invocation_ref"]
    assert result["warnings"][0]["target"] == "claims[0].evidence_bindings[0]"
    assert "inv-2" in result["warnings"][0]["message"]
    assert result["verified_excerpts"]["c1"][0]["invocation_id"] == "inv-2"


def test_gatekeeper_backfill_refused_with_two_candidates() -> None:
    invocations = default_invocations() + [
        make_invocation(4, "query_logs", [("logs[0]", LOG_TEXT_0)], round_number=2)
    ]

    result = check(output(claim(bindings=[binding(invocation_id=None)])), invocations)

    assert result["status"] == "fail"
    assert result["severity"] == "reject"
    assert result["failed_rules"] == ["evidence.invocation_ref"]
    assert result["warnings"] == []
    assert "inv-2" in result["errors"][0]["message"]
    assert "inv-4" in result["errors"][0]["message"]


def test_gatekeeper_backfill_refused_without_candidates() -> None:
    no_logs = [inv for inv in default_invocations() if inv["tool_name"] != "query_logs"]

    result = check(output(claim(bindings=[binding(invocation_id=None)])), no_logs)

    assert result["failed_rules"] == ["evidence.invocation_ref"]
    assert result["warnings"] == []


def test_gatekeeper_backfill_never_synthesises_raw_path() -> None:
    result = check(output(claim(bindings=[binding(invocation_id=None, raw_path=None)])))

    assert result["failed_rules"] == ["evidence.raw_path_missing"]
    assert result["severity"] == "low_confid"
    assert rule_ids(result["warnings"]) == ["evidence.invocation_ref"]
    assert result["verified_excerpts"] == {}


# --------------------------------------------------------------------------- legacy plural ids


def test_gatekeeper_legacy_single_id_with_raw_path_is_treated_as_singular() -> None:
    legacy = binding(invocation_id=None, source_invocation_ids=["inv-2"])

    result = check(output(claim(bindings=[legacy])))

    assert result["status"] == "pass"
    assert result["verified_excerpts"]["c1"][0]["invocation_id"] == "inv-2"


def test_gatekeeper_legacy_several_ids_fail_raw_path_missing() -> None:
    legacy = binding(invocation_id=None, source_invocation_ids=["inv-2", "inv-3"])
    legacy["tool_name"] = "query_logs"
    invocations = default_invocations()
    invocations[2]["tool_name"] = "query_logs"

    result = check(output(claim(bindings=[legacy])), invocations)

    assert result["failed_rules"] == ["evidence.raw_path_missing"]
    assert result["severity"] == "low_confid"
    assert result["verified_excerpts"] == {}


# --------------------------------------------------------------------------- raw path rules


def test_gatekeeper_invocation_without_refs_fails_refs_missing() -> None:
    invocations = default_invocations()
    invocations[1]["retrieval_details"] = {}

    result = check(output(), invocations)

    assert result["failed_rules"] == ["evidence.refs_missing"]
    assert result["severity"] == "low_confid"
    assert result["verified_excerpts"] == {}


# --------------------------------------------------------------------------- excerpt rule


@pytest.mark.parametrize(
    "excerpt",
    [
        pytest.param("ＣＡＮＮＯＴ ａｃｑｕｉｒｅ connection", id="full-width-letters"),
        pytest.param("HTTP ５００ returned", id="full-width-digits"),
        pytest.param("cannot ACQUIRE Connection FROM pool", id="case"),
        pytest.param("  Cannot   acquire\nconnection\tfrom pool  ", id="whitespace"),
    ],
)
def test_gatekeeper_excerpt_matching_normalises_text(excerpt: str) -> None:
    result = check(output(claim(bindings=[binding(excerpt=excerpt)])))

    assert result["status"] == "pass"
    assert "c1" in result["verified_excerpts"]


# --------------------------------------------------------------------------- one bad binding

INVOCATION_REF = ["evidence.invocation_ref"]
RAW_PATH_MISSING = ["evidence.raw_path_missing"]
EXCERPT_MISMATCH = ["evidence.excerpt_mismatch"]
BAD_BINDINGS: dict[str, tuple[JSONObject, list[str], str, str]] = {
    "binding_without_tool_name_fails_invocation_ref": (
        _without(binding(), "tool_name"),
        INVOCATION_REF,
        "reject",
        "binding has no tool_name",
    ),
    "legacy_single_id_without_raw_path_fails_raw_path_missing": (
        binding(invocation_id=None, raw_path=None, source_invocation_ids=["inv-2"]),
        RAW_PATH_MISSING,
        "low_confid",
        "has no raw_path",
    ),
    "legacy_unknown_id_fails_invocation_ref": (
        binding(invocation_id=None, source_invocation_ids=["inv-77"]),
        INVOCATION_REF,
        "reject",
        "inv-77",
    ),
    "legacy_ids_each_checked_for_tool_name": (
        binding(invocation_id=None, source_invocation_ids=["inv-2", "inv-3"]),
        ["evidence.invocation_ref", "evidence.raw_path_missing"],
        "reject",
        "differs from inv-3's recorded tool",
    ),
    "missing_raw_path_fails_with_low_confid": (
        binding(raw_path=None),
        RAW_PATH_MISSING,
        "low_confid",
        "has no raw_path",
    ),
    "unknown_raw_path_fails_with_reject": (
        binding(raw_path="logs[7]"),
        ["evidence.raw_path"],
        "reject",
        "logs[7]",
    ),
    "excerpt_not_in_ref_text_fails_with_reject": (
        binding(excerpt="Connection refused by database"),
        EXCERPT_MISMATCH,
        "reject",
        "is not contained in the text of inv-2 logs[0]",
    ),
    "excerpt_from_another_ref_fails": (
        binding(raw_path="logs[1]"),
        EXCERPT_MISMATCH,
        "reject",
        "is not contained in the text of inv-2 logs[1]",
    ),
    "empty_excerpt_fails-empty": (binding(excerpt=""), EXCERPT_MISMATCH, "reject", "is empty"),
    "empty_excerpt_fails-blank": (
        binding(excerpt="   \n\t "),
        EXCERPT_MISMATCH,
        "reject",
        "is empty",
    ),
}
"""A claim's only binding, by the test it stands for: the rules it fails, the severity, what the
first error says."""


@pytest.mark.parametrize(
    ("bad_binding", "rules", "severity", "fragment"), BAD_BINDINGS.values(), ids=BAD_BINDINGS.keys()
)
def test_gatekeeper(
    bad_binding: JSONObject, rules: list[str], severity: str, fragment: str
) -> None:
    """Each case, named after the test it was, fails with its rules and nothing verified."""
    result = check(output(claim(bindings=[bad_binding])))

    assert result["status"] == "fail"
    assert result["failed_rules"] == rules
    assert result["severity"] == severity
    assert result["verified_excerpts"] == {}
    assert result["warnings"] == []
    assert fragment in result["errors"][0]["message"]


# --------------------------------------------------------------------------- unbound specifics


@pytest.mark.parametrize(
    ("claim_text", "token"),
    [
        pytest.param("order-service returned HTTP 503 errors", "503", id="status-code"),
        pytest.param("connections wait 45s before failing", "45s", id="duration"),
        pytest.param("pool usage reached 95%", "95%", id="percentage"),
        pytest.param("requests fail with IllegalStateException", "IllegalStateException", id="exc"),
    ],
)
def test_gatekeeper_unbound_specifics_flags_invented_details(claim_text: str, token: str) -> None:
    result = check(output(claim(text=claim_text)), with_elsewhere())

    assert result["status"] == "fail"
    assert result["failed_rules"] == ["evidence.unbound_specifics"]
    assert result["severity"] == "low_confid"
    error = result["errors"][0]
    assert error["target"] == "claims[0].claim_text"
    assert token in error["message"]
    assert "c1" in result["verified_excerpts"]


def test_gatekeeper_unbound_specifics_lists_every_unbound_token_once() -> None:
    text = "HTTP 503 after 45s, 95% usage, HTTP 503 again"

    result = check(output(claim(text=text)), with_elsewhere())

    assert len(result["errors"]) == 1
    message = result["errors"][0]["message"]
    assert message.endswith("503, 45s, 95%")


def test_gatekeeper_unbound_specifics_passes_when_specifics_are_in_verified_text() -> None:
    text = (
        "order-service returned HTTP 500. Connections waited 30s, pool usage 12%: "
        "NullPointerException thrown"
    )
    second = binding(raw_path="logs[1]", excerpt="NullPointerException")

    result = check(output(claim(text=text, bindings=[binding(), second])))

    assert result["status"] == "pass"
    assert result["errors"] == []


def test_gatekeeper_unbound_specifics_ignores_specifics_only_in_unverified_binding() -> None:
    text = "order-service returned HTTP 500 and NullPointerException"
    unverified = binding(raw_path="logs[1]", excerpt="not in the text")

    result = check(output(claim(text=text, bindings=[binding(), unverified])))

    assert "evidence.excerpt_mismatch" in result["failed_rules"]
    assert "evidence.unbound_specifics" in result["failed_rules"]
    unbound = next(e for e in result["errors"] if e["rule_id"] == "evidence.unbound_specifics")
    assert "NullPointerException" in unbound["message"]
    assert "500" not in unbound["message"]


def test_gatekeeper_unbound_specifics_skips_claims_without_verified_binding() -> None:
    result = check(
        output(claim(text="HTTP 503 everywhere", bindings=[binding(raw_path="x[0]")])),
        with_elsewhere(),
    )

    assert result["failed_rules"] == ["evidence.raw_path"]


# --------------------------------------------------------------------------- aggregation


def test_gatekeeper_aggregates_mixed_errors_and_warnings() -> None:
    backfilled = binding(invocation_id=None)
    no_path = binding(raw_path=None)
    wrong_path = binding(raw_path="logs[9]")
    structured = output(
        claim("c1", bindings=[backfilled]),
        claim("c2", bindings=[no_path]),
        claim("c3", bindings=[wrong_path]),
        claim("c4", bindings=[]),
    )

    result = check(structured)

    assert result["status"] == "fail"
    assert result["severity"] == "reject"
    assert result["failed_rules"] == [
        "schema.executor_v2",
        "evidence.raw_path_missing",
        "evidence.raw_path",
    ]
    assert rule_ids(result["warnings"]) == ["evidence.invocation_ref"]
    assert result["checked_bindings"] == 3


def test_gatekeeper_low_confid_errors_with_warning_give_low_confid() -> None:
    structured = output(
        claim("c1", bindings=[binding(invocation_id=None)]),
        claim("c2", bindings=[binding(raw_path=None)]),
        claim("c3", bindings=[binding(raw_path=None)]),
    )

    result = check(structured)

    assert result["status"] == "fail"
    assert result["severity"] == "low_confid"
    assert result["failed_rules"] == ["evidence.raw_path_missing"]
    assert len(result["errors"]) == 2


# --------------------------------------------------------------------------- catalog


def test_gatekeeper_disabled_rule_is_skipped() -> None:
    catalog = load_catalog()
    for rule in catalog["rules"]:
        if rule["id"] == "evidence.excerpt_mismatch":
            rule["enabled"] = False

    result = run_gatekeeper(
        VALID,
        output(claim(bindings=[binding(excerpt="made up")])),
        default_invocations(),
        catalog,
    )

    assert result["status"] == "pass"
    assert "c1" in result["verified_excerpts"]
    summary = {rule["id"]: rule["enabled"] for rule in result["rules"]}
    assert summary["evidence.excerpt_mismatch"] is False
    assert summary["evidence.raw_path"] is True


def test_gatekeeper_severity_comes_from_catalog() -> None:
    catalog = load_catalog()
    catalog["rule_set_version"] = "custom.v9"
    for rule in catalog["rules"]:
        if rule["id"] == "evidence.raw_path_missing":
            rule["default_severity"] = "reject"

    result = run_gatekeeper(
        VALID, output(claim(bindings=[binding(raw_path=None)])), default_invocations(), catalog
    )

    assert result["severity"] == "reject"
    assert result["rule_set_version"] == "custom.v9"


def test_load_catalog_bundled_has_all_rules() -> None:
    catalog = load_catalog()

    assert catalog["rule_set_version"] == DEFAULT_RULE_SET_VERSION
    assert [rule["id"] for rule in catalog["rules"]] == list(KNOWN_RULE_IDS)
    assert all(rule["enabled"] for rule in catalog["rules"])


def test_load_catalog_reads_a_path(tmp_path: Path) -> None:
    catalog = load_catalog()
    catalog["rule_set_version"] = "file.v2"
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog), encoding="utf-8")

    assert load_catalog(path)["rule_set_version"] == "file.v2"


def _bundled_catalog() -> JSONObject:
    """The bundled catalog as the JSON a catalog file holds."""
    return json_object(json.loads(json.dumps(load_catalog())))


def _first_rule(catalog: JSONObject) -> JSONObject:
    return json_object(json_list(catalog["rules"])[0])


def _broken_catalogs() -> list[JSONObject]:
    missing_rule, unknown, bad_severity, bad_enabled, no_version, bad_parameter = (
        _bundled_catalog() for _ in range(6)
    )
    missing_rule["rules"] = json_list(missing_rule["rules"])[1:]
    json_list(unknown["rules"]).append({**_first_rule(unknown), "id": "evidence.magic"})
    _first_rule(bad_severity)["default_severity"] = "fatal"
    _first_rule(bad_enabled)["enabled"] = "yes"
    del no_version["rule_set_version"]
    json_object(_first_rule(bad_parameter)["parameters"])["forbidden_keys"] = "diagnosis_summary"
    return [missing_rule, unknown, bad_severity, bad_enabled, no_version, bad_parameter]


@pytest.mark.parametrize(
    "index", range(6), ids=["missing", "unknown", "severity", "enabled", "version", "param"]
)
def test_load_catalog_rejects_bad_shapes(tmp_path: Path, index: int) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(_broken_catalogs()[index]), encoding="utf-8")

    with pytest.raises(CatalogError):
        load_catalog(path)


def test_load_catalog_rejects_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text("{not json", encoding="utf-8")

    with pytest.raises(CatalogError, match="not valid JSON"):
        load_catalog(path)


# --------------------------------------------------------------------------- fail closed, fallback


def test_gatekeeper_fails_closed_on_internal_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(gatekeeper, "_check_binding", explode)

    result = check(output())

    assert result["status"] == "fail"
    assert result["severity"] == "reject"
    assert result["failed_rules"] == ["gatekeeper.internal_error"]
    assert result["errors"] == [
        {
            "rule_id": "gatekeeper.internal_error",
            "target": "gatekeeper",
            "message": "RuntimeError: boom",
            "claim_id": None,
            "binding_index": None,
        }
    ]
    assert result["rule_set_version"] == DEFAULT_RULE_SET_VERSION
    assert len(result["rules"]) == len(KNOWN_RULE_IDS)
    assert result["verified_excerpts"] == {}


def test_gatekeeper_fails_closed_on_invalid_catalog() -> None:
    # A catalog of the wrong shape, as a hand-edited file may hold.
    invalid = cast(Catalog, {"rules": "nope"})

    result = run_gatekeeper(VALID, output(), default_invocations(), invalid)

    assert result["status"] == "fail"
    assert result["severity"] == "reject"
    assert result["failed_rules"] == ["gatekeeper.internal_error"]
    assert result["errors"][0]["message"].startswith("CatalogError: ")
    assert result["rule_set_version"] == DEFAULT_RULE_SET_VERSION


def test_gatekeeper_fallback_pass_carries_rule_metadata() -> None:
    result = fallback_pass()

    assert result["fallback"] is True
    assert result["status"] == "pass"
    assert result["severity"] == "none"
    assert result["failed_rules"] == []
    assert result["rule_set_version"] == DEFAULT_RULE_SET_VERSION
    assert [rule["id"] for rule in result["rules"]] == list(KNOWN_RULE_IDS)


def test_gatekeeper_rules_summary_present_on_fail() -> None:
    result = check(output(claim(bindings=[binding(invocation_id="inv-404")])))

    assert result["status"] == "fail"
    assert result["rule_set_version"] == DEFAULT_RULE_SET_VERSION
    assert [rule["id"] for rule in result["rules"]] == list(KNOWN_RULE_IDS)
