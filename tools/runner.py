"""Runs one tool call: validate, call the backend, bound the output, record the invocation.

`ToolRunner.run` never raises for anything the model or the backend did: unknown tools, bad
arguments, backend exceptions and timeouts all become an invocation with status `error`, no
evidence refs, and an `error` text saying what failed. Every call is recorded in the ledger
before its result is returned, under an idempotency key derived from the diagnosis, the round
and the tool call id, so re-running a graph node returns the recorded row instead of calling the
backend again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from persistence.ledger import InvocationLedger
from tools.backend import EvidenceBackend
from tools.refs import build_evidence_refs, format_value
from tools.schemas import ARGUMENT_MODELS, HELPER_TOOLS

TRUNCATION_MARKER = " …[truncated]"
"""Appended to a string field cut at the field cap."""

MAX_ENTRIES = 100
"""Upper bound on the entries of any output array (logs are further bounded by `limit`)."""

_ENTRY_ARRAYS: dict[str, tuple[str, ...]] = {
    "query_logs": ("logs",),
    "query_metrics": ("alerts", "series"),
    "lookup_knowledge": ("documents",),
}


class _Timeout(Exception):
    pass


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    """Turns a backend result into plain JSON data (dicts, lists, str, numbers, bools, None)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _cap_strings(value: Any, cap: int) -> tuple[Any, bool]:
    """Caps every string inside `value` at `cap` characters; tells whether any was cut."""
    if isinstance(value, str):
        if len(value) > cap:
            return value[:cap] + TRUNCATION_MARKER, True
        return value, False
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        cut = False
        for key, item in value.items():
            out[key], item_cut = _cap_strings(item, cap)
            cut = cut or item_cut
        return out, cut
    if isinstance(value, list):
        items = []
        cut = False
        for item in value:
            capped, item_cut = _cap_strings(item, cap)
            items.append(capped)
            cut = cut or item_cut
        return items, cut
    return value, False


def _validation_message(tool_name: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error.get("loc", ())) or "arguments"
        message = str(error.get("msg", "invalid"))
        problems.append(f"{location}: {message}")
    return f"invalid arguments for {tool_name}: " + "; ".join(problems)


def _call_key(call: dict[str, Any]) -> str:
    """The tool call id, or a stable stand-in derived from name and arguments when it is missing."""
    call_id = call.get("id")
    if isinstance(call_id, str) and call_id:
        return call_id
    basis = json.dumps(
        {"name": call.get("name"), "args": call.get("args")}, sort_keys=True, default=str
    )
    return "noid-" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:16]


