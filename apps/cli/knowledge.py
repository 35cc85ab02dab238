"""``superbiz kb index`` and ``superbiz kb search``: the runbook index from the command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from evidence.config import ConfigError, load_settings
from knowledge.runbooks import RunbookIndex
from persistence.database import DatabaseError
from state.records import DocumentEntry
from tools.backend import BackendError


class KnowledgeUsageError(Exception):
    """Bad input for a ``kb`` command; the message is the one-line reason."""


def _configured() -> tuple[str, ...]:
    """The folders of ``SUPERBIZ_RUNBOOKS`` (none when it is not set)."""
    try:
        return load_settings().runbooks
    except ConfigError as exc:
        raise KnowledgeUsageError(str(exc)) from exc


def _folders(given: Sequence[str]) -> tuple[str, ...]:
    if given:
        folders = []
        for item in given:
            path = Path(item).expanduser()
            if not path.is_dir():
                raise KnowledgeUsageError(
                    f"{item} is not a folder; name folders of Markdown runbooks"
                )
            folders.append(str(path.resolve()))
        return tuple(dict.fromkeys(folders))
    try:
        settings = load_settings()
    except ConfigError as exc:
        raise KnowledgeUsageError(str(exc)) from exc
    if not settings.runbooks:
        raise KnowledgeUsageError(
            "no runbook folder: name folders (superbiz kb index DIR...) or set SUPERBIZ_RUNBOOKS"
        )
    return settings.runbooks


def kb_index_command(folders: Sequence[str], database: str | None, out: TextIO, err: TextIO) -> int:
    """Bring the index in line with the folders (default ``SUPERBIZ_RUNBOOKS``); print what changed.

    The index then holds exactly these folders' runbooks: files of folders not named leave it.
    """
    chosen = _folders(folders)

    def progress(line: str) -> None:
        err.write(line + "\n")
        err.flush()

    index = RunbookIndex(chosen, database=database, progress=progress)
    try:
        report = index.sync()
        stats = index.store.stats()
    except (BackendError, DatabaseError) as exc:
        raise KnowledgeUsageError(str(exc)) from exc
    finally:
        index.close()
    out.write(
        f"{report.line()}; the index holds {stats.files} files, {stats.chunks} chunks "
        f"({index.db.target.display})\n"
    )
    return 0


def _search_as_indexed(
    index: RunbookIndex, query: str, top_k: int, err: TextIO
) -> list[DocumentEntry]:
    """Search the index ``kb index DIR`` left when ``SUPERBIZ_RUNBOOKS`` is not set."""
    files = index.store.stats().files
    where = index.db.target.display
    if not files:
        raise KnowledgeUsageError(
            f"no runbook folder is set and the runbook index in {where} is empty: run "
            "superbiz kb index DIR (with the same --db) first, or set SUPERBIZ_RUNBOOKS"
        )
    err.write(
        f"SUPERBIZ_RUNBOOKS is not set: searching the index as superbiz kb index left it "
        f"({files} files in {where}); set SUPERBIZ_RUNBOOKS to those folders so diagnoses use "
        "them too\n"
    )
    return index.search_indexed(query=query, top_k=top_k)["documents"]


def kb_search_command(
    query: str, top_k: int, database: str | None, as_json: bool, out: TextIO, err: TextIO
) -> int:
    """Look a query up in the index as ``lookup_knowledge`` does (indexing first if needed)."""
    if not query.strip():
        raise KnowledgeUsageError('the query is empty; search e.g. superbiz kb search "TargetDown"')
    if not 1 <= top_k <= 10:
        raise KnowledgeUsageError("--top-k must be from 1 to 10")
    chosen = _configured()

    def progress(line: str) -> None:
        err.write(line + "\n")
        err.flush()

    index = RunbookIndex(chosen, database=database, progress=progress)
    try:
        if chosen:
            documents = index.lookup_knowledge(query=query, top_k=top_k)["documents"]
        else:
            documents = _search_as_indexed(index, query, top_k, err)
    except (BackendError, DatabaseError) as exc:
        raise KnowledgeUsageError(str(exc)) from exc
    finally:
        index.close()
    if as_json:
        out.write(json.dumps(documents, ensure_ascii=False, indent=2) + "\n")
        return 0
    if not documents:
        err.write("no runbook matches\n")
    for doc in documents:
        out.write(
            f"{doc.get('score', 0):>7.3f}  {doc.get('relevance', '')}  {doc['title']} "
            f"({doc.get('source', '')})\n         {doc['chunk'][:200]}\n"
        )
    return 0
