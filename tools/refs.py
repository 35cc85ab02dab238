"""Evidence refs: the citable units of one tool invocation, built from its tool's spec.

Each entry of an evidence tool's entry arrays becomes one ref whose ``raw_path`` names it
(``logs[0]``, ``alerts[1]``, ``series[0]``, ``documents[2]``; an array inside an entry adds a
step, ``traces[0].spans[3]``) and whose ``text`` is the entry rendered on one line by its array's
renderer; every evidence invocation ends with one ``summary`` ref stating what was asked and how
much matched. A claim cites a ref by invocation id + ``raw_path``, and its excerpt must occur in
the ref's text, so these texts are a contract (docs/contracts.md, "Evidence tools").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from state.json_shape import whole
from state.records import EvidenceRef, Invocation
from tools.registry import spec_of
from tools.render import format_value
from tools.spec import EntryArray, ToolSpec


def _count(output: Mapping[str, object], array: str) -> int:
    listed = output.get(array)
    return len(listed) if isinstance(listed, list) else 0


def summary_text(
    spec: ToolSpec, arguments: Mapping[str, object], output: Mapping[str, object]
) -> str:
    """The ``summary`` ref of an evidence invocation.

    ``<tool_name> <k>=<v> ... matched <n> of <total> (complete|truncated)``, arguments sorted by
    key with ``None`` values left out; ``n`` counts the entries returned and ``total`` is the
    output's ``total`` when the tool reports one (``matched <n> of at least <total>`` when it
    is a lower bound), else ``n``. A tool that counts its arrays separately reads ``... <array>
    <n> of <total>, <array> <n> of <total> (complete|truncated)``, each total the output's
    ``<array>_total`` when it has one (never less than what was returned; ``of at least <total>``
    when the output says ``<array>_total_at_least``). A tool that reports
    the absolute window it searched states ``window=<start>/<end>`` before the counts.
    ``truncated`` when fewer entries were returned than matched or the output says
    ``truncated`` (a field was capped).
    """
    parts = [spec.name]
    parts += [
        f"{key}={format_value(arguments[key])}"
        for key in sorted(arguments)
        if arguments[key] is not None
    ]
    counts = spec.counts
    if counts.window:
        window = (output.get("window_start"), output.get("window_end"))
        if window[0] and window[1]:
            parts.append(f"window={window[0]}/{window[1]}")
    incomplete = output.get("truncated") is True
    if counts.per_array:
        pieces: list[str] = []
        for array in spec.arrays:
            returned = _count(output, array.name)
            reported = whole(output.get(f"{array.name}_total"))
            total = max(returned, reported if reported is not None else returned)
            at_least = output.get(f"{array.name}_total_at_least") is True
            incomplete = incomplete or returned < total or at_least
            of = "at least " if at_least else ""
            pieces.append(f"{array.name} {returned} of {of}{total}")
        state = "truncated" if incomplete else "complete"
        parts.append(f"{', '.join(pieces)} ({state})")
        return " ".join(parts)
    returned = sum(_count(output, array.name) for array in spec.arrays)
    total, of = returned, ""
    if counts.total:
        reported = whole(output.get("total"))
        total = reported if reported is not None else returned
        if output.get("total_at_least") is True:
            of = "at least "
    incomplete = incomplete or returned < total
    state = "truncated" if incomplete else "complete"
    parts.append(f"matched {returned} of {of}{total} ({state})")
    return " ".join(parts)


def _entry_refs(array: EntryArray, entries: object, prefix: str = "") -> list[EvidenceRef]:
    """One ref per entry (an object) of ``entries``, each followed by its inner arrays' refs."""
    refs: list[EvidenceRef] = []
    if not isinstance(entries, list):
        return refs
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        path = f"{prefix}{array.name}[{index}]"
        refs.append(
            EvidenceRef(raw_path=path, text=array.render(entry), source_type=array.source_type)
        )
        for inner in array.within:
            refs += _entry_refs(inner, entry.get(inner.name), prefix=f"{path}.")
    return refs


def spec_refs(
    spec: ToolSpec, arguments: Mapping[str, object], output: Mapping[str, object]
) -> list[EvidenceRef]:
    """The refs of one output of an evidence tool: its entries in array order, then ``summary``."""
    refs = [ref for array in spec.arrays for ref in _entry_refs(array, output.get(array.name))]
    refs.append(
        EvidenceRef(
            raw_path="summary",
            text=summary_text(spec, arguments, output),
            source_type="summary",
        )
    )
    return refs


def build_evidence_refs(
    tool_name: str, arguments: Mapping[str, object], output: Mapping[str, object] | None
) -> list[EvidenceRef]:
    """The evidence refs of one invocation.

    Returns:
        One ref per output entry in output order, then exactly one ``summary`` ref. Helper
        tools, unknown tools and failed calls (no output) give ``[]``.
    """
    spec = spec_of(tool_name)
    if spec is None or not spec.evidence or output is None:
        return []
    return spec_refs(spec, arguments, output)


def ref_text(refs: Sequence[EvidenceRef], raw_path: str) -> str:
    """The text of the ref at ``raw_path`` ("" when there is none)."""
    return next((ref["text"] for ref in refs if ref["raw_path"] == raw_path), "")


def grounding_text(invocation: Invocation, raw_path: str) -> str:
    """The text of a ref that may ground a claim's counts and values.

    The ref text itself, unless the entry's array says otherwise (a log line without its
    timestamp and instance, whose digits are no count or value of the incident).
    """
    text = ref_text(invocation["retrieval_details"].get("evidence_refs", []), raw_path)
    spec = spec_of(invocation["tool_name"])
    if spec is None or not spec.grounds_apart:
        return text
    found = spec.locate(invocation["output"], raw_path)
    if found is None or found[0].grounding is None:
        return text
    array, entry = found
    assert array.grounding is not None
    return array.grounding(entry)
