"""Call patterns per request against the baseline's: where a request's path departs from the usual.

A method that throws may leave no error anywhere a counter sees: its span has no status, the
service logs nothing new, the caller's error handler answers for it. What does change is the
*shape* of the requests: a service visit stops writing the line it always writes, stops making the
calls it always makes after a failing one, or runs an error handler it never ran. This module
compares, for every kind of service visit, the events the incident's visits hold with those the
baseline's visits held (in the spirit of comparing event patterns per trace against fault-free
traces), and points at the visit where the path departs.

- **Visit**: the spans one service ran for one incoming request: an entry span (no parent in the
  data, or a parent of another service) and its descendants of the same service. Its kind is
  ``(service, entry operation)``.
- **Events of a visit**: each local operation (a span of the service under the entry), each call
  out (the callee's service and entry operation) and each log template the service wrote in the
  visit (a log line is tied to a visit when its text names the id of one of the visit's spans, as
  log lines correlated with traces do); an event occurring twice or three times is an event of
  its own (a retried call is a new event).
- **Divergence** of a kind of visit (both windows holding at least ``MIN_SPANS`` visits):
  *missing*, an event at least ``PATTERN_COMMON_SHARE`` of the baseline visits held whose share in
  the incident fell to half of that or less; *new*, a failure event (an operation or log template
  naming a failure, a log line at ERROR or WARN, or a call repeated) no baseline visit held, in at
  least ``MIN_EVENTS`` incident visits. Either is kept only when it is improbable under the
  baseline's share: its surprise, the number of incident visits times the relative entropy
  between the incident share and the baseline share (the exponent of the Chernoff bound on a
  binomial tail, in nats), reaches ``PATTERN_SURPRISE``. A stated start is often late: the
  baseline's visits of its last ``EARLY_ONSET_S`` that all lack a usual event join the
  incident's, when ``MIN_SPANS`` visits before them remain to say what usual was; that share is
  then taken at the lower end of its 95 % interval (the cut was chosen by looking at the data),
  and the signal's onset is the first visit that lacked the event. An error event that stopped
  is a recovery and never a divergence. An incident visit lacking a usual event but holding an
  event (a failure aside) that no baseline visit holding the usual one held took another branch
  of the code (different data, a reworded line), and does not diverge by it.
- **Divergence point** of a request: its deepest divergent visit (no divergent visit below it). The
  service of that visit takes the blame when the visit lost or gained an event of its own (a log
  line, a local operation, an error handler) or made no call at all; when it only stopped calling
  after some calls, the request was cut short after the last call it made, and that call's callee
  takes the blame.
- **Signal** per blamed service (kind ``call_pattern``), from the requests whose divergence point
  lost a usual event (new failures alone are left to the error signals of logs and spans, which
  count them already): how many requests, the strongest such divergence, its onset (the first
  such request) and its evidence (the diverging visits' entry spans, or the callee's span of the
  last call, and a baseline log line the visits no longer write). Its strength is 0.5 at
  ``PATTERN_SURPRISE`` and 1.0 at eight times it, times 0.5 at ``MIN_EVENTS`` requests rising to
  1.0 at three times that.

Bounded: one pass over the spans and the log lines, the events per visit capped at
``_MAX_EVENTS_PER_VISIT``, the kinds of visit compared at ``_MAX_KINDS`` (more is stated as a gap).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from analysis import thresholds
from analysis.report import EvidencePointer, Phrase, Signal
from analysis.spans import visit_entries
from state.display import clip
from state.records import LogEntry, SpanEntry

_SPAN_ID_TOKEN: Final = re.compile(r"(?<![0-9a-fA-F])[0-9a-fA-F]{16}(?![0-9a-fA-F])")
_FAILURE: Final = re.compile(
    r"exception|error|fail|fault|fallback|timeout|timed out|refused|unavailable|reject|abort|"
    r"panic|异常|失败|超时|拒绝|错误",
    re.IGNORECASE,
)
_FAILURE_LEVELS: Final = frozenset(
    {"ERROR", "FATAL", "CRITICAL", "PANIC", "SEVERE", "EMERG", "ALERT", "WARN", "WARNING"}
)
_MAX_REPEAT: Final = 3
"""An event occurring ``k`` times in a visit is the events ``(e, 1) .. (e, k)`` up to this ``k``."""
_MAX_EVENTS_PER_VISIT: Final = 200
_MAX_KINDS: Final = 5_000

Event = tuple[str, str, str]
"""``("op", operation, "")``, ``("call", callee, its operation)`` or ``("log", template, "")``."""
Side = Callable[[float], str | None]


@dataclass
class _Visit:
    """One service's part of one request: its entry span, its events and its calls out."""

    entry: SpanEntry
    moment: float
    counts: dict[Event, int] = field(default_factory=lambda: defaultdict(int))
    calls: list[tuple[str, SpanEntry]] = field(default_factory=list)
    """The calls out: ``(start, the callee's entry span)``."""

    def events(self) -> set[tuple[Event, int]]:
        return {
            (event, repeat)
            for event, count in self.counts.items()
            for repeat in range(1, min(count, _MAX_REPEAT) + 1)
        }


