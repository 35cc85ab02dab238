"""``query_logs`` over local log files (``SUPERBIZ_LOG_FILES``: ``service=glob`` pairs).

Each glob names the files of one service; every file it matches is searched, rotated and
gzip-compressed ones included (``*.log*`` names ``app.log``, ``app.log.1`` and ``app.log.2.gz``).
Lines are read by ``evidence.logformats`` (JSON lines, logfmt, text with a leading timestamp;
multi-line entries kept with their first line).

**Cost follows the window, not the file.** Files are taken newest first, and one last written
before the window is not opened. A plain file is read from its end backwards in 64 KB blocks and
the scan stops at the first entry older than the window (less five minutes, for writers whose
lines are slightly out of order); a ``.gz`` file cannot be read backwards, so it is streamed
forwards and the scan stops at the first entry newer than the window. Memory is bounded whatever
the file: a physical line is cut at 64 KB as it is read, an entry keeps at most 50 continuation
lines and ``MAX_MESSAGE_CHARS`` characters, and only the newest ``limit`` matches are kept while
all are counted. One call reads at most ``MAX_SCAN_BYTES``; past that the total is a lower bound
(``total_at_least``).

Filters: ``service`` one of the configured names (another is an error naming them), ``level``
any spelling of the level (``evidence.logquery``), ``query`` case-insensitive text in the message
(continuation lines included). Entries come back newest first.
"""

from __future__ import annotations

import glob
import gzip
import itertools
import os
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import BinaryIO

from evidence.logformats import Line, local_zone, parse_line
from evidence.logquery import (
    MAX_MESSAGE_CHARS,
    LogWindow,
    Newest,
    iso,
    level_matches,
    log_entry,
    logs_output,
    text_matches,
)
from tools.backend import BackendError, BackendReport, LogSource, LogsOutput, LogsRequest

BLOCK_BYTES = 64 * 1024
MAX_LINE_BYTES = 64 * 1024
"""A longer physical line is cut here as it is read (its start is kept)."""
MAX_CONTINUATION_LINES = 50
MAX_SCAN_BYTES = 256 * 1024 * 1024
"""Bytes one call reads at most, over all files; past that the total is a lower bound."""
OUT_OF_ORDER = timedelta(minutes=5)
CONTINUATION_SEPARATOR = " | "
SETTING = "SUPERBIZ_LOG_FILES"


