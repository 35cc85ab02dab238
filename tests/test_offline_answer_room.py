"""The offline answer stays within what the Verifier sees, and the Verifier reads what it sees.

A why question over traced Java services after a long root-cause section: each claim's verified
excerpt is the full text of its ref (a log line, an analysis suspect), so the Gatekeeper's block
of the Verifier's payload fills before the claims' block does. The trace claims that come last
stop where that block would cut an excerpt; and the offline Verifier, given a block cut inside an
excerpt, still reads every excerpt that was shown whole (before, one cut excerpt left every claim
without support: an answer of facts verified by the Gatekeeper ended LOW_CONFID with none).
A round whose evidence holds lines no section of the answer quotes (a retry reading a service's
lines at every level) still states one of them rather than no fact at all.
"""

from __future__ import annotations

import json
from typing import Any

from models.offline.answers import compose
from models.offline.evidence import Result
from models.offline.rules import analysis
from models.offline.traces import claims as trace_claims
from models.offline.verifier import gatekeeper_of
from models.offline.writer import Writer, binding
from state.records import VerifierInput
from verification.question import analyze_question
from verification.verifier_payload import build_payload

SERVICES = [f"svc-{name}" for name in ("a", "b", "c", "d", "e", "f", "g", "h")]
LONG_LINE = "2026-03-01T10:00:00.123456Z ERROR svc-a: c.e.Handler#175 TraceID: " + "ab" * 40


def _analysis(count: int) -> Result:
    """An analysis result whose signals quote long log lines (their refs are the whole lines)."""
    refs = {f"signals[{i}].evidence[0]": f"{LONG_LINE} request {i} failed" for i in range(count)}
    return Result("analyze_incident", {}, "inv-1", "ok", {}, refs)


def _traces() -> Result:
    """svc-a's traces: who calls it, its operation, and the slow callee it calls."""
    edges: list[dict[str, Any]] = [
        {"caller": caller, "callee": "svc-a", "count": 3, "errors": 0, "p99_ms": 900.0}
        for caller in SERVICES[1:4]
    ]
    edges.append({"caller": "svc-a", "callee": "svc-z", "count": 4, "errors": 0, "p99_ms": 850.0})
    operations = [
        {"service": "svc-a", "operation": "HTTP POST", "count": 8, "errors": 0, "p50_ms": 50.0}
    ]
    refs = {
        f"edges[{i}]": f"{e['caller']} -> {e['callee']} calls={e['count']} errors=0 "
        f"p99={e['p99_ms']}ms"
        for i, e in enumerate(edges)
    }
    refs["operations[0]"] = "svc-a HTTP POST spans=8 errors=0 p50=50.0ms"
    output = {"edges": edges, "operations": operations}
    return Result("query_traces", {"service": "svc-a"}, "inv-2", "ok", output, refs)


def _gatekept(writer: Writer, results: list[Result]) -> dict[str, Any]:
    """The payload's Gatekeeper block when every binding holds (its excerpts: the refs' text)."""
    texts = {(r.invocation_id, path): text for r in results for path, text in r.refs.items()}
    excerpts = {
        claim["claim_id"]: [
            {
                "binding": index,
                "invocation_id": item["source_invocation_id"],
                "tool_name": item["tool_name"],
                "raw_path": item["raw_path"],
                "text": texts[(item["source_invocation_id"], item["raw_path"])],
            }
            for index, item in enumerate(claim["evidence_bindings"])
        ]
        for claim in writer.claims
    }
    payload = build_payload(
        VerifierInput(  # type: ignore[typeddict-item]
            question="Why is svc-a slow?",
            final_answer="",
            parse_status={"status": "valid"},
            structured_output=json.loads(writer.json()),
            trace_summary=[],
            gatekeeper_result={
                "status": "pass",
                "severity": "none",
                "checked_bindings": len(excerpts),
                "failed_rules": [],
                "verified_excerpts": excerpts,
            },
            retry_context=None,
            round=1,
        )
    )
    block: dict[str, Any] = payload["gatekeeper_result"]  # type: ignore[assignment]
    return block


