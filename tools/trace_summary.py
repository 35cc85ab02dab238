"""Verifier-facing tool trace summary built from invocation rows (contracts section 8).

Only evidence-bearing tools appear. Each item names its calls by ``trace_ref`` (``t1``, ``t2``, ...
in first-call order over the whole diagnosis) and keeps ``source_invocation_ids``. Output summaries
are built from the recorded output alone, concrete facts first, and bounded per item and in total.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from typing import Any

TRACEABILITY_VERSION = "trace-summary.v1"
"""Version of the trace summary format, persisted beside the snapshot."""

EVIDENCE_TOOLS: frozenset[str] = frozenset({"query_logs", "query_metrics", "lookup_knowledge"})
"""Tools whose calls are evidence; every other tool is a helper and left out."""

MERGE_IGNORED_ARGUMENTS: frozenset[str] = frozenset({"limit", "start", "end"})
"""Arguments that may differ between calls merged into one item."""

ELLIPSIS = "…"
_SEPARATOR = "; "
_MIN_CLIPPED_CHARS = 24
_SCALARS = (str, int, float, bool)


# --------------------------------------------------------------------------- small helpers


def _text(value: Any, limit: int) -> str:
    """Render a scalar as text, reading at most ``limit`` characters of a long string."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + ELLIPSIS
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return ""
    rendered = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return rendered if len(rendered) <= limit else rendered[:limit] + ELLIPSIS