class ScanBudget:
    """Bytes a file source may still read in one call; ``spent`` once they ran out."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.spent = False

    def take(self, size: int) -> bool:
        """Spend ``size`` bytes; False once the budget is gone."""
        if self.left <= 0:
            self.spent = True
            return False
        self.left -= size
        return True


def reverse_lines(
    handle: BinaryIO, budget: ScanBudget, *, block: int = BLOCK_BYTES
) -> Iterator[bytes]:
    """The lines of a file from its last to its first, each cut at ``MAX_LINE_BYTES``.

    Memory stays at one block plus one capped line whatever the file or line length. A final
    newline does not make an empty last line.
    """
    handle.seek(0, os.SEEK_END)
    position = handle.tell()
    pending = b""
    at_end = True
    while position > 0:
        size = min(block, position)
        if not budget.take(size):
            return
        position -= size
        handle.seek(position)
        data = handle.read(size)
        parts = data.split(b"\n")
        # The last part continues the line already pending (which lies after it in the file).
        pending = (parts[-1] + pending)[:MAX_LINE_BYTES]
        for part in reversed(parts[:-1]):
            if not (at_end and pending == b""):
                yield pending
            at_end = False
            pending = part[:MAX_LINE_BYTES]
    if pending or not at_end:
        yield pending


def forward_lines(handle: BinaryIO | gzip.GzipFile, budget: ScanBudget) -> Iterator[bytes]:
    """The lines of a stream from its start, each cut at ``MAX_LINE_BYTES``."""
    while True:
        line = handle.readline(MAX_LINE_BYTES)
        if not line:
            return
        if not budget.take(len(line)):
            return
        if not line.endswith(b"\n"):
            rest = line
            while rest and not rest.endswith(b"\n"):  # skip the rest of an overlong line
                rest = handle.readline(BLOCK_BYTES)
                if rest and not budget.take(len(rest)):
                    return
        yield line.rstrip(b"\n")


@dataclass
class _Query:
    service: str
    window: LogWindow
    level: str | None
    text: str | None
    now: datetime
    zone: tzinfo

    def offer(self, line: Line, continuations: Sequence[str], found: Newest) -> None:
        assert line.at is not None
        if not self.window.contains(line.at) or not level_matches(self.level, line.level):
            return
        message = line.message
        if continuations:
            message = CONTINUATION_SEPARATOR.join([message, *continuations])
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS + 1]
        if not text_matches(self.text, message):
            return
        found.offer(
            line.at,
            log_entry(
                at=line.at,
                level=line.level,
                service=self.service,
                instance=line.instance,
                message=message,
            ),
        )


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _scan_backwards(path: str, query: _Query, found: Newest, budget: ScanBudget) -> None:
    oldest = query.window.start - OUT_OF_ORDER
    tail: deque[str] = deque(maxlen=MAX_CONTINUATION_LINES)
    with open(path, "rb") as handle:
        for raw in reverse_lines(handle, budget):
            line = parse_line(_decode(raw), now=query.now, local=query.zone)
            if line.at is None:
                if line.message:
                    tail.appendleft(line.message[:1000])  # keeps the lines nearest the start
                continue
            query.offer(line, list(tail), found)
            tail.clear()
            if line.at < oldest:
                return


def _scan_forwards(path: str, query: _Query, found: Newest, budget: ScanBudget) -> None:
    newest = query.window.end + OUT_OF_ORDER
    current: Line | None = None
    continuations: list[str] = []
    with gzip.open(path, "rb") as handle:
        for raw in forward_lines(handle, budget):
            line = parse_line(_decode(raw), now=query.now, local=query.zone)
            if line.at is None:
                if current is not None and line.message:
                    if len(continuations) < MAX_CONTINUATION_LINES:
                        continuations.append(line.message[:1000])
                continue
            if current is not None:
                query.offer(current, continuations, found)
            current, continuations = line, []
            if line.at > newest:
                current = None
                break
    if current is not None:
        query.offer(current, continuations, found)


def _glob_root(pattern: str) -> str:
    """The folder a glob cannot leave: its path up to the first part with a wildcard."""
    parts = Path(pattern).parts
    fixed = [part for part in itertools.takewhile(lambda part: not glob.has_magic(part), parts)]
    if len(fixed) == len(parts):
        fixed = fixed[:-1]
    return os.path.realpath(os.path.join(*fixed)) if fixed else os.path.realpath(".")


def _files(pattern: str, outside: list[str] | None = None) -> list[tuple[float, str]]:
    """The regular files a glob matches, as ``(mtime, path)``, newest first.

    A symbolic link to a file outside the glob's folder is not followed: it is listed in
    ``outside`` (when given) so the answer can say it was not read.
    """
    found: list[tuple[float, str]] = []
    root = _glob_root(pattern)
    for name in glob.glob(pattern, recursive=True):
        try:
            info = os.stat(name)
        except OSError:
            continue
        if not os.path.isfile(name):
            continue
        if os.path.islink(name) and os.path.commonpath([root, os.path.realpath(name)]) != root:
            if outside is not None:
                outside.append(f"{name} (a link to a file outside {root}: not followed)")
            continue
        found.append((info.st_mtime, name))
    return sorted(found, reverse=True)


class FileLogs(LogSource):
    """The log part of the evidence backend over local files.

    Args:
        sources: ``(service, glob)`` pairs (``evidence.config.Settings.log_files``).
        now: The clock (for tests).
        max_scan_bytes: Bytes one call reads at most.
    """

    needs_timeout = True

    def __init__(
        self,
        sources: Sequence[tuple[str, str]],
        *,
        now: Callable[[], datetime] | None = None,
        max_scan_bytes: int = MAX_SCAN_BYTES,
    ) -> None:
        self.sources = tuple(sources)
        self._now = now or (lambda: datetime.now(UTC))
        self.max_scan_bytes = max_scan_bytes

    @property
    def title(self) -> str:
        """What serves the logs, in words (``config show``)."""
        return "log files (" + ", ".join(self.services()) + ")"

    def services(self) -> list[str]:
        """The configured service names."""
        return sorted({service for service, _ in self.sources})

    def _globs(self, service: str | None) -> list[tuple[str, str]]:
        if service is None:
            return list(self.sources)
        chosen = [(name, pattern) for name, pattern in self.sources if name == service]
        if not chosen:
            raise BackendError(
                f"no log files are configured for service {service!r} (configured: "
                f"{', '.join(self.services())}); add {service}=<glob> to {SETTING}"
            )
        return chosen

    def find_logs(self, request: LogsRequest) -> LogsOutput:
        """The newest matching entries of the window (see the module docstring).

        Raises:
            BackendError: For an unknown service, a glob that matches no file, or a file that
                cannot be read.
        """
        now = self._now()
        window = LogWindow(request.start, request.end, now)
        found = Newest(request.limit)
        budget = ScanBudget(self.max_scan_bytes)
        zone = local_zone()
        by_service: dict[str, list[str]] = {}
        for name, pattern in self._globs(request.service):
            by_service.setdefault(name, []).append(pattern)
        unread: list[str] = []
        for name, patterns in by_service.items():
            files = sorted(
                {f for pattern in patterns for f in _files(pattern, unread)}, reverse=True
            )
            if not files:
                raise BackendError(
                    f"no file matches {' or '.join(patterns)} (service {name}); check {SETTING}"
                    + (f"; not read: {'; '.join(unread)}" if unread else "")
                )
            spec = _Query(name, window, request.level, request.query, now, zone)
            failed: list[str] = []
            for mtime, path in files:
                if datetime.fromtimestamp(mtime, UTC) < window.start - OUT_OF_ORDER:
                    break  # written before the window: it and every older file hold nothing
                try:
                    if path.endswith(".gz"):
                        _scan_forwards(path, spec, found, budget)
                    else:
                        _scan_backwards(path, spec, found, budget)
                except (OSError, EOFError, zlib.error) as exc:
                    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                    failed.append(f"{path} ({reason})")
                    continue
                if budget.spent:
                    break
            if failed and len(failed) == len(files):
                raise BackendError(
                    f"cannot read the log files of service {name}: {'; '.join(failed)}; check "
                    f"{SETTING} and the files' permissions"
                )
            unread += failed
        output = logs_output(
            found.entries(), total=found.total, window=window, at_least=budget.spent
        )
        if unread:
            output["unread"] = unread
        return output

    def check(self) -> BackendReport:
        """Whether every service's glob matches readable files, with their size and age."""
        parts: list[str] = []
        failed: list[str] = []
        for name in self.services():
            patterns = [pattern for service, pattern in self.sources if service == name]
            files = sorted({f for pattern in patterns for f in _files(pattern)}, reverse=True)
            if not files:
                failed.append(f"{name}: no file matches {' or '.join(patterns)}")
                continue
            unreadable = [path for _, path in files if not os.access(path, os.R_OK)]
            if unreadable:
                failed.append(f"{name}: cannot read {unreadable[0]}")
                continue
            size = sum(Path(path).stat().st_size for _, path in files)
            newest = iso(datetime.fromtimestamp(files[0][0], UTC).replace(microsecond=0))
            count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
            parts.append(f"{name}: {count}, {_size(size)}, last written {newest}")
        if failed:
            return BackendReport(
                backend="log_files",
                url=None,
                status="error",
                detail="; ".join(failed + parts),
                setting=SETTING,
            )
        return BackendReport(backend="log_files", url=None, status="ok", detail="; ".join(parts))


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
