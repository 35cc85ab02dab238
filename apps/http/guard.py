"""What a browser may do with the HTTP API: no cross-origin use unless allowed, no DNS rebinding.

``ApiGuard`` wraps the API (ASGI middleware) and acts on ``/api/...``, ``/mcp`` and ``/healthz``;
every other path (the LangGraph server's own routes, when the API is mounted there) passes
untouched.

- **CORS is off by default.** A preflight (``OPTIONS`` with ``Access-Control-Request-Method``)
  from an origin not in ``SUPERBIZ_API_CORS_ORIGINS`` (comma-separated, e.g.
  ``https://ops.example.com``) is refused with 403, and so is any request that carries such an
  ``Origin`` and is not same-origin. Responses carry ``Access-Control-Allow-*`` headers only for an
  allowed origin; headers an outer server added (the LangGraph server's wildcard CORS and its
  private-network header) are removed.
- **The ``Host`` header is checked in keyless mode.** Without API keys the API is open to whoever
  reaches it, which ``superbiz serve`` allows on a loopback address only; a page on another site
  could still reach it through DNS rebinding (its own host name resolving to 127.0.0.1). So a
  request whose ``Host`` is not a loopback name (``localhost``, ``127.x.x.x``, ``[::1]``) or one of
  ``SUPERBIZ_API_ALLOWED_HOSTS`` is refused with 403. With keys, the key is what counts.
- **POST bodies must be JSON.** A POST with a body whose ``Content-Type`` is not
  ``application/json`` gets 415: browsers send ``text/plain`` and form bodies cross-site without
  a preflight.
- **Slow bodies are cut off.** A request whose body has not fully arrived
  ``SUPERBIZ_API_BODY_TIMEOUT_S`` seconds after it started gets 408, and the server closes the
  connection (its body was not read), so clients that never finish cannot hold connections.
- **Responses are not cached or sniffed**: ``Cache-Control: no-store`` and
  ``X-Content-Type-Options: nosniff`` on every answer of these paths.
- **``/metrics``** (the LangGraph server's own, when the API is mounted there) takes the API's
  key like every route (401 without it); without keys it is held to the ``Host`` check.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apps.auth import ApiKeys, ConfigError, presented_key, read
from state import catalog
from state.settings import typed_default

CORS_VAR = catalog.API_CORS_ORIGINS.variable
HOSTS_VAR = catalog.API_ALLOWED_HOSTS.variable
_ALLOW_HEADERS = "authorization, content-type, x-api-key, mcp-protocol-version, last-event-id"
_ALLOW_METHODS = "GET, POST"


@dataclass(frozen=True)
class GuardSettings:
    """Which origins may use the API from a browser, and which extra host names are this server.

    Attributes:
        cors_origins: Origins (``scheme://host[:port]``) allowed cross-origin; empty: none.
        allowed_hosts: Host names accepted in keyless mode besides the loopback names.
        body_timeout_s: Seconds a request's body may take to arrive (slower: 408).
    """

    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    body_timeout_s: float = typed_default(catalog.API_BODY_TIMEOUT_S, float)

    @classmethod
    def from_env(cls) -> GuardSettings:
        """Read ``SUPERBIZ_API_CORS_ORIGINS`` and ``SUPERBIZ_API_ALLOWED_HOSTS``.

        Raises:
            ConfigError: for ``*`` (every origin is never allowed) or an origin without scheme.
        """
        return cls(
            cors_origins=read(catalog.API_CORS_ORIGINS),
            allowed_hosts=read(catalog.API_ALLOWED_HOSTS),
            body_timeout_s=read(catalog.API_BODY_TIMEOUT_S),
        )


def host_name(host_header: str) -> str:
    """The host name of a ``Host`` header, without port or IPv6 brackets, lower-case."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_loopback_name(name: str) -> bool:
    """``localhost`` (and its subdomains) and loopback addresses."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


METRICS_PATH = "/metrics"

_NO_STORE = [(b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff")]


def _guarded(path: str) -> bool:
    return path in ("/healthz", "/api", "/mcp", METRICS_PATH) or path.startswith("/api/")


def _no_store(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Response headers with ``Cache-Control: no-store`` and ``nosniff`` (replacing any)."""
    names = {name for name, _ in _NO_STORE}
    return [(n, v) for n, v in headers if n.lower() not in names] + _NO_STORE


def _json_error(
    status: int, message: str, extra: Sequence[tuple[bytes, bytes]] = ()
) -> tuple[Message, Message]:
    body = json.dumps({"error": message}).encode()
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": _no_store(
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ]
        ),
    }
    return start, {"type": "http.response.body", "body": body}


def timed_receive(receive: Receive, seconds: float) -> Receive:
    """``receive``, raising a 408 ``ApiError`` once the body is not complete after ``seconds``.

    The time counts from this call; once the last body chunk has arrived, later calls (waiting
    for the client to disconnect) are not timed.
    """
    deadline = anyio.current_time() + seconds
    complete = False

    async def timed() -> Message:
        nonlocal complete
        if complete:
            return await receive()
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                message = await receive()
        except TimeoutError:
            complete = True
            raise ApiError(
                408,
                f"the request body did not arrive within {seconds:g} s "
                f"({catalog.API_BODY_TIMEOUT_S.variable}); send it at once",
                {"Connection": "close"},
            ) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            complete = True
        return message

    return timed


