"""The HTTP API: chat (plain and streamed), diagnosis records and a health check.

``create_app(...)`` builds the ASGI app; ``superbiz serve`` runs it with uvicorn. The module-level
``app`` is the one the LangGraph server mounts through its ``http.app`` key: importing this module
opens no database and reads no setting; the database (``SUPERBIZ_DATABASE_URL``), the API keys
(``SUPERBIZ_API_KEYS`` / ``SUPERBIZ_API_KEYS_FILE``) and the limits are read on first use.

Each diagnosis runs the synchronous graph in a worker thread with the database's checkpointer,
audit store and ledger, holding the thread's writer lock: a second request on a thread that is
being diagnosed gets 409, never a fork of the conversation. Every error is ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, NamedTuple, cast

import anyio
import anyio.from_thread
import anyio.to_thread
import psycopg
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from langgraph.graph.state import CompiledStateGraph
from psycopg_pool import PoolTimeout
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Receive, Scope, Send

from apps.auth import (
    ApiKeys,
    Caller,
    ConfigError,
    Limits,
    RateLimiter,
    authenticate,
    presented_key,
    retry_after_header,
)
from apps.eval.export import ExportError, export_scenario
from apps.http.alert_receiver import AlertReceiver
from apps.http.guard import ApiError, ApiGuard, GuardSettings, read_limited
from apps.http.web import web_routes
from apps.resuming import backend_for, environment_ref
from apps.sweeper import PeriodicSweeper, sweep_interval
from evidence.composed import backend_health, configured_backend
from graph.compile import compile_graph
from graph.failures import DiagnosisFailed
from graph.resume import ResumeRefused, models_configured, plan_resume
from graph.reverify import NotReverifiable, reverify
from graph.runner import NothingToResume, run_diagnosis, summary_of
from models.budget import GetModel
from models.calls import ModelCallFailed
from models.factory import make_model_factory
from persistence.database import DatabaseError
from persistence.locks import ThreadBusy
from persistence.ownership import ThreadOwners
from persistence.store import Persistence, open_persistence
from state.context import REQUEST_SETTINGS, Context, Language, check_settings
from state.display import error_line, has_unstorable, one_line
from state.json_shape import json_type
from state.records import DiagnosisRecord, DiagnosisSummary
from state.settings import SettingsError
from tools.backend import EvidenceBackend

logger = logging.getLogger("superbiz.api")

Graph = CompiledStateGraph[Any, Context, Any, Any]

_THREAD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_PING_S = 15.0
SCHEMA_CHECK_S = 5.0
"""How often (at most) a request checks the database's schema version."""
_DB_ERRORS = (DatabaseError, SQLAlchemyError, psycopg.Error, PoolTimeout, sqlite3.Error)


def _reason(exc: BaseException) -> str:
    """A database error's own message (it names the database and the fix), else the type too."""
    message = one_line(str(exc))
    return message if isinstance(exc, DatabaseError) and message else error_line(exc)


