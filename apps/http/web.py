"""The web application at ``/``: ask a question, read a diagnosis claim by claim, the history.

Three pages, one shell: ``/`` (ask, with the stages streamed from ``/api/chat_stream``),
``/diagnoses/{diagnosis_id}`` (the audit record: verdict and why, answer, claims with their
evidence, charts, log timelines, trace, coverage, rounds) and ``/history`` (the caller's threads
and diagnoses, and alert investigations when ``GET /api/alerts`` exists). The pages are static
files of this package (``apps/http/webui/``, no framework, no external origin); every datum
comes from the JSON API with the caller's key, so the API's authentication and per-identity
ownership are the only access rules and the shell itself holds nothing to protect. How each
tool's entries are shown is data too: ``/assets/tools.json`` is the registry's display data
(``tools.registry.display_data``), so the script draws entries by their display kind (log
timeline, series chart, table, ...) and knows no tool by name. The key is
kept in the browser's session storage; ``#key=...`` in the address is moved there and removed
from it.

Every response carries a Content-Security-Policy that allows only this origin (no inline script
or style, no frames) and ``X-Content-Type-Options: nosniff``; the script renders all data as
text nodes, never as markup.
"""

from __future__ import annotations

import json
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tools.registry import display_data

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""Only this origin, for scripts, styles, images and API calls; nothing inline, no frames."""

ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
"""The files under ``/assets/`` and their media types (nothing else is served from there)."""

PAGES = ("/", "/history", "/diagnoses/{diagnosis_id}")
"""The paths that answer with the application's page."""

SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def _asset(name: str) -> bytes:
    return resources.files("apps.http").joinpath("webui", name).read_bytes()


def _response(body: bytes, media_type: str, status: int = 200, cache: str = "no-cache") -> Response:
    return Response(
        body, status, headers={**SECURITY_HEADERS, "cache-control": cache}, media_type=media_type
    )


async def page(request: Request) -> Response:
    """The application's page (the same shell for every page; the script picks the view)."""
    return _response(_asset("index.html"), "text/html; charset=utf-8", cache="no-store")


async def tool_display(request: Request) -> Response:
    """How the page shows each registered tool's entries (``tools.registry.display_data``)."""
    body = json.dumps(display_data(), ensure_ascii=False, separators=(",", ":"))
    return _response(body.encode("utf-8"), "application/json")


async def asset(request: Request) -> Response:
    """One of the page's own files (``ASSETS``); anything else is 404."""
    name = str(request.path_params["name"])
    media_type = ASSETS.get(name)
    if media_type is None:
        return _response(b"not found\n", "text/plain; charset=utf-8", 404)
    return _response(_asset(name), media_type)


def web_routes() -> list[BaseRoute]:
    """The routes of the web application (register them before any catch-all route)."""
    routes: list[BaseRoute] = [Route(path, page, methods=["GET", "HEAD"]) for path in PAGES]
    routes.append(Route("/assets/tools.json", tool_display, methods=["GET", "HEAD"]))
    routes.append(Route("/assets/{name}", asset, methods=["GET", "HEAD"]))
    return routes
