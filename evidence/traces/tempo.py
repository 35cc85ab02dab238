r"""``query_traces`` over Grafana Tempo's HTTP API (search, trace by id, tag values).

**The search.** The arguments become one TraceQL spanset filter, ``{ resource.service.name =
"payment-service" && name = "charge" && status = error && duration >= 500ms }`` (``{ }`` without
any), sent to ``GET /api/search`` with ``q``, ``start`` / ``end`` (Unix seconds; the last hour by
default, 24 h at most) and ``limit`` = ``SEARCH_LIMIT``. The traces it lists are counted
(``traces_total``; a lower bound when the search returned ``SEARCH_LIMIT`` of them).

**The traces.** The first ``limit`` listed (at most 20) are fetched whole with ``GET
/api/traces/<traceID>``: OTLP JSON, ``batches`` (Tempo 2) or ``resourceSpans`` / ``trace`` (the
v2 endpoint's envelope), ids in base64 or hex, read by ``evidence.otlp`` (attributes clipped,
secrets masked). Operations, edges and span trees are computed from those traces
(``evidence.traces.answer``). A trace holds at most ``MAX_TRACE_SPANS`` spans.

**Services**: ``GET /api/v2/search/tag/resource.service.name/values`` (``tagValues``: objects
with ``value``), falling back to ``/api/search/tag/service.name/values`` (plain strings). A
multi-tenant Tempo takes the tenant as ``X-Scope-OrgID`` (``SUPERBIZ_TEMPO_TENANT``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from evidence.config import BackendSettings
from evidence.http import SERVER_TEXT_CHARS, BackendClient, BackendRequestError, failed_report
from evidence.otlp import hex_id, read_spans
from evidence.traces.answer import traces_answer
from state.display import one_line
from state.json_shape import at, obj, objects
from state.records import SpanEntry
from tools.backend import BackendError, BackendReport, window_bounds
from tools.query_traces import TracesOutput, TracesRequest

SEARCH_LIMIT = 100
"""Traces one search lists at most (they are counted; at most ``limit`` are fetched)."""
MAX_TRACE_SPANS = 2_000
MAX_SERVICES = 500


def tempo_error(status: int, body: bytes) -> str | None:
    """Tempo's error text: plain text (its usual form), or a JSON ``error`` / ``message``."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return one_line(text, SERVER_TEXT_CHARS) or None
    said = at(data, "error") or at(data, "message")
    return one_line(str(said if said else text), SERVER_TEXT_CHARS) or None


def _literal(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def traceql(request: TracesRequest) -> str:
    """The TraceQL spanset filter of one call (see the module docstring)."""
    conditions: list[str] = []
    if request.service is not None:
        conditions.append(f"resource.service.name = {_literal(request.service)}")
    if request.operation is not None:
        conditions.append(f"name = {_literal(request.operation)}")
    if request.errors_only:
        conditions.append("status = error")
    if request.min_duration_ms is not None:
        conditions.append(f"duration >= {request.min_duration_ms:g}ms")
    return "{ " + " && ".join(conditions) + " }" if conditions else "{ }"


def _unix(moment: datetime) -> str:
    return str(int(moment.timestamp()))


class TempoTraces:
    """The trace part of the evidence backend over Tempo.

    Args:
        settings: Tempo's URL, auth, TLS and ``tenant``.
        timeout_s: Seconds one request may take.
        now: The clock (for tests).
    """

    needs_timeout = True
    title = "tempo"

    def __init__(
        self,
        settings: BackendSettings,
        *,
        timeout_s: float = 20.0,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        tenant = settings.options.get("tenant")
        if tenant:
            settings = dataclasses.replace(
                settings, headers={**settings.headers, "X-Scope-OrgID": str(tenant)}
            )
        self.http = BackendClient(
            settings, timeout_s=timeout_s, title="Tempo", error_reader=tempo_error
        )
        self._now = now or (lambda: datetime.now(UTC))

    def trace(self, trace_id: str) -> list[SpanEntry]:
        """One trace's spans (``GET /api/traces/<id>``), at most ``MAX_TRACE_SPANS``."""
        answer = self.http.get_json(f"api/traces/{trace_id}")
        data = obj(answer)
        envelope = obj(data.get("trace")) or data
        batches = objects(envelope.get("batches")) or objects(envelope.get("resourceSpans"))
        return read_spans([{"resourceSpans": batches}]).spans[:MAX_TRACE_SPANS]

    def search(self, request: TracesRequest, start: datetime, end: datetime) -> list[str]:
        """The trace ids the search lists (hex), in Tempo's order."""
        answer = self.http.get_json(
            "api/search",
            {
                "q": traceql(request),
                "start": _unix(start),
                "end": _unix(end),
                "limit": str(SEARCH_LIMIT),
            },
        )
        ids: list[str] = []
        for listed in objects(obj(answer).get("traces")):
            raw = listed.get("traceID")
            text = raw.rjust(32, "0") if isinstance(raw, str) else None
            trace_id = hex_id(text, 16)
            if trace_id is not None and trace_id not in ids:
                ids.append(trace_id)
        return ids

    def find_traces(self, request: TracesRequest) -> TracesOutput:
        """Search, fetch the first ``limit`` traces, answer from their spans.

        Raises:
            BackendError: When Tempo fails or refuses the query (its message quoted).
        """
        start, end = window_bounds(request.start, request.end, self._now())
        ids = self.search(request, start, end)
        spans: list[SpanEntry] = []
        for trace_id in ids[: max(1, request.limit)]:
            try:
                spans.extend(self.trace(trace_id))
            except BackendRequestError as exc:
                if exc.kind != "not_found":  # a trace gone since the search is left out
                    raise
        return traces_answer(
            spans,
            request,
            traces_seen=len(ids),
            at_least=len(ids) >= SEARCH_LIMIT,
            window=(start, end),
        )

    def _service_names(self) -> list[str]:
        try:
            answer: Any = self.http.get_json("api/v2/search/tag/resource.service.name/values")
            values = [at(item, "value") for item in objects(obj(answer).get("tagValues"))]
        except BackendRequestError as exc:
            if exc.kind != "not_found":
                raise
            answer = self.http.get_json("api/search/tag/service.name/values")
            values = list(obj(answer).get("tagValues") or [])
        names = sorted({v for v in values if isinstance(v, str) and v})
        return names[:MAX_SERVICES]

    def services(self) -> list[str]:
        """The services Tempo knows (tag values of ``service.name``); none when it fails."""
        try:
            return self._service_names()
        except BackendError:
            return []

    def check(self) -> BackendReport:
        """Whether Tempo answers: the services it knows, and a search of the last minutes."""
        url = self.http.url
        try:
            names = self._service_names()
            end = self._now()
            found = self.search(TracesRequest(limit=1), end - timedelta(minutes=15), end)
        except BackendError as exc:
            return failed_report("tempo", url, exc)
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        return BackendReport(
            backend="tempo",
            url=url,
            status="ok",
            detail=f"{len(names)} services ({shown or 'none'}); search ok "
            f"({len(found)}{'+' if len(found) >= SEARCH_LIMIT else ''} traces in 15 min)",
        )