def _failure(exc: BaseException, action: str) -> ApiError:
    """The error response for an exception raised while serving a request.

    A diagnosis ended by its model endpoint is 502 with the reason; a database that went away
    is 503; anything else 500.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, DiagnosisFailed):
        if isinstance(exc.cause, ModelCallFailed):
            logger.warning("diagnosis %s failed: %s", exc.diagnosis_id, exc.reason)
            return ApiError(502, f"the diagnosis could not finish: {exc.reason}")
        exc = exc.cause
    if isinstance(exc, ConfigError | SettingsError):
        logger.error("API configuration error: %s", exc)
        return ApiError(500, f"the API is misconfigured: {exc}")
    if isinstance(exc, _DB_ERRORS):
        logger.warning("database unavailable: %s", _reason(exc))
        return ApiError(503, f"database unavailable: {_reason(exc)}")
    logger.error("%s failed", action, exc_info=exc)
    return ApiError(500, f"{action} failed: {_reason(exc)}")


class ChatRequest(NamedTuple):
    """A validated ``/api/chat`` body (identity fields a client sends are never read).

    Not a dataclass: the LangGraph server executes this file without registering it as a module,
    and a dataclass with postponed annotations cannot be built there.
    """

    question: str
    thread_id: str
    language: Language | None
    settings: dict[str, object] = {}
    message_id: str | None = None


def parse_chat(body: bytes, limits: Limits) -> ChatRequest:
    """Validate a chat body: ``{question, thread_id?, language?}``.

    Raises:
        ApiError: 422 saying everything that is wrong.
    """
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ApiError(422, f"the body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(422, f"the body must be a JSON object, got {json_type(data)}")
    problems: list[str] = []
    question = data.get("question")
    if question is None:
        problems.append("question is required")
    elif not isinstance(question, str):
        problems.append(f"question must be a string, got {json_type(question)}")
    elif not question.strip():
        problems.append("question is empty")
    elif has_unstorable(question):
        problems.append(
            "question holds a NUL character or a lone UTF-16 surrogate; remove it and send the "
            "question as plain text"
        )
    elif len(question) > limits.max_question_chars:
        problems.append(
            f"question is {len(question)} characters long; the limit is {limits.max_question_chars}"
        )
    thread_id = data.get("thread_id")
    if thread_id is not None and not isinstance(thread_id, str):
        problems.append(f"thread_id must be a string, got {json_type(thread_id)}")
    elif isinstance(thread_id, str) and not _THREAD_ID.fullmatch(thread_id):
        problems.append(
            "thread_id must be 1 to 128 letters, digits or . _ : @ -, starting with a letter "
            "or digit"
        )
    settings = request_settings(data, problems)
    if problems:
        raise ApiError(422, "; ".join(problems))
    assert isinstance(question, str)
    return ChatRequest(
        question=question.strip(),
        thread_id=thread_id if isinstance(thread_id, str) else f"thread-{uuid.uuid4().hex}",
        language=cast(Language | None, settings.get("language")),
        settings=settings,
    )


BODY_FIELDS = ("question", "thread_id", "language", "settings")
IGNORED_FIELDS = ("user", "owner", "identity")
"""Identity fields a client may send; the identity is always the API key's."""