class ToolRunner:
    """Executes tool calls against a backend and records each one as an invocation.

    Args:
        backend: Where the data comes from.
        ledger: Where invocations are recorded.
        field_cap: Maximum length of any string inside an output entry; longer strings are cut
            and marked with ` …[truncated]`.
        timeout_s: When set, a backend call running longer than this many seconds is abandoned
            and recorded as an error.
    """

    def __init__(
        self,
        backend: EvidenceBackend,
        ledger: InvocationLedger,
        *,
        field_cap: int = 1000,
        timeout_s: float | None = None,
    ) -> None:
        if field_cap < 1:
            raise ValueError("field_cap must be at least 1")
        self._backend = backend
        self._ledger = ledger
        self._field_cap = field_cap
        self._timeout_s = timeout_s
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def run(
        self,
        call: dict[str, Any],
        *,
        diagnosis_id: str,
        thread_id: str,
        round: int,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Runs one tool call and returns its recorded invocation.

        Args:
            call: A LangChain tool call `{"name", "args", "id"}`.
            diagnosis_id: The diagnosis the call belongs to.
            thread_id: The conversation thread.
            round: The diagnosis round (1 or 2).
            timeout_s: Time limit for this call; overrides the runner's ``timeout_s``.

        Returns:
            The invocation row as stored in the ledger (contracts section 2). When the call's
            idempotency key is already recorded, that row is returned and nothing is executed.
        """
        idempotency_key = f"{diagnosis_id}:r{round}:{_call_key(call)}"
        existing = self._ledger.find(idempotency_key)
        if existing is not None:
            return existing

        started_at = _now_iso()
        clock = time.perf_counter()
        tool_name = call.get("name")
        raw_args = call.get("args")
        name = tool_name if isinstance(tool_name, str) else str(tool_name)
        arguments: dict[str, Any] = _plain(raw_args) if isinstance(raw_args, dict) else {}
        output: dict[str, Any] | None = None
        error: str | None = None
        extras: dict[str, Any] = {}

        model = ARGUMENT_MODELS.get(name)
        if model is None:
            known = ", ".join(sorted(ARGUMENT_MODELS))
            error = f"unknown tool {name!r}; available tools: {known}"
        elif raw_args is not None and not isinstance(raw_args, dict):
            error = f"arguments for {name} must be a JSON object, got {type(raw_args).__name__}"
        else:
            try:
                validated = model.model_validate(raw_args or {})
            except ValidationError as exc:
                error = _validation_message(name, exc)
            else:
                arguments = validated.model_dump(exclude_none=True, exclude_unset=True)
                output, error = self._execute(
                    name, validated, self._timeout_s if timeout_s is None else timeout_s
                )
                if output is not None:
                    output = self._bound(name, output, validated)
                    if name == "lookup_knowledge":
                        extras = self._mark_deduped(diagnosis_id, output)

        if error is not None:
            status = "error"
            output = None
            retrieval_details: dict[str, Any] = {"evidence_refs": []}
        else:
            assert output is not None
            status = self._status(name, output)
            retrieval_details = {
                "evidence_refs": build_evidence_refs(name, arguments, output),
                **extras,
            }

        invocation = {
            "invocation_id": None,
            "diagnosis_id": diagnosis_id,
            "thread_id": thread_id,
            "round": round,
            "tool_name": name,
            "arguments": arguments,
            "status": status,
            "output": output,
            "retrieval_details": retrieval_details,
            "idempotency_key": idempotency_key,
            "started_at": started_at,
            "duration_ms": _round_ms(time.perf_counter() - clock),
            "error": error,
        }
        return self._ledger.record(invocation)

    def _execute(
        self, name: str, validated: BaseModel, timeout_s: float | None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Calls the backend; returns (output, None) or (None, error text)."""
        method: Callable[..., Any] = getattr(self._backend, name)
        kwargs = validated.model_dump()
        try:
            result = self._call_with_timeout(method, kwargs, timeout_s)
        except _Timeout:
            return None, f"timed out after {format_value(timeout_s)}s"
        except Exception as exc:  # any backend failure becomes an error row
            return None, f"{type(exc).__name__}: {exc}"
        if not isinstance(result, dict):
            return None, f"backend returned {type(result).__name__}, expected an object"
        try:
            return _plain(result), None
        except (TypeError, ValueError) as exc:
            return None, f"backend returned data that is not JSON-compatible ({exc})"

    def _call_with_timeout(
        self, method: Callable[..., Any], kwargs: dict[str, Any], timeout_s: float | None
    ) -> Any:
        if timeout_s is None or not getattr(self._backend, "needs_timeout", True):
            return method(**kwargs)
        with self._pool_lock:
            if self._pool is None:
                # Reused worker threads: a thread per call cost about 1 ms. A call that times out
                # cannot be cancelled; its worker finishes it in the background.
                self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tool-call")
            pool = self._pool
        future = pool.submit(method, **kwargs)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            raise _Timeout() from None

    def _bound(self, name: str, output: dict[str, Any], validated: BaseModel) -> dict[str, Any]:
        """Limits entry counts and caps string fields; sets `truncated` when anything was cut."""
        if name in HELPER_TOOLS:
            capped, _ = _cap_strings(output, self._field_cap)
            return dict(capped)
        bounded = dict(output)
        cut_any = False
        if name == "query_logs":
            limit = min(int(getattr(validated, "limit", MAX_ENTRIES)), MAX_ENTRIES)
        elif name == "lookup_knowledge":
            limit = min(int(getattr(validated, "top_k", MAX_ENTRIES)), MAX_ENTRIES)
        else:
            limit = MAX_ENTRIES
        for array in _ENTRY_ARRAYS[name]:
            entries = output.get(array)
            entries = entries if isinstance(entries, list) else []
            if len(entries) > limit:
                entries = entries[:limit]
                cut_any = True
            capped, cut = _cap_strings(entries, self._field_cap)
            bounded[array] = capped
            cut_any = cut_any or cut
        if name == "query_logs":
            total = output.get("total")
            returned = len(bounded["logs"])
            if not isinstance(total, int) or isinstance(total, bool) or total < returned:
                total = returned
            bounded["total"] = total
            bounded["truncated"] = bool(output.get("truncated")) or cut_any or total > returned
        elif cut_any or output.get("truncated") is True:
            bounded["truncated"] = True
        return bounded

    def _mark_deduped(self, diagnosis_id: str, output: dict[str, Any]) -> dict[str, Any]:
        """Marks documents already returned in this diagnosis; returns the retrieval extras."""
        seen: set[str] = set()
        for row in self._ledger.list(diagnosis_id):
            if row.get("tool_name") != "lookup_knowledge" or not isinstance(
                row.get("output"), dict
            ):
                continue
            for doc in row["output"].get("documents") or []:
                if isinstance(doc, dict) and doc.get("doc_id") is not None:
                    seen.add(str(doc["doc_id"]))
        documents = [doc if isinstance(doc, dict) else {} for doc in output.get("documents", [])]
        deduped: list[str] = []
        for doc in documents:
            doc_id = doc.get("doc_id")
            doc["deduped"] = doc_id is not None and str(doc_id) in seen
            if doc["deduped"]:
                deduped.append(str(doc_id))
        output["documents"] = documents
        return {
            "layers": ["keyword"],
            "relevance": [doc.get("relevance") for doc in documents],
            "source_docs": [doc.get("source") for doc in documents],
            "deduped": deduped,
        }

    @staticmethod
    def _status(name: str, output: dict[str, Any]) -> str:
        if name in HELPER_TOOLS:
            return "ok"
        count = sum(
            len(output[array])
            for array in _ENTRY_ARRAYS.get(name, ())
            if isinstance(output.get(array), list)
        )
        return "ok" if count else "no_hit"


def _round_ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def tool_message_content(invocation: dict[str, Any]) -> str:
    """Renders the tool message the executor model reads for one invocation.

    The message is compact JSON with `invocation_id`, `tool_name`, `status`, `error` (when the
    call failed, with a note that it produced no evidence), `evidence_refs` as
    `[{raw_path, text}]`, `deduped` (doc ids already seen, lookup_knowledge only, when any) and,
    for helper tools, which have no refs, their small `output` (e.g. `{"now": ...}`).

    Args:
        invocation: A recorded invocation row.

    Returns:
        The JSON text.
    """
    details = invocation.get("retrieval_details") or {}
    refs = details.get("evidence_refs") or []
    message: dict[str, Any] = {
        "invocation_id": invocation.get("invocation_id"),
        "tool_name": invocation.get("tool_name"),
        "status": invocation.get("status"),
    }
    if invocation.get("error"):
        message["error"] = invocation["error"]
        message["note"] = "this call produced no evidence and cannot be cited"
    message["evidence_refs"] = [
        {"raw_path": ref.get("raw_path"), "text": ref.get("text")} for ref in refs
    ]
    if details.get("deduped"):
        message["deduped"] = list(details["deduped"])
    if invocation.get("tool_name") in HELPER_TOOLS and invocation.get("output") is not None:
        message["output"] = invocation["output"]
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))