@dataclass(frozen=True)
class _Divergence:
    """An event of one kind of visit whose share moved: the counts on both sides, the surprise.

    ``since`` is the entry span of the first baseline visit that already lacked a missing event,
    when the absence began before the stated start (``_Tail.absence``); those visits then count
    with the incident's in ``incident_visits``.
    """

    kind: str  # "missing" or "new"
    event: Event
    repeat: int
    baseline: int
    baseline_visits: int
    incident: int
    incident_visits: int
    surprise: float
    since: SpanEntry | None = field(default=None, compare=False)


def _relative_entropy(q: float, p: float) -> float:
    """KL(q || p) of two Bernoulli shares, in nats."""
    p = min(max(p, 1e-9), 1.0 - 1e-9)
    total = 0.0
    if q > 0:
        total += q * math.log(q / p)
    if q < 1:
        total += (1.0 - q) * math.log((1.0 - q) / (1.0 - p))
    return total


def surprise(count: int, visits: int, baseline: int, baseline_visits: int) -> float:
    """How improbable ``count`` of ``visits`` is when the baseline had ``baseline`` of its visits.

    ``visits * KL(count / visits || p)`` with ``p`` the baseline share (add-one-half smoothed):
    a bound on minus the natural log of the binomial tail probability.
    """
    if visits <= 0:
        return 0.0
    p = (baseline + 0.5) / (baseline_visits + 1.0)
    return visits * _relative_entropy(count / visits, p)


def _wilson_lower(count: int, total: int, z: float = 1.96) -> float:
    """The lower end of the Wilson score interval (95 % at ``z`` 1.96) of a share."""
    if total <= 0:
        return 0.0
    share = count / total
    centre = share + z * z / (2 * total)
    margin = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total))
    return max(0.0, (centre - margin) / (1 + z * z / total))


@dataclass
class _Logs:
    """What the log lines tied to visits say about their templates."""

    levels: dict[int, str] = field(default_factory=dict)
    """Per template, ``"failure"`` when any of its lines is at ERROR or WARN, else ``""``."""
    samples: dict[int, tuple[float, LogEntry]] = field(default_factory=dict)
    """Per template, a line of it and its moment (one of the baseline's when there is one)."""