def request_settings(data: dict[str, Any], problems: list[str]) -> dict[str, object]:
    """The run settings of a chat body (``language`` and ``settings``).

    They are checked by the rules every entry uses; unknown fields and settings, and wrong
    values, are added to ``problems``.
    """
    problems.extend(
        f"unknown field {key!r}; the body takes {', '.join(BODY_FIELDS)}"
        for key in data
        if key not in BODY_FIELDS and key not in IGNORED_FIELDS
    )
    values: dict[str, object] = {}
    extra = data.get("settings")
    if extra is not None and not isinstance(extra, dict):
        problems.append(f"settings must be an object, got {json_type(extra)}")
    elif extra:
        values.update(extra)
    if data.get("language") is not None:
        values["language"] = data["language"]
    try:
        return check_settings(values, allowed=REQUEST_SETTINGS)
    except SettingsError as exc:
        problems.extend(exc.problems)
        return {}


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing one larger than ``limit`` bytes without reading it all.

    Raises:
        ApiError: 413 when the body is too large.
    """
    too_large = f"the request body is larger than the limit of {limit} bytes"
    return await read_limited(request, limit, too_large)


class Service:
    """Configuration, database and compiled graph behind the API, opened on first use."""

    def __init__(
        self,
        database_url: str | None,
        api_keys: Mapping[str, str] | None,
        limits: Limits | None,
        get_model: GetModel | None,
        backend: EvidenceBackend | None,
    ) -> None:
        self._database_url = database_url
        self._api_keys = api_keys
        self._limits = limits
        self._get_model = get_model
        self._backend = backend
        self._custom_backend = backend is not None
        self._config: tuple[ApiKeys, Limits, RateLimiter] | None = None
        self._config_lock = threading.Lock()
        self._persistence: Persistence | None = None
        self._graph: Graph | None = None
        self._open_lock = threading.Lock()
        self._schema_checked = 0.0
        self._runs: anyio.CapacityLimiter | None = None

    def config(self) -> tuple[ApiKeys, Limits, RateLimiter]:
        """Keys, limits and the rate limiter (from the environment unless given).

        Raises:
            ConfigError: when the keys or limits are misconfigured (access is then refused).
        """
        with self._config_lock:
            if self._config is None:
                keys = ApiKeys(self._api_keys) if self._api_keys is not None else ApiKeys.from_env()
                limits = self._limits or Limits.from_env()
                rate = RateLimiter(limits.rate_per_minute, limits.rate_burst)
                self._config = (keys, limits, rate)
            return self._config

    async def config_async(self) -> tuple[ApiKeys, Limits, RateLimiter]:
        """``config()`` without blocking the event loop (the first call may read a key file)."""
        config = self._config
        return config if config is not None else await anyio.to_thread.run_sync(self.config)

    def open(self) -> tuple[Persistence, Graph]:
        """The database and the graph compiled on it, opened once (blocking).

        Raises:
            DatabaseError: when the database cannot be used; the next call tries again.
        """
        with self._open_lock:
            if self._persistence is None or self._graph is None:
                persistence = open_persistence(self._database_url, origin="api")
                try:
                    graph = compile_graph(
                        persistence,
                        self.backend(),
                        get_model=self._get_model,
                        environment=self.environment(),
                    )
                except BaseException:
                    persistence.close()
                    raise
                self._persistence, self._graph = persistence, graph
                self._schema_checked = time.monotonic()
            elif time.monotonic() - self._schema_checked > SCHEMA_CHECK_S:
                # A database dropped and created again (or migrated) is picked up here.
                self._persistence.db.check_schema()
                self._schema_checked = time.monotonic()
            return self._persistence, self._graph

    def environment(self) -> dict[str, Any]:
        """How the evidence source of this service's runs is recorded with each diagnosis."""
        return {"kind": "custom"} if self._custom_backend else environment_ref(None)

    def backend(self) -> EvidenceBackend:
        """The evidence backend: the one given, else the configured one (made once).

        Raises:
            ConfigError: when the backend configuration cannot be used.
        """
        with self._config_lock:
            if self._backend is None:
                self._backend = configured_backend(database=self._database_url)
            return self._backend

    def close(self) -> None:
        """Release the database (a later request opens it again)."""
        with self._open_lock:
            if self._persistence is not None:
                self._persistence.close()
            self._persistence, self._graph = None, None

    def runs(self, persistence: Persistence) -> anyio.CapacityLimiter:
        """How many diagnoses run at once in this process (the others wait their turn).

        Each PostgreSQL run holds one pooled connection for its thread lock and uses up to two
        more while it writes, so the default keeps one connection of the pool free for reads.
        """
        if self._runs is None:
            total = self.config()[1].max_runs
            if total is None:
                size = persistence.db.pool_size
                total = max(1, (size - 1) // 3) if size is not None else 4
            self._runs = anyio.CapacityLimiter(total)
        return self._runs

    def check_database(self) -> None:
        """Open the database if needed and check its schema version (blocking).

        Missing or older tables (a database created again) are set up again first.

        Raises:
            DatabaseError: when the database does not answer or its schema is too new.
        """
        persistence, _ = self.open()
        persistence.db.check_schema()

    def diagnose(
        self,
        identity: str,
        chat: ChatRequest,
        on_started: Callable[[], None] | None = None,
        on_event: Callable[[dict[str, object]], None] | None = None,
        stop: threading.Event | None = None,
    ) -> DiagnosisSummary:
        """Run one diagnosis on the caller's thread and return its summary (blocking).

        ``stop``, once set, ends the run at its next stage, resumable (``graph.runner``).

        Raises:
            ApiError: 404 for another identity's thread, 409 while the thread is busy.
        """
        persistence, graph = self.open()
        if not ThreadOwners(persistence.db).claim(chat.thread_id, identity):
            raise ApiError(404, f"no thread {chat.thread_id!r}")
        context = Context(**chat.settings)
        try:
            values = run_diagnosis(
                graph,
                thread_id=chat.thread_id,
                context=context,
                audit=persistence.audit,
                question=chat.question,
                message_id=chat.message_id,
                on_event=_started_then(on_started, on_event),
                stop=stop,
            )
        except ThreadBusy as exc:
            raise ApiError(
                409,
                f"thread {chat.thread_id!r} is already being diagnosed by another request; "
                "retry when it has finished",
            ) from exc
        return summary_of(values, chat.thread_id)

    def resume(
        self,
        identity: str | None,
        diagnosis_id: str,
        on_started: Callable[[], None] | None = None,
        on_event: Callable[[dict[str, object]], None] | None = None,
        stop: threading.Event | None = None,
    ) -> DiagnosisSummary:
        """Resume an interrupted diagnosis with the settings it started with (blocking).

        ``identity`` None is the server itself (the sweeper): no ownership check.

        Raises:
            ApiError: 404 for an unknown or another identity's diagnosis, 409 when it cannot be
                resumed (finished, not its thread's latest, busy) or its settings cannot be
                honoured here.
        """
        persistence, graph = self.open()
        record = persistence.audit.get(diagnosis_id)
        owners = ThreadOwners(persistence.db)
        if record is None or (
            identity is not None and owners.owner_of(str(record["thread_id"])) != identity
        ):
            raise ApiError(404, f"no diagnosis {diagnosis_id!r}")
        thread_id = str(record["thread_id"])
        try:
            plan = plan_resume(
                persistence,
                thread_id,
                models_available=models_configured if self._get_model is None else lambda: True,
            )
        except (NothingToResume, ResumeRefused) as exc:
            raise ApiError(409, f"diagnosis {diagnosis_id!r} cannot be resumed: {exc}") from exc
        if plan.diagnosis_id != diagnosis_id:
            raise ApiError(
                409,
                f"diagnosis {diagnosis_id!r} cannot be resumed: its thread has moved on to "
                f"{plan.diagnosis_id}",
            )
        if plan.environment not in ({}, self.environment()) and not self._custom_backend:
            graph = compile_graph(
                persistence,
                backend_for(plan.environment, database=self._database_url),
                get_model=self._get_model,
                environment=plan.environment,
            )
        try:
            values = run_diagnosis(
                graph,
                thread_id=thread_id,
                context=plan.context,
                audit=persistence.audit,
                resume=True,
                on_event=_started_then(on_started, on_event),
                stop=stop,
            )
        except ThreadBusy as exc:
            if identity is None:  # the sweeper leaves it for its next round
                raise
            raise ApiError(
                409, f"thread {thread_id!r} is being diagnosed by another request; retry later"
            ) from exc
        return summary_of(values, thread_id)

    def diagnosis(self, identity: str, diagnosis_id: str) -> dict[str, Any]:
        """One diagnosis record with its invocations, if the caller owns its thread (blocking).

        Raises:
            ApiError: 404 when it does not exist or belongs to another identity.
        """
        persistence, _ = self.open()
        record = persistence.audit.get(diagnosis_id)
        owners = ThreadOwners(persistence.db)
        if record is None or owners.owner_of(str(record["thread_id"])) != identity:
            raise ApiError(404, f"no diagnosis {diagnosis_id!r}")
        return {**record, "invocations": persistence.ledger.list(diagnosis_id)}

    def diagnosis_scenario(self, identity: str, diagnosis_id: str) -> dict[str, Any]:
        """The scenario replaying one of the caller's finished diagnoses (blocking).

        Raises:
            ApiError: 404 as ``diagnosis``; 409 when it cannot be exported (not finished).
        """
        found = self.diagnosis(identity, diagnosis_id)
        record = cast(DiagnosisRecord, {k: v for k, v in found.items() if k != "invocations"})
        try:
            return export_scenario(record, found["invocations"]).scenario
        except ExportError as exc:
            raise ApiError(409, str(exc)) from None

    def reverify(self, identity: str, diagnosis_id: str, *, offline: bool) -> dict[str, Any]:
        """Re-check one of the caller's diagnoses on its stored evidence (blocking).

        Raises:
            ApiError: 404 as ``diagnosis``; 409 when there is nothing recorded to re-check.
        """
        self.diagnosis(identity, diagnosis_id)  # 404 unless the caller owns it
        persistence, _ = self.open()
        try:
            report = reverify(
                diagnosis_id,
                audit=persistence.audit,
                ledger=persistence.ledger,
                get_model=self._get_model or make_model_factory(),
                context=Context(offline=True) if offline else Context(),
            )
        except NotReverifiable as exc:
            raise ApiError(409, str(exc)) from None
        return dict(report)

    def thread_diagnoses(self, identity: str, thread_id: str) -> dict[str, Any]:
        """The diagnoses of one of the caller's threads, oldest first (blocking).

        Raises:
            ApiError: 404 when the thread does not exist or belongs to another identity.
        """
        persistence, _ = self.open()
        if ThreadOwners(persistence.db).owner_of(thread_id) != identity:
            raise ApiError(404, f"no thread {thread_id!r}")
        return {"thread_id": thread_id, "diagnoses": persistence.audit.list(thread_id)}

    def threads(self, identity: str) -> dict[str, Any]:
        """The caller's threads, oldest first (blocking)."""
        persistence, _ = self.open()
        return {"threads": ThreadOwners(persistence.db).threads_of(identity)}


def _started_then(
    on_started: Callable[[], None] | None, on_event: Callable[[dict[str, object]], None] | None
) -> Callable[[dict[str, object]], None]:
    """An event handler that reports the start (the run holds its thread) once, then relays."""
    started = False

    def handle(event: dict[str, object]) -> None:
        nonlocal started
        if not started:
            started = True
            if on_started is not None:
                on_started()
        if on_event is not None:
            on_event(event)

    return handle


def _sse(event: str, data: Any) -> bytes:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {event}\ndata: {payload}\n\n".encode()


class DiagnosisStream:
    """ASGI response for ``/api/chat_stream``.

    The status is decided once the run holds the thread: a refusal before that (unknown thread,
    busy thread, database down) is a plain JSON error; after it, the response is
    ``text/event-stream`` with ``stage`` events, then ``answer`` and ``done``, or ``error``. A
    client that goes away does not stop the diagnosis: it finishes and is recorded.
    """

    def __init__(
        self,
        service: Service,
        identity: str,
        chat: ChatRequest,
        runs: anyio.CapacityLimiter,
    ) -> None:
        self._service = service
        self._identity = identity
        self._chat = chat
        self._runs = runs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the diagnosis in a worker thread and relay what it reports."""
        sender, receiver = anyio.create_memory_object_stream[tuple[str, Any]](math.inf)
        async with anyio.create_task_group() as group:
            group.start_soon(self._work, sender)
            with receiver:
                await self._relay(receiver, scope, receive, send)

    async def _work(self, sender: MemoryObjectSendStream[tuple[str, Any]]) -> None:
        def push(kind: str, payload: Any) -> None:
            try:
                anyio.from_thread.run_sync(sender.send_nowait, (kind, payload))
            except Exception:  # the client is gone: the run still finishes and is recorded
                return

        def run() -> None:
            started = threading.Event()

            def on_started() -> None:
                started.set()
                push("started", None)

            try:
                result = self._service.diagnose(
                    self._identity,
                    self._chat,
                    on_started=on_started,
                    on_event=lambda event: push("stage", event),
                )
            except Exception as exc:
                push("error" if started.is_set() else "refused", exc)
                return
            push("answer", result)

        with sender:
            await anyio.to_thread.run_sync(run, limiter=self._runs)

    async def _relay(
        self,
        receiver: MemoryObjectReceiveStream[tuple[str, Any]],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        try:
            kind, payload = await receiver.receive()
        except anyio.EndOfStream:
            kind, payload = "refused", RuntimeError("the diagnosis ended without a result")
        if kind == "refused":
            await _failure(payload, "diagnosis").response()(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        connected, ended, diagnosis_id = True, False, None
        try:
            while True:  # ends when the worker closes the stream (its run is over)
                item: tuple[str, Any] | None = None
                with anyio.move_on_after(_PING_S):
                    try:
                        item = await receiver.receive()
                    except anyio.EndOfStream:
                        break
                if item is None:
                    chunk = b": keep-alive\n\n"
                elif item[0] == "stage":
                    diagnosis_id = item[1].get("diagnosis_id") or diagnosis_id
                    chunk = _sse("stage", item[1])
                elif item[0] == "answer":
                    ended = True
                    chunk = _sse("answer", item[1]) + _sse(
                        "done", {"diagnosis_id": item[1].get("diagnosis_id")}
                    )
                else:
                    ended = True
                    error = _failure(item[1], "diagnosis")
                    chunk = _sse("error", {"error": error.message, "status": error.status})
                if connected:
                    connected = await _send_chunk(send, chunk)
        except BaseException:  # cancelled (the server is stopping): say so while we still can
            if connected and not ended:
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await _send_chunk(send, _ended_early(diagnosis_id, "the server is stopping"))
                    await _send_chunk(send, b"", more=False)
            raise
        if connected and not ended:
            await _send_chunk(send, _ended_early(diagnosis_id, "the run stopped"))
        if connected:
            await _send_chunk(send, b"", more=False)


def _ended_early(diagnosis_id: object, why: str) -> bytes:
    """The ``error`` event of a stream that ends without an answer."""
    resume = f"; resume it with POST /api/diagnoses/{diagnosis_id}/resume" if diagnosis_id else ""
    return _sse(
        "error",
        {
            "error": f"the diagnosis ended without a result ({why}){resume}",
            "status": 503,
            "diagnosis_id": diagnosis_id,
        },
    )


async def _send_chunk(send: Send, chunk: bytes, *, more: bool = True) -> bool:
    try:
        await send({"type": "http.response.body", "body": chunk, "more_body": more})
    except OSError:
        return False
    return True


class Api:
    """The request handlers."""

    def __init__(self, service: Service, health_timeout_s: float) -> None:
        self.service = service
        self.health_timeout_s = health_timeout_s

    async def admit(self, request: Request) -> tuple[Caller, Limits]:
        """Authenticate the caller and spend one token of their rate.

        Raises:
            ApiError: 401 without a valid key, 429 over the rate, 500 when misconfigured.
        """
        keys, limits, rate = await self.service.config_async()
        client = request.client.host if request.client else "unknown"
        caller = authenticate(keys, request.headers, client)
        if caller is None:
            reason = (
                "missing API key: send Authorization: Bearer <key> or X-API-Key: <key>"
                if presented_key(request.headers) is None
                else "invalid API key"
            )
            raise ApiError(401, reason, {"WWW-Authenticate": "Bearer"})
        wait = rate.take(caller.bucket)
        if wait is not None:
            after = retry_after_header(wait)
            raise ApiError(
                429,
                f"rate limit exceeded: {limits.rate_per_minute} requests per minute per API key; "
                f"retry in {after} s",
                {"Retry-After": after},
            )
        return caller, limits

    async def chat(self, request: Request) -> Response:
        """``POST /api/chat``: one diagnosis, answered as one JSON object."""
        caller, limits = await self.admit(request)
        chat = parse_chat(await read_body(request, limits.max_body_bytes), limits)
        persistence, _ = await anyio.to_thread.run_sync(self.service.open)
        result = await anyio.to_thread.run_sync(
            partial(self.service.diagnose, caller.identity, chat),
            limiter=self.service.runs(persistence),
        )
        return JSONResponse(result)

    async def chat_stream(self, request: Request) -> Response | DiagnosisStream:
        """``POST /api/chat_stream``: the same diagnosis as server-sent events."""
        caller, limits = await self.admit(request)
        chat = parse_chat(await read_body(request, limits.max_body_bytes), limits)
        persistence, _ = await anyio.to_thread.run_sync(self.service.open)
        return DiagnosisStream(self.service, caller.identity, chat, self.service.runs(persistence))

    async def resume(self, request: Request) -> Response:
        """``POST /api/diagnoses/{diagnosis_id}/resume``: finish an interrupted diagnosis."""
        caller, limits = await self.admit(request)
        await read_body(request, limits.max_body_bytes)  # any body is ignored
        persistence, _ = await anyio.to_thread.run_sync(self.service.open)
        diagnosis_id = str(request.path_params["diagnosis_id"])
        result = await anyio.to_thread.run_sync(
            partial(self.service.resume, caller.identity, diagnosis_id),
            limiter=self.service.runs(persistence),
        )
        return JSONResponse(result)

    async def diagnosis(self, request: Request) -> Response:
        """``GET /api/diagnoses/{diagnosis_id}``: the audit record and its invocations."""
        return await self._owned(request, self.service.diagnosis, "diagnosis_id")

    async def diagnosis_scenario(self, request: Request) -> Response:
        """``GET /api/diagnoses/{diagnosis_id}/scenario``: the diagnosis as a replay scenario."""
        return await self._owned(request, self.service.diagnosis_scenario, "diagnosis_id")

    async def thread_diagnoses(self, request: Request) -> Response:
        """``GET /api/threads/{thread_id}/diagnoses``: the thread's records, oldest first."""
        return await self._owned(request, self.service.thread_diagnoses, "thread_id")

    async def _owned(
        self, request: Request, read: Callable[[str, str], dict[str, Any]], parameter: str
    ) -> Response:
        """Admit the caller, then ``read(identity, path parameter)`` off the event loop."""
        caller, _ = await self.admit(request)
        key = str(request.path_params[parameter])
        return JSONResponse(await anyio.to_thread.run_sync(read, caller.identity, key))

    async def threads(self, request: Request) -> Response:
        """``GET /api/threads``: the caller's threads."""
        caller, _ = await self.admit(request)
        return JSONResponse(await anyio.to_thread.run_sync(self.service.threads, caller.identity))

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: 200 when the database answers, else 503 with the reason."""
        try:
            await self.service.config_async()
        except ConfigError as exc:
            return JSONResponse(
                {"status": "unavailable", "database": "unknown", "error": f"API config: {exc}"},
                503,
            )
        reason: str | None = None
        try:
            with anyio.fail_after(self.health_timeout_s):
                await anyio.to_thread.run_sync(self.service.check_database, abandon_on_cancel=True)
        except TimeoutError:
            reason = f"the database did not answer within {self.health_timeout_s:g} s"
        except _DB_ERRORS as exc:
            reason = _reason(exc)
        backends = await backend_health(self.service.backend, self.health_timeout_s)
        if reason is not None:
            return JSONResponse(
                {"status": "unavailable", "database": "error", "error": reason, **backends}, 503
            )
        return JSONResponse({"status": "ok", "database": "ok", **backends})

    async def not_found(self, request: Request) -> Response:
        """Any path the API does not serve."""
        return ApiError(404, f"no route {request.url.path}").response()


Handler = Callable[[Request], Awaitable[Response | DiagnosisStream]]


class _Endpoint:
    """An ASGI endpoint: JSON 405 for other methods, JSON errors for every failure."""

    def __init__(self, handler: Handler, methods: tuple[str, ...], action: str) -> None:
        self._handler = handler
        self._allowed = set(methods) | ({"HEAD"} if "GET" in methods else set())
        self._action = action

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request."""
        request = Request(scope, receive)
        response: Response | DiagnosisStream
        if request.method not in self._allowed:
            response = ApiError(
                405,
                f"method {request.method} is not allowed on {request.url.path}",
                {"Allow": ", ".join(sorted(self._allowed))},
            ).response()
        else:
            try:
                response = await self._handler(request)
            except Exception as exc:
                response = _failure(exc, self._action).response()
        await response(scope, receive, send)


def create_app(
    database_url: str | None = None,
    *,
    api_keys: Mapping[str, str] | None = None,
    limits: Limits | None = None,
    get_model: GetModel | None = None,
    backend: EvidenceBackend | None = None,
    health_timeout_s: float = 5.0,
    standalone: bool = True,
    guard_settings: GuardSettings | None = None,
) -> Starlette:
    """Build the HTTP API.

    Args:
        database_url: The database (``postgresql://...``, ``sqlite:///...``); None reads
            ``SUPERBIZ_DATABASE_URL`` (else the embedded SQLite default) on first use.
        api_keys: ``{key: identity}``; an empty mapping means open access as ``anonymous``;
            None reads ``SUPERBIZ_API_KEYS`` / ``SUPERBIZ_API_KEYS_FILE`` on first use.
        limits: Request limits; None reads the ``SUPERBIZ_API_*`` variables on first use.
        get_model: ``get_model(role, context)``; defaults to the environment-configured models
            (offline rule-based models when ``OPENAI_API_KEY`` is not set).
        backend: Where evidence comes from; defaults to the bundled sample incident.
        health_timeout_s: How long ``/healthz`` waits for the database.
        standalone: Answer unknown paths outside ``/api`` with JSON 404 too; False leaves them
            to a host server that mounts these routes (the LangGraph server).
        guard_settings: CORS origins and extra host names (``apps/http/guard.py``); None reads
            ``SUPERBIZ_API_CORS_ORIGINS`` / ``SUPERBIZ_API_ALLOWED_HOSTS`` on first use.

    Returns:
        A Starlette app; the database is opened at startup (or on first use) and closed at
        shutdown. Nothing is opened by this call.
    """
    service = Service(database_url, api_keys, limits, get_model, backend)
    api = Api(service, health_timeout_s)
    alerts = AlertReceiver(
        open_persistence=lambda: service.open()[0],
        admit=api.admit,
        diagnose=lambda owner, thread_id, message_id, question: service.diagnose(
            owner, ChatRequest(question, thread_id, None, {}, message_id)
        ),
        resume=partial(service.resume, None),
    )

    def route(path: str, handler: Handler, *methods: str, action: str = "request") -> Route:
        return Route(path, _Endpoint(handler, methods, action), methods=None)

    api_routes: list[BaseRoute] = [
        route("/chat", api.chat, "POST", action="diagnosis"),
        route("/chat_stream", api.chat_stream, "POST", action="diagnosis"),
        route("/diagnoses/{diagnosis_id}", api.diagnosis, "GET"),
        route("/diagnoses/{diagnosis_id}/resume", api.resume, "POST", action="resume"),
        route("/diagnoses/{diagnosis_id}/scenario", api.diagnosis_scenario, "GET"),
        route("/threads", api.threads, "GET"),
        route("/threads/{thread_id}/diagnoses", api.thread_diagnoses, "GET"),
        route("/alertmanager", alerts.receive, "POST", action="alert notification"),
        route("/alerts", alerts.list, "GET"),
        route("/{path:path}", api.not_found, "GET", "POST", "PUT", "PATCH", "DELETE"),
    ]
    # Imported here: the MCP server is built on this module's Service.
    from apps.mcp.server import http_routes

    mcp_routes, mcp_server = http_routes(service)
    routes: list[BaseRoute] = [
        route("/healthz", api.healthz, "GET"),
        Mount("/api", routes=api_routes),
        *mcp_routes,
        *web_routes(),
    ]
    if standalone:
        routes.append(route("/{path:path}", api.not_found, "GET", "POST", "PUT", "PATCH", "DELETE"))

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            await anyio.to_thread.run_sync(service.open)
        except Exception as exc:  # start anyway: /healthz and each request report the database
            logger.warning("database not available at startup: %s", _reason(exc))
        sweeper = PeriodicSweeper(
            lambda: service.open()[0], partial(service.resume, None), sweep_interval()
        )
        sweeper.start()  # orphaned diagnoses: now, then periodically
        await anyio.to_thread.run_sync(alerts.start)  # the queue earlier runs left, then new
        try:
            async with mcp_server.session_manager.run():
                yield
        finally:
            await anyio.to_thread.run_sync(alerts.stop)
            await anyio.to_thread.run_sync(sweeper.stop)
            await anyio.to_thread.run_sync(service.close)

    async def keys() -> ApiKeys:
        return (await service.config_async())[0]

    guard = Middleware(ApiGuard, keys=keys, settings=guard_settings)
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[guard])
    app.state.superbiz = service
    return app


app = create_app(standalone=False)
"""The app the LangGraph server mounts (``http.app``); configured from the environment."""
