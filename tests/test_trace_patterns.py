"""Call patterns per request against the baseline's (``analysis.trace_patterns``), on small traces.

Each request: ``web`` calls ``orders`` (``POST /orders``), whose controller span writes a log
line naming its span id, calls ``stock`` (``GET /stock``) and then ``billing``
(``POST /charge``). Baseline requests run at minutes 0-59, incident ones at 60-74.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from analysis import trace_patterns
from analysis.incident import IncidentInputs, analyze, parse_time
from analysis.templates import TemplateIndex
from analysis.trace_patterns import pattern_signals, surprise
from state.records import LogEntry, SpanEntry

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
_ids = itertools.count(1)


def _at(minute: float) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")


def _span(
    trace: str, parent: str, service: str, operation: str, minute: float, ms: float
) -> SpanEntry:
    span = SpanEntry(
        trace_id=trace,
        span_id=f"{next(_ids):016x}",
        service=service,
        operation=operation,
        start=_at(minute),
        duration_ms=ms,
    )
    if parent:
        span["parent_span_id"] = parent
    return span


def _request(
    minute: float,
    *,
    log: bool = True,
    stock: bool = True,
    billing: bool = True,
    other_line: str = "",
    error_handler: bool = False,
    web_line: bool = True,
    retry: bool = False,
) -> tuple[list[SpanEntry], list[LogEntry]]:
    """One request's spans and the log lines tied to them."""
    trace = f"{next(_ids):032x}"
    root = _span(trace, "", "web", "GET /checkout", minute, 80.0)
    entry = _span(trace, root["span_id"], "orders", "POST /orders", minute + 0.001, 70.0)
    controller = _span(
        trace, entry["span_id"], "orders", "OrderController.create", minute + 0.002, 60.0
    )
    spans = [root, entry, controller]
    logs: list[LogEntry] = []
    if web_line:
        logs.append(
            LogEntry(
                timestamp=_at(minute + 0.009),
                level="INFO",
                service="web",
                message=f"span={root['span_id']} checkout page rendered",
            )
        )
    tag = f"TraceID: {trace} SpanID: {controller['span_id']}"
    if log:
        logs.append(
            LogEntry(
                timestamp=_at(minute + 0.003),
                level="INFO",
                service="orders",
                message=f"{tag} [create][order accepted][items: 3]",
            )
        )
    if other_line:
        logs.append(
            LogEntry(
                timestamp=_at(minute + 0.003),
                level="INFO",
                service="orders",
                message=f"{tag} {other_line}",
            )
        )
    if stock:
        call = _span(trace, controller["span_id"], "orders", "HTTP GET", minute + 0.004, 20.0)
        spans += [call, _span(trace, call["span_id"], "stock", "GET /stock", minute + 0.005, 15.0)]
    if billing:
        call = _span(trace, controller["span_id"], "orders", "HTTP POST", minute + 0.006, 20.0)
        spans += [
            call,
            _span(trace, call["span_id"], "billing", "POST /charge", minute + 0.007, 15.0),
        ]
    if retry:
        call = _span(trace, controller["span_id"], "orders", "HTTP POST", minute + 0.0065, 20.0)
        spans += [
            call,
            _span(trace, call["span_id"], "billing", "POST /charge", minute + 0.0066, 15.0),
        ]
    if error_handler:
        spans.append(
            _span(trace, entry["span_id"], "orders", "ErrorController.error", minute + 0.008, 1.0)
        )
    return spans, logs


def _requests(
    minutes: range, per_minute: int = 1, **kwargs: bool | str
) -> tuple[list[SpanEntry], list[LogEntry]]:
    spans: list[SpanEntry] = []
    logs: list[LogEntry] = []
    for minute in minutes:
        for k in range(per_minute):
            more_spans, more_logs = _request(minute + k / (per_minute + 1), **kwargs)  # type: ignore[arg-type]
            spans += more_spans
            logs += more_logs
    return spans, logs


def _side(moment: float) -> str | None:
    start = T0.timestamp()
    if start <= moment < start + 3600:
        return "b"
    if start + 3600 <= moment <= start + 75 * 60:
        return "i"
    return None


