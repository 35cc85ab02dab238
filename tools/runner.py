"""Runs one tool call: validate, call the backend, bound the output, record the invocation.

``ToolRunner.run`` never raises for anything the model or the backend did: unknown tools, bad
arguments, backend exceptions, timeouts and outputs of the wrong shape all become an invocation
with status ``error``, no evidence refs, and an ``error`` text saying what failed. What a backend
returns is bounded (entry counts, string lengths) and validated into a ``ToolOutput`` here, once.
Every call is recorded in the ledger before its result is returned, under an idempotency key
derived from the diagnosis, the round and the tool call id, so re-running a graph node returns
the recorded row instead of calling the backend again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import BaseModel, TypeAdapter, ValidationError

from persistence.ledger import InvocationLedger
from state import json_shape
from state.display import clean_text
from state.records import (
    HELPER_TOOLS,
    KNOWLEDGE_TOOL,
    Invocation,
    InvocationDraft,
    InvocationStatus,
    JSONObject,
    RetrievalDetails,
    ToolOutput,
)
from tools.backend import EvidenceBackend, ReplayedError
from tools.points import bounded_points
from tools.refs import ENTRY_ARRAYS, build_evidence_refs, format_value
from tools.schemas import ARGUMENT_MODELS

TRUNCATION_MARKER = " …[truncated]"
"""Appended to a string field cut at the field cap."""

MAX_ENTRIES = 100
"""Upper bound on the entries of any output array (logs are further bounded by ``limit``)."""

_OUTPUT: TypeAdapter[ToolOutput] = TypeAdapter(ToolOutput)


class _Timeout(Exception):
    pass


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(value: dict[str, object]) -> JSONObject:
    """A backend result (or call arguments) as a plain JSON object.

    Values JSON has no type for become their text; every string, keys included, is cleaned of
    lone surrogates and NUL characters (``state.display``).
    """
    copied: JSONObject = json.loads(json.dumps(value, ensure_ascii=False, default=str))
    return cast(JSONObject, _map_strings(copied, clean_text, keys=clean_text))


def _map_strings(
    value: object, change: Callable[[str], str], *, keys: Callable[[Any], Any] = lambda key: key
) -> object:
    """``value`` with ``change`` applied to every string inside it (and ``keys`` to dict keys).

    Dicts, lists and tuples are walked (a tuple becomes a list); other values are kept as they
    are.
    """
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {keys(key): _map_strings(item, change, keys=keys) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_map_strings(item, change, keys=keys) for item in value]
    return value


def _cap_strings(value: object, cap: int) -> tuple[object, bool]:
    """Cap every string inside ``value`` at ``cap`` characters; tell whether any was cut.

    Works on what a backend returned, before any copy into JSON.
    """
    cut = False

    def shorten(text: str) -> str:
        nonlocal cut
        if len(text) <= cap:
            return text
        cut = True
        return text[:cap] + TRUNCATION_MARKER

    capped = _map_strings(value, shorten)
    return capped, cut


def _series_points(entry: object) -> object:
    """A series entry with its ``points`` bounded (``tools.points``); other entries unchanged."""
    if not isinstance(entry, Mapping) or "points" not in entry:
        return entry
    return {**entry, "points": bounded_points(entry["points"])}


def _validation_message(tool_name: str, exc: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
        for error in exc.errors()
    ]
    return f"invalid arguments for {tool_name}: " + "; ".join(problems)


def _count(value: object) -> int | None:
    """A count a backend reported, or None when it is not a non-negative integer."""
    number = json_shape.whole(value)
    return number if number is not None and number >= 0 else None


def _arguments(name: str, raw: object) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments of a call as sent (None for none), or the error when they are no object."""
    if isinstance(raw, str):
        return None, (
            f"the arguments of this {name} call are not valid JSON ({raw[:200]!r}); "
            "call the tool again with one JSON object of arguments"
        )
    if raw is not None and not isinstance(raw, dict):
        return None, f"arguments for {name} must be a JSON object, got {type(raw).__name__}"
    return raw, None


