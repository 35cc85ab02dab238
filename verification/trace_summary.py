"""The Verifier's tool trace summary, built from invocation rows (docs/contracts.md, "Trace").

Only evidence-bearing tools appear. Each item names its calls by ``trace_ref`` (``t1``, ``t2``, ...
in first-call order over the whole diagnosis) and keeps ``source_invocation_ids``. Output summaries
are built from the recorded output alone, concrete facts first, as each tool's spec describes its
calls (``tools.spec.Trace``: the same texts the refs carry, with fields left out), and bounded per
item and in total.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence

from state.display import clip
from state.records import Invocation, TraceItem
from tools.registry import spec_of
from tools.render import format_value
from tools.spec import ToolSpec

TRACEABILITY_VERSION = "trace-summary.v1"
"""Version of the trace summary format, persisted beside the snapshot."""

MERGE_IGNORED_ARGUMENTS: frozenset[str] = frozenset({"limit", "start", "end"})
"""Arguments that may differ between calls merged into one item."""

_SEPARATOR = "; "
_MIN_CLIPPED_CHARS = 24
_SCALARS = (str, int, float, bool)


def _clip(text: str, limit: int) -> str:
    """``text`` clipped at a boundary: between items (``; ``), else between words."""
    return clip(text, limit, at=(_SEPARATOR, " "))


def _join(parts: Iterable[str], limit: int) -> str:
    """Join parts with ``; `` and clip, reading no more parts than the limit can show."""
    collected: list[str] = []
    length = 0
    for part in parts:
        if not part:
            continue
        collected.append(_clip(part, limit))
        length += len(collected[-1]) + len(_SEPARATOR)
        if length > limit:
            break
    return _clip(_SEPARATOR.join(collected), limit)


def _input_summary(invocation: Invocation, limit: int) -> str:
    arguments = invocation["arguments"]
    pairs = (
        f"{key}={_clip(format_value(arguments[key]), limit)}"
        for key in sorted(arguments)
        if arguments[key] is not None
    )
    return _clip(" ".join(pairs), limit)


def _merge_key(invocation: Invocation) -> Hashable:
    """Calls with equal keys are merged: same round, tool and arguments except limit/start/end."""
    kept = sorted(
        (key, value)
        for key, value in invocation["arguments"].items()
        if key not in MERGE_IGNORED_ARGUMENTS and value is not None
    )
    head = (invocation["round"], invocation["tool_name"])
    if all(type(value) in _SCALARS for _, value in kept):
        # Type names keep 1, 1.0 and True apart, as JSON would.
        return (*head, tuple((key, type(value).__name__, value) for key, value in kept))
    return (*head, json.dumps(kept, sort_keys=True, ensure_ascii=False, default=str))


def _is_effective(spec: ToolSpec, invocation: Invocation) -> bool:
    """Whether a call is an effective hit: ok, and a hit by its tool's rule.

    By default a call that returned entries; a tool may say otherwise (``lookup_knowledge``: not
    only documents returned before).
    """
    return invocation["status"] == "ok" and spec.trace_effective(invocation)


# --------------------------------------------------------------------------- output summaries


def _output_summary(spec: ToolSpec, invocation: Invocation, item_chars: int) -> str:
    status = invocation["status"]
    if status == "error":
        return _clip(f"error: {invocation['error'] or 'unknown error'}", item_chars)
    if status == "no_hit":
        return "no match"
    return _join(spec.trace_parts(invocation), item_chars)


def _status_floor(spec: ToolSpec, invocation: Invocation) -> str:
    """The shortest summary an item is cut down to: its status and, when ok, its size."""
    status = invocation["status"]
    if status != "ok":
        return "error" if status == "error" else "no match"
    return spec.trace_floor(invocation)


# --------------------------------------------------------------------------- building


class _Item:
    """One trace item while it is being built (its calls are of one tool, ``spec``)."""

    __slots__ = ("calls", "first_hit", "index", "spec")

    def __init__(self, index: int, spec: ToolSpec, first: Invocation) -> None:
        self.index = index
        self.spec = spec
        self.calls: list[Invocation] = [first]
        self.first_hit: Invocation | None = first if _is_effective(spec, first) else None

    def add(self, invocation: Invocation) -> None:
        self.calls.append(invocation)
        if self.first_hit is None and _is_effective(self.spec, invocation):
            self.first_hit = invocation

    def representative(self) -> Invocation:
        """The call whose output the item summarises."""
        if self.first_hit is not None:
            return self.first_hit
        return next((call for call in self.calls if call["status"] == "ok"), self.calls[0])

    def render(self, item_chars: int, output_summary: str) -> TraceItem:
        first = self.calls[0]
        item = TraceItem(
            trace_ref=f"t{self.index}",
            tool_name=first["tool_name"],
            round=first["round"],
            success=any(call["status"] == "ok" for call in self.calls),
            evidence_level="direct" if self.first_hit is not None else "none",
            input_summary=_input_summary(first, item_chars),
            output_summary=output_summary,
            source_invocation_ids=[call["invocation_id"] for call in self.calls],
        )
        extras = self.spec.trace.extras
        if extras is not None:
            extras(item, self.calls, lambda text: _clip(text, item_chars))
        if len(self.calls) > 1:
            item["repeat_count"] = len(self.calls)
            item["failed_count"] = sum(1 for call in self.calls if call["status"] == "error")
            item["no_hit_count"] = sum(1 for call in self.calls if call["status"] == "no_hit")
        return item


def _bounded_summaries(
    shown: list[tuple[ToolSpec, Invocation]], item_chars: int, total_chars: int
) -> list[str]:
    """Output summaries within ``total_chars`` overall, later items shortened first.

    Item ``i`` may use what the earlier items left after reserving the status floor of every
    later item; once one item had to be shortened, every later item gets its floor, so full
    summaries are only built while they can still be shown.
    """
    floors = [_status_floor(spec, invocation) for spec, invocation in shown]
    reserved = [0] * (len(shown) + 1)
    for index in range(len(shown) - 1, -1, -1):
        reserved[index] = reserved[index + 1] + len(floors[index])
    summaries: list[str] = []
    used = 0
    exhausted = False
    for index, (spec, invocation) in enumerate(shown):
        floor = floors[index]
        if exhausted:
            summary = floor
        else:
            full = _output_summary(spec, invocation, item_chars)
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
    invocations: Sequence[Invocation], *, item_chars: int = 700, total_chars: int = 12000
) -> list[TraceItem]:
    """Summarise a diagnosis's evidence-tool calls for the Verifier.

    Items follow first-call order over all rounds (``trace_ref`` ``t1``, ``t2``, ...). Calls of one
    round with the same tool and the same arguments apart from ``limit``, ``start`` and ``end`` are
    merged into the item of the first: the item summarises the first effective hit (an ok call with
    entries that are not all deduped knowledge), and carries ``repeat_count`` (calls merged,
    including the first), ``failed_count`` and ``no_hit_count``. Failed and no-hit calls stay as
    items with ``evidence_level="none"``.

    Args:
        invocations: The diagnosis's invocation rows in call order.
        item_chars: Maximum length of one item's ``output_summary`` (and ``input_summary``).
        total_chars: Maximum total length of all output summaries; later items are shortened
            first, down to their status (``error``, ``no match``, ``matched N of M``, ...), and no
            item is dropped, so very many items can still exceed it.
    """
    item_chars = max(item_chars, 1)
    groups: dict[Hashable, _Item] = {}
    order: list[_Item] = []
    specs: dict[str, ToolSpec | None] = {}
    for invocation in invocations:
        name = invocation["tool_name"]
        spec = specs[name] if name in specs else specs.setdefault(name, spec_of(name))
        if spec is None or not spec.evidence:
            continue
        key = _merge_key(invocation)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Item(len(order) + 1, spec, invocation)
            order.append(group)
        else:
            group.add(invocation)
    summaries = _bounded_summaries(
        [(group.spec, group.representative()) for group in order], item_chars, max(total_chars, 0)
    )
    return [
        group.render(item_chars, summary) for group, summary in zip(order, summaries, strict=True)
    ]
