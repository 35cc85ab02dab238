"""Runs one tool call: validate, call the backend, bound the output, record the invocation.

``ToolRunner.run`` never raises for anything the model or the backend did: unknown tools, bad
arguments, backend exceptions, timeouts and outputs of the wrong shape all become an invocation
with status ``error``, no evidence refs, and an ``error`` text saying what failed. What a backend
returns is bounded (entry counts, string lengths) and validated into the tool's output model
here, once; how, and how the backend is asked, the tool's spec says (``tools.spec``).
Every call is recorded in the ledger before its result is returned, under an idempotency key
derived from the diagnosis, the round and the tool call id, so re-running a graph node returns
the recorded row instead of calling the backend again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import ValidationError

from persistence.ledger import InvocationLedger
from state import json_shape
from state.display import clean_text
from state.records import (
    Invocation,
    InvocationDraft,
    InvocationStatus,
    JSONObject,
    RetrievalDetails,
)
from tools.backend import EvidenceBackend, ReplayedError
from tools.refs import spec_refs
from tools.registry import names, spec_of
from tools.render import format_value
from tools.spec import MAX_ENTRIES as MAX_ENTRIES  # the bound on every array, kept here too
from tools.spec import AnswersEveryTool, ArgumentError, Call, EntryArray, ToolSpec

TRUNCATION_MARKER = " …[truncated]"
"""Appended to a string field cut at the field cap."""


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
        output: JSONObject | None = None
        error: str | None = None
        details = RetrievalDetails(evidence_refs=[])
        status: InvocationStatus = "error"

        spec = spec_of(name)
        if spec is None:
            error = f"unknown tool {name!r}; available tools: {', '.join(sorted(names()))}"
        elif problem is not None:
            error = problem
        else:
            try:
                validated = spec.arguments.validate(name, raw_args or {})
            except ArgumentError as exc:
                error = str(exc)
            else:
                arguments = validated.recorded
                earlier = _Earlier(self._ledger, diagnosis_id)
                asked = Call(
                    tool=name, backend=self._backend, arguments=validated.full, earlier=earlier
                )
                timeout = self._timeout_s if timeout_s is None else timeout_s
                output, error, details = self._execute(spec, asked, arguments, timeout)
                if output is not None:
                    status = spec.status_of(output)
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

    def _execute(
        self, spec: ToolSpec, call: Call, recorded: JSONObject, timeout_s: float | None
    ) -> tuple[JSONObject | None, str | None, RetrievalDetails]:
        """Ask the backend; return the output and its details, or None and the error text.

        ``prepare`` may add keywords for the backend and ``annotate`` retrieval details; both
        belong to the tool's spec, as do the bounds and the output model.
        """
        failed = RetrievalDetails(evidence_refs=[])
        try:
            extras = dict(spec.prepare(call)) if spec.prepare is not None else {}
            call = replace(call, extras=extras)
            backend = self._backend
            if isinstance(backend, AnswersEveryTool):
                # A backend that answers every tool by name (a replay) is asked by name.
                keywords = {**call.arguments, **extras}
                result = self._call_with_timeout(
                    lambda: backend.answer_tool_call(spec.name, keywords), timeout_s
                )
            else:
                result = self._call_with_timeout(lambda: spec.call_backend(call), timeout_s)
        except _Timeout:
            return None, f"timed out after {format_value(timeout_s)}s", failed
        except ReplayedError as exc:
            return None, exc.invocation_error, failed  # a replayed error, as recorded
        except Exception as exc:  # any backend failure becomes an error row
            return None, f"{type(exc).__name__}: {exc}", failed
        if not isinstance(result, dict):
            return None, f"backend returned {type(result).__name__}, expected an object", failed
        try:
            # Bounded first: a 10 MB message is cut before anything copies it (the JSON below).
            plain = _plain(self._bound(spec, result, call.arguments))
        except (TypeError, ValueError) as exc:
            return None, f"backend returned data that is not JSON-compatible ({exc})", failed
        try:
            output = spec.validate_output(plain)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            message = f"backend returned an output of the wrong shape ({where}: {first['msg']})"
            return None, message, failed
        details = RetrievalDetails(evidence_refs=[])
        extra = spec.annotate(call, output) if spec.annotate is not None else RetrievalDetails()
        if spec.evidence:
            details["evidence_refs"] = spec_refs(spec, recorded, output)
        details.update(extra)
        return output, None, details

    def _call_with_timeout(self, ask: Callable[[], object], timeout_s: float | None) -> object:
        if timeout_s is None or not getattr(self._backend, "needs_timeout", True):
            return ask()
        with self._pool_lock:
            if self._pool is None:
                # Reused worker threads: a thread per call cost about 1 ms. A call that times out
                # cannot be cancelled; its worker finishes it in the background.
                self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tool-call")
            pool = self._pool
        future = pool.submit(ask)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            raise _Timeout() from None

    def _bound(
        self, spec: ToolSpec, output: Mapping[str, object], arguments: Mapping[str, object]
    ) -> dict[str, object]:
        """Limit entry counts and cap string fields; set ``truncated`` when anything was cut.

        The tool's spec says how (``Bounds``) and what the output reports (``Counts``). Runs on
        the backend's own result, before it is copied into plain JSON, so the copy costs what
        the bounded output costs whatever the backend returned.
        """
        cap = spec.bounds.field_chars or self._field_cap
        if not spec.evidence:
            return {key: _cap_strings(item, cap)[0] for key, item in output.items()}
        limit = spec.bounds.entries
        if spec.bounds.argument is not None:
            asked = json_shape.whole(arguments.get(spec.bounds.argument))
            limit = min(asked, limit) if asked is not None else limit
        counts = spec.counts
        bounded: dict[str, object] = {}
        cut_any = False
        returned = 0
        for array in spec.arrays:
            found = output.get(array.name)
            listed = found if isinstance(found, list | tuple) else []
            entries, cut = _bound_entries(array, listed, limit, spec.bounds.entries)
            capped, capped_any = _cap_strings(entries, cap)
            bounded[array.name] = capped
            cut_any = cut_any or cut or capped_any
            returned += len(entries)
            if counts.per_array:
                key = f"{array.name}_total"
                matched = max(_count(output.get(key)) or 0, len(listed))
                if matched > len(entries) or key in output:
                    bounded[key] = matched
                if output.get(f"{key}_at_least") is True:
                    bounded[f"{key}_at_least"] = True
                    cut_any = True
        if counts.total:
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
        for key in spec.bounds.fields:
            if key in output:
                bounded[key], capped_any = _cap_strings(output[key], cap)
                if capped_any:
                    bounded["truncated"] = True
        if counts.window:
            for key in ("window_start", "window_end"):
                value = output.get(key)
                if isinstance(value, str):
                    bounded[key] = value[:64]
        return bounded


class _Earlier:
    """The diagnosis's invocations recorded so far, read from the ledger once, when first asked."""

    def __init__(self, ledger: InvocationLedger, diagnosis_id: str) -> None:
        self._ledger = ledger
        self._diagnosis_id = diagnosis_id
        self._rows: list[Invocation] | None = None

    def __call__(self) -> list[Invocation]:
        if self._rows is None:
            self._rows = self._ledger.list(self._diagnosis_id)
        return self._rows


