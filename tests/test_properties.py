"""Property tests: the parser, the Gatekeeper against an independent restatement of its rules,
and "no exception escapes a node" for random and near-valid executor outputs.

Every test runs a fixed number of derandomised examples, so CI runs the same examples each time
and within a fixed budget.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from state.records import VERDICTS, Invocation, JSONValue, ParseStatus
from tests.records import binding, claim, executor_output
from tests.scenario_kit import ERROR_LOGS_CALL, default_logs, environment, final, run_diagnosis
from verification.executor_output import MAX_DEPTH, depth, parse_executor_output
from verification.gatekeeper import run_gatekeeper

FIXED = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
VALID: ParseStatus = {"status": "valid", "fence_stripped": False, "error": None}

EDGE_TEXT = st.sampled_from(
    ["", " ", "500", "5\u200b03", "\u202e", "\ufeff", "\x00", "\ud800", "\u2028", "ＨＴＴＰ", "𝟓𝟎𝟎"]
)
TEXT = st.one_of(st.text(max_size=40), EDGE_TEXT)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT)
JSON: st.SearchStrategy[JSONValue] = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


# --------------------------------------------------------------------------- parser


@FIXED
@given(JSON)
def test_parse_any_json_object_is_valid_and_unchanged(value: JSONValue) -> None:
    document = {"answer_version": "executor_evidence_v2", "payload": value}
    text = json.dumps(document, ensure_ascii=True)
    status, parsed = parse_executor_output(text)
    if depth(document) > MAX_DEPTH:
        assert status["status"] == "malformed"
    else:
        assert status["status"] == "valid"
        assert parsed is not None and parsed["answer_version"] == "executor_evidence_v2"


@FIXED
@given(st.text(max_size=200), st.sampled_from(["\n", "\r\n"]))
def test_parse_never_raises_and_tolerates_one_fence(text: str, newline: str) -> None:
    status, parsed = parse_executor_output(text)
    assert status["status"] in ("valid", "missing", "malformed")
    assert (parsed is None) == (status["status"] != "valid")
    fenced = f"```json{newline}" + json.dumps({"a": text}) + f"{newline}```"
    status, parsed = parse_executor_output(fenced)
    assert status == {"status": "valid", "fence_stripped": True, "error": None}


@FIXED
@given(st.integers(min_value=MAX_DEPTH + 1, max_value=5000), st.sampled_from("[{"))
def test_parse_deep_nesting_is_malformed_not_a_crash(levels: int, bracket: str) -> None:
    status, _ = parse_executor_output(bracket * levels)
    assert status["status"] == "malformed"


# --------------------------------------------------------------------------- Gatekeeper


LOG_TEXTS = [
    "2026-03-01T10:01:00Z ERROR order-service order-1: HTTP 500 Cannot acquire connection",
    "2026-03-01T10:02:00Z ERROR order-service order-2: Connection is not available",
]


def _invocations() -> list[Invocation]:
    refs = [
        {"raw_path": f"logs[{i}]", "text": text, "source_type": "log"}
        for i, text in enumerate(LOG_TEXTS)
    ]
    summary = {"raw_path": "summary", "text": "query_logs matched 2 of 2", "source_type": "summary"}
    refs.append(summary)
    return [
        {
            "invocation_id": "inv-1",
            "diagnosis_id": "d",
            "thread_id": "t",
            "round": 1,
            "tool_name": "query_logs",
            "arguments": {},
            "status": "ok",
            "output": {},
            "retrieval_details": {"evidence_refs": refs},  # type: ignore[typeddict-item]
            "idempotency_key": "k1",
            "started_at": "2026-03-01T10:30:00Z",
            "duration_ms": 1.0,
            "error": None,
        }
    ]


def _norm(text: str) -> str:
    """The excerpt rule restated: NFKC, case-folded, whitespace collapsed, invisibles gone."""
    for char in "\u200b\u200c\u200d\u2060\ufeff\u00ad":
        text = text.replace(char, "")
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _expected_verified(binding: dict[str, Any]) -> bool:
    """Whether a binding should verify: known id (trimmed), same tool, known path, excerpt in it."""
    texts = {f"logs[{i}]": text for i, text in enumerate(LOG_TEXTS)}
    texts["summary"] = "query_logs matched 2 of 2"
    excerpt = binding["evidence_excerpt"]
    return (
        binding["source_invocation_id"].strip() == "inv-1"
        and binding["tool_name"] == "query_logs"
        and binding["raw_path"] in texts
        and bool(_norm(excerpt))
        and _norm(excerpt) in _norm(texts[binding["raw_path"]])
    )


BINDING = st.fixed_dictionaries(
    {
        "source_type": st.just("log"),
        "tool_name": st.sampled_from(["query_logs", "query_metrics"]),
        "source_invocation_id": st.sampled_from(["inv-1", "inv-2", "inv-1 "]),
        "raw_path": st.sampled_from(["logs[0]", "logs[1]", "logs[2]", "summary", "alerts[0]"]),
        "evidence_excerpt": st.one_of(
            st.sampled_from(
                ["HTTP 500", "http  500", "ＨＴＴＰ 500", "Connection is not", "matched 2", "nope"]
            ),
            TEXT,
        ),
    }
)


@FIXED
@given(st.lists(st.lists(BINDING, min_size=1, max_size=3), min_size=1, max_size=4))
def test_gatekeeper_verifies_exactly_what_the_rules_say(claims: list[list[dict[str, Any]]]) -> None:
    output = {
        "answer_version": "executor_evidence_v2",
        "claims": [
            {
                "claim_id": f"c{n}",
                "claim_type": "observation",
                "claim_text": "order-service reports connection trouble",
                "support_level": "direct",
                "evidence_bindings": bindings,
            }
            for n, bindings in enumerate(claims)
        ],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
    }

    result = run_gatekeeper(VALID, output, _invocations())  # type: ignore[arg-type]

    for n, bindings in enumerate(claims):
        expected = [i for i, b in enumerate(bindings) if _expected_verified(b)]
        verified = [entry["binding"] for entry in result["verified_excerpts"].get(f"c{n}", [])]
        assert verified == expected, (n, bindings)
    all_good = all(_expected_verified(b) for bindings in claims for b in bindings)
    assert (result["status"] == "pass") == all_good
    assert result["checked_bindings"] == sum(len(b) for b in claims)


# --------------------------------------------------------------------------- nodes


def _near_valid(value: JSONValue, claim_text: str, excerpt: str) -> str:
    bound = claim("c1", claim_text, binding("inv-1", "logs[0]", excerpt))
    document = executor_output(bound, hypotheses=[value])
    document["claims"] = [bound, value]
    return json.dumps(document, ensure_ascii=True)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.one_of(
        st.builds(_near_valid, JSON, TEXT, st.one_of(st.just("HTTP 500"), TEXT)),
        JSON.map(lambda v: json.dumps(v, ensure_ascii=True)),
        st.text(max_size=300),
    ),
    st.one_of(JSON.map(lambda v: json.dumps(v, ensure_ascii=True)), st.text(max_size=100)),
)
def test_nodes_never_raise_on_random_executor_and_verifier_replies(
    executor_text: str, verifier_text: str
) -> None:
    # Enough replies for two rounds of three verifier attempts each; unused ones do not matter.
    replies: dict[str, list[Any]] = {
        "planner": ["Check the logs."] * 2,
        "executor": [ERROR_LOGS_CALL, final(executor_text)] * 2,
        "verifier": [verifier_text] * 6,
    }
    run = run_diagnosis(environment(default_logs()), replies)
    assert run.state["verdict"] in VERDICTS
    assert run.state["answer"]
    assert run.state["route"][-1] == "audit"
