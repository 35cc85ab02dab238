"""What the MCP server returns: a diagnosis, its claims and their evidence, as plain data.

Everything here is read from a diagnosis's audit record and its invocations, exactly what
``superbiz sessions show --json`` and ``GET /api/diagnoses/{id}`` return, so an MCP client sees
the same claims, labels and evidence as the command line and the web page.

An **evidence handle** names one citable ref: ``<invocation_id>#<raw_path>`` (``inv-3#logs[0]``).
``get_evidence`` takes one (or a bare invocation id) and returns the raw entry behind it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from state.display import one_line
from state.json_shape import objects
from state.records import CONFIRMED_LABELS, DiagnosisRecord, Invocation

_SERVICE = re.compile(r"(?:^|\s)service=(\S+)")
_TABLE_CELL = 300
"""Longest text of one cell of the claims table (Markdown), in characters."""


def handle(invocation_id: str, raw_path: str) -> str:
    """The evidence handle of one ref: ``<invocation_id>#<raw_path>``."""
    return f"{invocation_id}#{raw_path}"


def split_handle(text: str) -> tuple[str, str | None]:
    """``(invocation_id, raw_path)`` of a handle; a bare invocation id gives ``(id, None)``."""
    invocation_id, mark, raw_path = text.partition("#")
    return invocation_id.strip(), (raw_path.strip() or None) if mark else None


def _evaluation(record: Mapping[str, Any]) -> dict[str, Any]:
    channels = record.get("self_evaluation") or {}
    evaluation = channels.get("verifier_evaluation") if isinstance(channels, dict) else None
    return evaluation if isinstance(evaluation, dict) else {}


def _ref_text(invocation: Invocation | None, raw_path: str) -> str | None:
    if invocation is None:
        return None
    refs = invocation["retrieval_details"].get("evidence_refs", [])
    return next((ref["text"] for ref in refs if ref["raw_path"] == raw_path), None)