def _signals(
    spans: list[SpanEntry], logs: list[LogEntry], start: float | None = None
) -> list[dict[str, object]]:
    timed_spans = sorted(((parse_time(s["start"]) or 0.0, s) for s in spans), key=lambda x: x[0])
    timed_logs = sorted(((parse_time(g["timestamp"]) or 0.0, g) for g in logs), key=lambda x: x[0])
    index = TemplateIndex()
    template_of = [index.add(log.get("message", "")) for _, log in timed_logs]
    found = pattern_signals(
        timed_spans, timed_logs, template_of, index.template, _side, start=start
    )
    return [dict(signal) for signal in found]


def test_trace_patterns_surprise_grows_with_the_departure() -> None:
    assert surprise(0, 20, 45, 50) > surprise(0, 5, 45, 50) > 0
    assert surprise(18, 20, 18, 20) < 0.1
    assert surprise(0, 20, 45, 50) > surprise(10, 20, 45, 50)


def test_trace_patterns_missing_log_line_points_at_the_service_that_stopped_writing_it() -> None:
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), log=False)
    found = _signals(base_spans + inc_spans, base_logs + inc_logs)
    assert [signal["service"] for signal in found] == ["orders"]
    signal = found[0]
    assert signal["kind"] == "call_pattern"
    # The trace and span ids every traced line carries are left out of the quoted line.
    assert str(signal["detail"]) == (
        "POST /orders: 0 of 15 visits (baseline 60 of 60) write the log line"
        " '[create][order accepted][items: <NUM>]'; 15 requests depart from the baseline's call"
        " pattern"
    )
    phrase = signal["phrase"]
    assert isinstance(phrase, dict) and phrase["kind"] == "call_pattern"
    values = phrase["values"]
    assert values["event"] == "log"
    assert (values["incident"], values["incident_visits"], values["requests"]) == ("0", "15", "15")
    # The service visited is the one blamed: the suspect names it, the mechanism does not repeat it.
    assert "cut_after" not in values and "repeat" not in values and "service" not in values
    assert all(str(value) in str(signal["detail"]) for value in values.values())
    assert signal["baseline"] == 1.0 and signal["incident"] == 0.0
    assert signal["onset"] == _at(60.001)
    evidence = signal["evidence"]
    assert isinstance(evidence, list)
    spans = [pointer for pointer in evidence if pointer["kind"] == "span"]
    lines = [pointer for pointer in evidence if pointer["kind"] == "log"]
    assert spans
    assert all(p["service"] == "orders" and p["operation"] == "POST /orders" for p in spans)
    assert spans[0]["start"] == _at(60.001)
    # The line the visits no longer write, quoted from the baseline.
    assert lines and "order accepted" in lines[0]["message"]
    assert (parse_time(lines[0]["timestamp"]) or 0) < T0.timestamp() + 3600


def test_trace_patterns_same_departure_in_the_baseline_is_not_a_suspect() -> None:
    spans: list[SpanEntry] = []
    logs: list[LogEntry] = []
    for minute in range(0, 75):
        more_spans, more_logs = _request(minute, log=minute % 2 == 0)
        spans += more_spans
        logs += more_logs
    assert _signals(spans, logs) == []


def _mixed(minutes: range, every: int) -> tuple[list[SpanEntry], list[LogEntry]]:
    """One request a minute, writing the usual line in one minute of ``every``."""
    spans: list[SpanEntry] = []
    logs: list[LogEntry] = []
    for minute in minutes:
        more_spans, more_logs = _request(minute, log=minute % every == 0)
        spans += more_spans
        logs += more_logs
    return spans, logs


START = T0.timestamp() + 3600