def _bound_entries(
    array: EntryArray, listed: Sequence[object], limit: int, inner_limit: int
) -> tuple[list[object], bool]:
    """The first ``limit`` entries, each bounded, and whether any entry was left out.

    Each kept entry goes through the array's ``bound_entry``; its inner arrays keep their first
    ``inner_limit`` entries.
    """
    entries = list(listed[:limit])
    cut = len(listed) > limit
    if array.bound_entry is not None:
        entries = [array.bound_entry(entry) for entry in entries]
    if array.within:
        kept: list[object] = []
        for entry in entries:
            if isinstance(entry, Mapping):
                entry = dict(entry)
                for inner in array.within:
                    found = entry.get(inner.name)
                    if isinstance(found, list | tuple):
                        entry[inner.name], inner_cut = _bound_entries(
                            inner, found, inner_limit, inner_limit
                        )
                        cut = cut or inner_cut
            kept.append(entry)
        entries = kept
    return entries, cut


def round_ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded to microseconds."""
    return round(seconds * 1000.0, 3)


def tool_message_content(invocation: Invocation) -> str:
    """The tool message the executor model reads for one invocation (compact JSON).

    ``invocation_id``, ``tool_name``, ``status``, ``error`` (when the call failed, with a note that
    it produced no evidence), ``evidence_refs`` as ``[{raw_path, text}]``, ``deduped`` (doc ids
    already seen, when any) and the output keys its spec shows the model (``message_output``:
    a helper's small output, e.g. ``{"now": ...}``), which have no refs.
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
    spec = spec_of(invocation["tool_name"])
    if spec is not None and output is not None:
        shown: JSONObject = {key: output[key] for key in spec.message_output if key in output}
        if shown:
            message["output"] = shown
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))
