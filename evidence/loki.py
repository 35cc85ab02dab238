r"""``query_logs`` over Loki's HTTP API (``query_range``, ``labels``, ``label/<name>/values``).

**LogQL from the arguments.** The selector names the service by the first service label the
streams carry (``SUPERBIZ_SERVICE_LABEL``, then Loki's own ``service_name``):
``{service="order-service"}``. A level is matched case-insensitively in every spelling
(``evidence.logquery``): as a stream label where the streams carry one (``level``, ``severity``,
``detected_level``), ``{..., level=~"(?i)(error|err|eror)"}``, or where streams use more than
one of them a label filter any of them passes, ``| level=~"..." or severity=~"..."``; else as a
line filter ``|~ "(?i)\b(error|err|eror)\b"``. A text query is a case-insensitive line filter,
``|~ "(?i)<text, regex-escaped>"``. Without a service the selector is
``{<service label>=~".+"}`` (never the catch-all ``{}`` Loki refuses), and a call with no
service, level or text at all is refused: it would read every stream.

**The call.** ``query_range`` with ``direction=backward`` (newest first) over the window (1 h by
default, 24 h at most, nanosecond timestamps), ``limit`` + 1 to tell a complete answer from a
truncated one. A complete answer's ``total`` is exact. A truncated one's is a lower bound: Loki
stops reading at the limit, so ``total`` is the larger of ``limit + 1`` and the lines Loki
reports in ``stats.summary`` (``totalPostFilterLines``, or ``totalLinesProcessed`` when the
query has no line filter), shown as ``at least``.

**Entries.** Time from Loki; service, level and instance (``instance``, ``host``, ``pod``,
``node``) from the stream labels, else from the line (a JSON or logfmt line's fields, a text
line's level word); message the line's message field, else the line, cut at
``MAX_MESSAGE_CHARS``. Loki's plain-text errors (400 parse errors and limits, 504 timeouts)
become ``BackendError`` quoting the server.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from evidence.config import BackendSettings
from evidence.http import SERVER_TEXT_CHARS, BackendClient, BackendRequestError, failed_report
from evidence.logformats import describe_line
from evidence.logquery import (
    MAX_LIMIT,
    MAX_MESSAGE_CHARS,
    LogWindow,
    level_spellings,
    log_entry,
    logs_output,
)
from state.display import one_line
from state.json_shape import at, is_number, items, obj, objects, texts
from state.records import LogEntry
from tools.backend import BackendError, BackendReport, LogSource, LogsOutput, LogsRequest

LEVEL_LABELS = ("level", "severity", "detected_level")
INSTANCE_LABELS = ("instance", "host", "hostname", "pod", "node")
LOKI_SERVICE_LABEL = "service_name"
"""The label Loki 3 derives for every stream; tried after the configured service labels."""
LABELS_TTL_S = 60.0
MAX_SERVICES = 500


def loki_error(status: int, body: bytes) -> str | None:
    """Loki's error text: plain text, or the ``error`` / ``message`` of a JSON body."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return one_line(text, SERVER_TEXT_CHARS) or None
    said = at(data, "error") or at(data, "message")
    if said:
        return one_line(str(said), SERVER_TEXT_CHARS)
    return one_line(text, SERVER_TEXT_CHARS) or None


