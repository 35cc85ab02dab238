"""The incident analysis on real third-party data: two Nezha faults converted (tests/nezha/, MIT
licence beside them), and the converter itself on a small snapshot written here.

The fixtures were made with ``bench/nezha_convert.py --sample 16 --metrics
cpu_usage_percent,memory_usage_percent,server_latency_p90_seconds,workload_ops`` (one trace in 16,
with the INFO lines of the kept traces and every other log line) and gzipped.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from analysis.incident import IncidentInputs, analyze
from bench.nezha_convert import Converter, Fault, Snapshot, log_entry, service_of
from evidence.environment import parse_environment
from evidence.sample import SampleBackend
from graph.compile import RunStores, compile_graph
from persistence.ledger import InMemoryLedger
from state.context import Context

FIXTURES = Path(__file__).parent / "nezha"
CASES = sorted(FIXTURES.glob("*.case.json"))


def _inputs(case: dict[str, Any]) -> IncidentInputs:
    text = gzip.decompress((FIXTURES / case["environment"]).read_bytes()).decode("utf-8")
    environment = parse_environment(text, origin=case["environment"])
    windows = case["windows"]
    return IncidentInputs(
        incident_start=windows["incident_start"],
        incident_end=windows["incident_end"],
        baseline_start=windows["baseline_start"],
        baseline_end=windows["baseline_end"],
        logs=list(environment.get("logs", [])),
        series=list(environment.get("series", [])),
        spans=list(environment.get("traces", [])),
        gaps=list(case.get("gaps", [])),
    )


def test_nezha_fixtures_keep_the_licence_beside_them() -> None:
    assert len(CASES) >= 2
    assert "MIT License" in (FIXTURES / "LICENSE.nezha").read_text()


@pytest.mark.parametrize("case_path", CASES, ids=lambda path: path.name.split(".")[0])
def test_incident_nezha_fault_names_the_injected_service(case_path: Path) -> None:
    case = json.loads(case_path.read_text())
    inputs = _inputs(case)
    report = analyze(inputs)
    assert report["root_cause"] is not None, report["ambiguity"]
    assert report["root_cause"]["service"] == case["expected_service"]
    assert report["suspects"][0]["service"] == case["expected_service"]
    assert report["gaps"][0].startswith("logs and traces: the baseline is a fault-free capture")
    # Every pointer quotes an item of the data as it is.
    logs = {(log["timestamp"], log["service"], log["message"]) for log in inputs.get("logs", [])}
    spans = {span["span_id"]: span for span in inputs.get("spans", [])}
    series = {(s["metric"], json.dumps(s["labels"], sort_keys=True)) for s in inputs["series"]}
    for signal in report["root_cause"]["signals"]:
        assert signal["evidence"], signal
        for pointer in signal["evidence"]:
            if pointer["kind"] == "log":
                assert (pointer["timestamp"], pointer["service"], pointer["message"]) in logs
            elif pointer["kind"] == "span":
                assert spans[pointer["span_id"]]["duration_ms"] == pointer["duration_ms"]
            elif pointer["kind"] == "series":
                assert (pointer["metric"], json.dumps(pointer["labels"], sort_keys=True)) in series


def _csv(rows: list[list[str]]) -> str:
    return "\n".join(",".join(row) for row in rows) + "\n"


def _log_row(nanos: int, pod: str, line: str) -> list[str]:
    payload = json.dumps({"log": line + "\n", "stream": "stdout"})
    return [
        "",
        str(nanos),
        "10.0.0.1",
        pod,
        "server",
        "t1",
        "s1",
        '"' + payload.replace('"', '""') + '"',
    ]


LOG_HEADER = [
    "Timestamp",
    "TimeUnixNano",
    "Node",
    "PodName",
    "Container",
    "TraceID",
    "SpanID",
    "Log",
]
TRACE_HEADER = [
    "TraceID",
    "SpanID",
    "ParentID",
    "PodName",
    "OperationName",
    "StartTimeUnixNano",
    "EndTimeUnixNano",
    "Duration",
]


def test_nezha_converter_reads_the_fault_minutes_and_the_fault_free_capture(
    tmp_path: Path,
) -> None:
    day, pod = "2023-01-29", "ts-demo-service-5dc8d4f9fd-46997"
    minute = 1674982680 * 10**9  # 2023-01-29T08:58:00Z
    root = tmp_path / "Nezha"
    files = {
        f"rca_data/{day}/log/08_58_log.csv": [
            _log_row(minute - 30 * 10**9, pod, "08:57:30.000 INFO  a.B#1 ok")
        ],
        f"rca_data/{day}/log/08_59_log.csv": [
            _log_row(
                minute + 30 * 10**9,
                pod,
                "08:58:30.000 ERROR c.D#2 No contacts according to contactsId",
            )
        ],
        f"rca_data/{day}/log/09_00_log.csv": [
            _log_row(minute + 90 * 10**9, pod, "08:59:30.000 WARN  c.D#3 slow")
        ],
        f"rca_data/{day}/log/09_01_log.csv": [
            _log_row(minute + 150 * 10**9, pod, "09:00:30.000 ERROR x.Y#4 later")
        ],
        f"construct_data/{day}/log/08_50_log.csv": [
            _log_row(minute - 500 * 10**9, pod, "08:49:40.000 INFO  a.B#1 fine")
        ],
    }
    for path, rows in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_csv([LOG_HEADER, *rows]))
    trace = root / f"rca_data/{day}/trace/08_59_trace.csv"
    trace.parent.mkdir(parents=True, exist_ok=True)
    start = minute + 31 * 10**9
    trace.write_text(
        _csv(
            [
                TRACE_HEADER,
                [
                    "ab" * 16,
                    "cd" * 8,
                    "root",
                    pod,
                    "GET /x",
                    str(start),
                    str(start + 5 * 10**6),
                    "5000",
                ],
            ]
        )
    )
    metric = root / f"rca_data/{day}/metric/{pod}_metric.csv"
    metric.parent.mkdir(parents=True, exist_ok=True)
    metric.write_text(
        _csv(
            [
                ["Time", "TimeStamp", "PodName", "CpuUsageRate(%)", "PodServerLatencyP90(s)"],
                ["x", "1674981000", pod, "1.0", "0.02"],  # 30 minutes before: outside the baseline
                ["x", "1674982500", pod, "1.5", "NaN"],
                ["x", "1674982740", pod, "95.0", "0.4"],
            ]
        )
    )
    fault = Fault.read(
        json.dumps(
            {
                "day": day,
                "inject_time": "2023-01-29 08:58:16",
                "inject_pod": pod,
                "inject_timestamp": "0",
                "inject_type": "return",
            }
        )
    )
    environment, case = Converter(Snapshot(root)).convert(fault)
    messages = [(log["level"], log["message"]) for log in environment["logs"]]
    assert messages == [
        ("INFO", "a.B#1 fine"),
        ("INFO", "a.B#1 ok"),
        ("ERROR", "c.D#2 No contacts according to contactsId"),
        ("WARN", "c.D#3 slow"),
    ]
    assert {log["service"] for log in environment["logs"]} == {"ts-demo-service"}
    assert environment["logs"][2]["timestamp"] == "2023-01-29T08:58:30Z"
    cpu = [s for s in environment["series"] if s["metric"] == "cpu_usage_percent"][0]
    assert cpu["points"] == [[1674982500.0, 1.5], [1674982740.0, 95.0]]
    assert cpu["labels"] == {"service": "ts-demo-service", "pod": pod}
    assert len(environment["traces"]["resourceSpans"]) == 1
    assert case["expected_service"] == "ts-demo-service"
    assert case["windows"]["incident_start"] == "2023-01-29T08:58:16Z"
    parse_environment(json.dumps(environment), origin="converted")


def test_nezha_log_rows_and_pod_names() -> None:
    assert service_of("ts-contacts-service-866bd68c97-xcqfx") == "ts-contacts-service"
    row = {
        "TimeUnixNano": "",
        "Timestamp": "2023-01-29 08:57:13.950785669",
        "PodName": "p-a-1b2c3d4e5-abcde",
        "Log": "plain text without json ERROR here",
    }
    entry = log_entry(row)
    assert entry is not None
    assert entry["timestamp"] == "2023-01-29T08:57:13.950785Z"
    assert entry["level"] == "ERROR" and entry["service"] == "p-a"


@pytest.mark.parametrize("language", ["zh", "en"])
@pytest.mark.parametrize("case_path", CASES, ids=lambda path: path.name.split(".")[0])
def test_incident_nezha_product_answers_the_root_cause_question(
    case_path: Path, language: str
) -> None:
    """The product offline on the case's question (which names only the injection time): the
    windows it chooses itself give the same root cause as the case's windows, PASS, and the
    Verifier sees every claim of the answer."""
    case = json.loads(case_path.read_text())
    text = gzip.decompress((FIXTURES / case["environment"]).read_bytes()).decode("utf-8")
    backend = SampleBackend(parse_environment(text, origin=case["environment"]))
    app = compile_graph(RunStores(InMemorySaver(), ledger=InMemoryLedger()), backend)
    config: RunnableConfig = {"configurable": {"thread_id": f"nezha-{language}"}}
    question = case["questions"][language]
    app.invoke({"messages": [HumanMessage(question)]}, config, context=Context(language=language))
    state = app.get_state(config).values

    direct = analyze(_inputs(case))
    assert direct["root_cause"] is not None
    assert state["verdict"] == "PASS", state["answer"]
    assert state["root_cause"]["service"] == direct["root_cause"]["service"]
    assert state["root_cause"]["service"] == case["expected_service"]
    assert [s["service"] for s in state["suspects"][:3]] == [
        s["service"] for s in direct["suspects"][:3]
    ]
    checked = {c["claim_id"] for c in state["verifier_result"]["claim_checks"]}
    labels = {c["claim_id"]: c["verification"] for c in state["verifier_result"]["claim_checks"]}
    claims = [claim["claim_id"] for claim in state["executor_answer"]["claims"]]
    assert set(claims) <= checked
    assert not [c for c in claims if labels[c] == "unsupported"], state["answer"]