def _visits(
    spans: Sequence[tuple[float, SpanEntry]],
    logs: Sequence[tuple[float, LogEntry]],
    template_of: Sequence[int],
    side: Side,
) -> tuple[dict[str, _Visit], dict[str, str], _Logs]:
    """Every visit by its entry span id, each span's entry span id, and the tied log lines."""
    by_id = {span.get("span_id", ""): span for _, span in spans}
    entry = visit_entries(spans)
    entry_of: dict[str, str] = {}
    visits: dict[str, _Visit] = {}
    for moment, span in spans:
        span_id = span.get("span_id", "")
        entry_of[span_id] = entry(span)
        if entry_of[span_id] == span_id:
            visits[span_id] = _Visit(span, moment)
    # A span whose child is another service's entry is the client side of a call: the call
    # event stands for it.
    clients = {
        span.get("parent_span_id", "")
        for span in (visit.entry for visit in visits.values())
        if span.get("parent_span_id")
    }
    for _, span in spans:
        span_id = span.get("span_id", "")
        visit = visits.get(entry_of.get(span_id, ""))
        if visit is None:
            continue
        if entry_of[span_id] != span_id:
            if span_id not in clients:
                _count(visit, ("op", span.get("operation", ""), ""))
            continue
        parent = by_id.get(span.get("parent_span_id", ""))
        caller = visits.get(entry(parent)) if parent is not None else None
        if caller is not None:
            _count(caller, ("call", span.get("service", ""), span.get("operation", "")))
            caller.calls.append((span.get("start", ""), span))
    tied = _Logs()
    for (moment, log), template_id in zip(logs, template_of, strict=False):
        for token in _SPAN_ID_TOKEN.findall(log.get("message", "")):
            named = by_id.get(token.lower())
            if named is None or named.get("service") != log.get("service"):
                continue
            visit = visits.get(entry(named))
            if visit is None:
                break
            _count(visit, ("log", str(template_id), ""))
            if log.get("level", "").upper() in _FAILURE_LEVELS:
                tied.levels[template_id] = "failure"
            known = tied.samples.get(template_id)
            if known is None or (side(moment) == "b" and side(known[0]) != "b"):
                tied.samples[template_id] = (moment, log)
            break
    return visits, entry_of, tied


def _count(visit: _Visit, event: Event) -> None:
    if event in visit.counts or len(visit.counts) < _MAX_EVENTS_PER_VISIT:
        visit.counts[event] += 1


def _is_failure(event: Event, repeat: int, text: Callable[[int], str], tied: _Logs) -> bool:
    """Whether an event is a failure: an error line or handler, or a call made again."""
    kind, name, _ = event
    if kind == "log":
        template_id = int(name)
        return template_id in tied.levels or bool(_FAILURE.search(text(template_id)))
    if kind == "op":
        return bool(_FAILURE.search(name))
    return repeat > 1


class _Tail:
    """The baseline's visits of its last ``EARLY_ONSET_S`` before the stated start, newest last."""

    def __init__(self, base: list[_Visit], start: float | None) -> None:
        ordered = sorted(base, key=lambda visit: visit.moment)
        since = start - thresholds.EARLY_ONSET_S if start is not None else math.inf
        first = next((k for k, visit in enumerate(ordered) if visit.moment >= since), len(ordered))
        self.before = first
        """How many baseline visits precede the tail."""
        self.visits = ordered[first:]
        self.events = [visit.events() for visit in self.visits]

    def absence(self, item: tuple[Event, int]) -> tuple[int, SpanEntry | None]:
        """How many of the baseline's last visits lacked an event, and the first one's entry span.

        A stated incident start is often late (as for latency, ``EARLY_ONSET_S``): the tail's
        visits that all lack the event belong to the incident when at least ``MIN_SPANS`` visits
        before them remain and the last of those held it (the usual is still said by the
        baseline's earlier part).

        Returns:
            The number of trailing baseline visits moved (0 for none) and the first one's entry.
        """
        cut = len(self.visits)
        while cut > 0 and item not in self.events[cut - 1]:
            cut -= 1
        moved = len(self.visits) - cut
        if not moved or self.before + cut < thresholds.MIN_SPANS:
            return 0, None
        return moved, self.visits[cut].entry


def _could_be_usual(held: int, fewest: int, incident_share: float, common_share: float) -> bool:
    """Whether an event held ``held`` times could be usual with only ``fewest`` visits left."""
    best = held / fewest if fewest > 0 else 1.0
    return best >= common_share and incident_share <= best / 2


