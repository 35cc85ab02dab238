"""``query_metrics`` over a Prometheus-compatible HTTP API, alerts optionally from Alertmanager.

Prometheus, VictoriaMetrics, Thanos and Mimir speak the same API.

Alerts: Prometheus ``/api/v1/alerts`` (firing and pending), plus alerts that fired in the window
and are no longer active (the ``ALERTS`` series) as ``resolved``; with Alertmanager configured,
its v2 alerts instead (``evidence.alertmanager``). The threshold comes from the alerting rule's
expression (``/api/v1/rules``) when it is a plain comparison, else it is absent; the service from
the first configured service label an alert carries.

Series: with ``promql``, a range query of it over the window; for a service without ``promql``,
the measured side of each active alert's expression (firing, pending, silenced or inhibited: a
pending alert's measure is what is about to fire) and the standard queries (error ratio, p99
latency, saturation) that return data. min, max and last are computed here from the returned
points; the unit comes from the metric name (``evidence.promql.unit_of``). The points themselves are
kept with the entry, bounded (``tools.points``), for charts; they are never evidence text.

Bounds are the client's, whatever the server does (Prometheus 2.42 ignores ``limit``): at most
``max_series`` series (``series_total`` says how many matched), at most 300 points per series
(step = window / 299, at least 1 s), a window of 1 h by default and at most 24 h (a longer one
keeps its end), PromQL at most 2,000 characters. Errors of the server (``bad_data``,
``execution``, ``timeout``, VictoriaMetrics' ``422``) raise ``BackendError`` quoting it, so the
call is an ``error`` invocation; an empty result is a valid answer with nothing in it.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from string import Template
from typing import Any, Protocol

from evidence.config import BackendSettings
from evidence.http import SERVER_TEXT_CHARS, BackendClient, BackendRequestError, failed_report
from evidence.promql import bare_selector, comparison, unit_of
from state.display import one_line
from state.json_shape import at, is_number, items, obj, objects, scalar_text, text, texts
from state.records import AlertEntry, SeriesEntry
from tools.backend import (
    MAX_WINDOW,
    BackendError,
    BackendReport,
    MetricSource,
    MetricsOutput,
    MetricsRequest,
    api_time,
    window_bounds,
)
from tools.points import bounded_points

logger = logging.getLogger("superbiz.prometheus")

MAX_POINTS = 300
MAX_PROMQL_CHARS = 2000
MAX_SERVICES = 500
SERVICES_TTL_S = 60.0
RATE_RANGE = "5m"

DEFAULT_STANDARD_QUERIES: dict[str, str] = {
    "error_ratio": (
        '(sum by ($label) (rate(http_requests_total{$label="$service",code=~"5.."}[5m]))'
        ' or sum by ($label) (rate(http_requests_total{$label="$service",status=~"5.."}[5m]))'
        ' or 0 * sum by ($label) (rate(http_requests_total{$label="$service"}[5m])))'
        ' / sum by ($label) (rate(http_requests_total{$label="$service"}[5m]))'
    ),
    "latency_p99_seconds": (
        "histogram_quantile(0.99, sum by ($label, le) "
        '(rate(http_request_duration_seconds_bucket{$label="$service"}[5m])))'
    ),
    "cpu_usage_cores": 'sum by ($label) (rate(process_cpu_seconds_total{$label="$service"}[5m]))',
    "memory_resident_bytes": 'sum by ($label) (process_resident_memory_bytes{$label="$service"})',
}
"""Queried for a service (``$label`` the service label, ``$service`` its value); only those
that return data give series. Replaced by ``SUPERBIZ_PROMETHEUS_STANDARD_QUERIES``."""

_STATE_ORDER = {"firing": 0, "pending": 1, "silenced": 2, "inhibited": 3, "resolved": 4}


def prometheus_error(status: int, body: bytes) -> str | None:
    """The server's message from a Prometheus error body (``errorType: error``).

    VictoriaMetrics gives a numeric ``errorType`` (``"422"``), which the HTTP status already
    says, so only its ``error`` text is kept.
    """
    try:
        data = json.loads(body)
    except ValueError:
        text = one_line(body.decode("utf-8", errors="replace"), SERVER_TEXT_CHARS)
        return text or None
    if not obj(data):
        return one_line(str(data), SERVER_TEXT_CHARS) or None
    error = one_line(str(data.get("error") or ""), SERVER_TEXT_CHARS)
    kind = str(data.get("errorType") or "")
    if kind and not kind.isdigit():
        return f"{kind}: {error}" if error else kind
    return error or None


def iso(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso_text(value: object) -> str | None:
    """An API timestamp (RFC 3339 with fractions, or unix seconds) as ``iso``."""
    if is_number(value):
        return iso(datetime.fromtimestamp(float(str(value)), UTC))
    moment = api_time(value)
    return iso(moment) if moment is not None else None


def number(value: object) -> float | None:
    """A sample value (Prometheus sends strings) as a finite float, or None."""
    given = scalar_text(value)
    try:
        parsed = float(given) if given is not None else math.nan
    except ValueError:
        return None
    if not math.isfinite(parsed):
        return None
    return _rounded(parsed)


def _rounded(value: float) -> float:
    """Integral values exactly; others to 6 significant digits (``0.30000000000000004`` 0.3)."""
    if value.is_integer():
        return value
    return float(f"{value:.6g}")


def _labels(metric: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in obj(metric).items()}


def service_of(labels: Mapping[str, str], service_labels: Iterable[str]) -> str | None:
    """The value of the first configured service label the labels carry."""
    return next((labels[name] for name in service_labels if labels.get(name)), None)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class Window:
    """The absolute window and step of one call, bounded by the client."""

    def __init__(self, start: str | None, end: str | None, now: datetime) -> None:
        start_at, end_at = window_bounds(start, end, now)
        self.start = start_at.replace(microsecond=0)
        self.end = end_at.replace(microsecond=0)
        span = (self.end - self.start).total_seconds()
        self.step = max(1, math.ceil(span / (MAX_POINTS - 1)))
        # Points count back from the end, so the last point is the window's end itself.
        self.first = self.end - timedelta(seconds=self.step * int(span // self.step))

    def params(self, query: str) -> dict[str, str]:
        """The ``query_range`` parameters."""
        return {
            "query": query,
            "start": str(int(self.first.timestamp())),
            "end": str(int(self.end.timestamp())),
            "step": f"{self.step}s",
        }


class PrometheusClient:
    """The Prometheus HTTP API calls this backend makes (all reads)."""

    def __init__(self, settings: BackendSettings, *, timeout_s: float) -> None:
        self.http = BackendClient(
            settings, timeout_s=timeout_s, title="Prometheus", error_reader=prometheus_error
        )

    def _data(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        answer = self.http.get_json(path, params)
        if at(answer, "status") != "success":
            said = prometheus_error(200, json.dumps(answer).encode()) if answer else None
            raise BackendRequestError(
                f"Prometheus at {self.http.url}: unexpected answer for {path}"
                + (f" ({said})" if said else ""),
                kind="invalid",
                setting=self.http.settings.variable("url"),
            )
        return obj(answer).get("data")

    def range_query(self, query: str, window: Window) -> list[dict[str, Any]]:
        """The series of a range query (matrix), as returned."""
        data = self._data("api/v1/query_range", window.params(query))
        return objects(at(data, "result"))

    def instant_query(self, query: str) -> Any:
        """An instant query's ``data``."""
        return self._data("api/v1/query", {"query": query})

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts (firing and pending)."""
        data = self._data("api/v1/alerts")
        return objects(at(data, "alerts"))

    def alert_rules(self) -> list[dict[str, Any]]:
        """Every alerting rule (name, query, labels, annotations)."""
        data = self._data("api/v1/rules", {"type": "alert"})
        return [
            rule
            for group in objects(at(data, "groups"))
            for rule in objects(group.get("rules"))
            if rule.get("type", "alerting") == "alerting"
        ]

    def label_values(self, label: str, start: datetime) -> list[str]:
        """The values of one label seen since ``start``."""
        data = self._data(f"api/v1/label/{label}/values", {"start": str(int(start.timestamp()))})
        return sorted(texts(data))

    def build_version(self) -> str | None:
        """The server's version (None when it does not say)."""
        try:
            data = self._data("api/v1/status/buildinfo")
        except BackendRequestError as exc:
            if exc.kind in {"not_found", "invalid", "server"}:
                return None
            raise
        version = at(data, "version")
        return str(version) if version else None


