"""``lookup_knowledge`` over an indexed library of Markdown runbooks (``SUPERBIZ_RUNBOOKS``).

**The index** lives in the configured database (``persistence.knowledge``): SQLite FTS5 with
BM25 in the embedded default, PostgreSQL ``tsvector`` + GIN with ``ts_rank_cd``. ``sync`` brings
it in line with the folders: every ``*.md`` / ``*.markdown`` file below them (hidden folders
left out) is chunked by headings (``knowledge.runbook_text``); a file whose size and modification
time are unchanged is not read, one whose content hash is unchanged is not re-chunked, and files
no longer in the folders (deleted, or in a folder no longer named) leave the index. All changes
of one sync land in one transaction. ``superbiz kb index`` runs it; a lookup runs it on first use
(and again when the last sync is over a minute old), with progress on stderr when there is work.

**A lookup** ranks the chunks in the database and returns the best ``top_k`` as documents
(``doc_id`` = ``<source>#<heading path>``, ``title`` = runbook title and heading path,
``source`` = the file below its folder, ``chunk``, ``score`` = the database's rank, higher is
better, ``relevance`` from the share of the query's words the chunk has: ``high`` from 0.66,
``medium`` from 0.33, else ``low``). Runbooks an alert points at come first: a ``runbook_url``
(given by the tool runner from the diagnosis's alerts, or written in the query) whose last path
segment names an indexed file (``.../runbooks/kubernetes/kubepodcrashlooping/`` names
``KubePodCrashLooping.md``) puts that file's chunks first, best matching first. Knowledge is
guidance, never incident evidence: the refs say ``knowledge``.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypedDict
from urllib.parse import unquote, urlsplit

from knowledge.runbook_text import (
    CJK_RUN,
    TITLE_SEPARATOR,
    URL,
    pieces,
    query_tokens,
    read_runbook,
    slug,
    terms,
    tokens,
)
from knowledge.vocabulary import CONCEPTS, concepts_in
from persistence.database import Database, DatabaseError
from persistence.knowledge import ChunkRow, FoundChunk, IndexedFile, KnowledgeStore
from state.records import DocumentEntry
from tools.backend import BackendError, BackendReport, KnowledgeOutput

SUFFIXES = (".md", ".markdown")
WIDENED_CANDIDATES = 4
"""A question widened by concepts reads this many times the candidates, then ranks them by how
many of its units each covers (``query_units``)."""
RESYNC_S = 60.0
MAX_TOP_K = 10
MAX_FOLLOWED_CHUNKS = 50
SETTING = "SUPERBIZ_RUNBOOKS"

Progress = Callable[[str], None]


def stderr_progress(line: str) -> None:
    """Write one progress line to stderr."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _Stat(TypedDict):
    """A file's size and modification time, as the index keeps them."""

    size: int
    mtime_ns: int


@dataclass
class SyncReport:
    """What one sync did."""

    files: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    chunks: int = 0
    seconds: float = 0.0
    read: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Files skipped or cleaned, each with the reason (links out of the folder, NUL bytes)."""

    def line(self) -> str:
        """One line for the command line and the progress stream."""
        return (
            f"runbook index: {self.files} files ({self.added} new, {self.changed} changed, "
            f"{self.removed} removed), {self.chunks} chunks written in {self.seconds:.2f} s"
        )


def _sources(folders: Sequence[str]) -> dict[str, str]:
    """How each folder is named in ``source``: its name, or its path when names repeat."""
    names = [Path(folder).name or folder for folder in folders]
    return {
        folder: (name if names.count(name) == 1 else folder.strip("/"))
        for folder, name in zip(folders, names, strict=True)
    }


def _walk(folder: str, outside: list[str]) -> list[Path]:
    """The runbook files under ``folder``; a link to a file outside it is listed in ``outside``."""
    found: list[Path] = []
    root = os.path.realpath(folder)
    for directory, subdirs, files in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(directory) / name
            if not name.lower().endswith(SUFFIXES):
                continue
            if path.is_symlink() and os.path.commonpath([root, os.path.realpath(path)]) != root:
                outside.append(str(path))
                continue
            found.append(path)
    return found


def chunk_rows(text: str, *, source: str, name: str) -> tuple[str, list[ChunkRow]]:
    """A runbook's title and its chunks as stored (see the module docstring)."""
    runbook = read_runbook(text, name=name)
    rows: list[ChunkRow] = []
    seen: set[str] = set()
    name_terms = terms(f"{runbook.title} {name}")
    for section in runbook.sections:
        parts = pieces(section.text)
        for number, part in enumerate(parts, start=1):
            title = TITLE_SEPARATOR.join([runbook.title, *section.path])
            anchor = slug(section.path)
            if len(parts) > 1:
                title += f", part {number}"
                anchor += f"-{number}"
            doc_id = f"{source}#{anchor}"
            suffix = 2
            while doc_id in seen:
                doc_id, suffix = f"{source}#{anchor}-{suffix}", suffix + 1
            seen.add(doc_id)
            rows.append(
                ChunkRow(
                    ordinal=len(rows),
                    doc_id=doc_id,
                    title=title,
                    source=source,
                    chunk=part,
                    name_terms=name_terms,
                    heading_terms=terms(" ".join(section.path)),
                    body_terms=terms(part),
                )
            )
    return runbook.title, rows