def test_trace_patterns_absence_begun_shortly_before_the_stated_start_is_found() -> None:
    """The line stopped four minutes before the stated start: those visits join the incident.

    Over the whole baseline the line is no longer usual (7 of 34 visits); before its last four
    minutes it was (7 of 14), and every visit since has gone without it.
    """
    base_spans, base_logs = _mixed(range(0, 14), every=2)
    early_spans, early_logs = _requests(range(56, 60), per_minute=5, log=False)
    inc_spans, inc_logs = _requests(range(60, 75), log=False)
    spans = base_spans + early_spans + inc_spans
    logs = base_logs + early_logs + inc_logs
    assert _signals(spans, logs) == []  # without the stated start: the baseline as a whole
    found = _signals(spans, logs, start=START)
    assert [signal["service"] for signal in found] == ["orders"]
    signal = found[0]
    first_early = min(span["start"] for span in early_spans if span["service"] == "orders")
    assert signal["onset"] == first_early < _at(60)
    detail = str(signal["detail"])
    assert detail.startswith("POST /orders: 0 of 35 visits (baseline 7 of 14) write")
    assert detail.endswith(f"; so since {first_early}, before the stated start")
    phrase = signal["phrase"]
    assert isinstance(phrase, dict) and phrase["values"]["since"] == first_early
    evidence = signal["evidence"]
    assert isinstance(evidence, list)
    # The first visit that went without the line, then the incident's, then the line itself.
    assert evidence[0]["kind"] == "span" and evidence[0]["start"] == first_early
    assert (parse_time(evidence[1]["start"]) or 0) >= START
    assert evidence[-1]["kind"] == "log" and "order accepted" in evidence[-1]["message"]
    assert all(str(value) in detail for value in phrase["values"].values())


def test_trace_patterns_absence_longer_ago_than_the_early_onset_stays_in_the_baseline() -> None:
    """Visits without the line more than ``EARLY_ONSET_S`` before the start are the baseline."""
    base_spans, base_logs = _mixed(range(0, 14), every=2)
    old_spans, old_logs = _requests(range(30, 50), log=False)
    early_spans, early_logs = _requests(range(56, 60), per_minute=2, log=False)
    inc_spans, inc_logs = _requests(range(60, 75), log=False)
    spans = base_spans + old_spans + early_spans + inc_spans
    logs = base_logs + old_logs + early_logs + inc_logs
    assert _signals(spans, logs, start=START) == []


def test_trace_patterns_early_absence_needs_a_usual_said_by_enough_visits() -> None:
    """Six of eight visits do not say what usual is firmly enough to move the start.

    Taken at face value (6 of 8), 2 of the 23 later visits holding the line would be improbable;
    at the lower end of the share's 95 % interval they are not (the cut was chosen by looking at
    the data, so the share it leaves is taken conservatively).
    """
    base_spans, base_logs = _mixed(range(0, 6), every=1)
    for minute in (1, 3):  # 6 of 8 write the line
        base_spans += _request(minute + 0.5, log=False)[0]
    early_spans, early_logs = _requests(range(56, 60), per_minute=2, log=False)
    inc_spans, inc_logs = _requests(range(60, 73), log=False)
    held_spans, held_logs = _requests(range(73, 75))
    spans = base_spans + early_spans + inc_spans + held_spans
    logs = base_logs + early_logs + inc_logs + held_logs
    assert _signals(spans, logs, start=START) == []
    # The same departure from a usual said by many visits is found.
    many_spans, many_logs = _mixed(range(0, 30), every=1)
    found = _signals(
        many_spans + early_spans + inc_spans + held_spans,
        many_logs + early_logs + inc_logs + held_logs,
        start=START,
    )
    assert [signal["service"] for signal in found] == ["orders"]


def test_trace_patterns_truncated_sequence_points_at_the_last_callee() -> None:
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), billing=False)
    found = _signals(base_spans + inc_spans, base_logs + inc_logs)
    assert [signal["service"] for signal in found] == ["stock"]
    detail = str(found[0]["detail"])
    assert "cut short after calling stock" in detail
    assert "0 of 15 visits (baseline 60 of 60) make the call to billing POST /charge" in detail
    phrase = found[0]["phrase"]
    assert isinstance(phrase, dict)
    values = phrase["values"]
    assert (values["event"], values["name"], values["extra"]) == ("call", "billing", "POST /charge")
    assert values["cut_after"] == "stock" and values["service"] == "orders"
    assert all(str(value) in detail for value in values.values())
    evidence = found[0]["evidence"]
    assert isinstance(evidence, list)
    assert evidence[0]["service"] == "stock" and evidence[0]["operation"] == "GET /stock"