class AlertSource(Protocol):
    """Where alerts come from instead of Prometheus (``evidence.alertmanager``'s alerts)."""

    def alerts(self, service_labels: tuple[str, ...]) -> list[tuple[AlertEntry, dict[str, str]]]:
        """Every alert it holds, with its full label set."""
        ...

    def check(self) -> BackendReport:
        """Whether it answers."""
        ...


class PrometheusMetrics(MetricSource):
    """The metrics part of the evidence backend over Prometheus (and optionally Alertmanager).

    Args:
        prometheus: The Prometheus API settings (None: alerts from Alertmanager only, no series).
        alertmanager: When given, alerts come from it (``evidence.alertmanager``).
        service_labels: Labels naming a service, tried in order.
        timeout_s: Seconds one request may take.
        now: The clock (for tests).
    """

    needs_timeout = True

    def __init__(
        self,
        prometheus: BackendSettings | None,
        *,
        alertmanager: AlertSource | None = None,
        service_labels: Iterable[str] = ("service", "job", "app"),
        timeout_s: float = 20.0,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = (
            PrometheusClient(prometheus, timeout_s=timeout_s) if prometheus is not None else None
        )
        self.alertmanager = alertmanager
        self.service_labels = tuple(service_labels)
        self._now = now or (lambda: datetime.now(UTC))
        options = prometheus.options if prometheus is not None else {}
        self.max_series = int(options.get("max_series") or 20)
        self.standard_queries: dict[str, str] = dict(
            options.get("standard_queries") or DEFAULT_STANDARD_QUERIES
        )
        self._services: tuple[float, dict[str, list[str]]] | None = None
        self._services_lock = threading.Lock()

    @property
    def title(self) -> str:
        """What serves the metrics, in words (``config show``)."""
        if self.client is None:
            return "alertmanager"
        return "prometheus" + (" + alertmanager" if self.alertmanager is not None else "")

    # ----------------------------------------------------------------------- the tool

    def find_metrics(self, request: MetricsRequest) -> MetricsOutput:
        """Alerts and series of a service, an alert name or a PromQL expression.

        Raises:
            BackendError: When a server fails or refuses the query (its message quoted).
        """
        service, alert, promql = request.service, request.alert, request.promql
        if promql is not None and len(promql) > MAX_PROMQL_CHARS:
            raise BackendError(
                f"promql is {len(promql)} characters; at most {MAX_PROMQL_CHARS} are sent"
            )
        window = Window(request.start, request.end, self._now())
        rules = self._rules()
        alerts = self._alerts(window, rules)
        alerts = [
            entry
            for entry in alerts
            if (service is None or entry.get("service") == service)
            and (alert is None or alert.casefold() in entry.get("alert_name", "").casefold())
        ]
        series: list[SeriesEntry] = []
        if promql is not None:
            series = self._promql_series(promql, window)
        elif service is not None and self.client is not None:
            series = self._service_series(service, alerts, rules, window)
        output = MetricsOutput(
            alerts=alerts,
            series=series[: self.max_series],
            series_total=len(series),
            window_start=iso(window.start),
            window_end=iso(window.end),
        )
        return output

    def _rules(self) -> list[dict[str, Any]]:
        if self.client is None:
            return []
        try:
            return self.client.alert_rules()
        except BackendRequestError as exc:
            if exc.kind in {"not_found", "server"}:  # a server without rules (VictoriaMetrics)
                return []
            raise

    def _alerts(self, window: Window, rules: list[dict[str, Any]]) -> list[AlertEntry]:
        active: list[tuple[AlertEntry, dict[str, str]]] = []
        values: dict[tuple[tuple[str, str], ...], float] = {}
        if self.client is not None:
            for raw in self.client.alerts():
                labels = _labels(raw.get("labels"))
                value = number(raw.get("value"))
                if value is not None:
                    values[_key(labels)] = value
                if self.alertmanager is None:
                    active.append((self._entry(labels, raw, rules), labels))
        if self.alertmanager is not None:
            for entry, labels in self.alertmanager.alerts(self.service_labels):
                value = values.get(_key(labels))
                if value is not None:
                    entry["value"] = value
                threshold = _threshold(labels, rules)
                if threshold is not None:
                    entry["threshold"] = threshold
                active.append((entry, labels))
        elif self.client is not None:
            active += self._resolved(window, rules, {_key(labels) for _, labels in active})
        active.sort(key=lambda pair: _alert_order(pair[0], pair[1]))
        return [entry for entry, _ in active]

    def _entry(
        self, labels: Mapping[str, str], raw: Mapping[str, Any], rules: list[dict[str, Any]]
    ) -> AlertEntry:
        entry = AlertEntry(alert_name=labels.get("alertname", ""))
        service = service_of(labels, self.service_labels)
        if service is not None:
            entry["service"] = service
        if labels.get("severity"):
            entry["severity"] = labels["severity"]
        entry["state"] = str(raw.get("state") or "firing")
        value = number(raw.get("value"))
        if value is not None:
            entry["value"] = value
        threshold = _threshold(labels, rules)
        if threshold is not None:
            entry["threshold"] = threshold
        summary = _summary(raw.get("annotations"))
        if summary is not None:
            entry["summary"] = summary
        url = text(at(raw, "annotations", "runbook_url"))
        if url is not None:
            entry["runbook_url"] = one_line(url, 500)
        active_at = _iso_text(raw.get("activeAt"))
        if active_at is not None:
            entry["active_at"] = active_at
        return entry

    def _resolved(
        self, window: Window, rules: list[dict[str, Any]], active: set[tuple[tuple[str, str], ...]]
    ) -> list[tuple[AlertEntry, dict[str, str]]]:
        """Alerts that fired in the window and are not active now (Prometheus' ALERTS series)."""
        found: list[tuple[AlertEntry, dict[str, str]]] = []
        for item in self._client().range_query('ALERTS{alertstate="firing"}', window):
            labels = {
                k: v
                for k, v in _labels(item.get("metric")).items()
                if k not in {"__name__", "alertstate"}
            }
            points = item.get("values") or []
            if _key(labels) in active or not points:
                continue
            rule = _rule_for(labels, rules)
            raw = {
                "state": "resolved",
                "activeAt": next(iter(items(points[0])), None),
                "annotations": rule.get("annotations") if rule else None,
            }
            entry = self._entry(labels, raw, rules)
            found.append((entry, labels))
        return found

    def _promql_series(self, promql: str, window: Window) -> list[SeriesEntry]:
        name = bare_selector(promql)
        rated = bool(name and name.endswith("_total"))
        query = f"rate({promql.strip()}[{_rate_range(window)}])" if rated else promql
        items = self._client().range_query(query, window)
        shown = name if rated and name else promql
        return _sorted(_series(item, shown, rated) for item in items)

    def _service_series(
        self,
        service: str,
        alerts: list[AlertEntry],
        rules: list[dict[str, Any]],
        window: Window,
    ) -> list[SeriesEntry]:
        client = self._client()
        found: list[SeriesEntry] = []
        queried: set[str] = set()
        for entry in alerts:
            if entry.get("state") not in {"firing", "pending", "silenced", "inhibited"}:
                continue
            rule = next((r for r in rules if r.get("name") == entry.get("alert_name")), None)
            expression = str(rule.get("query") or "") if rule else ""
            if not expression:
                continue
            plain = comparison(expression)
            measured = plain.expression if plain is not None else expression
            if measured in queried:
                continue
            queried.add(measured)
            items = client.range_query(measured, window)
            found += _sorted(
                _series(item, measured, False)
                for item in items
                if service_of(_labels(item.get("metric")), self.service_labels) in {service, None}
            )
        label = self._label_of(service)
        for name, template in self.standard_queries.items():
            query = Template(template).safe_substitute(label=label, service=_escape(service))
            if query in queried:
                continue
            queried.add(query)
            items = client.range_query(query, window)
            found += _sorted(_series(item, name, False) for item in items)
        return found

    def _client(self) -> PrometheusClient:
        if self.client is None:
            raise BackendError(
                "no Prometheus is configured for series (SUPERBIZ_PROMETHEUS_URL); "
                "only alerts come from Alertmanager"
            )
        return self.client

    # ----------------------------------------------------------------------- services

    def _label_values(self) -> dict[str, list[str]]:
        """Values of the service labels (the first label with any, cached for a minute)."""
        with self._services_lock:
            cached = self._services
            if cached is not None and time.monotonic() - cached[0] < SERVICES_TTL_S:
                return cached[1]
            found: dict[str, list[str]] = {}
            if self.client is not None:
                since = self._now() - MAX_WINDOW
                for label in self.service_labels:
                    values = self.client.label_values(label, since)
                    if values:
                        found[label] = values[:MAX_SERVICES]
                        break
            self._services = (time.monotonic(), found)
            return found

    def services(self) -> list[str]:
        """The services the server knows: the values of the first service label it has.

        Cached for a minute. A server that does not answer gives no names (and a warning in the
        log); the diagnosis then reports the failed queries themselves.
        """
        try:
            values = self._label_values()
        except BackendError as exc:
            logger.warning("cannot list services: %s", exc)
            return []
        return sorted({name for names in values.values() for name in names})

    def _label_of(self, service: str) -> str:
        try:
            values = self._label_values()
        except BackendError:
            values = {}
        for label, names in values.items():
            if service in names:
                return label
        return self.service_labels[0]

    # ----------------------------------------------------------------------- doctor

    def checks(self) -> list[BackendReport]:
        """One report per configured server: Prometheus, then Alertmanager."""
        reports = [self.check()] if self.client is not None else []
        if self.alertmanager is not None:
            reports.append(self.alertmanager.check())
        return reports

    def check(self) -> BackendReport:
        """Whether Prometheus answers: its version, a trivial query, the services found."""
        client = self._client()
        url = client.http.url
        try:
            version = client.build_version()
            data = client.instant_query("vector(1)")
            if not at(data, "result"):
                raise BackendError(f"Prometheus at {url}: the query vector(1) returned nothing")
            with self._services_lock:
                self._services = None
            values = self._label_values()
        except BackendError as exc:
            return failed_report("prometheus", url, exc)
        if values:
            label, names = next(iter(values.items()))
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            services = f"label {label}: {len(names)} services ({shown})"
        else:
            services = (
                f"no service label found (tried {', '.join(self.service_labels)}; "
                "set SUPERBIZ_SERVICE_LABEL)"
            )
        return BackendReport(
            backend="prometheus",
            url=url,
            status="ok",
            detail=f"version {version or 'unknown'}; query vector(1) ok; {services}",
        )


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "alertstate"))