def _clip(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters on a boundary, marking the cut with ``…``."""
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return ELLIPSIS[:limit]
    room = limit - len(ELLIPSIS)
    head = text[:room]
    floor = room // 2
    cut = head.rfind(_SEPARATOR)
    if cut >= floor:
        return head[:cut].rstrip(" ;,") + ELLIPSIS
    cut = head.rfind(" ")
    if cut >= floor:
        return head[:cut].rstrip(" ;,") + ELLIPSIS
    return head + ELLIPSIS


def _join(parts: Iterable[str], limit: int) -> str:
    """Join parts with ``; `` and clip, reading no more parts than the limit can show."""
    collected: list[str] = []
    length = 0
    for part in parts:
        if not part:
            continue
        collected.append(part)
        length += len(part) + len(_SEPARATOR)
        if length > limit:
            break
    return _clip(_SEPARATOR.join(collected), limit)


def _input_summary(arguments: Any, limit: int) -> str:
    if not isinstance(arguments, dict):
        return ""
    pairs = (
        f"{key}={_text(arguments[key], limit)}"
        for key in sorted(arguments, key=str)
        if arguments[key] is not None
    )
    return _clip(" ".join(pairs), limit)


def _merge_key(invocation: dict[str, Any]) -> Hashable:
    """Calls with equal keys are merged: same round, tool and arguments except limit/start/end."""
    arguments = invocation.get("arguments")
    if not isinstance(arguments, dict):
        arguments = {}
    kept = sorted(
        (
            (str(key), value)
            for key, value in arguments.items()
            if key not in MERGE_IGNORED_ARGUMENTS and value is not None
        ),
        key=lambda pair: pair[0],
    )
    head = (invocation.get("round"), invocation.get("tool_name"))
    if all(type(value) in _SCALARS for _, value in kept):
        # Type names keep 1, 1.0 and True apart, as JSON would.
        return (*head, tuple((key, type(value).__name__, value) for key, value in kept))
    return (*head, json.dumps(kept, sort_keys=True, ensure_ascii=False, default=str))


def _output(invocation: dict[str, Any]) -> dict[str, Any]:
    output = invocation.get("output")
    return output if isinstance(output, dict) else {}


def _details(invocation: dict[str, Any]) -> dict[str, Any]:
    details = invocation.get("retrieval_details")
    return details if isinstance(details, dict) else {}


def _entries(output: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = output.get(key)
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _has_entries(output: dict[str, Any], key: str) -> bool:
    value = output.get(key)
    return isinstance(value, list) and any(isinstance(item, dict) for item in value)


def _count(output: dict[str, Any], key: str) -> int:
    value = output.get(key)
    return sum(1 for item in value if isinstance(item, dict)) if isinstance(value, list) else 0


def _deduped_ids(invocation: dict[str, Any]) -> set[str]:
    deduped = _details(invocation).get("deduped")
    if not isinstance(deduped, list):
        return set()
    return {item for item in deduped if isinstance(item, str)}


def _is_deduped(document: dict[str, Any], deduped_ids: set[str]) -> bool:
    return document.get("deduped") is True or document.get("doc_id") in deduped_ids


def _is_effective(invocation: dict[str, Any]) -> bool:
    """Whether a call is an effective hit: ok, with entries, and not only deduped knowledge."""
    if invocation.get("status") != "ok":
        return False
    output = _output(invocation)
    tool_name = invocation.get("tool_name")
    if tool_name == "query_logs":
        return _has_entries(output, "logs")
    if tool_name == "query_metrics":
        return _has_entries(output, "alerts") or _has_entries(output, "series")
    if tool_name == "lookup_knowledge":
        deduped_ids = _deduped_ids(invocation)
        return any(not _is_deduped(doc, deduped_ids) for doc in _entries(output, "documents"))
    return False


def _distinct(values: Iterable[Any], into: list[str]) -> None:
    for value in values:
        if isinstance(value, str) and value and value not in into:
            into.append(value)


# --------------------------------------------------------------------------- output summaries


def _logs_parts(output: dict[str, Any], item_chars: int) -> Iterable[str]:
    logs = _entries(output, "logs")
    total = output.get("total")
    header = f"matched {len(logs)} of {total if isinstance(total, int) else len(logs)}"
    if output.get("truncated") is True:
        header += " (truncated)"
    yield header
    counts: dict[tuple[Any, ...], int] = {}
    for entry in logs:
        key: tuple[Any, ...] = (entry.get("level"), entry.get("service"), entry.get("message"))
        try:
            counts[key] = counts.get(key, 0) + 1
        except TypeError:  # a non-scalar field: count it by its rendering
            key = tuple(_text(value, item_chars) for value in key)
            counts[key] = counts.get(key, 0) + 1
    # Most frequent first; the stable sort keeps first appearance among equals.
    for (level, service, message), count in sorted(counts.items(), key=lambda kv: -kv[1]):
        label = " ".join(
            part for part in (_text(level, item_chars), _text(service, item_chars)) if part
        )
        text = _text(message, item_chars)
        line = f"{label}: {text}" if label else text
        yield f"{line} (x{count})" if count > 1 else line


def _alert_part(alert: dict[str, Any], item_chars: int) -> str:
    words = [_text(alert.get("alert_name"), item_chars) or "alert"]
    for name in ("service", "severity", "state", "value", "threshold"):
        if alert.get(name) is not None:
            words.append(f"{name}={_text(alert.get(name), item_chars)}")
    return " ".join(words)


def _series_part(series: dict[str, Any], item_chars: int) -> str:
    labels = series.get("labels")
    rendered_labels = ""
    if isinstance(labels, dict) and labels:
        pairs = ",".join(
            f"{key}={_text(labels[key], item_chars)}" for key in sorted(labels, key=str)
        )
        rendered_labels = "{" + pairs + "}"
    unit = _text(series.get("unit"), item_chars)
    words = [_text(series.get("metric"), item_chars) + rendered_labels]
    for name in ("min", "max", "last"):
        if series.get(name) is not None:
            words.append(f"{name}={_text(series.get(name), item_chars)}{unit}")
    return " ".join(words)


def _metrics_parts(output: dict[str, Any], item_chars: int) -> Iterable[str]:
    alerts = _entries(output, "alerts")
    series = _entries(output, "series")
    if not alerts and not series:
        yield "no alerts or series"
        return
    for alert in alerts:
        yield _alert_part(alert, item_chars)
    for entry in series:
        yield _series_part(entry, item_chars)


def _knowledge_parts(invocation: dict[str, Any], item_chars: int) -> Iterable[str]:
    documents = _entries(_output(invocation), "documents")
    if not documents:
        yield "no documents"
        return
    deduped_ids = _deduped_ids(invocation)
    for document in documents:
        title = _text(document.get("title"), item_chars) or _text(
            document.get("doc_id"), item_chars
        )
        words = [title]
        source = _text(document.get("source"), item_chars)
        if source:
            words.append(f"({source})")
        relevance = _text(document.get("relevance"), item_chars)
        if relevance:
            words.append(f"relevance={relevance}")
        if _is_deduped(document, deduped_ids):
            words.append("[deduped: already returned earlier]")
        yield " ".join(words)


def _output_summary(invocation: dict[str, Any], item_chars: int) -> str:
    status = invocation.get("status")
    if status == "error":
        message = invocation.get("error")
        if not isinstance(message, str) or not message:
            message = _output(invocation).get("error")
        return _clip(f"error: {_text(message, item_chars) or 'unknown error'}", item_chars)
    if status == "no_hit":
        return "no match"
    tool_name = invocation.get("tool_name")
    output = _output(invocation)
    if tool_name == "query_logs":
        return _join(_logs_parts(output, item_chars), item_chars)
    if tool_name == "query_metrics":
        return _join(_metrics_parts(output, item_chars), item_chars)
    return _join(_knowledge_parts(invocation, item_chars), item_chars)


def _status_floor(invocation: dict[str, Any]) -> str:
    """The shortest summary an item is cut down to: its status and, when ok, its size."""
    status = invocation.get("status")
    if status == "error":
        return "error"
    if status == "no_hit":
        return "no match"
    output = _output(invocation)
    tool_name = invocation.get("tool_name")
    if tool_name == "query_logs":
        logs = _count(output, "logs")
        total = output.get("total")
        return f"matched {logs} of {total if isinstance(total, int) else logs}"
    if tool_name == "query_metrics":
        return f"{_count(output, 'alerts')} alerts, {_count(output, 'series')} series"
    documents = _entries(output, "documents")
    deduped_ids = _deduped_ids(invocation)
    deduped = sum(1 for doc in documents if _is_deduped(doc, deduped_ids))
    return (
        f"{len(documents)} documents ({deduped} deduped)"
        if deduped
        else f"{len(documents)} documents"
    )


# --------------------------------------------------------------------------- building


class _Item:
    """One trace item while it is being built."""

    __slots__ = ("calls", "first_hit", "index", "key")

    def __init__(self, key: Hashable, index: int, first: dict[str, Any]) -> None:
        self.key = key
        self.index = index
        self.calls: list[dict[str, Any]] = [first]
        self.first_hit: dict[str, Any] | None = first if _is_effective(first) else None

    def add(self, invocation: dict[str, Any]) -> None:
        self.calls.append(invocation)
        if self.first_hit is None and _is_effective(invocation):
            self.first_hit = invocation

    def representative(self) -> dict[str, Any]:
        """The call whose output the item summarises."""
        if self.first_hit is not None:
            return self.first_hit
        for call in self.calls:
            if call.get("status") == "ok":
                return call
        return self.calls[0]

    def render(self, item_chars: int, output_summary: str) -> dict[str, Any]:
        first = self.calls[0]
        tool_name = first.get("tool_name")
        round_number = first.get("round")
        ids = [call.get("invocation_id") for call in self.calls]
        item: dict[str, Any] = {
            "trace_ref": f"t{self.index}",
            "tool_name": tool_name,
            "round": round_number if isinstance(round_number, int) else 1,
            "success": any(call.get("status") == "ok" for call in self.calls),
            "evidence_level": "direct" if self.first_hit is not None else "none",
            "input_summary": _input_summary(first.get("arguments"), item_chars),
            "output_summary": output_summary,
            "source_invocation_ids": [value for value in ids if isinstance(value, str)],
        }
        if tool_name == "lookup_knowledge":
            queries: list[str] = []
            layers: list[str] = []
            relevance: list[str] = []
            source_docs: list[str] = []
            for call in self.calls:
                arguments = call.get("arguments")
                if isinstance(arguments, dict):
                    _distinct([arguments.get("query")], queries)
                details = _details(call)
                for name, into in (
                    ("layers", layers),
                    ("relevance", relevance),
                    ("source_docs", source_docs),
                ):
                    values = details.get(name)
                    if isinstance(values, list):
                        _distinct(values, into)
            item["query_samples"] = [_clip(query, item_chars) for query in queries]
            item["retrieval_layers"] = layers
            item["relevance_levels"] = relevance
            item["source_docs"] = source_docs
        if len(self.calls) > 1:
            item["repeat_count"] = len(self.calls)
            item["failed_count"] = sum(1 for call in self.calls if call.get("status") == "error")
            item["no_hit_count"] = sum(1 for call in self.calls if call.get("status") == "no_hit")
        return item


def _bounded_summaries(shown: list[dict[str, Any]], item_chars: int, total_chars: int) -> list[str]:
    """Output summaries within ``total_chars`` overall, later items shortened first.

    Item ``i`` may use what the earlier items left after reserving the status floor of every
    later item; once one item had to be shortened, every later item gets its floor, so full
    summaries are only built while they can still be shown.
    """
    floors = [_status_floor(invocation) for invocation in shown]
    reserved = [0] * (len(shown) + 1)
    for index in range(len(shown) - 1, -1, -1):
        reserved[index] = reserved[index + 1] + len(floors[index])
    summaries: list[str] = []
    used = 0
    exhausted = False
    for index, invocation in enumerate(shown):
        floor = floors[index]
        if exhausted:
            summary = floor
        else:
            full = _output_summary(invocation, item_chars)
            allowed = total_chars - used - reserved[index + 1]
            if len(full) <= allowed:
                summary = full
            else:
                exhausted = True
                summary = _clip(full, allowed) if allowed >= _MIN_CLIPPED_CHARS else floor
                if len(full) <= len(summary):
                    summary = full
        summaries.append(summary)
        used += len(summary)
    return summaries


def build_trace_summary(
    invocations: list[dict[str, Any]],
    *,
    item_chars: int = 700,
    total_chars: int = 12000,
) -> list[dict[str, Any]]:
    """Summarise a diagnosis's evidence-tool calls for the Verifier.

    Items follow first-call order over all rounds (``trace_ref`` ``t1``, ``t2``, ...). Calls of one
    round with the same tool and the same arguments apart from ``limit``, ``start`` and ``end`` are
    merged into the item of the first: the item summarises the first effective hit (an ok call with
    entries that are not all deduped knowledge), and carries ``repeat_count`` (calls merged,
    including the first), ``failed_count`` and ``no_hit_count``. Failed and no-hit calls stay as
    items with ``evidence_level="none"``.

    Args:
        invocations: The diagnosis's invocation rows (contracts section 2) in call order.
        item_chars: Maximum length of one item's ``output_summary`` (and ``input_summary``).
        total_chars: Maximum total length of all output summaries; later items are shortened
            first, down to their status (``error``, ``no match``, ``matched N of M``, ...), and no
            item is dropped, so very many items can still exceed it.

    Returns:
        Items ``{trace_ref, tool_name, round, success, evidence_level, input_summary,
        output_summary, source_invocation_ids}``, plus ``query_samples``, ``retrieval_layers``,
        ``relevance_levels`` and ``source_docs`` on ``lookup_knowledge`` items and
        ``repeat_count``, ``failed_count`` and ``no_hit_count`` on merged items.
    """
    item_chars = max(item_chars, 1)
    groups: dict[Hashable, _Item] = {}
    order: list[_Item] = []
    for invocation in invocations:
        if not isinstance(invocation, dict):
            continue
        tool_name = invocation.get("tool_name")
        if not isinstance(tool_name, str) or tool_name not in EVIDENCE_TOOLS:
            continue
        key = _merge_key(invocation)
        group = groups.get(key)
        if group is None:
            group = _Item(key, len(order) + 1, invocation)
            groups[key] = group
            order.append(group)
        else:
            group.add(invocation)
    summaries = _bounded_summaries(
        [group.representative() for group in order], item_chars, max(total_chars, 0)
    )
    return [
        group.render(item_chars, summary) for group, summary in zip(order, summaries, strict=True)
    ]