def call_key(call: Mapping[str, object]) -> str:
    """The tool call id, or a stable stand-in derived from name and arguments when missing."""
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
            and marked with `` …[truncated]``.
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
        call: Mapping[str, object],
        *,
        diagnosis_id: str,
        thread_id: str,
        round: int,
        timeout_s: float | None = None,
    ) -> Invocation:
        """Run one tool call (``{"name", "args", "id"}``) and return its recorded invocation.

        When the call's idempotency key is already recorded, that row is returned and nothing
        is executed.
        """
        idempotency_key = f"{diagnosis_id}:r{round}:{call_key(call)}"
        existing = self._ledger.find(idempotency_key)
        if existing is not None:
            return existing

        started_at = _now_iso()
        clock = time.perf_counter()
        name = str(call.get("name"))
        raw_args, problem = _arguments(name, call.get("args"))
        arguments: JSONObject = _plain(raw_args) if raw_args is not None else {}
        output: ToolOutput | None = None
        error: str | None = None
        details = RetrievalDetails(evidence_refs=[])
        urls: list[str] = []

        model = ARGUMENT_MODELS.get(name)
        if model is None:
            error = f"unknown tool {name!r}; available tools: {', '.join(sorted(ARGUMENT_MODELS))}"
        elif problem is not None:
            error = problem
        else:
            try:
                validated = model.model_validate(raw_args or {})
            except ValidationError as exc:
                error = _validation_message(name, exc)
            else:
                arguments = validated.model_dump(exclude_none=True, exclude_unset=True)
                timeout = self._timeout_s if timeout_s is None else timeout_s
                if name == KNOWLEDGE_TOOL and getattr(self._backend, "follows_runbook_urls", False):
                    urls = self._runbook_urls(diagnosis_id, str(arguments.get("query", "")))
                extra = {"runbook_urls": urls} if urls else {}
                output, error = self._execute(name, validated, timeout, extra)

        status: InvocationStatus = "error"
        if output is not None:
            status = self._status(name, output)
            details = RetrievalDetails(evidence_refs=build_evidence_refs(name, arguments, output))
            if name == KNOWLEDGE_TOOL:
                details.update(self._mark_deduped(diagnosis_id, output))
                if urls:
                    details["runbook_urls"] = urls
        return self._ledger.record(
            InvocationDraft(
                diagnosis_id=diagnosis_id,
                thread_id=thread_id,
                round=round,
                tool_name=name,
                arguments=arguments,
                status=status,
                output=output,
                retrieval_details=details,
                idempotency_key=idempotency_key,
                started_at=started_at,
                duration_ms=round_ms(time.perf_counter() - clock),
                error=error,
            )
        )

    def _runbook_urls(self, diagnosis_id: str, query: str) -> list[str]:
        """Runbook URLs of the alerts returned earlier in this diagnosis that the query names.

        An alert is named by its name or its service; the knowledge backend puts the runbooks
        these URLs point at first.
        """
        wanted = query.casefold()
        urls: list[str] = []
        for row in self._ledger.list(diagnosis_id):
            if row["tool_name"] != "query_metrics" or row["output"] is None:
                continue
            for alert in row["output"].get("alerts", []):
                url = alert.get("runbook_url")
                named = [alert.get("alert_name"), alert.get("service")]
                if url and any(n and n.casefold() in wanted for n in named):
                    urls.append(url)
        return list(dict.fromkeys(urls))

    def _execute(
        self,
        name: str,
        validated: BaseModel,
        timeout_s: float | None,
        extra: Mapping[str, object] | None = None,
    ) -> tuple[ToolOutput | None, str | None]:
        """Call the backend; return ``(output, None)`` or ``(None, error text)``."""
        method: Callable[..., object] = getattr(self._backend, name)
        try:
            kwargs = {**validated.model_dump(), **(extra or {})}
            result = self._call_with_timeout(method, kwargs, timeout_s)
        except _Timeout:
            return None, f"timed out after {format_value(timeout_s)}s"
        except ReplayedError as exc:
            return None, exc.invocation_error  # a replayed error, as recorded
        except Exception as exc:  # any backend failure becomes an error row
            return None, f"{type(exc).__name__}: {exc}"
        if not isinstance(result, dict):
            return None, f"backend returned {type(result).__name__}, expected an object"
        try:
            # Bounded first: a 10 MB message is cut before anything copies it (the JSON below).
            plain = _plain(self._bound(name, result, validated))
        except (TypeError, ValueError) as exc:
            return None, f"backend returned data that is not JSON-compatible ({exc})"
        try:
            return _OUTPUT.validate_python(plain), None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return None, f"backend returned an output of the wrong shape ({where}: {first['msg']})"

    def _call_with_timeout(
        self, method: Callable[..., object], kwargs: dict[str, object], timeout_s: float | None
    ) -> object:
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

    def _bound(
        self, name: str, output: Mapping[str, object], validated: BaseModel
    ) -> dict[str, object]:
        """Limit entry counts and cap string fields; set ``truncated`` when anything was cut.

        Runs on the backend's own result, before it is copied into plain JSON, so the copy costs
        what the bounded output costs whatever the backend returned.
        """
        if name in HELPER_TOOLS:
            return {key: _cap_strings(item, self._field_cap)[0] for key, item in output.items()}
        limit = MAX_ENTRIES
        if name == "query_logs":
            limit = min(int(getattr(validated, "limit", MAX_ENTRIES)), MAX_ENTRIES)
        elif name == KNOWLEDGE_TOOL:
            limit = min(int(getattr(validated, "top_k", MAX_ENTRIES)), MAX_ENTRIES)
        bounded: dict[str, object] = {}
        cut_any = False
        returned = 0
        for array in ENTRY_ARRAYS[name]:
            found = output.get(array)
            listed = found if isinstance(found, list | tuple) else []
            entries = list(listed[:limit])
            if array == "series":
                entries = [_series_points(entry) for entry in entries]
            cut_any = cut_any or len(listed) > limit
            capped, cut = _cap_strings(entries, self._field_cap)
            bounded[array] = capped
            cut_any = cut_any or cut
            returned = len(entries)
            if name == "query_metrics":
                matched = _count(output.get(f"{array}_total"))
                matched = max(matched or 0, len(listed))
                if matched > returned or f"{array}_total" in output:
                    bounded[f"{array}_total"] = matched
        if name == "query_logs":
            total = max(_count(output.get("total")) or 0, returned)
            bounded["total"] = total
            at_least = output.get("total_at_least") is True
            if at_least:
                bounded["total_at_least"] = True
            bounded["truncated"] = (
                bool(output.get("truncated")) or cut_any or total > returned or at_least
            )
        elif cut_any or output.get("truncated") is True:
            bounded["truncated"] = True
        if name in ("query_metrics", "query_logs"):
            for key in ("window_start", "window_end"):
                value = output.get(key)
                if isinstance(value, str):
                    bounded[key] = value[:64]
        return bounded

    def _mark_deduped(self, diagnosis_id: str, output: ToolOutput) -> RetrievalDetails:
        """Mark documents already returned in this diagnosis; return the retrieval extras."""
        seen = {
            doc["doc_id"]
            for row in self._ledger.list(diagnosis_id)
            if row["tool_name"] == KNOWLEDGE_TOOL and row["output"] is not None
            for doc in row["output"].get("documents", [])
            if doc.get("doc_id") is not None
        }
        documents = output.get("documents", [])
        for doc in documents:
            doc["deduped"] = doc.get("doc_id") in seen
        return RetrievalDetails(
            layers=["keyword"],
            relevance=[doc.get("relevance") for doc in documents],
            source_docs=[doc.get("source") for doc in documents],
            deduped=[doc["doc_id"] for doc in documents if doc["deduped"] and "doc_id" in doc],
        )

    @staticmethod
    def _status(name: str, output: ToolOutput) -> InvocationStatus:
        if name in HELPER_TOOLS:
            return "ok"
        count = (
            len(output.get("logs", []))
            + len(output.get("alerts", []))
            + len(output.get("series", []))
            + len(output.get("documents", []))
        )
        return "ok" if count else "no_hit"