def root_cause_of(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The diagnosis's root cause when its record holds one (``root_cause``), else None."""
    channels = record.get("self_evaluation") or {}
    found = channels.get("root_cause") if isinstance(channels, dict) else None
    if found is None:
        found = _evaluation(record).get("root_cause")
    if not isinstance(found, dict) or not isinstance(found.get("service"), str):
        return None
    return {
        "service": found["service"],
        "mechanism": str(found.get("mechanism") or ""),
        "claim_ids": [str(claim) for claim in found.get("claim_ids") or []],
    }


def claims_of(record: Mapping[str, Any], invocations: Sequence[Invocation]) -> list[dict[str, Any]]:
    """Each claim the executor stated, with its label and its evidence handles.

    Per claim: ``claim_id``, ``claim_type``, ``text``, ``label`` (the claim check's label,
    ``unchecked`` when there is none), ``confirmed`` (whether the label lets the answer present it
    as established), ``detail`` and ``evidence``: per binding its ``handle``, ``invocation_id``,
    ``raw_path``, ``tool``, the ``excerpt`` quoted, whether the Gatekeeper ``verified`` it, and
    the cited ref's ``ref_text``.
    """
    evaluation = _evaluation(record)
    output = evaluation.get("executor_structured_output")
    claims = objects(output.get("claims")) if isinstance(output, dict) else []
    checks = {
        str(check.get("claim_id")): check for check in objects(evaluation.get("claim_checks"))
    }
    gate = evaluation.get("gatekeeper_result")
    verified_by_claim = gate.get("verified_excerpts") if isinstance(gate, dict) else None
    verified_by_claim = verified_by_claim if isinstance(verified_by_claim, dict) else {}
    by_id = {invocation["invocation_id"]: invocation for invocation in invocations}
    shown: list[dict[str, Any]] = []
    for claim in claims:
        claim_id = str(claim.get("claim_id"))
        check = checks.get(claim_id)
        label = str(check.get("verification")) if check is not None else "unchecked"
        verified = {item.get("binding") for item in objects(verified_by_claim.get(claim_id))}
        evidence: list[dict[str, Any]] = []
        for index, binding in enumerate(objects(claim.get("evidence_bindings"))):
            invocation_id = binding.get("source_invocation_id")
            if not isinstance(invocation_id, str):
                listed = binding.get("source_invocation_ids")
                first = listed[0] if isinstance(listed, list) and listed else None
                invocation_id = first if isinstance(first, str) else ""
            raw_path = binding.get("raw_path")
            raw_path = raw_path if isinstance(raw_path, str) else ""
            invocation = by_id.get(invocation_id)
            tool = binding.get("tool_name")
            evidence.append(
                {
                    "handle": handle(invocation_id, raw_path),
                    "invocation_id": invocation_id,
                    "raw_path": raw_path,
                    "tool": invocation["tool_name"] if invocation else tool,
                    "excerpt": binding.get("evidence_excerpt"),
                    "verified": index in verified,
                    "ref_text": _ref_text(invocation, raw_path),
                }
            )
        shown.append(
            {
                "claim_id": claim_id,
                "claim_type": claim.get("claim_type"),
                "text": claim.get("claim_text"),
                "label": label,
                "confirmed": label in CONFIRMED_LABELS,
                "detail": check.get("detail") if check is not None else None,
                "evidence": evidence,
            }
        )
    return shown


def diagnosis_view(record: DiagnosisRecord, invocations: Sequence[Invocation]) -> dict[str, Any]:
    """One diagnosis as the MCP tools return it (``diagnose``, ``get_diagnosis``)."""
    evaluation = _evaluation(record)
    return {
        "diagnosis_id": record["id"],
        "thread_id": record["thread_id"],
        "question": record["question"],
        "status": record["status"],
        "note": record["note"],
        "verdict": record["verdict"],
        "score": record["score"],
        "rounds": record["rounds"],
        "offline": bool(evaluation.get("offline", False)),
        "root_cause": root_cause_of(record),
        "answer": record["final_answer"],
        "claims": claims_of(record, invocations),
        "invocations": len(invocations),
        "created_at": record["created_at"],
        "updated_at": record["updated_at"],
    }


def services_of(record: Mapping[str, Any]) -> list[str]:
    """The services a diagnosis queried (``service=`` in its tool trace), sorted."""
    found: set[str] = set()
    for item in objects(_evaluation(record).get("tool_trace_summary")):
        summary = item.get("input_summary")
        if isinstance(summary, str):
            found.update(_SERVICE.findall(summary))
    return sorted(found)


def listing_entry(record: DiagnosisRecord) -> dict[str, Any]:
    """One diagnosis in ``list_diagnoses``."""
    return {
        "diagnosis_id": record["id"],
        "thread_id": record["thread_id"],
        "question": record["question"],
        "status": record["status"],
        "verdict": record["verdict"],
        "score": record["score"],
        "services": services_of(record),
        "created_at": record["created_at"],
    }


def evidence_view(invocation: Invocation, raw_path: str | None) -> dict[str, Any]:
    """One invocation, or one ref of it: tool, arguments, time, status and the raw excerpt.

    With ``raw_path``: that ref's ``text`` and the raw ``entry`` it was rendered from (the
    ``summary`` ref has no entry); without: every ref of the invocation.

    Raises:
        KeyError: When the invocation has no ref at ``raw_path``.
    """
    refs = invocation["retrieval_details"].get("evidence_refs", [])
    view: dict[str, Any] = {
        "invocation_id": invocation["invocation_id"],
        "diagnosis_id": invocation["diagnosis_id"],
        "tool": invocation["tool_name"],
        "arguments": invocation["arguments"],
        "round": invocation["round"],
        "status": invocation["status"],
        "error": invocation["error"],
        "started_at": invocation["started_at"],
        "duration_ms": invocation["duration_ms"],
    }
    if raw_path is None:
        view["refs"] = [
            {
                "handle": handle(invocation["invocation_id"], ref["raw_path"]),
                "raw_path": ref["raw_path"],
                "source_type": ref["source_type"],
                "text": ref["text"],
            }
            for ref in refs
        ]
        return view
    ref = next((ref for ref in refs if ref["raw_path"] == raw_path), None)
    if ref is None:
        raise KeyError(raw_path)
    view.update(
        handle=handle(invocation["invocation_id"], raw_path),
        raw_path=raw_path,
        source_type=ref["source_type"],
        text=ref["text"],
        entry=_entry_at(invocation["output"], raw_path),
    )
    return view


def _entry_at(output: Mapping[str, Any] | None, raw_path: str) -> Any:
    """The raw entry a path names in an output (``logs[2]``, ``traces[0].spans[3]``), else None."""
    current: Any = output
    for step in raw_path.split("."):
        name, bracket, rest = step.partition("[")
        if not bracket or not rest.endswith("]") or not rest[:-1].isdigit():
            return None
        listed = current.get(name) if isinstance(current, Mapping) else None
        index = int(rest[:-1])
        if not isinstance(listed, list) or index >= len(listed):
            return None
        current = listed[index]
    return current


def _cell(value: object) -> str:
    return one_line(str(value if value is not None else ""), _TABLE_CELL).replace("|", "\\|")


def claims_table(view: Mapping[str, Any]) -> str:
    """The claims of a diagnosis view as a Markdown table (the ``claims`` resource)."""
    lines = [
        f"Claims of diagnosis {view['diagnosis_id']} (verdict {view['verdict'] or '-'}, "
        f"score {view['score'] if view['score'] is not None else '-'})",
        "",
        "| claim | label | text | evidence (handle: excerpt) |",
        "|---|---|---|---|",
    ]
    for claim in view["claims"]:
        cited = "; ".join(
            f"{item['handle']}{'' if item['verified'] else ' (not verified)'}: "
            f"\u201c{item['excerpt'] or ''}\u201d"
            for item in claim["evidence"]
        )
        mark = "" if claim["confirmed"] else " (not shown as confirmed)"
        lines.append(
            f"| {_cell(claim['claim_id'])} | {_cell(claim['label'] + mark)} | "
            f"{_cell(claim['text'])} | {_cell(cited or 'none')} |"
        )
    if not view["claims"]:
        lines.append("| - | - | the executor stated no claims | - |")
    return "\n".join(lines) + "\n"
