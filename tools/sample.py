"""A backend that serves a fixed environment (the bundled sample incident or a scenario's).

Filtering follows contracts section 9, always in environment order so a script can predict
indexes:

- `query_logs`: `service` exact; `level` case-insensitive exact; `query` case-insensitive
  substring of the message; `start`/`end` inclusive on the log timestamps (compared as parsed
  datetimes; `Z` and offsets accepted, no offset means UTC); then `limit` (clamped to 1..100).
  `total` counts matches before the limit and `truncated` is `total > len(logs)`.
- `query_metrics`: `service` exact (the alert's `service`, the series' `service` label);
  `alert` case-insensitive substring of `alert_name` (filters alerts only); `promql` keeps the
  series whose `metric` name occurs in the PromQL text (filters series only). Alerts are returned
  whatever their state. `start`/`end` filter neither alerts nor series: a series entry is already
  a summary over the environment's window, and an alert's state is its current state.
- `lookup_knowledge`: documents ranked by how many of the query's distinct whitespace-separated
  terms (compared case-insensitively) occur in title or chunk as case-insensitive substrings;
  ties keep environment order; documents matching no term are left out; `top_k` is clamped to
  1..10. `score` = matched terms / terms, rounded to 3 places; `relevance` is `high` from 0.66,
  `medium` from 0.33, else `low`.
- `get_current_time`: the environment's `now` when present, else the real UTC time.

Entries are returned as copies of the environment's entries. `load_environment` reads and checks
an environment (or a scenario holding one) from a file; `default_environment` loads the bundled
sample incident.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tools.backend import BackendError, parse_timestamp

ENVIRONMENT_KEYS: frozenset[str] = frozenset({"logs", "alerts", "series", "documents", "now"})
"""The top-level keys an environment may have."""

REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "logs": ("timestamp", "level", "service", "message"),
    "alerts": ("alert_name", "service", "state"),
    "series": ("metric",),
    "documents": ("doc_id", "title", "chunk"),
}
"""Fields every entry of each environment array must have (checked by `load_environment`)."""

_MAX_LIMIT = 100
_MAX_TOP_K = 10
_SAMPLE_RESOURCE = "sample_environment.json"


class EnvironmentFileError(ValueError):
    """An environment or scenario file cannot be used; the message says what to fix."""


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _fold(value: Any) -> str:
    return value.casefold() if isinstance(value, str) else ""


def _bound(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise BackendError(f"{name}: {exc}") from None


def _relevance(score: float) -> str:
    if score >= 0.66:
        return "high"
    if score >= 0.33:
        return "medium"
    return "low"


def _format_now(moment: datetime) -> str:
    if moment.utcoffset() == UTC.utcoffset(None):
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.isoformat(timespec="seconds")


class SampleBackend:
    """Serves logs, alerts, series and documents from an in-memory environment.

    Args:
        environment: `{"logs": [...], "alerts": [...], "series": [...], "documents": [...],
            "now": "<ISO-8601>"}`; every key is optional. Entries use the tool output shapes
            (contracts section 2). The environment is copied; later changes to the argument
            do not affect the backend.
    """

    needs_timeout = False
    """In-memory and bounded: the runner calls it directly instead of on a timed worker thread."""

    def __init__(self, environment: dict[str, Any]) -> None:
        env = copy.deepcopy(environment)
        self._logs: list[dict[str, Any]] = _dict_entries(env.get("logs"))
        self._alerts: list[dict[str, Any]] = _dict_entries(env.get("alerts"))
        self._series: list[dict[str, Any]] = _dict_entries(env.get("series"))
        self._documents: list[dict[str, Any]] = _dict_entries(env.get("documents"))
        now = env.get("now")
        self._now: str | None = now if isinstance(now, str) else None

    def query_logs(
        self,
        *,
        service: str | None = None,
        query: str | None = None,
        level: str | None = None,
        start: str | None = None,
        end: str | None = None,
        limit: int = 20,
    ) -> dict[str, Any]:
        """Finds log lines (see the module docstring for the exact semantics).

        Args:
            service: Exact service name.
            query: Case-insensitive substring of the message.
            level: Case-insensitive level.
            start: Inclusive lower bound on the timestamp (ISO-8601).
            end: Inclusive upper bound on the timestamp (ISO-8601).
            limit: At most this many lines (clamped to 1..100).

        Returns:
            `{"logs": [...], "total": int, "truncated": bool}`.

        Raises:
            BackendError: When `start` or `end` is not an ISO-8601 timestamp.
        """
        start_at = _bound(start, "start")
        end_at = _bound(end, "end")
        needle = query.casefold() if query is not None else None
        wanted_level = level.casefold() if level is not None else None
        matches: list[dict[str, Any]] = []
        for entry in self._logs:
            if service is not None and entry.get("service") != service:
                continue
            if wanted_level is not None and _fold(entry.get("level")) != wanted_level:
                continue
            if needle is not None and needle not in _fold(entry.get("message")):
                continue
            if (start_at is not None or end_at is not None) and not _within(
                entry.get("timestamp"), start_at, end_at
            ):
                continue
            matches.append(entry)
        returned = matches[: _clamp(limit, 1, _MAX_LIMIT)]
        return {
            "logs": copy.deepcopy(returned),
            "total": len(matches),
            "truncated": len(matches) > len(returned),
        }

    def query_metrics(
        self,
        *,
        service: str | None = None,
        alert: str | None = None,
        promql: str | None = None,
        start: str | None = None,
        end: str | None = None,
    ) -> dict[str, Any]:
        """Finds alerts and series (see the module docstring for the exact semantics).

        Args:
            service: Exact service name (alert `service`, series `service` label).
            alert: Case-insensitive substring of the alert name; filters alerts only.
            promql: Keeps series whose metric name occurs in this text; filters series only.
            start: Accepted for interface compatibility; checked but does not filter.
            end: Accepted for interface compatibility; checked but does not filter.

        Returns:
            `{"alerts": [...], "series": [...]}`.

        Raises:
            BackendError: When `start` or `end` is not an ISO-8601 timestamp.
        """
        _bound(start, "start")
        _bound(end, "end")
        alert_needle = alert.casefold() if alert is not None else None
        alerts = [
            entry
            for entry in self._alerts
            if (service is None or entry.get("service") == service)
            and (alert_needle is None or alert_needle in _fold(entry.get("alert_name")))
        ]
        series = [
            entry
            for entry in self._series
            if (service is None or _labels(entry).get("service") == service)
            and (promql is None or _metric_in(entry.get("metric"), promql))
        ]
        return {"alerts": copy.deepcopy(alerts), "series": copy.deepcopy(series)}

    def lookup_knowledge(self, *, query: str, top_k: int = 3) -> dict[str, Any]:
        """Ranks documents by matched query terms (see the module docstring).

        Args:
            query: Whitespace-separated terms.
            top_k: At most this many documents (clamped to 1..10).

        Returns:
            `{"documents": [{doc_id, title, source, chunk, score, relevance}]}`, best first.
        """
        terms = list(dict.fromkeys(term.casefold() for term in query.split()))
        if not terms:
            return {"documents": []}
        ranked: list[tuple[int, int, dict[str, Any]]] = []
        for position, doc in enumerate(self._documents):
            haystack = f"{_fold(doc.get('title'))}\n{_fold(doc.get('chunk'))}"
            matched = sum(1 for term in terms if term in haystack)
            if matched:
                ranked.append((-matched, position, doc))
        ranked.sort(key=lambda item: (item[0], item[1]))
        documents = []
        for negative_matched, _, doc in ranked[: _clamp(top_k, 1, _MAX_TOP_K)]:
            score = round(-negative_matched / len(terms), 3)
            documents.append(
                {
                    "doc_id": doc.get("doc_id"),
                    "title": doc.get("title"),
                    "source": doc.get("source"),
                    "chunk": doc.get("chunk"),
                    "score": score,
                    "relevance": _relevance(score),
                }
            )
        return {"documents": documents}

    def get_current_time(self, *, timezone: str | None = None) -> dict[str, Any]:
        """Returns the environment's `now` (or the real UTC time when it has none).

        Args:
            timezone: An IANA timezone to express the time in. When omitted, the environment's
                `now` is returned exactly as written.

        Returns:
            `{"now": "<ISO-8601>"}`.

        Raises:
            BackendError: When the timezone is unknown or the environment's `now` is invalid.
        """
        if self._now is not None:
            if timezone is None:
                return {"now": self._now}
            try:
                moment = parse_timestamp(self._now)
            except ValueError as exc:
                raise BackendError(f"environment now: {exc}") from None
        else:
            moment = datetime.now(UTC).replace(microsecond=0)
        if timezone is not None:
            try:
                moment = moment.astimezone(ZoneInfo(timezone))
            except (ZoneInfoNotFoundError, ValueError):
                raise BackendError(f"unknown timezone {timezone!r}") from None
        return {"now": _format_now(moment)}

    def services(self) -> list[str]:
        """Lists every service named by a log, an alert or a series label, sorted."""
        names = {entry.get("service") for entry in self._logs}
        names |= {entry.get("service") for entry in self._alerts}
        names |= {_labels(entry).get("service") for entry in self._series}
        return sorted(name for name in names if isinstance(name, str) and name)


def _dict_entries(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [entry for entry in value if isinstance(entry, dict)]


def _labels(entry: dict[str, Any]) -> dict[str, Any]:
    labels = entry.get("labels")
    return labels if isinstance(labels, dict) else {}


def _metric_in(metric: Any, promql: str) -> bool:
    return isinstance(metric, str) and bool(metric) and metric in promql


def _within(timestamp: Any, start_at: datetime | None, end_at: datetime | None) -> bool:
    """Tells whether a log timestamp lies in the inclusive window; unparseable never does."""
    try:
        moment = parse_timestamp(timestamp)
    except ValueError:
        return False
    if start_at is not None and moment < start_at:
        return False
    return not (end_at is not None and moment > end_at)


def validate_environment(environment: Any, *, origin: str = "environment") -> dict[str, Any]:
    """Checks that an environment can be served, with messages that say how to fix it.

    Args:
        environment: The parsed environment object.
        origin: How to name the environment in messages (e.g. `scenario.json: environment`).

    Returns:
        The environment, unchanged.

    Raises:
        EnvironmentFileError: On an unknown key, an array that is not a list, an entry that is
            not an object or lacks a required field (see `REQUIRED_FIELDS`), a log timestamp or
            `now` that is not ISO-8601, or series labels that are not an object.
    """
    if not isinstance(environment, dict):
        raise EnvironmentFileError(
            f"{origin} must be a JSON object with keys among {_key_list()}, "
            f"got {json_type(environment)}"
        )
    unknown = sorted(set(environment) - ENVIRONMENT_KEYS)
    if unknown:
        raise EnvironmentFileError(
            f"{origin} has unknown key(s) {', '.join(unknown)}; allowed keys are {_key_list()}"
        )
    now = environment.get("now")
    if now is not None:
        _check_timestamp(now, f"{origin}.now")
    for array, required in REQUIRED_FIELDS.items():
        entries = environment.get(array)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise EnvironmentFileError(
                f"{origin}.{array} must be a list of objects, got {json_type(entries)}"
            )
        for index, entry in enumerate(entries):
            where = f"{origin}.{array}[{index}]"
            if not isinstance(entry, dict):
                raise EnvironmentFileError(f"{where} must be an object, got {json_type(entry)}")
            for field in required:
                if entry.get(field) is None:
                    raise EnvironmentFileError(
                        f"{where} is missing required field '{field}'; add it "
                        f"(required: {', '.join(required)}) or remove the entry"
                    )
            if array == "logs":
                _check_timestamp(entry["timestamp"], f"{where}.timestamp")
            if array == "series" and entry.get("labels") is not None:
                if not isinstance(entry["labels"], dict):
                    raise EnvironmentFileError(
                        f"{where}.labels must be an object such as "
                        f'{{"service": "order-service"}}, got {json_type(entry["labels"])}'
                    )
    return environment


def _check_timestamp(value: Any, where: str) -> None:
    try:
        parse_timestamp(value)
    except ValueError as exc:
        raise EnvironmentFileError(f"{where}: {exc}") from None


def _key_list() -> str:
    return ", ".join(sorted(ENVIRONMENT_KEYS))


def json_type(value: Any) -> str:
    """How a JSON value's type reads in an error message (``an object``, ``a string``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def parse_environment(text: str, *, origin: str) -> dict[str, Any]:
    """Parses and checks an environment from JSON text.

    Args:
        text: A scenario (an object with an `environment` key) or a bare environment object.
        origin: How to name the source in messages (usually the file path).

    Returns:
        The environment object.

    Raises:
        EnvironmentFileError: When the text is not JSON, not an object, of an unknown shape, or
            the environment fails `validate_environment`.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvironmentFileError(
            f"{origin} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; "
            "fix the syntax there"
        ) from None
    if not isinstance(data, dict):
        raise EnvironmentFileError(
            f"{origin} must contain a JSON object (a scenario with an 'environment' key, or an "
            f"environment with keys among {_key_list()}), got {json_type(data)}"
        )
    if "environment" in data:
        return validate_environment(data["environment"], origin=f"{origin}: environment")
    if data and set(data) <= ENVIRONMENT_KEYS:
        return validate_environment(data, origin=origin)
    found = ", ".join(sorted(data)) or "none"
    raise EnvironmentFileError(
        f"{origin} is neither a scenario (no 'environment' key) nor an environment (keys found: "
        f"{found}; expected keys among {_key_list()})"
    )


def load_environment(path: str | Path) -> dict[str, Any]:
    """Reads an environment from a file.

    Args:
        path: A scenario file (an object with an `environment` key) or a bare environment file
            (an object with keys among logs, alerts, series, documents, now).

    Returns:
        The environment object.

    Raises:
        EnvironmentFileError: With a one-line message saying what is wrong and how to fix it.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EnvironmentFileError(
            f"environment file {file} does not exist; pass the path of a scenario or "
            "environment JSON file"
        ) from None
    except IsADirectoryError:
        raise EnvironmentFileError(
            f"environment file {file} is a directory; pass the path of a JSON file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentFileError(
            f"cannot read environment file {file} ({type(exc).__name__}: {exc}); check that it "
            "exists, is readable and is UTF-8 text"
        ) from None
    return parse_environment(text, origin=str(file))


def default_environment() -> dict[str, Any]:
    """Loads the bundled sample incident environment (`tools/data/sample_environment.json`).

    Returns:
        A fresh copy of the environment object.
    """
    resource = resources.files("tools.data").joinpath(_SAMPLE_RESOURCE)
    text = resource.read_text(encoding="utf-8")
    return parse_environment(text, origin=f"tools/data/{_SAMPLE_RESOURCE}")
