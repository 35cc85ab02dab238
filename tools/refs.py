"""Evidence refs: the citable units of one tool invocation (contracts section 2).

Each entry of an evidence tool's output becomes one ref whose `raw_path` names it (`logs[0]`,
`alerts[1]`, `series[0]`, `documents[2]`) and whose `text` renders it on one line; every evidence
invocation ends with one `summary` ref stating what was asked and how much matched. A claim cites
a ref by invocation id + `raw_path`, and its excerpt must occur in the ref's text, so these texts
are a contract: they change only together with the contracts document.
"""

from __future__ import annotations

import json
from typing import Any

from tools.schemas import EVIDENCE_TOOLS


def format_value(value: Any) -> str:
    """Renders one value the way every ref text shows it.

    Rules: `None` -> `null`; bool -> `true`/`false`; int -> decimal digits; a float that is
    integral -> its int form (`12.0` -> `12`); any other float -> `repr` (`0.23`); str as is;
    list/dict -> compact JSON (no spaces, non-ASCII kept); anything else -> `str()`.

    Args:
        value: The value to render.

    Returns:
        The rendered text.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)


def _present(entry: dict[str, Any], key: str) -> bool:
    return entry.get(key) is not None


def _with_message(head: list[str], message: Any) -> str:
    """Joins the head parts with spaces and appends `: <message>` when there is one."""
    text = " ".join(head)
    if message is None:
        return text
    return f"{text}: {format_value(message)}" if text else format_value(message)


def log_text(entry: dict[str, Any]) -> str:
    """Renders a log entry: `<timestamp> <level> <service> <instance>: <message>`.

    Args:
        entry: One element of `logs`.

    Returns:
        The ref text; absent fields are left out.
    """
    head = [
        format_value(entry[k])
        for k in ("timestamp", "level", "service", "instance")
        if _present(entry, k)
    ]
    return _with_message(head, entry.get("message"))


def alert_text(entry: dict[str, Any]) -> str:
    """Renders an alert.

    Format: `<alert_name> service=<service> severity=<severity> state=<state> value=<value>
    threshold=<threshold> active_at=<active_at>: <summary>` (one line).

    Args:
        entry: One element of `alerts`.

    Returns:
        The ref text; absent fields are left out with their key.
    """
    head = [format_value(entry["alert_name"])] if _present(entry, "alert_name") else []
    for key in ("service", "severity", "state", "value", "threshold", "active_at"):
        if _present(entry, key):
            head.append(f"{key}={format_value(entry[key])}")
    return _with_message(head, entry.get("summary"))


def series_text(entry: dict[str, Any]) -> str:
    """Renders a metric series.

    Format: `<metric>{<k>=<v>,...} min=<min><unit> max=<max><unit> last=<last><unit>
    points=<points_count>` (one line, labels sorted by key, `{}` when there are none).

    Args:
        entry: One element of `series`.

    Returns:
        The ref text; absent fields are left out with their key.
    """
    labels = entry.get("labels")
    label_map: dict[str, Any] = labels if isinstance(labels, dict) else {}
    rendered = ",".join(
        f"{k}={format_value(label_map[k])}" for k in sorted(label_map) if label_map[k] is not None
    )
    metric = format_value(entry["metric"]) if _present(entry, "metric") else ""
    parts = [f"{metric}{{{rendered}}}"]
    unit = format_value(entry["unit"]) if _present(entry, "unit") else ""
    for key in ("min", "max", "last"):
        if _present(entry, key):
            parts.append(f"{key}={format_value(entry[key])}{unit}")
    if _present(entry, "points_count"):
        parts.append(f"points={format_value(entry['points_count'])}")
    return " ".join(parts)


def document_text(entry: dict[str, Any]) -> str:
    """Renders a knowledge document: `<title> (<source>): <chunk>`.

    Args:
        entry: One element of `documents`.

    Returns:
        The ref text; absent fields are left out.
    """
    head = [format_value(entry["title"])] if _present(entry, "title") else []
    if _present(entry, "source"):
        head.append(f"({format_value(entry['source'])})")
    return _with_message(head, entry.get("chunk"))


def summary_text(tool_name: str, arguments: dict[str, Any], output: dict[str, Any]) -> str:
    """Renders the `summary` ref of an evidence invocation.

    Format: `<tool_name> <k>=<v> ... matched <n> of <total> (complete|truncated)`, arguments
    sorted by key with `None` values skipped. For `query_logs`, `n` is the number of lines
    returned and `total` the output's `total`; for `query_metrics` both count alerts plus series;
    for `lookup_knowledge` both count documents. The result is `truncated` when fewer entries
    were returned than matched or when the output says `truncated: true` (a field was capped).

    Args:
        tool_name: The tool that was called.
        arguments: The call's arguments.
        output: The (bounded) output of the call.

    Returns:
        The summary text.
    """
    if tool_name == "query_logs":
        returned = len(_entries(output, "logs"))
        total_raw = output.get("total")
        total = (
            total_raw
            if isinstance(total_raw, int) and not isinstance(total_raw, bool)
            else returned
        )
    elif tool_name == "query_metrics":
        returned = len(_entries(output, "alerts")) + len(_entries(output, "series"))
        total = returned
    else:
        returned = len(_entries(output, "documents"))
        total = returned
    incomplete = returned < total or output.get("truncated") is True
    parts = [tool_name]
    parts.extend(
        f"{key}={format_value(arguments[key])}"
        for key in sorted(arguments)
        if arguments[key] is not None
    )
    parts.append(f"matched {returned} of {total} ({'truncated' if incomplete else 'complete'})")
    return " ".join(parts)


def _entries(output: dict[str, Any], key: str) -> list[Any]:
    value = output.get(key)
    return value if isinstance(value, list) else []


_ARRAYS: dict[str, list[tuple[str, str]]] = {
    "query_logs": [("logs", "log")],
    "query_metrics": [("alerts", "alert"), ("series", "metric")],
    "lookup_knowledge": [("documents", "knowledge")],
}

_RENDERERS = {
    "logs": log_text,
    "alerts": alert_text,
    "series": series_text,
    "documents": document_text,
}


def build_evidence_refs(
    tool_name: str, arguments: dict[str, Any], output: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Builds the evidence refs of one invocation.

    Args:
        tool_name: The tool that was called.
        arguments: The call's arguments (as recorded on the invocation).
        output: The call's (bounded) output; `None` for a failed call.

    Returns:
        `[{raw_path, text, source_type}]`: one ref per output entry in output order
        (`source_type` log, alert, metric or knowledge), then exactly one `summary` ref
        (`source_type` summary). Helper tools, unknown tools and failed calls give `[]`.
    """
    if tool_name not in EVIDENCE_TOOLS or not isinstance(output, dict):
        return []
    refs: list[dict[str, Any]] = []
    for array, source_type in _ARRAYS[tool_name]:
        render = _RENDERERS[array]
        for index, entry in enumerate(_entries(output, array)):
            text = render(entry) if isinstance(entry, dict) else format_value(entry)
            refs.append({"raw_path": f"{array}[{index}]", "text": text, "source_type": source_type})
    refs.append(
        {
            "raw_path": "summary",
            "text": summary_text(tool_name, arguments, output),
            "source_type": "summary",
        }
    )
    return refs
