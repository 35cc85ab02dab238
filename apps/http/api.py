"""The HTTP API: chat (plain and streamed), diagnosis records and a health check.

``create_app(...)`` builds the ASGI app; ``superbiz serve`` runs it with uvicorn. The module-level
``app`` is the one the LangGraph server mounts through its ``http.app`` key: importing this module
opens no database and reads no setting; the database (``SUPERBIZ_DATABASE_URL``), the API keys
(``SUPERBIZ_API_KEYS`` / ``SUPERBIZ_API_KEYS_FILE``) and the limits are read on first use.

Each diagnosis runs the synchronous graph in a worker thread with the database's checkpointer,
audit store and ledger, holding the thread's writer lock: a second request on a thread that is
being diagnosed gets 409, never a fork of the conversation. Every error is ``{"error": "..."}``.
The service behind the handlers (``apps/http/service.py``) also serves the MCP server, whose
streamable HTTP endpoint is mounted here at ``/mcp``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
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
    authenticate,
    presented_key,
    retry_after_header,
)
from apps.http.alert_receiver import AlertReceiver
from apps.http.guard import ApiError, ApiGuard, GuardSettings, read_limited
from apps.http.service import (
    _DB_ERRORS,
    ChatRequest,
    Service,
    _failure,
    _reason,
    parse_chat,
)
from apps.http.web import web_routes
from apps.mcp.server import http_routes
from apps.sweeper import PeriodicSweeper, sweep_interval
from evidence.composed import backend_health
from models.budget import GetModel
from tools.backend import EvidenceBackend

logger = logging.getLogger("superbiz.api")

_PING_S = 15.0


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing one larger than ``limit`` bytes without reading it all.

    Raises:
        ApiError: 413 when the body is too large.
    """
    too_large = f"the request body is larger than the limit of {limit} bytes"
    return await read_limited(request, limit, too_large)


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
