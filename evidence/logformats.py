"""One log line read into its parts: JSON lines, logfmt, and text with a leading timestamp.

``parse_line`` recognises, in this order:

- **JSON lines**: an object with a time field (``@timestamp``, ``timestamp``, ``time``, ``ts``,
  ``datetime``, ``date``, ``t``, ``asctime``; ISO-8601 text or epoch seconds, milliseconds or
  nanoseconds), a level field (``level``, ``lvl``, ``severity``, ``log.level``, ``levelname``,
  ``loglevel``, ``log_level``), a message field (``message``, ``msg``, ``log``, ``text``,
  ``event``, ``body``; else the whole line) and an instance field (``host``, ``hostname``,
  ``host.name``, ``instance``, ``pod``, ``node``); dotted names also match nested objects;
- **logfmt**: ``key=value`` pairs (values quoted or bare) with one of the same time fields;
- **text with a leading timestamp**: ISO-8601 (``2026-03-01T10:00:00.123Z``, a space for the
  ``T``, an offset or ``UTC`` / ``GMT`` / a zone abbreviation after it, as PostgreSQL writes),
  ``YYYY/MM/DD HH:MM:SS`` (nginx's error log), syslog's ``Mon DD HH:MM:SS host tag: message``
  (the host becomes the instance; the year is the one that puts the line in the past), and a
  Common Log Format stamp ``[01/Mar/2026:10:00:00 +0000]`` near the start of the line. The level
  is the first level word after the timestamp written ``LEVEL:``, ``[level]``, ``LEVEL`` or
  ``level=...`` (PostgreSQL's ``ERROR:``, ``FATAL:`` and ``PANIC:`` included); the message is the
  text after it.

A timestamp without a zone is the machine's local time (what PostgreSQL, nginx and syslog write
when no zone is shown). A line with no timestamp continues the entry before it (stack traces);
so does a PostgreSQL ``DETAIL:``, ``HINT:``, ``CONTEXT:``, ``STATEMENT:``, ``QUERY:`` or
``LOCATION:`` line, which is kept as ``DETAIL: ...`` in that entry's message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

from evidence.logquery import LEVEL_WORDS
from state import json_shape

CONTINUATION_LABELS = frozenset({"DETAIL", "HINT", "CONTEXT", "STATEMENT", "QUERY", "LOCATION"})
"""PostgreSQL's follow-up lines: each belongs to the entry before it."""

TIME_KEYS = ("@timestamp", "timestamp", "time", "ts", "datetime", "date", "t", "asctime")
LEVEL_KEYS = ("level", "lvl", "severity", "log.level", "levelname", "loglevel", "log_level")
MESSAGE_KEYS = ("message", "msg", "log", "text", "event", "body")
INSTANCE_KEYS = ("host", "hostname", "host.name", "instance", "pod", "node")

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_ISO = re.compile(
    r"^\[?(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?P<frac>[.,]\d{1,9})?"
    r"(?:\s?(?P<zone>Z|[+-]\d{2}(?::?\d{2})?|[A-Z]{2,5}\b))?\]?\s*"
)
_SLASHED = re.compile(
    r"^\[?(?P<date>\d{4}/\d{2}/\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?P<frac>[.,]\d{1,9})?\]?\s*"
)
_SYSLOG = re.compile(
    r"^(?P<month>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<time>\d{2}:\d{2}:\d{2})"
    r"(?P<frac>\.\d{1,9})? (?P<host>\S+) (?P<rest>.*)$"
)
_CLF = re.compile(
    r"\[(?P<day>\d{2})/(?P<month>[A-Z][a-z]{2})/(?P<year>\d{4}):(?P<time>\d{2}:\d{2}:\d{2}) "
    r"(?P<zone>[+-]\d{4})\]"
)
_LEVEL_TOKEN = re.compile(
    r"(?:^|(?<=[\s\]\)|]))(?:\[(?P<bracketed>[A-Za-z]+[1-5]?)\]|"
    r"level=(?P<pair>\"?[A-Za-z]+\"?)|(?P<word>[A-Z]+[1-5]?)|(?P<lower>[a-z]+(?=:)))"
    r"(?P<colon>:)?(?=\s|$)"
)
_LOGFMT_PAIR = re.compile(r'(?P<key>[A-Za-z_@][\w.@-]*)=(?P<value>"(?:[^"\\]|\\.)*"|[^\s]*)')
_HEAD = re.compile(r"\s*(?:\S+\s+){0,4}\S*")
"""A level word counts only among the first five words after the timestamp
(``[pid] user@db FATAL:``, ``- app - WARNING -``), never deep in a message."""
_ZONE_ABBREVIATIONS: dict[str, tzinfo] = {"UTC": UTC, "GMT": UTC, "Z": UTC}


