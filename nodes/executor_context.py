"""What the executor model reads each turn: the conversation, bounded in characters.

The checkpointed conversation holds each tool result as a small reference (its invocation id,
tool and status: ``tool_reference``, written by the ``tools`` node). Before a model turn,
``bounded_history`` turns the references into what the model reads:

- a tool result the executor has already seen (a model reply follows it) is shown **compacted**:
  its invocation id, tool, status, the raw paths of its refs and its one-line summary. The full
  texts stay in the ledger, remain citable, and the Gatekeeper checks citations against the
  ledger, never against the conversation;
- the results the executor has not seen yet are shown in full, unless that would take the turn
  over its character bound (``Context.executor_context_chars``): then each one keeps as many of
  its refs in order as its share of the bound allows, always its ``summary`` ref, and lists the
  raw paths of the refs whose texts were left out.

So what one turn sends is bounded, and a round's total grows linearly with its tool turns
instead of quadratically. Only content characters are counted (``nodes.common.content_chars``);
the tool schemas bound to the model are a constant on top.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from models.messages import content_chars, json_content
from state.display import one_line
from state.json_shape import at, objects
from state.records import Invocation, JSONObject
from tools.runner import tool_message_content

SUMMARY_CHARS = 240
"""How much of the ``summary`` ref a compacted tool result keeps."""

COMPACTED_NOTE = (
    "shown in full earlier; full texts are on record and citable with the excerpts you read"
)
"""What a compacted tool result says about its texts."""

OMITTED_NOTE = (
    "texts not shown to keep this turn within its size bound; not citable from here, query "
    "again with narrower arguments to read them"
)
"""What a tool result cut for the bound says about the refs it leaves out."""

_INDEXED = re.compile(r"^(?P<array>[a-z_]+)\[(?P<index>\d+)\]$")


def raw_path_ranges(paths: Sequence[str]) -> str:
    """Raw paths in order, consecutive indices of one array as a range: ``logs[0]..logs[99]``."""
    parts: list[str] = []
    run: tuple[str, int, int] | None = None

    def close() -> None:
        if run is not None:
            array, first, last = run
            parts.append(
                f"{array}[{first}]" if first == last else f"{array}[{first}]..{array}[{last}]"
            )

    for path in paths:
        match = _INDEXED.match(path)
        if match is None:
            close()
            run = None
            parts.append(path)
            continue
        array, index = match["array"], int(match["index"])
        if run is not None and run[0] == array and run[2] + 1 == index:
            run = (array, run[1], index)
            continue
        close()
        run = (array, index, index)
    close()
    return ", ".join(parts)


def tool_reference(invocation: Invocation) -> str:
    """What the checkpointed tool message holds: the invocation's id, tool and status."""
    return json.dumps(
        {
            "invocation_id": invocation["invocation_id"],
            "tool_name": invocation["tool_name"],
            "status": invocation["status"],
        },
        ensure_ascii=False,
    )


def _summary_line(invocation: Invocation) -> str:
    refs = invocation["retrieval_details"].get("evidence_refs", [])
    text = next((ref["text"] for ref in refs if ref["raw_path"] == "summary"), "")
    if not text:
        text = invocation["error"] or f"{len(refs)} refs"
    return one_line(text, SUMMARY_CHARS)


