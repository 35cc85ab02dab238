"""``lookup_knowledge``: runbooks and past incidents by keywords (guidance, never evidence).

Refs: ``documents[i]`` (``<title> (<source>): <chunk>``) and ``summary`` (``lookup_knowledge
<k>=<v> ... matched <n> of <n> (complete|truncated)``). A document returned earlier in the
diagnosis comes again marked ``deduped: true``; the runbook URLs of alerts returned earlier and
named by the query are handed to a backend that follows them (``follows_runbook_urls``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from pydantic import Field
from typing_extensions import TypedDict

from state.json_shape import texts
from state.records import DocumentEntry, Invocation, JSONObject, RetrievalDetails, TraceItem
from tools import query_metrics
from tools.render import format_value, with_message
from tools.schemas import ToolArgs
from tools.spec import (
    Bounds,
    Call,
    Display,
    EntryArray,
    ModelArguments,
    ToolSpec,
    Trace,
)

NAME = "lookup_knowledge"


class LookupKnowledgeArgs(ToolArgs):
    """Arguments of `lookup_knowledge`."""

    query: str = Field(
        min_length=1, description="Keywords to look for in runbooks and past incidents."
    )
    top_k: int = Field(
        default=3, ge=1, le=10, description="Return at most this many documents (1-10)."
    )


class KnowledgeResult(TypedDict, total=False):
    """What a ``lookup_knowledge`` invocation records, best document first."""

    documents: list[DocumentEntry]
    truncated: bool


def result(output: Mapping[str, object] | None) -> KnowledgeResult:
    """The recorded output of a ``lookup_knowledge`` invocation (its shape was validated)."""
    # A view, not a copy: no call on the hot paths of the trace summary and Gatekeeper.
    return output if output is not None else {}  # type: ignore[return-value]


def document_text(entry: DocumentEntry) -> str:
    """``<title> (<source>): <chunk>``; absent fields left out."""
    title, source = entry.get("title"), entry.get("source")
    head = [format_value(title)] if title is not None else []
    if source is not None:
        head.append(f"({format_value(source)})")
    return with_message(head, entry.get("chunk"))


def _runbook_urls(call: Call) -> dict[str, object]:
    """The runbook URLs of alerts returned earlier in the diagnosis that the query names.

    An alert is named by its name or its service; a knowledge backend that follows runbook URLs
    puts the runbooks they point at first. Nothing for a backend that does not.
    """
    if not getattr(call.backend, "follows_runbook_urls", False):
        return {}
    wanted = str(call.arguments.get("query", "")).casefold()
    urls: list[str] = []
    for row in call.earlier():
        if row["tool_name"] != query_metrics.NAME or row["output"] is None:
            continue
        for alert in query_metrics.result(row["output"]).get("alerts", []):
            url = alert.get("runbook_url")
            named = [alert.get("alert_name"), alert.get("service")]
            if url and any(n and n.casefold() in wanted for n in named):
                urls.append(url)
    found = list(dict.fromkeys(urls))
    return {"runbook_urls": found} if found else {}


def _mark_deduped(call: Call, output: JSONObject) -> RetrievalDetails:
    """Mark documents already returned in this diagnosis; return the retrieval extras."""
    seen = {
        doc["doc_id"]
        for row in call.earlier()
        if row["tool_name"] == NAME and row["output"] is not None
        for doc in result(row["output"]).get("documents", [])
        if doc.get("doc_id") is not None
    }
    documents = result(output).get("documents", [])
    for doc in documents:
        doc["deduped"] = doc.get("doc_id") in seen
    details = RetrievalDetails(
        layers=["keyword"],
        relevance=[doc.get("relevance") for doc in documents],
        source_docs=[doc.get("source") for doc in documents],
        deduped=[doc["doc_id"] for doc in documents if doc["deduped"] and "doc_id" in doc],
    )
    urls = call.extras.get("runbook_urls")
    if isinstance(urls, list) and urls:
        details["runbook_urls"] = [str(url) for url in urls]
    return details


def _deduped_ids(invocation: Invocation) -> set[str]:
    return set(invocation["retrieval_details"].get("deduped", []))


def _is_deduped(document: DocumentEntry, deduped_ids: set[str]) -> bool:
    return document.get("deduped") is True or document.get("doc_id") in deduped_ids


def _effective(invocation: Invocation) -> bool:
    """An effective hit returned a document not seen before in the diagnosis."""
    deduped_ids = _deduped_ids(invocation)
    documents = result(invocation["output"]).get("documents", [])
    return any(not _is_deduped(doc, deduped_ids) for doc in documents)


def _parts(invocation: Invocation) -> Iterable[str]:
    documents = result(invocation["output"]).get("documents", [])
    if not documents:
        yield "no documents"
        return
    deduped_ids = _deduped_ids(invocation)
    for document in documents:
        words = [document.get("title") or document.get("doc_id") or ""]
        if document.get("source"):
            words.append(f"({document.get('source')})")
        if document.get("relevance"):
            words.append(f"relevance={document.get('relevance')}")
        if _is_deduped(document, deduped_ids):
            words.append("[deduped: already returned earlier]")
        yield " ".join(words)


def _floor(invocation: Invocation) -> str:
    documents = result(invocation["output"]).get("documents", [])
    deduped_ids = _deduped_ids(invocation)
    deduped = sum(1 for doc in documents if _is_deduped(doc, deduped_ids))
    size = f"{len(documents)} documents"
    return f"{size} ({deduped} deduped)" if deduped else size


def _distinct(values: Iterable[str | None], into: list[str]) -> None:
    for value in values:
        if value and value not in into:
            into.append(value)


def _extras(item: TraceItem, calls: Sequence[Invocation], clip: Callable[[str], str]) -> None:
    """The queries, retrieval layers, relevance levels and source documents of all calls."""
    queries: list[str] = []
    layers: list[str] = []
    relevance: list[str] = []
    source_docs: list[str] = []
    for call in calls:
        _distinct(texts([call["arguments"].get("query")]), queries)
        details = call["retrieval_details"]
        _distinct(details.get("layers", []), layers)
        _distinct(details.get("relevance", []), relevance)
        _distinct(details.get("source_docs", []), source_docs)
    item["query_samples"] = [clip(query) for query in queries]
    item["retrieval_layers"] = layers
    item["relevance_levels"] = relevance
    item["source_docs"] = source_docs


SPEC = ToolSpec(
    name=NAME,
    description=(
        "Search runbooks and past-incident postmortems by keywords. Guidance only: it describes "
        "what to check or do, never what is happening now."
    ),
    arguments=ModelArguments(LookupKnowledgeArgs, order=("query", "top_k")),
    role="guidance",
    arrays=(
        EntryArray(
            name="documents",
            source_type="knowledge",
            render=document_text,
            display=Display("document", ("title", "source", "chunk", "relevance")),
        ),
    ),
    output=KnowledgeResult,
    bounds=Bounds(argument="top_k"),
    prepare=_runbook_urls,
    annotate=_mark_deduped,
    trace=Trace(parts=_parts, floor=_floor, effective=_effective, extras=_extras),
)