@dataclass
class Line:
    """What one physical line says.

    ``at`` is None for a line that continues the entry before it; ``message`` is then the text to
    append to that entry.
    """

    at: datetime | None
    level: str | None
    message: str
    instance: str | None = None


def local_zone() -> tzinfo:
    """The machine's local time zone."""
    zone = datetime.now().astimezone().tzinfo
    return zone if zone is not None else UTC


def _fraction(text: str | None) -> int:
    if not text:
        return 0
    digits = text[1:]
    return int((digits + "000000")[:6])


def _zone(text: str | None, local: tzinfo) -> tzinfo:
    if not text:
        return local
    if text in _ZONE_ABBREVIATIONS:
        return _ZONE_ABBREVIATIONS[text]
    if text[0] in "+-":
        digits = text[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(delta if text[0] == "+" else -delta)
    # Another abbreviation (CET, PST, ...): the machine's zone, which is what wrote the line.
    return local


def _epoch(value: float) -> datetime | None:
    """Epoch seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude."""
    for scale in (1, 1e3, 1e6, 1e9):
        seconds = value / scale
        if seconds < 1e11:
            try:
                return datetime.fromtimestamp(seconds, UTC)
            except (OverflowError, OSError, ValueError):
                return None
    return None


def time_value(value: object, local: tzinfo) -> datetime | None:
    """A time field of a structured line (ISO-8601 text or an epoch number)."""
    if json_shape.is_number(value):
        return _epoch(float(value))
    text = json_shape.text(value)
    if text is None:
        return None
    if re.fullmatch(r"\d{9,19}(\.\d+)?", text):
        return _epoch(float(text))
    match = _ISO.match(text)
    if match:
        return _iso_moment(match, local)
    return None


def _iso_moment(match: re.Match[str], local: tzinfo) -> datetime | None:
    try:
        date = datetime.strptime(f"{match['date']} {match['time']}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    zone = _zone(match.groupdict().get("zone"), local)
    return date.replace(microsecond=_fraction(match["frac"]), tzinfo=zone)


def _lookup(data: dict[str, Any], keys: tuple[str, ...]) -> object:
    """The first key present: as written, else dotted into nested objects."""
    lowered = {str(k).casefold(): v for k, v in data.items()}
    for key in keys:
        if key in lowered and lowered[key] not in (None, ""):
            return lowered[key]
        if "." in key:
            head, _, tail = key.partition(".")
            inner = json_shape.at(lowered.get(head), tail)
            if inner not in (None, ""):
                return inner
    return None


def field_text(value: object) -> str | None:
    """A structured field's text: an object's ``name``, an array's first item, or the value."""
    value = json_shape.obj(value).get("name", value)  # an object without a name gives no text
    first = json_shape.items(value)
    return json_shape.scalar_text(first[0] if first else value)


def _fields(data: dict[str, Any], line: str) -> tuple[str | None, str, str | None]:
    """``(level, message, instance)`` of a structured line; no message field: the line."""
    message = _lookup(data, MESSAGE_KEYS)
    return (
        field_text(_lookup(data, LEVEL_KEYS)),
        message if isinstance(message, str) else line,
        field_text(_lookup(data, INSTANCE_KEYS)),
    )


def _structured(data: dict[str, Any], line: str, local: tzinfo) -> Line | None:
    at = time_value(_lookup(data, TIME_KEYS), local)
    if at is None:
        return None
    level, message, instance = _fields(data, line)
    return Line(at=at, level=level, message=message, instance=instance)


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a line holds, else None."""
    try:
        loaded = json.loads(text)
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def _json_line(text: str, local: tzinfo) -> Line | None:
    data = _json_object(text)
    return _structured(data, text, local) if data is not None else None


def _logfmt_line(text: str, local: tzinfo) -> Line | None:
    pairs: dict[str, Any] = {}
    for match in _LOGFMT_PAIR.finditer(text):
        value = match["value"]
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs.setdefault(match["key"], value)
    if len(pairs) < 2:
        return None
    return _structured(pairs, text, local)


def _level_in(rest: str) -> tuple[str | None, str]:
    """The first level word among the first words of the text, and the message after it."""
    head = _HEAD.match(rest)
    for match in _LEVEL_TOKEN.finditer(rest[: min(len(head.group(0)) if head else 0, 160)]):
        word = (
            match["bracketed"]
            or (match["pair"] or "").strip('"')
            or match["word"]
            or match["lower"]
        )
        if not word:
            continue
        upper = word.upper()
        if match["lower"] and word == "log":
            continue  # "log:" in lower case is a word of the message, not PostgreSQL's LOG
        if word.casefold() in LEVEL_WORDS or upper in CONTINUATION_LABELS:
            if match["word"] and upper in CONTINUATION_LABELS and not match["colon"]:
                continue
            return upper if match["word"] else word, rest[match.end() :].lstrip(" -:|\t").rstrip()
    return None, rest.strip()


def _text_line(text: str, now: datetime, local: tzinfo) -> Line | None:
    at: datetime | None = None
    rest = text
    instance: str | None = None
    if match := _ISO.match(text):
        at, rest = _iso_moment(match, local), text[match.end() :]
    elif match := _SLASHED.match(text):
        try:
            date = datetime.strptime(f"{match['date']} {match['time']}", "%Y/%m/%d %H:%M:%S")
            at = date.replace(microsecond=_fraction(match["frac"]), tzinfo=local)
        except ValueError:
            at = None
        rest = text[match.end() :]
    elif match := _SYSLOG.match(text):
        at = _syslog_moment(match, now, local)
        instance, rest = match["host"], match["rest"]
    elif (match := _CLF.search(text[:80])) is not None:
        try:
            date = datetime.strptime(
                f"{match['day']} {match['month']} {match['year']} {match['time']} {match['zone']}",
                "%d %b %Y %H:%M:%S %z",
            )
            at, rest = date, text
        except ValueError:
            at = None
    if at is None:
        return None
    level, message = _level_in(rest)
    if level is not None and level.upper() in CONTINUATION_LABELS:
        return Line(at=None, level=None, message=f"{level.upper()}: {message}")
    return Line(at=at, level=level, message=message, instance=instance)


def _syslog_moment(match: re.Match[str], now: datetime, local: tzinfo) -> datetime | None:
    month = _MONTHS.get(match["month"].casefold())
    if month is None:
        return None
    clock = datetime.strptime(match["time"], "%H:%M:%S")
    local_now = now.astimezone(local)
    for year in (local_now.year, local_now.year - 1):
        try:
            moment = datetime(
                year,
                month,
                int(match["day"]),
                clock.hour,
                clock.minute,
                clock.second,
                _fraction(match["frac"]),
                tzinfo=local,
            )
        except ValueError:
            continue
        if moment <= local_now + timedelta(days=1):
            return moment
    return None


def parse_line(text: str, *, now: datetime, local: tzinfo) -> Line:
    """Read one physical line (no newline) into a ``Line``.

    Args:
        text: The line, already decoded.
        now: The current time (syslog lines carry no year).
        local: The zone of timestamps written without one.

    Returns:
        A line that starts an entry (``at`` set), or one that continues the entry before it.
    """
    stripped = text.strip()
    if stripped.startswith("{") and (found := _json_line(stripped, local)) is not None:
        return found
    if "=" in stripped[:40] and (found := _logfmt_line(stripped, local)) is not None:
        return found
    found = _text_line(text.rstrip("\r"), now, local)
    if found is not None:
        return found
    return Line(at=None, level=None, message=stripped)


def describe_line(text: str) -> tuple[str | None, str, str | None]:
    """``(level, message, instance)`` of a line whose time the source already gave (Loki).

    A JSON or logfmt line gives its level, message and instance fields (no time field needed);
    a text line its first level word (after a leading timestamp, if it has one) and the rest.
    """
    stripped = text.strip()
    data: dict[str, Any] | None = None
    if stripped.startswith("{"):
        data = _json_object(stripped)
    elif "=" in stripped[:40]:
        pairs = {m["key"]: m["value"].strip('"') for m in _LOGFMT_PAIR.finditer(stripped)}
        if len(pairs) >= 2 and (_lookup(pairs, MESSAGE_KEYS) or _lookup(pairs, LEVEL_KEYS)):
            data = pairs
    if data is not None:
        return _fields(data, stripped)
    rest = stripped
    for pattern in (_ISO, _SLASHED):
        match = pattern.match(rest)
        if match:
            rest = rest[match.end() :]
            break
    level, message = _level_in(rest)
    if level is not None and level.upper() in CONTINUATION_LABELS:
        return None, stripped, None
    return level, message or stripped, None
