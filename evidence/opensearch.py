"""``query_logs`` over Elasticsearch 7/8 or OpenSearch ``_search``.

**The query.** A ``bool`` query on the index pattern (``SUPERBIZ_OPENSEARCH_INDEX``, default
``logs-*``): a ``range`` on the timestamp field over the window (1 h by default, 24 h at most),
a ``term`` on the service field, a ``terms`` on the level field with every spelling of the
level in lower, upper and title case (``evidence.logquery``), a ``match_phrase`` of the text on the
message field; sorted by time, newest first; ``size`` = ``limit`` + 1 to tell a complete answer
from a truncated one; ``track_total_hits`` up to 10,000, so ``total`` is exact below it and
``at least`` at it (``relation: gte``). Field names come from ``SUPERBIZ_OPENSEARCH_FIELDS``.

**Exact fields.** Dynamic mapping makes a string field ``text`` with a ``keyword`` sub-field; a
``term`` on the text field would match nothing (``order-service`` is analysed into two words),
so the mapping is read (``GET <index>/_mapping``, cached for a minute) and the service and level
filters use ``<field>.keyword`` where the field is text with one, the field itself where it is a
keyword, and a ``match_phrase`` / ``match`` where it is text only.

**Errors.** An error body (``index_not_found_exception``, ``parsing_exception``,
``search_phase_execution_exception`` with its root cause, ...) becomes ``BackendError`` quoting
the server's type and reason; a pattern that matches no index is an error too (an empty answer
would read as "no errors").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from evidence.config import DEFAULT_OPENSEARCH_FIELDS, DEFAULT_OPENSEARCH_INDEX, BackendSettings
from evidence.http import SERVER_TEXT_CHARS, BackendClient, BackendRequestError, failed_report
from evidence.logformats import field_text, time_value
from evidence.logquery import MAX_LIMIT, LogWindow, iso, level_spellings, log_entry, logs_output
from state.display import one_line
from state.json_shape import at, is_number, obj, objects, text
from state.records import LogEntry
from tools.backend import BackendError, BackendReport, LogSource, LogsOutput, LogsRequest

TRACK_TOTAL_HITS = 10_000
MAPPING_TTL_S = 60.0
MAX_SERVICES = 500


def search_error(status: int, body: bytes) -> str | None:
    """``<type>: <reason>`` of an Elasticsearch/OpenSearch error body (its root cause first)."""
    try:
        data = json.loads(body)
    except ValueError:
        return one_line(body.decode("utf-8", errors="replace"), SERVER_TEXT_CHARS) or None
    error = at(data, "error")
    if isinstance(error, str):
        return one_line(error, SERVER_TEXT_CHARS)
    if not isinstance(error, dict):
        return one_line(json.dumps(data), SERVER_TEXT_CHARS) or None
    first = next(iter(objects(error.get("root_cause"))), {})
    kind = first.get("type") or error.get("type")
    reason = first.get("reason") or error.get("reason")
    if error.get("type") and kind != error.get("type"):
        kind = f"{error['type']}: {kind}"
    return one_line(f"{kind}: {reason}" if reason else str(kind), SERVER_TEXT_CHARS) or None


def _field(source: Mapping[str, Any], name: str) -> object:
    """A document field by name: a flat key, else dotted into nested objects."""
    if name in source:
        return source[name]
    return at(source, *name.split("."))


def _flatten(properties: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Mapping properties as ``dotted name -> type`` (multi-fields as ``name.keyword``)."""
    found: dict[str, str] = {}
    for name, spec in properties.items():
        path = f"{prefix}{name}"
        found.update(_flatten(obj(at(spec, "properties")), f"{path}."))
        if kind := text(at(spec, "type")):
            found[path] = kind
        for sub, sub_spec in obj(at(spec, "fields")).items():
            if sub_kind := text(at(sub_spec, "type")):
                found[f"{path}.{sub}"] = sub_kind
    return found