def _diverging(
    base: list[_Visit],
    during: list[_Visit],
    text: Callable[[int], str],
    tied: _Logs,
    common_share: float,
    min_surprise: float,
    start: float | None = None,
) -> list[_Divergence]:
    """The events of one kind of visit whose share moved improbably far from the baseline's.

    A usual event whose absence began in the baseline's last ``EARLY_ONSET_S`` before ``start``
    is compared with the baseline before it (``_Tail.absence``).
    """
    count_b: dict[tuple[Event, int], int] = defaultdict(int)
    count_i: dict[tuple[Event, int], int] = defaultdict(int)
    for visit in base:
        for item in visit.events():
            count_b[item] += 1
    for visit in during:
        for item in visit.events():
            count_i[item] += 1
    found: list[_Divergence] = []
    n_b, n_i = len(base), len(during)
    tail = _Tail(base, start)
    for item in sorted(set(count_b) | set(count_i)):
        event, repeat = item
        c_b, c_i = count_b.get(item, 0), count_i.get(item, 0)
        moved, since = 0, None
        if c_b / n_b >= common_share and c_i / n_i <= c_b / n_b / 2:
            kind = "missing"
        elif c_b == 0 and c_i >= thresholds.MIN_EVENTS:
            kind = "new"
        elif (
            c_b
            and tail.visits
            and _could_be_usual(c_b, n_b - len(tail.visits), c_i / n_i, common_share)
        ):
            moved, since = tail.absence(item)
            usual = c_b / (n_b - moved) if moved else 0.0
            if usual < common_share or c_i / n_i > usual / 2:
                continue
            kind = "missing"
        else:
            continue
        failure = _is_failure(event, repeat, text, tied)
        if (kind == "missing") == failure:
            continue  # an error that stopped is a recovery; only a failure counts as new
        if moved:
            score = (n_i + moved) * _relative_entropy(
                c_i / (n_i + moved), _wilson_lower(c_b, n_b - moved)
            )
        else:
            score = surprise(c_i, n_i, c_b, n_b)
        if score >= min_surprise:
            found.append(
                _Divergence(
                    kind,
                    event,
                    repeat,
                    c_b,
                    n_b - moved,
                    c_i,
                    n_i + moved,
                    score,
                    since,
                )
            )
    return found


def _co_events(base: list[_Visit], found: list[_Divergence]) -> dict[Event, set[Event]]:
    """Per missing event, every event the baseline visits holding it held too."""
    co: dict[Event, set[Event]] = {}
    for divergence in found:
        if divergence.kind == "missing":
            held: set[Event] = set()
            for visit in base:
                if visit.counts.get(divergence.event):
                    held.update(visit.counts)
            co[divergence.event] = held
    return co


def _visit_divergences(
    visit: _Visit,
    found: list[_Divergence],
    with_event: dict[Event, set[Event]],
    text: Callable[[int], str],
    tied: _Logs,
) -> list[_Divergence]:
    """The divergences one incident visit shows.

    A visit that lacks a usual event but holds an event that no baseline visit holding the usual
    one held (a failure aside) took another branch of the code: a different request, not one cut
    short.
    """
    events = visit.events()
    own: list[_Divergence] = []
    for divergence in found:
        present = (divergence.event, divergence.repeat) in events
        if divergence.kind == "new" and present:
            own.append(divergence)
        elif divergence.kind == "missing" and not present:
            usual = with_event.get(divergence.event, set())
            if not any(
                event not in usual and not _is_failure(event, 1, text, tied)
                for event in visit.counts
            ):
                own.append(divergence)
    return own


@dataclass
class _Blame:
    """The requests a service is blamed for, and the strongest divergence among them."""

    visits: list[_Visit] = field(default_factory=list)
    spans: list[SpanEntry] = field(default_factory=list)
    traces: set[str] = field(default_factory=set)
    top: _Divergence | None = None
    where: _Visit | None = None