def _string(value: str) -> str:
    """A LogQL double-quoted string literal (a raw line break would end it: Loki refuses that)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r") + '"'


def re2_escape(text: str) -> str:
    """``text`` as a literal in an RE2 regular expression (Loki's): metacharacters escaped.

    Python's ``re.escape`` would also escape spaces, which RE2 refuses.
    """
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def _nanoseconds(moment: datetime) -> str:
    return str(int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000)


def _moment(value: object) -> datetime | None:
    try:
        nanos = int(str(value))
    except ValueError:
        return None
    return datetime.fromtimestamp(nanos // 1_000_000_000, UTC) + timedelta(
        microseconds=(nanos % 1_000_000_000) // 1000
    )


class LokiLogs(LogSource):
    """The log part of the evidence backend over Loki.

    Args:
        settings: Loki's URL, auth, TLS and ``tenant``.
        service_labels: Labels naming a service, tried in order (then ``service_name``).
        timeout_s: Seconds one request may take.
        now: The clock (for tests).
    """

    needs_timeout = True
    title = "loki"

    def __init__(
        self,
        settings: BackendSettings,
        *,
        service_labels: Iterable[str] = ("service", "job", "app"),
        timeout_s: float = 20.0,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        tenant = settings.options.get("tenant")
        if tenant:
            headers = {**settings.headers, "X-Scope-OrgID": str(tenant)}
            settings = dataclasses.replace(settings, headers=headers)
        self.http = BackendClient(
            settings, timeout_s=timeout_s, title="Loki", error_reader=loki_error
        )
        labels = list(dict.fromkeys([*service_labels, LOKI_SERVICE_LABEL]))
        self.service_labels = tuple(labels)
        self._now = now or (lambda: datetime.now(UTC))
        self._labels: tuple[float, list[str]] | None = None
        self._services: tuple[float, tuple[str, list[str]] | None] | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------- Loki calls

    def _data(self, path: str, params: Mapping[str, str]) -> Any:
        try:
            answer = self.http.get_json(path, params)
        except BackendRequestError as exc:
            if exc.kind == "auth" and "org id" in str(exc).casefold():
                tenant = self.http.settings.variable("tenant")
                raise BackendRequestError(
                    f"Loki at {self.http.url} wants a tenant (it answered: no org id); set "
                    f"{tenant}",
                    kind="auth",
                    setting=tenant,
                    status=exc.status,
                ) from None
            raise
        if at(answer, "status") != "success":
            raise BackendRequestError(
                f"Loki at {self.http.url}: unexpected answer for {path}",
                kind="invalid",
                setting=self.http.settings.variable("url"),
            )
        return obj(answer).get("data")

    def labels(self) -> list[str]:
        """The stream label names of the last 24 h (cached for a minute)."""
        with self._lock:
            cached = self._labels
            if cached is not None and time.monotonic() - cached[0] < LABELS_TTL_S:
                return cached[1]
        end = self._now()
        data = self._data(
            "loki/api/v1/labels",
            {"start": _nanoseconds(end - timedelta(hours=24)), "end": _nanoseconds(end)},
        )
        names = sorted(texts(data))
        with self._lock:
            self._labels = (time.monotonic(), names)
        return names

    def _service_label(self) -> str:
        labels = set(self.labels())
        found = next((name for name in self.service_labels if name in labels), None)
        if found is None:
            raise BackendError(
                f"Loki at {self.http.url} has none of the service labels "
                f"{', '.join(self.service_labels)} (it has {', '.join(sorted(labels)) or 'none'}); "
                "set SUPERBIZ_SERVICE_LABEL"
            )
        return found

    def _label_values(self) -> tuple[str, list[str]] | None:
        with self._lock:
            cached = self._services
            if cached is not None and time.monotonic() - cached[0] < LABELS_TTL_S:
                return cached[1]
        labels = set(self.labels())
        found: tuple[str, list[str]] | None = None
        end = self._now()
        for name in self.service_labels:
            if name not in labels:
                continue
            data = self._data(
                f"loki/api/v1/label/{name}/values",
                {"start": _nanoseconds(end - timedelta(hours=24)), "end": _nanoseconds(end)},
            )
            values = sorted(texts(data))
            if values:
                found = (name, values[:MAX_SERVICES])
                break
        with self._lock:
            self._services = (time.monotonic(), found)
        return found

    def services(self) -> list[str]:
        """The values of the first service label Loki has (last 24 h, cached for a minute)."""
        try:
            found = self._label_values()
        except BackendError:
            return []
        return list(found[1]) if found else []

    # ----------------------------------------------------------------------- the tool

    def logql(self, *, service: str | None, query: str | None, level: str | None) -> str:
        """The LogQL of one call (see the module docstring).

        Raises:
            BackendError: For a call that names no service, level or text.
        """
        return self._logql(service=service, query=query, level=level)[0]

    def _logql(
        self, *, service: str | None, query: str | None, level: str | None
    ) -> tuple[str, bool]:
        """The LogQL, and whether it has a line filter."""
        labels = set(self.labels())
        matchers: list[str] = []
        pipeline: list[str] = []
        if level is not None:
            spellings = "|".join(re2_escape(s) for s in level_spellings(level))
            pattern = _string(f"(?i)({spellings})")
            level_labels = [name for name in LEVEL_LABELS if name in labels]
            if len(level_labels) == 1:
                matchers.append(f"{level_labels[0]}=~{pattern}")
            elif level_labels:  # streams label it differently: any of their labels may hold it
                pipeline.append("| " + " or ".join(f"{n}=~{pattern}" for n in level_labels))
            else:
                words = r"(?i)\b(" + spellings + r")\b"
                pipeline.append(f"|~ {_string(words)}")
        if query is not None:
            pipeline.append(f"|~ {_string('(?i)' + re2_escape(query))}")
        if service is not None:
            matchers.insert(0, f"{self._service_label()}={_string(service)}")
        elif not matchers:
            if not pipeline:
                raise BackendError(
                    "query_logs over Loki needs a service, a level or a text query: without "
                    "one the query would read every stream"
                )
            matchers.append(f'{self._service_label()}=~".+"')
        text = "{" + ", ".join(matchers) + "}" + "".join(f" {step}" for step in pipeline)
        return text, bool(pipeline)

    def find_logs(self, request: LogsRequest) -> LogsOutput:
        """The newest matching lines of the window (see the module docstring).

        Raises:
            BackendError: When Loki fails or refuses the query (its message quoted).
        """
        window = LogWindow(request.start, request.end, self._now())
        limit = max(1, min(request.limit, MAX_LIMIT))
        logql, filtered = self._logql(
            service=request.service, query=request.query, level=request.level
        )
        data = self._data(
            "loki/api/v1/query_range",
            {
                "query": logql,
                "start": _nanoseconds(window.start),
                "end": _nanoseconds(window.end),
                "limit": str(limit + 1),
                "direction": "backward",
            },
        )
        kind = at(data, "resultType") if isinstance(data, dict) else "?"
        if kind not in ("streams", None):
            raise BackendError(f"Loki answered a {kind} result for a log query")
        found: list[tuple[datetime, int, LogEntry]] = []
        for stream in objects(at(data, "result")):
            labels = {str(k): str(v) for k, v in obj(stream.get("stream")).items()}
            for value in map(items, items(stream.get("values"))):
                if len(value) < 2:
                    continue
                moment = _moment(value[0])
                if moment is None:
                    continue
                entry = self._entry(moment, labels, str(value[1])[: MAX_MESSAGE_CHARS * 4])
                found.append((moment, len(found), entry))
        found.sort(key=lambda item: (item[0], -item[1]), reverse=True)
        entries = [entry for _, _, entry in found[:limit]]
        if len(found) <= limit:
            return logs_output(entries, total=len(found), window=window)
        reported = _reported_total(at(data, "stats"), filtered=filtered)
        return logs_output(entries, total=max(limit + 1, reported), window=window, at_least=True)

    def _entry(self, moment: datetime, labels: Mapping[str, str], line: str) -> LogEntry:
        level, message, instance = describe_line(line)
        level_label = next((labels[n] for n in LEVEL_LABELS if labels.get(n)), None)
        service = next((labels[n] for n in self.service_labels if labels.get(n)), None)
        instance = next((labels[n] for n in INSTANCE_LABELS if labels.get(n)), instance)
        return log_entry(
            at=moment,
            level=level_label or level,
            service=service,
            instance=instance,
            message=message,
        )

    # ----------------------------------------------------------------------- doctor

    def check(self) -> BackendReport:
        """Whether Loki answers: its labels and the services of its service label."""
        url = self.http.url
        try:
            with self._lock:
                self._labels = None
                self._services = None
            labels = self.labels()
            found = self._label_values()
        except BackendError as exc:
            return failed_report("loki", url, exc)
        if found is None:
            return BackendReport(
                backend="loki",
                url=url,
                status="error",
                detail=f"labels ok ({len(labels)}), but no stream carries a service label "
                f"({', '.join(self.service_labels)}); set SUPERBIZ_SERVICE_LABEL",
                setting="SUPERBIZ_SERVICE_LABEL",
            )
        label, names = found
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        level_labels = [n for n in LEVEL_LABELS if n in labels]
        levels = (
            f"level label{'s' if len(level_labels) > 1 else ''} {', '.join(level_labels)}"
            if level_labels
            else "no level label (levels as line filters)"
        )
        return BackendReport(
            backend="loki",
            url=url,
            status="ok",
            detail=f"labels ok ({len(labels)}); label {label}: {len(names)} services ({shown}); "
            f"{levels}",
        )


def _reported_total(stats: object, *, filtered: bool) -> int:
    """The lines Loki reports it matched (``stats.summary``), 0 when it does not say."""
    summary = obj(at(stats, "summary"))
    for key in ("totalPostFilterLines", *(() if filtered else ("totalLinesProcessed",))):
        value = summary.get(key)
        if is_number(value) and value > 0:
            return int(value)
    return 0