def test_trace_patterns_visit_making_none_of_its_calls_points_at_itself() -> None:
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), stock=False, billing=False)
    found = _signals(base_spans + inc_spans, base_logs + inc_logs)
    assert [signal["service"] for signal in found] == ["orders"]


def test_trace_patterns_deepest_divergence_wins_over_its_callers() -> None:
    """The caller of a visit that stopped writing its line departs too, and is not blamed."""
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), log=False, web_line=False)
    alone_spans, alone_logs = _requests(range(60, 75), web_line=False)
    web_alone = _signals(base_spans + alone_spans, base_logs + alone_logs)
    assert [signal["service"] for signal in web_alone] == ["web"]
    found = _signals(base_spans + inc_spans, base_logs + inc_logs)
    assert [signal["service"] for signal in found] == ["orders"]


def test_trace_patterns_another_branch_is_not_a_departure() -> None:
    """A visit writing a different ordinary line instead took another path, not a cut-short one."""
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), log=False, other_line="[create][cart empty]")
    assert _signals(base_spans + inc_spans, base_logs + inc_logs) == []


def test_trace_patterns_errors_that_stopped_are_not_a_suspect() -> None:
    base_spans, base_logs = _requests(range(0, 60), error_handler=True)
    inc_spans, inc_logs = _requests(range(60, 75))
    assert _signals(base_spans + inc_spans, base_logs + inc_logs) == []


def test_trace_patterns_new_failures_alone_are_left_to_the_error_signals() -> None:
    """A retried call or a new error handler marks the visit, but the error signals count it."""
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), retry=True, error_handler=True)
    assert _signals(base_spans + inc_spans, base_logs + inc_logs) == []


def test_trace_patterns_too_few_requests_raise_nothing() -> None:
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 62), log=False)
    assert _signals(base_spans + inc_spans, base_logs + inc_logs) == []


def test_incident_call_pattern_names_the_silent_service_as_root_cause() -> None:
    """No error anywhere: only the requests' shape changed, and the analysis says where."""
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), log=False)
    report = analyze(
        IncidentInputs(
            baseline_start=_at(0),
            baseline_end=_at(60),
            incident_start=_at(60),
            incident_end=_at(75),
            spans=base_spans + inc_spans,
            logs=base_logs + inc_logs,
        )
    )
    root = report["root_cause"]
    assert root is not None and root["service"] == "orders"
    assert root["signals"][0]["kind"] == "call_pattern"
    assert "0 of 15 visits (baseline 60 of 60) write the log line" in root["mechanism"]


def test_incident_call_pattern_thresholds_can_be_overridden_per_analysis() -> None:
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), log=False)
    inputs = IncidentInputs(
        baseline_start=_at(0),
        baseline_end=_at(60),
        incident_start=_at(60),
        incident_end=_at(75),
        spans=base_spans + inc_spans,
        logs=base_logs + inc_logs,
    )
    strict = analyze(inputs, {"pattern_surprise": 1000.0})
    assert not any(
        signal["kind"] == "call_pattern"
        for suspect in strict["suspects"]
        for signal in suspect["signals"]
    )


def test_trace_patterns_kinds_beyond_the_cap_are_a_stated_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace_patterns, "_MAX_KINDS", 1)
    base_spans, base_logs = _requests(range(0, 60))
    inc_spans, inc_logs = _requests(range(60, 75), log=False)
    report = analyze(
        IncidentInputs(
            baseline_start=_at(0),
            baseline_end=_at(60),
            incident_start=_at(60),
            incident_end=_at(75),
            spans=base_spans + inc_spans,
            logs=base_logs + inc_logs,
        )
    )
    assert "call patterns: 4 kinds of service visit, the first 1 compared" in report["gaps"]