def _stem(token: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(token) > len(suffix) + 2 and token.endswith(suffix):
            return token[: -len(suffix)]
    return token


def query_units(query: str) -> list[tuple[str, ...]]:
    """What a query asks for: each unit is the index tokens any one of which satisfies it.

    A word is a unit of itself. A concept the query names in CJK text (``knowledge.vocabulary``:
    磁盘 for disk) is one unit satisfied by any of its one-word forms in either language, so a
    Chinese question finds an English runbook; the query's other CJK bigrams (the rest of the
    sentence) are then left out of the units. English words stay as they are: a runbook written
    in English already has them, and widening them would only blur an alert name.
    """
    words = query_tokens(query)
    concepts = concepts_in(" ".join(CJK_RUN.findall(query)))
    if not concepts:
        return [(word,) for word in words]
    units: list[tuple[str, ...]] = []
    covered: set[str] = set()
    for concept in concepts:
        forms = [concept, *CONCEPTS[concept]] if "_" not in concept else list(CONCEPTS[concept])
        alternatives = [
            token
            for form in forms
            for token in tokens(form)
            if not form.isascii() or " " not in form  # "response time" is no one-word form
        ]
        alternatives = [t for t in dict.fromkeys(alternatives) if t.isalnum()]
        covered.update(alternatives)
        if alternatives:
            units.append(tuple(alternatives))
    units += [(w,) for w in words if w.isascii() and w not in covered]
    return units


def relevance(query: Sequence[tuple[str, ...]], found_terms: str) -> tuple[float, str]:
    """The share of the query's units a chunk has, and its level (high, medium, low)."""
    if not query:
        return 0.0, "low"
    have = {_stem(t) for t in found_terms.split()}
    share = sum(1 for unit in query if any(_stem(t) in have for t in unit)) / len(query)
    level = "high" if share >= 0.66 else "medium" if share >= 0.33 else "low"
    return share, level


def _url_names(urls: Sequence[str]) -> list[str]:
    """The file names runbook URLs point at: their last path segment, folded."""
    names: list[str] = []
    for url in urls:
        try:
            path = unquote(urlsplit(url.strip()).path)
        except ValueError:
            continue
        segments = [s for s in path.split("/") if s]
        if not segments:
            continue
        name = re.sub(r"\.(md|markdown|html?)$", "", segments[-1], flags=re.IGNORECASE)
        names.append(_fold_name(name))
    return list(dict.fromkeys(n for n in names if n))


def _fold_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.casefold())


