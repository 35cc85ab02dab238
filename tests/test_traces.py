"""``query_traces``: one spec, answered from an environment file's spans, cited and verified.

The spans are made by the real OpenTelemetry SDK (``tests.traces_kit``: a made-up shop whose
``payment-service`` fails calls 3 and 7 and is slow from call 5 on) and stored in the
environment as OTLP JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import apps.cli.main as cli
from apps.eval.evaluation import run_scenario
from apps.eval.scenario import load_scenario
from evidence.environment import parse_environment
from evidence.replay import ReplayBackend
from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger
from state.records import Invocation
from tests.records import claim
from tests.scenario_kit import (
    check,
    environment,
    executor_answer,
    final,
    run_diagnosis,
    verifier_reply,
)
from tests.traces_kit import otlp_request, shop_request, shop_spans
from tools.registry import offered, spec_of, tool_specs
from tools.runner import ToolRunner
from verification.trace_summary import build_trace_summary

TRACED = sorted((Path(__file__).parent / "scenarios" / "traces").glob("*.json"))
EDGE = "checkout -> payment-service calls=10 errors=2 p50=28ms p90=900ms p99=900ms max=900ms"
CHARGE = "payment-service charge spans=10 errors=2 p50=28ms p90=900ms p99=900ms max=900ms"


def _traced_environment(request: dict[str, Any] | None = None) -> Any:
    env = dict(environment())
    env["traces"] = request if request is not None else shop_request()
    return parse_environment(json.dumps(env), origin="test")


def _run(args: dict[str, Any], env: Any = None, call_id: str = "c1") -> Invocation:
    runner = ToolRunner(SampleBackend(env or _traced_environment()), InMemoryLedger())
    call = {"name": "query_traces", "args": args, "id": call_id}
    return runner.run(call, diagnosis_id="d1", thread_id="t1", round=1)


def _refs(row: Invocation) -> dict[str, str]:
    return {ref["raw_path"]: ref["text"] for ref in row["retrieval_details"]["evidence_refs"]}


def test_query_traces_is_offered_to_the_executor() -> None:
    spec = spec_of("query_traces")

    assert spec is not None and spec.role == "incident"
    tools: list[Any] = tool_specs()
    offered = {tool["function"]["name"]: tool["function"] for tool in tools}
    parameters = offered["query_traces"]["parameters"]
    assert list(parameters["properties"]) == [
        "service",
        "operation",
        "start",
        "end",
        "errors_only",
        "min_duration_ms",
        "limit",
    ]


def test_query_traces_operations_edges_and_traces_of_a_service() -> None:
    row = _run({"service": "payment-service"})

    assert row["status"] == "ok", row["error"]
    refs = _refs(row)
    assert refs["operations[0]"] == CHARGE
    assert refs["edges[0]"] == EDGE  # into the service first, then out of it
    assert refs["edges[1]"].startswith("payment-service -> payments-db calls=10 errors=0 ")
    assert refs["edges[2]"].startswith("frontend -> checkout calls=10 errors=0 ")
    assert refs["summary"] == (
        "query_traces service=payment-service operations 1 of 1, edges 3 of 3, "
        "traces 10 of 10 (complete)"
    )
    slowest = refs["traces[0]"]
    assert (
        slowest.startswith("trace ")
        and " frontend GET /checkout start=2026-03-01T10:00:0" in slowest
    )
    assert slowest.endswith(" duration=940ms spans=4 errors=0 example=slowest") or (
        slowest.endswith(" duration=940ms spans=4 errors=1 example=slowest")
    )
    assert (
        refs["traces[0].spans[2]"]
        .split(" ", 3)[3]
        .startswith("payment-service charge kind=server duration=900ms status=")
    )


def test_query_traces_span_tree_masks_secrets_and_clips() -> None:
    row = _run({"service": "payment-service", "errors_only": True})

    output: Any = row["output"]
    assert output is not None
    traces = output["traces"]
    assert isinstance(traces, list) and output["traces_total"] == 2
    text = json.dumps(output)
    assert "hunter2" not in text and "Bearer abc" not in text
    failed = [t for t in traces if isinstance(t, dict) and t["errors"]]
    assert len(failed) == 2
    spans = [s for t in failed for s in t.get("spans", [])]
    charge = [s for s in spans if s["operation"] == "charge"]
    assert charge and all(s["status"] == "error" for s in charge)
    assert charge[0]["attributes"]["http.request.header.authorization"] == "****"
    assert charge[0]["status_message"] == "payment provider unavailable"
    refs = _refs(row)
    cited = [text for path, text in refs.items() if ".spans[" in path and " charge " in text]
    assert cited and cited[0].endswith("http.status_code=503: payment provider unavailable"), cited[
        0
    ]


def test_query_traces_filters_and_limit_state_the_counts() -> None:
    slow = _run({"service": "payment-service", "min_duration_ms": 500, "limit": 2})
    none = _run({"service": "cart-service"}, call_id="c2")

    assert _refs(slow)["summary"] == (
        "query_traces limit=2 min_duration_ms=500 service=payment-service operations 1 of 1, "
        "edges 3 of 3, traces 2 of 5 (truncated)"
    )
    assert _refs(slow)["operations[0]"] == (
        "payment-service charge spans=5 errors=1 p50=900ms p90=900ms p99=900ms max=900ms"
    )
    assert none["status"] == "no_hit"
    assert _refs(none)["summary"] == (
        "query_traces service=cart-service operations 0 of 0, edges 0 of 0, traces 0 of 0 "
        "(complete)"
    )


def test_query_traces_reads_base64_ids_of_plain_proto3_json() -> None:
    env = _traced_environment(otlp_request(shop_spans(4)))

    row = _run({"service": "payment-service"}, env)

    assert _refs(row)["edges[0]"].startswith("checkout -> payment-service calls=4 errors=1 ")


def test_query_traces_without_a_trace_source_is_an_error_row() -> None:
    class NoTraces:
        needs_timeout = False

    runner = ToolRunner(NoTraces(), InMemoryLedger())  # type: ignore[arg-type]
    row = runner.run(
        {"name": "query_traces", "args": {}, "id": "c1"}, diagnosis_id="d", thread_id="t", round=1
    )

    assert row["status"] == "error"
    assert (row["error"] or "").startswith("NotServed: no trace source is configured; set ")


def test_query_traces_trace_summary_names_edges_first() -> None:
    row = _run({"service": "payment-service"})

    (item,) = build_trace_summary([row])

    assert item["output_summary"].startswith(f"traces 10 of 10; {EDGE}; ")


def _claims_replies(text: str, excerpt: str) -> dict[str, list[Any]]:
    cited = claim(
        "c1",
        text,
        {
            "source_type": "trace_edge",
            "tool_name": "query_traces",
            "source_invocation_id": "inv-1",
            "raw_path": "edges[0]",
            "evidence_excerpt": excerpt,
        },
        {
            "source_type": "span",
            "tool_name": "query_traces",
            "source_invocation_id": "inv-1",
            "raw_path": "traces[0].spans[2]",
            "evidence_excerpt": "charge kind=server duration=900ms",
        },
    )
    call = {"tool_calls": [{"name": "query_traces", "args": {"service": "payment-service"}}]}
    return {
        "planner": ["find who calls payment-service and whether it is slow"],
        "executor": [call, final(executor_answer(cited))],
        "verifier": [
            verifier_reply("PASS", check("c1", "direct_observation", tool="query_traces"))
        ],
    }


def test_query_traces_gatekeeper_verifies_an_edge_error_count_and_a_span_duration() -> None:
    run = run_diagnosis(
        _traced_environment(),
        _claims_replies(
            "checkout calls payment-service: 2 of 10 calls failed and a charge took 900 ms",
            "checkout -> payment-service calls=10 errors=2",
        ),
        question="who calls payment-service and is it slow?",
    )

    gate = run.state["gatekeeper_result"]
    assert gate["status"] == "pass", gate["errors"]
    verified = gate["verified_excerpts"]["c1"]
    assert [v["raw_path"] for v in verified] == ["edges[0]", "traces[0].spans[2]"]


def test_query_traces_gatekeeper_flags_an_overstated_error_count() -> None:
    run = run_diagnosis(
        _traced_environment(),
        _claims_replies(
            "checkout calls payment-service: 3 of 10 calls failed and a charge took 900 ms",
            "checkout -> payment-service calls=10 errors=2",
        ),
        question="who calls payment-service and is it slow?",
    )

    gate = run.state["gatekeeper_result"]
    assert "evidence.unbound_specifics" in gate["failed_rules"]


@pytest.mark.parametrize("path", TRACED, ids=[path.stem for path in TRACED])
def test_query_traces_offline_rules_answer_from_the_call_graph(path: Path) -> None:
    result = run_scenario(load_scenario(path))

    assert result["ok"], "; ".join(result["mismatches"])


def test_query_traces_cli_diagnose_offline_answers_who_calls_from_the_traces(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "SUPERBIZ_MAX_TOOL_CALLS",
        "SUPERBIZ_LANGUAGE",
    ):
        monkeypatch.delenv(name, raising=False)
    environment = Path(__file__).parent / "environments" / "checkout-traced.json"

    code = cli.main(
        [
            "diagnose",
            "--offline",
            "--lang",
            "en",
            "--env",
            str(environment),
            "who calls payment-service and is it slow?",
        ]
    )

    out = capsys.readouterr().out
    assert code == 0
    assert "checkout calls payment-service: 10 calls, 2 failed, p99 900 ms" in out
    assert "edges[0]: checkout -> payment-service calls=10 errors=2 " in out
    assert "verdict: PASS" in out


def _offered_names(backend: object) -> list[str]:
    tools: list[Any] = offered(backend)
    return [str(tool["function"]["name"]) for tool in tools]


def test_query_traces_is_offered_only_over_a_backend_with_traces() -> None:
    recorded = _run({"service": "payment-service"})
    call: Any = {
        "tool": "query_traces",
        "arguments": recorded["arguments"],
        "status": "ok",
        "output": recorded["output"],
        "error": None,
    }

    assert "query_traces" not in _offered_names(SampleBackend(environment()))
    assert "query_traces" in _offered_names(SampleBackend(_traced_environment()))
    assert "query_traces" not in _offered_names(ReplayBackend({"services": [], "calls": []}))
    assert "query_traces" in _offered_names(ReplayBackend({"services": [], "calls": [call]}))
    assert "query_logs" in _offered_names(SampleBackend(environment()))