def pattern_signals(
    spans: Sequence[tuple[float, SpanEntry]],
    logs: Sequence[tuple[float, LogEntry]],
    template_of: Sequence[int],
    template_text: Callable[[int], str],
    side: Side,
    *,
    min_surprise: float = thresholds.PATTERN_SURPRISE,
    common_share: float = thresholds.PATTERN_COMMON_SHARE,
    gaps: list[str] | None = None,
    start: float | None = None,
) -> list[Signal]:
    """``call_pattern`` signals: services where incident requests depart from the baseline's path.

    Args:
        spans: ``(unix seconds, span)`` of both windows.
        logs: ``(unix seconds, log line)``; a line naming a span id is tied to its visit.
        template_of: the template id of each of ``logs`` (same order).
        template_text: a template id's text.
        side: ``"b"`` (baseline), ``"i"`` (incident) or None, for a moment.
        min_surprise: ``PATTERN_SURPRISE`` unless given.
        common_share: ``PATTERN_COMMON_SHARE`` unless given.
        gaps: where to say that kinds of visit were left out (beyond ``_MAX_KINDS``).
        start: the incident's stated start (Unix seconds), for an absence that began before it.

    Returns:
        One signal per blamed service, in service order.
    """
    visits, entry_of, tied = _visits(spans, logs, template_of, side)
    by_kind: dict[tuple[str, str], dict[str, list[_Visit]]] = defaultdict(
        lambda: {"b": [], "i": []}
    )
    for visit in visits.values():
        which = side(visit.moment)
        if which is not None:
            key = (visit.entry.get("service", ""), visit.entry.get("operation", ""))
            by_kind[key][which].append(visit)
    flagged: dict[str, list[_Divergence]] = {}
    kinds = sorted(by_kind)
    if len(kinds) > _MAX_KINDS and gaps is not None:
        gaps.append(
            f"call patterns: {len(kinds)} kinds of service visit, the first {_MAX_KINDS} compared"
        )
    for key in kinds[:_MAX_KINDS]:
        base, during = by_kind[key]["b"], by_kind[key]["i"]
        if len(base) < thresholds.MIN_SPANS or len(during) < thresholds.MIN_SPANS:
            continue
        found = _diverging(base, during, template_text, tied, common_share, min_surprise, start)
        if not found:
            continue
        with_event = _co_events(base, found)
        for visit in during:
            own = _visit_divergences(visit, found, with_event, template_text, tied)
            if own:
                flagged[visit.entry.get("span_id", "")] = own
    blamed = _blame(visits, entry_of, flagged)
    signals = [
        _signal(service, blame, template_text, tied, min_surprise)
        for service, blame in sorted(blamed.items())
    ]
    return [signal for signal in signals if signal is not None]


def _blame(
    visits: dict[str, _Visit], entry_of: dict[str, str], flagged: dict[str, list[_Divergence]]
) -> dict[str, _Blame]:
    """Per service, the requests whose deepest divergent visit points at it.

    A visit whose divergences are only new failures raises no signal here: the error signals of
    the logs and spans count those; it still keeps the visits above it from being the deepest.
    """

    def caller(visit: _Visit) -> str | None:
        found = entry_of.get(visit.entry.get("parent_span_id", "") or "\0")
        return found if found in visits else None

    above_divergent: set[str] = set()
    for entry_id in flagged:
        current = caller(visits[entry_id])
        while current is not None and current not in above_divergent:
            above_divergent.add(current)
            current = caller(visits[current])
    blamed: dict[str, _Blame] = defaultdict(_Blame)
    for entry_id, divergences in flagged.items():
        missing = [item for item in divergences if item.kind == "missing"]
        if entry_id in above_divergent or not missing:
            continue
        visit = visits[entry_id]
        own = any(item.event[0] != "call" for item in divergences) or not visit.calls
        service = visit.entry.get("service", "") if own else _last_call(visit).get("service", "")
        blame = blamed[service]
        blame.visits.append(visit)
        blame.spans.append(visit.entry if own else _last_call(visit))
        blame.traces.add(visit.entry.get("trace_id", ""))
        top = max(missing, key=lambda item: item.surprise)
        if blame.top is None or top.surprise > blame.top.surprise:
            blame.top, blame.where = top, visit
    return blamed


def _last_call(visit: _Visit) -> SpanEntry:
    """The callee's entry span of the last call a visit made."""
    return max(visit.calls, key=lambda call: call[0])[1]