class RunbookIndex:
    """The knowledge part of the evidence backend over the runbook index.

    Args:
        folders: The runbook folders (``SUPERBIZ_RUNBOOKS``, absolute paths).
        database: ``--db`` / ``SUPERBIZ_DATABASE_URL`` (None: the configured database).
        progress: Where progress lines go (default stderr).
    """

    needs_timeout = True
    follows_runbook_urls = True

    def __init__(
        self,
        folders: Sequence[str],
        *,
        database: str | None = None,
        progress: Progress | None = stderr_progress,
    ) -> None:
        self.folders = tuple(folders)
        self.db = Database(database)
        self.store = KnowledgeStore(self.db)
        self.progress = progress
        self._synced_at: float | None = None
        self._lock = threading.Lock()

    @property
    def title(self) -> str:
        """What serves the knowledge, in words (``config show``)."""
        count = len(self.folders)
        return (
            f"runbook index ({count} folder{'s' if count != 1 else ''}, {self.db.target.display})"
        )

    def close(self) -> None:
        """Close the index's database connection."""
        self.db.close()

    # ----------------------------------------------------------------------- indexing

    def sync(self, folders: Sequence[str] | None = None) -> SyncReport:
        """Bring the index in line with the folders (see the module docstring).

        Raises:
            BackendError: When a folder is missing or a file cannot be read.
            DatabaseError: When the database cannot be used.
        """
        chosen = tuple(folders) if folders is not None else self.folders
        started = time.perf_counter()
        report = SyncReport()
        existing = self.store.files()
        names = _sources(chosen)
        seen: set[str] = set()
        replaced: list[tuple[IndexedFile, list[ChunkRow]]] = []
        touched: list[IndexedFile] = []
        listed: list[tuple[str, Path]] = []
        for folder in chosen:
            if not Path(folder).is_dir():
                raise BackendError(f"runbook folder {folder} does not exist; check {SETTING}")
            outside: list[str] = []
            listed += [(folder, path) for path in _walk(folder, outside)]
            report.notes += [
                f"runbook {path}: a link to a file outside {folder}, not followed"
                for path in outside
            ]
        work = []
        for folder, path in listed:
            key = str(path)
            seen.add(key)
            info = path.stat()
            stat = _Stat(size=info.st_size, mtime_ns=info.st_mtime_ns)
            known = existing.get(key)
            if known and known.size == stat["size"] and known.mtime_ns == stat["mtime_ns"]:
                continue
            work.append((folder, path, stat, known))
        if work and self.progress is not None:
            self.progress(f"indexing runbooks: {len(work)} of {len(listed)} files to read")
        for number, (folder, path, stat, known) in enumerate(work, start=1):
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise BackendError(f"cannot read runbook {path}: {exc.strerror}") from None
            digest = hashlib.sha256(data).hexdigest()
            source = f"{names[folder]}/{path.relative_to(folder).as_posix()}"
            if known and known.sha256 == digest:
                touched.append(replace(known, **stat))
                continue
            text = data.decode("utf-8", errors="replace")
            if "\x00" in text:
                # No database text column holds NUL (PostgreSQL refuses it): the rest is kept.
                text = text.replace("\x00", "")
                report.notes.append(f"runbook {path}: NUL bytes removed (a binary file?)")
            title, rows = chunk_rows(text, source=source, name=path.stem)
            indexed = IndexedFile(
                path=str(path),
                root=folder,
                source=source,
                sha256=digest,
                **stat,
                title=title,
                chunks=len(rows),
            )
            replaced.append((indexed, rows))
            report.read.append(source)
            report.added += known is None
            report.changed += known is not None
            report.chunks += len(rows)
            if self.progress is not None and number % 100 == 0:
                self.progress(f"indexing runbooks: {number}/{len(work)} files read")
        removed = sorted(set(existing) - seen)
        report.removed = len(removed)
        report.files = len(listed)
        if replaced or touched or removed:
            self.store.apply(replaced=replaced, touched=touched, removed=removed)
        report.seconds = time.perf_counter() - started
        if self.progress is not None:
            for note in report.notes:
                self.progress(note)
        if (replaced or removed) and self.progress is not None:
            self.progress(report.line())
        return report

    def _ensure_synced(self) -> None:
        with self._lock:
            if self._synced_at is not None and time.monotonic() - self._synced_at < RESYNC_S:
                return
            self.sync()
            self._synced_at = time.monotonic()

    # ----------------------------------------------------------------------- the tool

    def lookup_knowledge(
        self, *, query: str, top_k: int = 3, runbook_urls: Sequence[str] = ()
    ) -> KnowledgeOutput:
        """The best chunks for a query, runbooks the alerts point at first.

        Raises:
            BackendError: When the index cannot be read or brought up to date.
        """
        try:
            self._ensure_synced()
            return self._lookup(query, max(1, min(top_k, MAX_TOP_K)), runbook_urls)
        except DatabaseError as exc:
            raise BackendError(f"runbook index: {exc}") from None

    def search_indexed(self, *, query: str, top_k: int = 3) -> KnowledgeOutput:
        """The best chunks for a query in the index as it is, without bringing it up to date.

        ``superbiz kb search`` with no folder configured reads what ``kb index DIR`` left.

        Raises:
            BackendError: When the index cannot be read.
        """
        try:
            return self._lookup(query, max(1, min(top_k, MAX_TOP_K)), ())
        except DatabaseError as exc:
            raise BackendError(f"runbook index: {exc}") from None

    def _lookup(self, query: str, top_k: int, runbook_urls: Sequence[str]) -> KnowledgeOutput:
        urls = [*runbook_urls, *URL.findall(query)]
        text = URL.sub(" ", query)
        units = query_units(text)
        words = [*query_tokens(text), *(token for unit in units for token in unit)]
        widened = any(len(unit) > 1 for unit in units)
        found = self.store.search(
            words, limit=(top_k + MAX_FOLLOWED_CHUNKS) * (WIDENED_CANDIDATES if widened else 1)
        )
        if widened:  # many forms of one concept must not outweigh covering more of the question
            found.sort(
                key=lambda c: (
                    -relevance(units, c.terms)[0],
                    -relevance(units, " ".join(tokens(c.title)))[0],
                    -c.score,
                    c.doc_id,
                )
            )
            found = found[: top_k + MAX_FOLLOWED_CHUNKS]
        followed = self._followed(urls)
        ranked: list[FoundChunk] = []
        if followed:
            scores = {chunk.doc_id: chunk.score for chunk in found}
            pinned = self.store.chunks_of(followed, limit=MAX_FOLLOWED_CHUNKS)
            pinned.sort(key=lambda c: (-scores.get(c.doc_id, 0.0), c.path, c.ordinal))
            ranked += pinned
        ranked += [c for c in found if c.path not in followed]
        documents: list[DocumentEntry] = []
        for chunk in ranked[:top_k]:
            _, level = relevance(units, chunk.terms)
            documents.append(
                DocumentEntry(
                    doc_id=chunk.doc_id,
                    title=chunk.title,
                    source=chunk.source,
                    chunk=chunk.chunk,
                    score=round(chunk.score, 3),
                    relevance=level,
                )
            )
        return KnowledgeOutput(documents=documents)

    def _followed(self, urls: Sequence[str]) -> list[str]:
        """The indexed files the URLs name (by file name, case and punctuation folded)."""
        names = _url_names(urls)
        if not names:
            return []
        by_name: dict[str, list[str]] = {}
        for path in self.store.files():
            by_name.setdefault(_fold_name(Path(path).stem), []).append(path)
        return [path for name in names for path in sorted(by_name.get(name, []))]

    def services(self) -> list[str]:
        """Knows no service."""
        return []

    # ----------------------------------------------------------------------- doctor

    def check(self) -> BackendReport:
        """The index: folders, files, chunks, when last indexed, and files changed since."""
        where = self.db.target.display
        try:
            missing = [f for f in self.folders if not Path(f).is_dir()]
            if missing:
                raise BackendError(f"runbook folder {missing[0]} does not exist; check {SETTING}")
            stats = self.store.stats()
            existing = self.store.files()
            listed = {str(path) for folder in self.folders for path in _walk(folder, [])}
            pending = len(listed ^ set(existing))
            for path in listed & set(existing):
                info = os.stat(path)
                known = existing[path]
                pending += (known.size, known.mtime_ns) != (info.st_size, info.st_mtime_ns)
        except (BackendError, DatabaseError, OSError) as exc:
            return BackendReport(
                backend="runbooks", url=None, status="error", detail=str(exc), setting=SETTING
            )
        last = stats.last_indexed or "never"
        state = (
            f"{pending} files changed since (indexed on the next lookup or superbiz kb index)"
            if pending
            else "up to date"
        )
        return BackendReport(
            backend="runbooks",
            url=None,
            status="ok",
            detail=f"{len(self.folders)} folder{'s' if len(self.folders) != 1 else ''}; index "
            f"{stats.files} files, {stats.chunks} chunks in {where}; last indexed {last}; {state}",
        )