def compacted_content(invocation: Invocation) -> str:
    """An invocation seen before: id, tool, status, raw paths of its refs, one-line summary."""
    refs = invocation["retrieval_details"].get("evidence_refs", [])
    message: JSONObject = {
        "invocation_id": invocation["invocation_id"],
        "tool_name": invocation["tool_name"],
        "status": invocation["status"],
        "raw_paths": raw_path_ranges([ref["raw_path"] for ref in refs]),
        "summary": _summary_line(invocation),
        "texts": COMPACTED_NOTE if refs else "none (this call produced no evidence)",
    }
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def fitted_content(invocation: Invocation, limit: int) -> str:
    """The full tool message, or as many refs (in order) as fit in ``limit`` characters.

    The ``summary`` ref is always kept; the raw paths of the refs left out are listed.
    """
    full = tool_message_content(invocation)
    if len(full) <= limit:
        return full
    data: JSONObject = json.loads(full)
    refs = objects(data.get("evidence_refs"))
    summary = [ref for ref in refs if ref.get("raw_path") == "summary"]
    entries = [ref for ref in refs if ref.get("raw_path") != "summary"]

    def render(count: int) -> str:
        shown: JSONObject = {**data, "evidence_refs": [*entries[:count], *summary]}
        left_out = [str(ref.get("raw_path")) for ref in entries[count:]]
        if left_out:
            shown["omitted_refs"] = raw_path_ranges(left_out)
            shown["omitted_note"] = OMITTED_NOTE
        return json.dumps(shown, ensure_ascii=False, separators=(",", ":"))

    # Estimate the count from the sizes of the refs, then step back until it fits.
    room = limit - len(render(0))
    count = 0
    for ref in entries:
        room -= len(json.dumps(ref, ensure_ascii=False, separators=(",", ":"))) + 1
        if room < 0:
            break
        count += 1
    text = render(count)
    while count > 0 and len(text) > limit:
        count -= 1
        text = render(count)
    return text


def _invocation_of(message: AnyMessage, by_id: dict[str, Invocation]) -> Invocation | None:
    """The invocation a tool message refers to (its reference holds the id), else None."""
    if not isinstance(message, ToolMessage):
        return None
    found = at(json_content(message), "invocation_id")
    return by_id.get(str(found)) if found is not None else None


def tool_artifact(invocation: Invocation) -> dict[str, object]:
    """The structured result of an invocation, carried beside its tool message.

    A chat model never reads a message's ``artifact``; rule-based stand-ins (the offline
    executor) read the entries from it instead of re-reading the rendered ref texts.
    """
    return {
        "invocation_id": invocation["invocation_id"],
        "tool_name": invocation["tool_name"],
        "arguments": invocation["arguments"],
        "status": invocation["status"],
        "output": invocation["output"],
    }


def expand_tool_messages(
    messages: Sequence[AnyMessage], invocations: Sequence[Invocation]
) -> list[AnyMessage]:
    """Replace every tool-result reference by the full tool message content (no bound).

    For rule-based stand-ins (offline), which have no context window and read every result.
    """
    by_id = {row["invocation_id"]: row for row in invocations}
    out: list[AnyMessage] = []
    for message in messages:
        row = _invocation_of(message, by_id)
        if row is not None:
            message = message.model_copy(
                update={"content": tool_message_content(row), "artifact": tool_artifact(row)}
            )
        out.append(message)
    return out


def bounded_history(
    messages: Sequence[AnyMessage],
    invocations: Sequence[Invocation],
    *,
    limit_chars: int,
    fixed_chars: int = 0,
) -> list[AnyMessage]:
    """The conversation as the executor model reads it this turn (see the module docstring).

    Args:
        messages: the checkpointed conversation (tool results as references).
        invocations: the diagnosis's ledger rows.
        limit_chars: the bound of one turn, in content characters.
        fixed_chars: characters sent beside ``messages`` (the system prompt, a nudge).
    """
    by_id = {row["invocation_id"]: row for row in invocations}
    last_reply = max(
        (index for index, message in enumerate(messages) if isinstance(message, AIMessage)),
        default=-1,
    )
    out: list[AnyMessage] = []
    fresh: list[tuple[int, Invocation]] = []
    for index, message in enumerate(messages):
        row = _invocation_of(message, by_id)
        if row is None:
            out.append(message)
            continue
        seen = index < last_reply
        content = compacted_content(row) if seen else tool_message_content(row)
        out.append(message.model_copy(update={"content": content, "artifact": tool_artifact(row)}))
        if not seen:
            fresh.append((len(out) - 1, row))
    total = fixed_chars + content_chars(out)
    if fresh and total > limit_chars:
        fresh_chars = sum(len(str(out[position].content)) for position, _ in fresh)
        share = max(0, limit_chars - (total - fresh_chars)) // len(fresh)
        for position, row in fresh:
            out[position] = out[position].model_copy(update={"content": fitted_content(row, share)})
    return out