class OpenSearchLogs(LogSource):
    """The log part of the evidence backend over Elasticsearch or OpenSearch.

    Args:
        settings: The URL, auth and TLS settings, ``index`` and ``fields``.
        timeout_s: Seconds one request may take.
        now: The clock (for tests).
    """

    needs_timeout = True

    def __init__(
        self,
        settings: BackendSettings,
        *,
        timeout_s: float = 20.0,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.http = BackendClient(
            settings, timeout_s=timeout_s, title="OpenSearch", error_reader=search_error
        )
        self.index = str(settings.options.get("index") or DEFAULT_OPENSEARCH_INDEX)
        self.fields: dict[str, str] = dict(settings.options.get("fields") or {})
        for role, default in DEFAULT_OPENSEARCH_FIELDS.items():
            self.fields.setdefault(role, default)
        self._now = now or (lambda: datetime.now(UTC))
        self._mapping: tuple[float, dict[str, str], int] | None = None
        self._lock = threading.Lock()

    @property
    def title(self) -> str:
        """What serves the logs, in words (``config show``)."""
        return f"opensearch (index {self.index})"

    # ----------------------------------------------------------------------- mapping

    def mapping(self) -> tuple[dict[str, str], int]:
        """The fields of the matching indices (``name -> type``) and how many indices matched."""
        with self._lock:
            cached = self._mapping
            if cached is not None and time.monotonic() - cached[0] < MAPPING_TTL_S:
                return cached[1], cached[2]
        answer = self.http.get_json(f"{self.index}/_mapping", not_found_key="index")
        fields: dict[str, str] = {}
        indices = obj(answer)
        for spec in indices.values():
            for name, kind in _flatten(obj(at(spec, "mappings", "properties"))).items():
                fields.setdefault(name, kind)
        with self._lock:
            self._mapping = (time.monotonic(), fields, len(indices))
        return fields, len(indices)

    def _exact(self, role: str) -> tuple[str, bool]:
        """The field to filter a role on exactly, and whether it is a keyword field."""
        name = self.fields[role]
        fields, _ = self.mapping()
        if fields.get(name) == "keyword":
            return name, True
        if fields.get(f"{name}.keyword") == "keyword":
            return f"{name}.keyword", True
        return name, False

    # ----------------------------------------------------------------------- the tool

    def search_body(
        self,
        *,
        window: LogWindow,
        service: str | None,
        query: str | None,
        level: str | None,
        size: int,
    ) -> dict[str, Any]:
        """The ``_search`` body of one call (see the module docstring)."""
        stamp = self.fields["timestamp"]
        filters: list[dict[str, Any]] = [
            {
                "range": {
                    stamp: {
                        "gte": iso(window.start),
                        "lte": iso(window.end),
                        "format": "strict_date_optional_time",
                    }
                }
            }
        ]
        if service is not None:
            field, keyword = self._exact("service")
            filters.append(
                {"term": {field: service}} if keyword else {"match_phrase": {field: service}}
            )
        if level is not None:
            field, keyword = self._exact("level")
            spellings = level_spellings(level)
            if keyword:
                variants = sorted({v for s in spellings for v in (s, s.upper(), s.title())})
                filters.append({"terms": {field: variants}})
            else:
                filters.append({"match": {field: {"query": " ".join(spellings)}}})
        if query is not None:
            filters.append({"match_phrase": {self.fields["message"]: query}})
        return {
            "size": size,
            "track_total_hits": TRACK_TOTAL_HITS,
            "sort": [{stamp: {"order": "desc", "unmapped_type": "date"}}],
            "_source": sorted(set(self.fields.values())),
            "query": {"bool": {"filter": filters}},
        }

    def _search(self, body: Mapping[str, Any]) -> dict[str, Any]:
        answer = self.http.post_json(f"{self.index}/_search", body, not_found_key="index")
        if not isinstance(at(answer, "hits"), dict):
            raise BackendRequestError(
                f"OpenSearch at {self.http.url}: the _search answer has no hits",
                kind="invalid",
                setting=self.http.settings.variable("url"),
            )
        if at(answer, "_shards", "total") == 0:
            raise BackendRequestError(
                f"OpenSearch at {self.http.url}: no index matches {self.index}; check "
                f"{self.http.settings.variable('index')}",
                kind="not_found",
                setting=self.http.settings.variable("index"),
            )
        return obj(answer)

    def find_logs(self, request: LogsRequest) -> LogsOutput:
        """The newest matching documents of the window (see the module docstring).

        Raises:
            BackendError: When the server fails or refuses the search (its message quoted).
        """
        window = LogWindow(request.start, request.end, self._now())
        limit = max(1, min(request.limit, MAX_LIMIT))
        body = self.search_body(
            window=window,
            service=request.service,
            query=request.query,
            level=request.level,
            size=limit + 1,
        )
        hits = self._search(body)["hits"]
        documents = objects(hits.get("hits"))
        entries = [e for e in (self._entry(h) for h in documents[: limit + 1]) if e is not None]
        total_field = hits.get("total")
        relation = "eq"
        if isinstance(total_field, dict):
            total = int(total_field.get("value") or 0)
            relation = str(total_field.get("relation") or "eq")
        elif is_number(total_field):
            total = int(total_field)
        else:
            total = len(documents)
        returned = entries[:limit]
        return logs_output(
            returned,
            total=max(total, len(entries)),
            window=window,
            at_least=relation == "gte",
        )

    def _entry(self, hit: Mapping[str, Any]) -> LogEntry | None:
        source = obj(hit.get("_source"))
        if not source:
            return None
        moment = time_value(_field(source, self.fields["timestamp"]), UTC)
        if moment is None:
            return None
        message = _field(source, self.fields["message"])
        return log_entry(
            at=moment,
            level=field_text(_field(source, self.fields["level"])),
            service=field_text(_field(source, self.fields["service"])),
            instance=field_text(_field(source, self.fields["instance"])),
            message=message if isinstance(message, str) else json.dumps(message, default=str),
        )

    # ----------------------------------------------------------------------- services, doctor

    def _service_values(self) -> list[str]:
        field, keyword = self._exact("service")
        if not keyword:
            return []
        end = self._now()
        body = {
            "size": 0,
            "query": {
                "range": {
                    self.fields["timestamp"]: {
                        "gte": iso(end - timedelta(hours=24)),
                        "lte": iso(end),
                        "format": "strict_date_optional_time",
                    }
                }
            },
            "aggs": {"services": {"terms": {"field": field, "size": MAX_SERVICES}}},
        }
        answer = self._search(body)
        buckets = objects(at(answer, "aggregations", "services", "buckets"))
        return sorted(str(b["key"]) for b in buckets if b.get("key"))

    def services(self) -> list[str]:
        """The values of the service field over the last 24 h (a terms aggregation)."""
        try:
            return self._service_values()
        except BackendError:
            return []

    def check(self) -> BackendReport:
        """Whether the server answers: version, the indices and fields, the services."""
        url = self.http.url
        try:
            info = self.http.get_json("")
            number = at(info, "version", "number")
            distribution = at(info, "version", "distribution") or "elasticsearch"
            with self._lock:
                self._mapping = None
            fields, indices = self.mapping()
            if indices == 0:
                raise BackendRequestError(
                    f"no index matches {self.index}; check {self.http.settings.variable('index')}",
                    kind="not_found",
                    setting=self.http.settings.variable("index"),
                )
            missing = [
                f"{role}={name}"
                for role, name in self.fields.items()
                if name not in fields and role in ("timestamp", "message")
            ]
            if missing:
                raise BackendRequestError(
                    f"the index mapping of {self.index} has no {', '.join(missing)}; set "
                    "SUPERBIZ_OPENSEARCH_FIELDS",
                    kind="invalid",
                    setting="SUPERBIZ_OPENSEARCH_FIELDS",
                )
            services = self._service_values()
        except BackendError as exc:
            return failed_report("opensearch", url, exc)
        shown = ", ".join(services[:5]) + (", ..." if len(services) > 5 else "")
        return BackendReport(
            backend="opensearch",
            url=url,
            status="ok",
            detail=f"{distribution} {number or 'unknown'}; index {self.index}: {indices} "
            f"indices; {len(services)} services ({shown})",
        )