def round_ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded to microseconds."""
    return round(seconds * 1000.0, 3)


def tool_message_content(invocation: Invocation) -> str:
    """The tool message the executor model reads for one invocation (compact JSON).

    ``invocation_id``, ``tool_name``, ``status``, ``error`` (when the call failed, with a note that
    it produced no evidence), ``evidence_refs`` as ``[{raw_path, text}]``, ``deduped`` (doc ids
    already seen, lookup_knowledge only, when any) and, for helper tools, which have no refs,
    their small ``output`` (e.g. ``{"now": ...}``).
    """
    details = invocation["retrieval_details"]
    message: JSONObject = {
        "invocation_id": invocation["invocation_id"],
        "tool_name": invocation["tool_name"],
        "status": invocation["status"],
    }
    if invocation["error"]:
        message["error"] = invocation["error"]
        message["note"] = "this call produced no evidence and cannot be cited"
    message["evidence_refs"] = [
        {"raw_path": ref["raw_path"], "text": ref["text"]}
        for ref in details.get("evidence_refs", [])
    ]
    if details.get("deduped"):
        message["deduped"] = list(details.get("deduped", []))
    output = invocation["output"]
    if invocation["tool_name"] in HELPER_TOOLS and output is not None and "now" in output:
        message["output"] = {"now": output["now"]}
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))
