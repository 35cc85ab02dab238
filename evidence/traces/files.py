"""``query_traces`` over OTLP JSON files (``SUPERBIZ_TRACE_FILES``: globs separated by ``;``).

The files are what the OpenTelemetry Collector's file exporter writes: one
``ExportTraceServiceRequest`` JSON object per line (``evidence.otlp`` reads it), plain or
gzip-compressed (``.gz``), rotated ones included.

**Cost follows the window, as for log files** (``evidence.logfiles``). Files are taken newest
first; one last written before the window (less five minutes) is not opened. A plain file is
read from its end backwards and the scan stops at the first line whose spans all ended before
the window; a ``.gz`` file is streamed forwards and stops at the first line whose spans all
start after it. Memory is bounded: a line longer than ``MAX_LINE_BYTES`` is skipped (counted),
one call reads at most ``MAX_SCAN_BYTES`` and keeps at most ``MAX_SPANS`` spans; past either the
trace count is a lower bound (``traces 20 of at least 140``).

A symlink the glob matches is followed only when its target lies inside the glob's folder: a
link to ``/etc/shadow`` in a trace folder is never read.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from evidence.logfiles import ScanBudget
from evidence.logquery import iso
from evidence.otlp import read_spans
from evidence.traces.answer import traces_answer
from state.json_shape import obj, objects
from state.records import SpanEntry
from tools.backend import BackendError, BackendReport, parse_timestamp, window_bounds
from tools.query_traces import TracesOutput, TracesRequest

BLOCK_BYTES = 256 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024
"""A longer line (one exported batch) is skipped, never held whole."""
MAX_SCAN_BYTES = 512 * 1024 * 1024
MAX_SPANS = 200_000
OUT_OF_ORDER = timedelta(minutes=5)
SETTING = "SUPERBIZ_TRACE_FILES"


def _reverse_lines(handle: BinaryIO, budget: ScanBudget) -> Iterator[bytes | None]:
    """The lines of a file from last to first; None for a line longer than ``MAX_LINE_BYTES``."""
    handle.seek(0, os.SEEK_END)
    position = handle.tell()
    pending: list[bytes] = []
    size_pending = 0
    overlong = False
    while position > 0:
        size = min(BLOCK_BYTES, position)
        if not budget.take(size):
            return
        position -= size
        handle.seek(position)
        parts = handle.read(size).split(b"\n")
        for index in range(len(parts) - 1, -1, -1):
            part = parts[index]
            if not overlong:
                pending.insert(0, part)
                size_pending += len(part)
                if size_pending > MAX_LINE_BYTES:
                    overlong, pending, size_pending = True, [], 0
            if index > 0:  # a newline precedes this part: the pending line is complete
                line = b"".join(pending)
                if overlong:
                    yield None
                elif line.strip():
                    yield line
                pending, size_pending, overlong = [], 0, False
    line = b"".join(pending)
    if overlong:
        yield None
    elif line.strip():
        yield line


def _forward_lines(handle: gzip.GzipFile, budget: ScanBudget) -> Iterator[bytes | None]:
    """The lines of a gzip stream from its start; None for an overlong line."""
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if not budget.take(len(line)):
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = handle.readline(BLOCK_BYTES)
                if line and not budget.take(len(line)):
                    return
            yield None
            continue
        if line.strip():
            yield line


def _moment(text: str) -> datetime | None:
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


def _nanos_range(request: object) -> tuple[int, int] | None:
    """The earliest and latest ``startTimeUnixNano`` of a request's spans, read raw.

    None when a span has none readable (the spans are then read one by one).
    """
    low: int | None = None
    high: int | None = None
    for resource_spans in objects(obj(request).get("resourceSpans")):
        scopes = objects(resource_spans.get("scopeSpans")) or objects(
            resource_spans.get("instrumentationLibrarySpans")
        )
        for scope in scopes:
            for raw in objects(scope.get("spans")):
                value = raw.get("startTimeUnixNano")
                if isinstance(value, str) and value.isdigit():
                    nanos = int(value)
                elif isinstance(value, int) and not isinstance(value, bool):
                    nanos = value
                else:
                    return None
                low = nanos if low is None or nanos < low else low
                high = nanos if high is None or nanos > high else high
    return (low, high) if low is not None and high is not None else None


def _from_nanos(nanos: int) -> datetime:
    return datetime.fromtimestamp(nanos // 1000 / 1_000_000, tz=UTC)


def _stamp(moment: datetime) -> str:
    """A moment as ``evidence.otlp`` writes a span's start (microseconds, ``Z``)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _inside(path: str, pattern: str) -> bool:
    """Whether a matched path, resolved, lies inside the glob's folder (its fixed prefix)."""
    fixed: list[str] = []
    for part in Path(pattern).parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    base = os.path.realpath(os.path.join(*fixed)) if fixed else os.path.realpath(".")
    target = os.path.realpath(path)
    return target == base or target.startswith(base.rstrip(os.sep) + os.sep)


def trace_files(patterns: Sequence[str]) -> list[tuple[float, str]]:
    """The regular files the globs match, as ``(mtime, path)``, newest first.

    A symlink whose target lies outside its glob's folder is left out.
    """
    found: dict[str, float] = {}
    for pattern in patterns:
        for name in glob.glob(pattern, recursive=True):
            if os.path.islink(name) and not _inside(name, pattern):
                continue
            try:
                info = os.stat(name)
            except OSError:
                continue
            if os.path.isfile(name):
                found[name] = info.st_mtime
    return sorted(((mtime, name) for name, mtime in found.items()), reverse=True)