class ApiGuard:
    """ASGI middleware: CORS allow-list, ``Host`` check in keyless mode, JSON POST bodies.

    Args:
        app: The wrapped ASGI app.
        keys: Returns the API keys (to tell keyless mode); may raise ``ConfigError``.
        settings: The guard settings; None reads them from the environment on first use.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: Callable[[], Awaitable[ApiKeys]],
        settings: GuardSettings | None = None,
    ) -> None:
        self.app = app
        self._keys = keys
        self._settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request, then serve it with only the CORS headers this API grants."""
        if scope["type"] != "http" or not _guarded(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        try:
            if self._settings is None:
                self._settings = GuardSettings.from_env()
            refusal, allowed = await self._check(scope, self._settings)
        except ConfigError as exc:
            refusal, allowed = (500, f"the API is misconfigured: {exc}"), None
        if refusal is None and str(scope.get("path", "")) == METRICS_PATH:
            refusal = await self._metrics_refusal(scope)
        if refusal is not None:
            extra = [(b"www-authenticate", b"Bearer")] if refusal[0] == 401 else []
            for message in _json_error(*refusal, extra):
                await send(message)
            return
        assert self._settings is not None
        receive = timed_receive(receive, self._settings.body_timeout_s)
        method = str(scope.get("method", ""))
        headers = Headers(scope=scope)
        if (
            allowed is not None
            and method == "OPTIONS"
            and ("access-control-request-method" in headers)
        ):
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [
                        *_cors_headers(allowed),
                        (b"access-control-allow-methods", _ALLOW_METHODS.encode()),
                        (b"access-control-allow-headers", _ALLOW_HEADERS.encode()),
                        (b"access-control-max-age", b"600"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        started = False

        async def send_with_own_cors(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                kept = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if not name.lower().startswith(b"access-control-")
                ]
                if allowed is not None:
                    kept += _cors_headers(allowed)
                message = {**message, "headers": _no_store(kept)}
            await send(message)

        try:
            await self.app(scope, receive, send_with_own_cors)
        except ApiError as exc:  # the body timed out under a handler that does not answer it
            if started or exc.status != 408:
                raise
            for message in _json_error(exc.status, exc.message, [(b"connection", b"close")]):
                await send(message)

    async def _metrics_refusal(self, scope: Scope) -> tuple[int, str] | None:
        """401 for a ``/metrics`` request without a valid key (when keys are configured)."""
        try:
            keys = await self._keys()
        except ConfigError as exc:
            return 500, f"the API is misconfigured: {exc}"
        if keys.open:
            return None  # the Host check above holds for keyless mode
        headers = Headers(scope=scope)
        key = presented_key({k: headers[k] for k in ("authorization", "x-api-key") if k in headers})
        if key is None or keys.identity_of(key) is None:
            return (
                401,
                "the metrics need an API key: send Authorization: Bearer <key> or X-API-Key",
            )
        return None

    async def _check(
        self, scope: Scope, settings: GuardSettings
    ) -> tuple[tuple[int, str] | None, str | None]:
        """``(refusal, allowed origin)``: the status and reason to refuse with, if any."""
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        try:
            keyless = (await self._keys()).open
        except ConfigError:
            keyless = False  # the handler reports the configuration error
        name = host_name(host)
        if keyless and not (is_loopback_name(name) or name in settings.allowed_hosts):
            return (
                403,
                f"Host {host!r} is not an address of this server: without API keys the API "
                "answers only requests addressed to a loopback name (localhost, 127.0.0.1, "
                f"[::1]), which stops DNS rebinding; set SUPERBIZ_API_KEYS, or list the name in "
                f"{HOSTS_VAR}",
            ), None
        origin = headers.get("origin")
        allowed: str | None = None
        if origin is not None:
            origin = origin.rstrip("/")
            if origin in settings.cors_origins:
                allowed = origin
            elif not _same_origin(origin, host):
                return (
                    403,
                    f"cross-origin requests from {origin} are not allowed; list the origin in "
                    f"{CORS_VAR} to allow them",
                ), None
        method = str(scope.get("method", ""))
        if method == "POST" and _has_body(headers) and not _is_json(headers):
            return (
                415,
                "send the body as JSON with Content-Type: application/json (got "
                f"{headers.get('content-type') or 'no Content-Type'})",
            ), allowed
        return None, allowed


def _cors_headers(origin: str) -> Sequence[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode()),
        (b"vary", b"Origin"),
    ]


def _same_origin(origin: str, host: str) -> bool:
    return urlsplit(origin).netloc.lower() == host.strip().lower()


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in headers


def _is_json(headers: Headers) -> bool:
    kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


class ApiError(Exception):
    """A request that ends with an error status; the message is the ``error`` text."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        """The JSON error response."""
        return JSONResponse({"error": self.message}, self.status, headers=self.headers)


async def read_limited(request: Request, limit: int, too_large: str) -> bytes:
    """The request body, refusing one larger than ``limit`` bytes without reading it all.

    Raises:
        ApiError: 413 with the message ``too_large``, when the declared or the streamed body is
            over the limit.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, too_large)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, too_large)
    return bytes(body)