def test_trace_claims_stop_where_the_verifier_would_not_see_their_excerpts() -> None:
    analysis, traces = _analysis(12), _traces()
    writer = Writer("en", [analysis, traces])
    for i in range(12):  # a root-cause section quoting long lines: the Gatekeeper's block fills
        path = f"signals[{i}].evidence[0]"
        excerpt = analysis.refs[path][:60]
        writer.claim("observation", f"svc-a logs: {excerpt}", [binding(analysis, path, excerpt)])
        if not writer.fits():
            writer.drop_claims_from(len(writer.claims) - 1)
            break
    before = len(writer.claims)
    found = analyze_question("Why is svc-a slow?", SERVICES, stems=True)

    trace_claims(writer, found, [analysis, traces])

    assert before < len(writer.claims) < before + 5  # some trace claims fit, not all
    assert writer.fits()
    shown = gatekeeper_of(_gatekept(writer, [analysis, traces]))["verified_excerpts"]
    for claim in writer.claims:  # the Verifier sees every claim's excerpt, whole
        seen = shown.get(claim["claim_id"], [])
        assert [e["raw_path"] for e in seen] == [b["raw_path"] for b in claim["evidence_bindings"]]
        assert all(not e["text"].endswith("…") for e in seen)


def test_trace_claims_with_room_are_all_stated() -> None:
    traces = _traces()
    writer = Writer("en", [traces])
    found = analyze_question("Why is svc-a slow?", SERVICES, stems=True)

    trace_claims(writer, found, [traces])

    texts = [claim["claim_text"] for claim in writer.claims]
    assert len(texts) == 5  # three callers, the operation, the slow callee
    assert texts[-1].startswith("svc-a calls svc-z: 4 calls, 0 failed, p99 850")


def test_offline_verifier_reads_every_whole_excerpt_of_a_cut_gatekeeper_block() -> None:
    whole = {
        "binding": 0,
        "invocation_id": "inv-1",
        "tool_name": "query_logs",
        "raw_path": "logs[0]",
        "text": "ERROR svc-a: timeout",
    }
    cut = {"binding": 0, "invocation_id": "inv-1", "tool_name": "query_logs"}  # no text left
    block: dict[str, Any] = {
        "status": "pass",
        "severity": "none",
        "verified_excerpts": {"c1": [whole], "c2": [whole, cut], "c3": [{}], "c4": "…"},
    }

    excerpts = gatekeeper_of(block)["verified_excerpts"]

    assert excerpts["c1"] == [whole]
    assert excerpts["c2"] == [whole]
    assert excerpts.get("c3", []) == [] and excerpts.get("c4", []) == []


def _all_levels(service: str) -> Result:
    """A log query of ``service`` at every level that found INFO lines only."""
    messages = ["order placed id=1", "payment requested id=1", "order placed id=2"]
    logs = [
        {"timestamp": f"2026-03-01T10:00:0{i}Z", "level": "INFO", "service": service, "message": m}
        for i, m in enumerate(messages)
    ]
    refs = {
        f"logs[{i}]": f"{e['timestamp']} INFO {service}: {e['message']}" for i, e in enumerate(logs)
    }
    refs["summary"] = "matched 3 of 3"
    output = {"logs": logs, "total": 3}
    return Result("query_logs", {"service": service, "limit": 50}, "inv-1", "ok", output, refs)


def test_why_answer_over_lines_no_section_quotes_states_one_of_them() -> None:
    task = {"question": "Why is svc-a slow?", "language": "en", "known_services": SERVICES}

    answer = json.loads(compose(task, analysis(task), [_all_levels("svc-a")]))

    assert [c["claim_text"] for c in answer["claims"]] == [
        'svc-a has INFO log entries, e.g. "order placed id=1"'
    ]
    bound = answer["claims"][0]["evidence_bindings"]
    assert [(b["source_invocation_id"], b["raw_path"]) for b in bound] == [("inv-1", "logs[0]")]


def test_why_answer_quotes_no_line_of_a_service_not_asked_about() -> None:
    task = {"question": "Why is svc-a slow?", "language": "en", "known_services": SERVICES}

    answer = json.loads(compose(task, analysis(task), [_all_levels("svc-b")]))

    assert answer["claims"] == []
