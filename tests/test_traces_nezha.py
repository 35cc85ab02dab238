"""End to end on a converted Nezha fault whose root-cause service logs nothing but INFO lines.

The fixture (``tests/nezha/``, MIT licence beside it, converted by ``bench/nezha_convert.py``) is
a CPU contention injected into ``ts-travel-service`` of TrainTicket: in the incident window that
service writes INFO lines only, so no error or warning text names it. Asked why a service that
calls it is slow, the offline rules query that service's traces, follow the call graph to the
slow callee, ``ts-travel-service``, and state the edge with its latency, verified by the
Gatekeeper; its logs show nothing (a negative observation).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from apps.eval.evaluation import run_graph
from apps.eval.scenario import validate_scenario
from evidence.environment import parse_environment

FIXTURES = Path(__file__).parent / "nezha"
CASE = FIXTURES / "2023-01-30_13-06_ts-travel-service.case.json"
ROOT_CAUSE = "ts-travel-service"
SYMPTOM = "ts-preserve-service"


def _environment(case: dict[str, Any]) -> dict[str, Any]:
    text = gzip.decompress((FIXTURES / case["environment"]).read_bytes()).decode("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def test_traces_nezha_root_cause_logs_nothing_above_info() -> None:
    case = json.loads(CASE.read_text())
    environment = parse_environment(json.dumps(_environment(case)), origin=CASE.name)
    start = case["windows"]["incident_start"]

    levels = {
        entry["level"]
        for entry in environment.get("logs", [])
        if entry["service"] == ROOT_CAUSE and entry["timestamp"] >= start
    }

    assert levels == {"INFO"}
    assert environment.get("traces")


def test_traces_nezha_a_why_question_follows_the_call_graph_to_the_root_cause() -> None:
    case = json.loads(CASE.read_text())
    scenario = validate_scenario(
        {
            "id": "nezha-travel-cpu",
            "question": f"Why is {SYMPTOM} slow?",
            "language": "en",
            "environment": _environment(case),
            "offline": True,
            "max_tool_calls": 10,
        },
        origin=CASE.name,
    )

    state = run_graph(scenario)

    traced = [
        item["input_summary"]
        for item in state["trace_summary"]
        if item["tool_name"] == "query_traces"
    ]
    assert f"service={SYMPTOM}" in traced and f"service={ROOT_CAUSE}" in traced
    gate = state["gatekeeper_result"]
    verified = [
        excerpt["text"]
        for excerpts in gate["verified_excerpts"].values()
        for excerpt in excerpts
        if excerpt["tool_name"] == "query_traces"
    ]
    edge = next(text for text in verified if text.startswith(f"{SYMPTOM} -> {ROOT_CAUSE} calls="))
    p99 = float(edge.split(" p99=")[1].split("ms")[0])
    assert p99 >= 500  # the calls into the root cause are what is slow
    assert f"{SYMPTOM} calls {ROOT_CAUSE}:" in state["answer"]
    assert state["verdict"] != "REJECT"
    # Every claim the answer makes is one the Verifier saw with its excerpts: none is left
    # unsupported for want of room (that once emptied the answer of every fact).
    checks = state["verifier_result"]["claim_checks"]
    assert state["executor_answer"]["claims"] and len(checks) == len(
        state["executor_answer"]["claims"]
    )
    assert all(check["verification"] != "unsupported" for check in checks)