def _alert_order(entry: AlertEntry, labels: Mapping[str, str]) -> tuple[Any, ...]:
    return (
        _STATE_ORDER.get(entry.get("state", ""), 9),
        entry.get("alert_name", ""),
        entry.get("service", ""),
        _key(labels),
    )


def _rule_for(labels: Mapping[str, str], rules: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one alerting rule of this alert (same name, its labels a subset), or None."""
    matching = [
        rule
        for rule in rules
        if rule.get("name") == labels.get("alertname")
        and all(labels.get(k) == v for k, v in _labels(rule.get("labels")).items())
    ]
    return matching[0] if len(matching) == 1 else None


def _threshold(labels: Mapping[str, str], rules: list[dict[str, Any]]) -> float | None:
    rule = _rule_for(labels, rules)
    plain = comparison(str(rule.get("query") or "")) if rule else None
    return _rounded(plain.threshold) if plain is not None else None


def _summary(annotations: object) -> str | None:
    for key in ("summary", "description", "message"):
        said = text(at(annotations, key))
        if said is not None and "{{" not in said:
            return one_line(said, 500)
    return None


def _rate_range(window: Window) -> str:
    return RATE_RANGE if window.step <= 300 else f"{window.step}s"


def _series(item: Mapping[str, Any], name: str, rated: bool) -> SeriesEntry:
    labels = _labels(item.get("metric"))
    metric = labels.pop("__name__", None) or name
    points = [items(p) for p in items(item.get("values")) if len(items(p)) == 2]
    values = [number(p[1]) for p in points]
    finite = [v for v in values if v is not None]
    entry = SeriesEntry(metric=metric, labels=labels, points_count=len(points))
    if finite:
        entry["min"] = min(finite)
        entry["max"] = max(finite)
    if values and values[-1] is not None:
        entry["last"] = values[-1]
    unit = unit_of(metric, rated=rated)
    if unit is not None:
        entry["unit"] = unit
    kept = bounded_points([[p[0], v] for p, v in zip(points, values, strict=True)])
    if kept:
        entry["points"] = kept
    return entry


def _sorted(series: Iterable[SeriesEntry]) -> list[SeriesEntry]:
    return sorted(
        series,
        key=lambda e: (e.get("metric", ""), sorted(e.get("labels", {}).items())),
    )
