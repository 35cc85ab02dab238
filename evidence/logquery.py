"""What every real log source shares: the time window, level names, caps and the output.

- **Window.** ``end`` defaults to now, ``start`` to ``end`` - 1 h; a window longer than 24 h keeps
  its end and starts 24 h before it. Sources report the absolute window they searched
  (``window_start`` / ``window_end``), so the summary ref states it.
- **Levels.** A requested level matches its spellings case-insensitively: ``ERROR`` matches
  ``error``, ``ERR`` and ``eror``; ``WARN`` matches ``warning``; ``CRITICAL`` matches ``crit``;
  ``FATAL``, ``PANIC``, ``INFO``, ``DEBUG`` (and PostgreSQL's ``DEBUG1`` to ``DEBUG5``),
  ``NOTICE``, ``TRACE``, ``LOG`` match themselves. A level outside that table matches itself,
  case-insensitively.
- **Caps.** A message is cut at ``MAX_MESSAGE_CHARS`` where it is read (the tool runner cuts it
  further, to its field cap, and marks it); at most ``limit`` entries are kept, newest first.
- **Totals.** ``total`` counts every match in the window when the source counted them; when it
  only knows a lower bound (a server that stops at the limit, a scan budget spent), the output
  says ``total_at_least`` and the summary reads ``matched 20 of at least 21``.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime

from state.display import clip
from state.records import LogEntry
from tools.backend import LogsOutput, window_bounds

MAX_MESSAGE_CHARS = 4000
"""A message is cut here where it is read; a 10 MB line never travels further."""
MAX_LIMIT = 100

_LEVEL_GROUPS: dict[str, tuple[str, ...]] = {
    "ERROR": ("error", "err", "eror"),
    "WARN": ("warn", "warning"),
    "CRITICAL": ("critical", "crit"),
    "FATAL": ("fatal",),
    "PANIC": ("panic",),
    "EMERGENCY": ("emergency", "emerg"),
    "ALERT": ("alert",),
    "NOTICE": ("notice",),
    "INFO": ("info", "information", "informational"),
    "LOG": ("log",),
    "DEBUG": ("debug", "dbg", "debug1", "debug2", "debug3", "debug4", "debug5"),
    "TRACE": ("trace",),
}
_CANONICAL = {alias: name for name, aliases in _LEVEL_GROUPS.items() for alias in aliases}

LEVEL_WORDS: frozenset[str] = frozenset(_CANONICAL)
"""Every known spelling of a level, lower case."""


def canonical_level(level: str) -> str:
    """The group a level spelling belongs to (``err`` -> ``ERROR``), else the spelling upper."""
    text = level.strip().casefold()
    return _CANONICAL.get(text, text.upper())


def level_spellings(level: str) -> list[str]:
    """Every lower-case spelling a requested level matches (``ERROR``: error, err, eror)."""
    name = canonical_level(level)
    return list(_LEVEL_GROUPS.get(name, (level.strip().casefold(),)))


def level_matches(wanted: str | None, level: str | None) -> bool:
    """Whether an entry's level is the requested one (any spelling); no request matches all."""
    if wanted is None:
        return True
    return level is not None and canonical_level(level) == canonical_level(wanted)


def text_matches(query: str | None, message: str) -> bool:
    """Whether the message contains the query text, case-insensitively."""
    return query is None or query.casefold() in message.casefold()


def cap_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """The message cut at ``limit`` characters (marked ``…``)."""
    return clip(text, limit)


def iso(moment: datetime) -> str:
    """UTC ISO-8601 with ``Z``: milliseconds when the moment has a fraction, else seconds."""
    utc = moment.astimezone(UTC)
    if utc.microsecond:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


class LogWindow:
    """The absolute window of one ``query_logs`` call (1 h by default, 24 h at most)."""

    def __init__(self, start: str | None, end: str | None, now: datetime) -> None:
        self.start, self.end = window_bounds(start, end, now)

    def contains(self, moment: datetime) -> bool:
        """Whether a moment lies in the window (both ends inclusive)."""
        return self.start <= moment <= self.end


@dataclass(frozen=True)
class Found:
    """One matching entry with the moment it is ordered by."""

    at: datetime
    entry: LogEntry


class Newest:
    """Keeps the newest ``limit`` entries offered (a bounded heap) and counts every offer."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, min(limit, MAX_LIMIT))
        self.total = 0
        self._heap: list[tuple[datetime, int, LogEntry]] = []
        self._order = itertools.count()

    def offer(self, at: datetime, entry: LogEntry) -> None:
        """Count a match; keep it when it is among the newest ``limit``."""
        self.total += 1
        item = (at, -next(self._order), entry)
        if len(self._heap) < self.limit:
            heapq.heappush(self._heap, item)
        elif item[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, item)

    def oldest_kept(self) -> datetime | None:
        """The oldest moment kept once the heap is full (older matches only add to the total)."""
        return self._heap[0][0] if len(self._heap) >= self.limit else None

    def entries(self) -> list[LogEntry]:
        """The kept entries, newest first."""
        ordered = sorted(self._heap, key=lambda item: (item[0], item[1]), reverse=True)
        return [entry for _, _, entry in ordered]


def logs_output(
    entries: list[LogEntry],
    *,
    total: int,
    window: LogWindow,
    at_least: bool = False,
) -> LogsOutput:
    """The ``query_logs`` output of a real source (entries newest first)."""
    total = max(total, len(entries))
    output = LogsOutput(
        logs=entries,
        total=total,
        truncated=at_least or total > len(entries),
        window_start=iso(window.start),
        window_end=iso(window.end),
    )
    if at_least:
        output["total_at_least"] = True
    return output


def log_entry(
    *,
    at: datetime,
    level: str | None,
    service: str | None,
    instance: str | None,
    message: str,
) -> LogEntry:
    """A log entry record; absent fields are left out (``instance`` is optional everywhere)."""
    entry = LogEntry(timestamp=iso(at))
    if level:
        entry["level"] = level
    if service:
        entry["service"] = service
    if instance:
        entry["instance"] = instance
    entry["message"] = cap_message(message)
    return entry