class _Scan:
    """The spans of one call's window, bounded."""

    def __init__(self, start: datetime, end: datetime, max_spans: int) -> None:
        self.start, self.end = start, end
        # Span starts are ISO-8601 UTC with microseconds (``evidence.otlp``): compared as text.
        self._first, self._last = _stamp(start), _stamp(end)
        self._first_ns = int(start.timestamp()) * 1_000_000_000 + start.microsecond * 1000
        self._last_ns = int(end.timestamp()) * 1_000_000_000 + end.microsecond * 1000
        self.max_spans = max_spans
        self.spans: list[SpanEntry] = []
        self.skipped_lines = 0
        self.full = False

    def offer(self, raw: bytes | None) -> tuple[datetime | None, datetime | None]:
        """Keep a line's spans inside the window; returns its earliest and latest span start."""
        if raw is None:
            self.skipped_lines += 1
            return None, None
        try:
            request = json.loads(raw)
        except ValueError:
            self.skipped_lines += 1
            return None, None
        bounds = _nanos_range(request)
        if bounds is not None and (bounds[1] < self._first_ns or bounds[0] > self._last_ns):
            # No span of the line starts in the window: its spans are not read one by one.
            return _from_nanos(bounds[0]), _from_nanos(bounds[1])
        starts: list[str] = []
        for span in read_spans([request]).spans:
            start = span.get("start", "")
            starts.append(start)
            if self._first <= start <= self._last:
                if len(self.spans) >= self.max_spans:
                    self.full = True
                    break
                self.spans.append(span)
        if not starts:
            return None, None
        return _moment(min(starts)), _moment(max(starts))


class FileTraces:
    """The trace part of the evidence backend over OTLP JSON files.

    Args:
        patterns: Globs of the files (``evidence.config.Settings.trace_files``).
        now: The clock (for tests).
        max_scan_bytes: Bytes one call reads at most.
        max_spans: Spans one call keeps at most.
    """

    needs_timeout = True

    def __init__(
        self,
        patterns: Sequence[str],
        *,
        now: Callable[[], datetime] | None = None,
        max_scan_bytes: int = MAX_SCAN_BYTES,
        max_spans: int = MAX_SPANS,
    ) -> None:
        self.patterns = tuple(patterns)
        self._now = now or (lambda: datetime.now(UTC))
        self.max_scan_bytes = max_scan_bytes
        self.max_spans = max_spans

    @property
    def title(self) -> str:
        """What serves the traces, in words (``config show``)."""
        return "OTLP trace files (" + "; ".join(self.patterns) + ")"

    def _files(self) -> list[tuple[float, str]]:
        files = trace_files(self.patterns)
        if not files:
            raise BackendError(f"no file matches {' or '.join(self.patterns)}; check {SETTING}")
        return files

    def read(self, start: datetime, end: datetime) -> _Scan:
        """The spans that start inside the window, newest files first (bounded).

        Raises:
            BackendError: When no file matches or a file cannot be read.
        """
        scan = _Scan(start, end, self.max_spans)
        budget = ScanBudget(self.max_scan_bytes)
        for mtime, path in self._files():
            if datetime.fromtimestamp(mtime, UTC) < start - OUT_OF_ORDER:
                break  # written before the window: it and every older file hold nothing
            try:
                if path.endswith(".gz"):
                    with gzip.open(path, "rb") as stream:
                        for line in _forward_lines(stream, budget):
                            earliest, _ = scan.offer(line)
                            if scan.full or (earliest and earliest > end + OUT_OF_ORDER):
                                break
                else:
                    with open(path, "rb") as handle:
                        for line in _reverse_lines(handle, budget):
                            _, latest = scan.offer(line)
                            if scan.full or (latest and latest < start - OUT_OF_ORDER):
                                break
            except (OSError, EOFError) as exc:
                reason = getattr(exc, "strerror", None) or str(exc)
                raise BackendError(
                    f"cannot read trace file {path} ({reason}); check {SETTING} and the file's "
                    "permissions"
                ) from None
            if scan.full or budget.spent:
                scan.full = True
                break
        return scan

    def find_traces(self, request: TracesRequest) -> TracesOutput:
        """The answer over the window's spans (see the module docstring)."""
        start, end = window_bounds(request.start, request.end, self._now())
        scan = self.read(start, end)
        return traces_answer(scan.spans, request, at_least=scan.full, window=(start, end))

    def scan_spans(self, start: datetime, end: datetime, limit: int) -> list[SpanEntry]:
        """The window's spans at once, at most ``limit`` (what ``analyze_incident`` reads)."""
        return list(self.read(start, end).spans[-limit:] if limit > 0 else [])

    def services(self) -> list[str]:
        """The services of the last hour's spans (empty when the files cannot be read)."""
        end = self._now()
        try:
            scan = self.read(end - timedelta(hours=1), end)
        except BackendError:
            return []
        return sorted({span.get("service", "") for span in scan.spans} - {""})

    def check(self) -> BackendReport:
        """Whether the globs match readable files, with their number, size and age."""
        try:
            files = self._files()
        except BackendError as exc:
            return BackendReport(
                backend="trace_files", url=None, status="error", detail=str(exc), setting=SETTING
            )
        unreadable = [path for _, path in files if not os.access(path, os.R_OK)]
        if unreadable:
            return BackendReport(
                backend="trace_files",
                url=None,
                status="error",
                detail=f"cannot read {unreadable[0]}",
                setting=SETTING,
            )
        size = sum(Path(path).stat().st_size for _, path in files)
        newest = iso(datetime.fromtimestamp(files[0][0], UTC).replace(microsecond=0))
        count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
        return BackendReport(
            backend="trace_files",
            url=None,
            status="ok",
            detail=f"{count}, {size / 1024 / 1024:.1f} MB, last written {newest}",
        )