def _signal(
    service: str,
    blame: _Blame,
    template_text: Callable[[int], str],
    tied: _Logs,
    min_surprise: float,
) -> Signal | None:
    top, where = blame.top, blame.where
    requests = len(blame.traces)
    if top is None or where is None or requests < thresholds.MIN_EVENTS:
        return None
    least = thresholds.MIN_EVENTS
    strength = min(1.0, 0.5 + 0.5 * math.log(top.surprise / min_surprise) / math.log(8.0))
    strength *= min(1.0, 0.5 + 0.5 * (requests - least) / (2 * least))
    visited = where.entry.get("service", "")
    after = "" if visited == service else f", cut short after calling {service}"
    since = top.since.get("start", "") if top.since is not None else ""
    early = f"; so since {since}, before the stated start" if since else ""
    # What the visits no longer do first (an answer quotes the first words), how many requests
    # and since when after it; the visited service only when it is not the one blamed (whose
    # name the suspect carries already).
    visitor = f"{visited} " if after else ""
    detail = (
        f"{visitor}{where.entry.get('operation', '')}: {top.incident} of {top.incident_visits}"
        f" visits (baseline {top.baseline} of {top.baseline_visits})"
        f" {_describe(top, template_text)}; {requests} requests depart from the baseline's"
        f" call pattern{after}{early}"
    )
    values = _values(top, template_text)
    values.update(
        operation=where.entry.get("operation", ""),
        incident=str(top.incident),
        incident_visits=str(top.incident_visits),
        baseline=str(top.baseline),
        baseline_visits=str(top.baseline_visits),
        requests=str(requests),
    )
    if after:
        values["service"] = visited
        values["cut_after"] = service
    if since:
        values["since"] = since
    ordered = sorted(zip(blame.visits, blame.spans, strict=True), key=lambda pair: pair[0].moment)
    pointers = [_span_pointer(span) for _, span in ordered[: thresholds.MAX_EVIDENCE]]
    if top.since is not None:  # the first visit that already went without it
        pointers.insert(0, _span_pointer(top.since))
    if top.event[0] == "log" and int(top.event[1]) in tied.samples:
        pointers.append(_log_pointer(tied.samples[int(top.event[1])][1]))
    return Signal(
        kind="call_pattern",
        service=service,
        detail=detail,
        phrase=Phrase(kind="call_pattern", values=values),
        baseline=round(top.baseline / top.baseline_visits, 4),
        incident=round(top.incident / top.incident_visits, 4),
        onset=since or ordered[0][1].get("start") or None,
        strength=round(strength, 4),
        evidence=pointers,
    )


_CORRELATION: Final = re.compile(
    r"\b[\w.-]*(?:trace|span)[\w.-]*\s*[:=]\s*<(?:HEX|NUM|\*)>[,;]?\s*", re.IGNORECASE
)


def _line(template: str) -> str:
    """A log template as a phrase quotes it: without its masked trace and span ids.

    ``<HEX>``, ``<NUM>`` or drain3's ``<*>`` after a key naming a trace or a span: every line of
    a traced service carries them; what tells the line apart comes after.
    """
    return clip(_CORRELATION.sub("", template).strip() or template, 100)


def _describe(divergence: _Divergence, template_text: Callable[[int], str]) -> str:
    """What the counted visits do, in a phrase."""
    kind, name, extra = divergence.event
    times = "" if divergence.repeat == 1 else f" {divergence.repeat} times"
    if kind == "log":
        return f"write{times} the log line '{_line(template_text(int(name)))}'"
    if kind == "op":
        return f"run{times} the operation {name}"
    return f"make{times} the call to {name} {extra}"


def _values(
    divergence: _Divergence, template_text: Callable[[int], str]
) -> dict[str, str | list[str]]:
    """What ``_describe`` says, as a phrase's values.

    ``event`` (``log``, ``op`` or ``call``), ``name`` (the line, the operation, the callee), for
    a call its ``extra``, and ``repeat`` when it is not 1.
    """
    kind, name, extra = divergence.event
    found: dict[str, str | list[str]] = {"event": kind}
    if kind == "log":
        found["name"] = _line(template_text(int(name)))
    else:
        found["name"] = name
    if kind not in ("log", "op"):
        found["event"] = "call"
        found["extra"] = extra
    if divergence.repeat != 1:
        found["repeat"] = str(divergence.repeat)
    return found


def _span_pointer(span: SpanEntry) -> EvidencePointer:
    return EvidencePointer(
        kind="span",
        trace_id=span.get("trace_id", ""),
        span_id=span.get("span_id", ""),
        service=span.get("service", ""),
        operation=span.get("operation", ""),
        duration_ms=float(span.get("duration_ms", 0.0)),
        start=span.get("start", ""),
    )


def _log_pointer(log: LogEntry) -> EvidencePointer:
    return EvidencePointer(
        kind="log",
        timestamp=log.get("timestamp", ""),
        service=log.get("service", ""),
        level=log.get("level", ""),
        message=log.get("message", ""),
    )
