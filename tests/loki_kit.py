"""A local stand-in for Loki's query API, for tests (no Loki server is installable here).

It is not Loki. It implements the documented answers of the three endpoints the Loki backend
calls, over streams a test gives it:

- ``GET /loki/api/v1/labels`` and ``GET /loki/api/v1/label/<name>/values``:
  ``{"status": "success", "data": [...]}``;
- ``GET /loki/api/v1/query_range`` with a LogQL log query: a selector of label matchers
  (``=``, ``!=``, ``=~``, ``!~``; at least one matcher that does not match the empty string, as
  Loki requires), line filters (``|=``, ``!=``, ``|~``, ``!~``) and label filter stages of
  string predicates joined by ``or`` (``| level=~"..." or severity=~"..."``); ``start`` / ``end`` in
  nanoseconds, ``limit``, ``direction``. The answer is the ``streams`` result type, each stream
  with its labels and ``[["<nanoseconds>", "<line>"], ...]`` values, and ``stats.summary``
  (``totalLinesProcessed``, ``totalPostFilterLines``, ``totalEntriesReturned``, ``execTime``);
- errors as Loki sends them: plain text with status 400 (a parse error, ``max entries limit per
  query exceeded``, an empty-compatible selector), 401 ``no org id`` when a tenant is required
  and the ``X-Scope-OrgID`` header is missing, 504 for a query that times out.

Regular expressions are Python's, which agree with RE2 on what the backend sends (``(?i)``,
``\\b``, escaped literals).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

from tests.backend_kit import QuietHandler, serve_handler


@dataclass
class Stream:
    """One log stream: its labels and its ``(time, line)`` entries."""

    labels: dict[str, str]
    entries: list[tuple[datetime, str]]


@dataclass
class FakeLoki:
    """What the stand-in serves and how it behaves."""

    streams: list[Stream] = field(default_factory=list)
    tenant: str | None = None
    max_entries_limit: int = 5000
    timeout: bool = False
    requests: list[dict[str, str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """The request headers of every request, names lower-cased (to check credentials arrive)."""
    parse_error: str | None = None
    """When set, ``query_range`` answers 400 with this plain text, as Loki answers a query it
    cannot parse (the backend's own LogQL always parses here, so a test sets it)."""


class LogQLError(ValueError):
    """A query the stand-in cannot parse (Loki answers 400 with the text)."""


_STRING = r'"(?:[^"\\]|\\.)*"|`[^`]*`'
_MATCHER = re.compile(rf"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*({_STRING})\s*")
_FILTER = re.compile(rf"\s*(\|=|!=|\|~|!~)\s*({_STRING})")
_PREDICATE = rf"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*({_STRING})"
_LABEL_STAGE = re.compile(rf"\s*\|\s+({_PREDICATE}(?:\s+or\s+{_PREDICATE})*)")
_ONE_PREDICATE = re.compile(_PREDICATE)

Matcher = tuple[str, str, str]
"""A label name, an operator (``=``, ``!=``, ``=~``, ``!~``) and the value it compares with."""


def _unquote(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    return str(json.loads(token, strict=False))  # other raw control characters are fine


def parse_logql(
    query: str,
) -> tuple[list[Matcher], list[tuple[str, str]], list[list[Matcher]]]:
    """The selector's matchers, the line filters and the label filter stages of a log query.

    A label filter stage is its predicates, any of which lets an entry through.
    """
    text = query.strip()
    unterminated = re.search(r'"(?:[^"\\\n]|\\.)*\n', text)
    if unterminated:  # Loki's lexer ends a "..." string at a raw line break
        col = unterminated.start() + 1
        raise LogQLError(f"parse error at line 1, col {col}: literal not terminated")
    if not text.startswith("{"):
        raise LogQLError("parse error at line 1, col 1: syntax error: unexpected IDENTIFIER")
    close = text.find("}")
    if close < 0:
        raise LogQLError(f"parse error at line 1, col {len(text)}: syntax error: unexpected $end")
    body, rest = text[1:close], text[close + 1 :]
    matchers: list[Matcher] = []
    position = 0
    while position < len(body):
        match = _MATCHER.match(body, position)
        if not match:
            raise LogQLError(
                f"parse error at line 1, col {position + 2}: syntax error: unexpected character"
            )
        matchers.append((match.group(1), match.group(2), _unquote(match.group(3))))
        position = match.end()
        if position < len(body):
            if body[position] != ",":
                raise LogQLError(f"parse error at line 1, col {position + 2}: syntax error")
            position += 1
    filters: list[tuple[str, str]] = []
    stages: list[list[Matcher]] = []
    position = 0
    while rest[position:].strip():
        match = _FILTER.match(rest, position)
        if match:
            filters.append((match.group(1), _unquote(match.group(2))))
            position = match.end()
            continue
        stage = _LABEL_STAGE.match(rest, position)
        if not stage:
            raise LogQLError(
                f"parse error at line 1, col {close + position + 2}: syntax error: unexpected "
                "IDENTIFIER"
            )
        stages.append([(n, op, _unquote(v)) for n, op, v in _ONE_PREDICATE.findall(stage.group(1))])
        position = stage.end()
    return matchers, filters, stages


def _matches(op: str, value: str, wanted: str) -> bool:
    if op == "=":
        return value == wanted
    if op == "!=":
        return value != wanted
    found = re.fullmatch(wanted, value) is not None
    return found if op == "=~" else not found


def _line_ok(line: str, filters: list[tuple[str, str]]) -> bool:
    for op, wanted in filters:
        if op == "|=" and wanted not in line:
            return False
        if op == "!=" and wanted in line:
            return False
        if op in ("|~", "!~"):
            found = re.search(wanted, line) is not None
            if found != (op == "|~"):
                return False
    return True


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _answer(fake: FakeLoki, path: str, query: dict[str, str]) -> tuple[int, str, bytes]:
    if path == "/loki/api/v1/labels":
        names = sorted({name for s in fake.streams for name in s.labels})
        return 200, "application/json", json.dumps({"status": "success", "data": names}).encode()
    values = re.fullmatch(r"/loki/api/v1/label/([^/]+)/values", path)
    if values:
        name = unquote(values.group(1))
        found = sorted({s.labels[name] for s in fake.streams if name in s.labels})
        return 200, "application/json", json.dumps({"status": "success", "data": found}).encode()
    if path != "/loki/api/v1/query_range":
        return 404, "text/plain", b"404 page not found\n"
    if fake.timeout:
        return 504, "text/plain", b"Gateway Timeout: query timed out\n"
    if fake.parse_error is not None:
        return 400, "text/plain", fake.parse_error.encode()
    limit = int(query.get("limit", "100"))
    if limit > fake.max_entries_limit:
        text = (
            "max entries limit per query exceeded, limit > max_entries_limit "
            f"({limit} > {fake.max_entries_limit})"
        )
        return 400, "text/plain", text.encode()
    try:
        matchers, filters, stages = parse_logql(query.get("query", ""))
    except LogQLError as exc:
        return 400, "text/plain", str(exc).encode()
    if not any(not _matches(op, "", wanted) for _, op, wanted in matchers if op in ("=", "=~")):
        return (
            400,
            "text/plain",
            b"queries require at least one regexp or equality matcher that does not have an "
            b'empty-compatible value. For instance, app=~".*" does not meet this requirement, '
            b'but app=~".+" will',
        )
    start, end = int(query["start"]), int(query["end"])
    backward = query.get("direction", "backward") == "backward"
    picked: list[tuple[int, int, str]] = []
    processed = 0
    for number, stream in enumerate(fake.streams):
        if not all(_matches(op, stream.labels.get(n, ""), w) for n, op, w in matchers):
            continue
        if not all(
            any(_matches(op, stream.labels.get(n, ""), w) for n, op, w in stage) for stage in stages
        ):
            continue
        for moment, line in stream.entries:
            stamp = _ns(moment)
            if not start <= stamp < end + 1:
                continue
            processed += 1
            if _line_ok(line, filters):
                picked.append((stamp, number, line))
    picked.sort(key=lambda item: item[0], reverse=backward)
    returned = picked[:limit]
    by_stream: dict[int, list[list[str]]] = {}
    for stamp, number, line in returned:
        by_stream.setdefault(number, []).append([str(stamp), line])
    result = [{"stream": fake.streams[n].labels, "values": v} for n, v in by_stream.items()]
    body = {
        "status": "success",
        "data": {
            "resultType": "streams",
            "result": result,
            "stats": {
                "summary": {
                    "bytesProcessedPerSecond": 1000,
                    "linesProcessedPerSecond": 100,
                    "totalBytesProcessed": sum(len(line) for _, _, line in picked),
                    "totalLinesProcessed": processed,
                    "totalPostFilterLines": len(picked),
                    "totalEntriesReturned": len(returned),
                    "execTime": 0.001,
                }
            },
        },
    }
    return 200, "application/json", json.dumps(body).encode()


def _handler(fake: FakeLoki) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            fake.requests.append({"path": parts.path, **query})
            fake.headers.append({k.lower(): v for k, v in self.headers.items()})
            if fake.tenant is not None and self.headers.get("X-Scope-OrgID") != fake.tenant:
                status, kind, body = 401, "text/plain", b"no org id\n"
            else:
                status, kind, body = _answer(fake, parts.path, query)
            self.reply(status, body, kind)

    return Handler


def serve_loki(fake: FakeLoki) -> Iterator[str]:
    """Serve the stand-in on a free loopback port for the duration of a fixture."""
    yield from serve_handler(_handler(fake))
