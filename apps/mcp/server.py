"""The MCP server: verified diagnoses for any MCP client, over stdio or streamable HTTP.

Built on the official SDK (``mcp``, its ``MCPServer``), on the HTTP API's ``Service``: the same
database, graph, validation, limits, rate limits, API keys and identities, so an MCP client and
an HTTP client of one key see the same threads and diagnoses, and another key sees none of them.

- Over **streamable HTTP** (``/mcp``, mounted by ``superbiz serve`` and by the LangGraph server's
  HTTP app), each tool call authenticates the key its request carries (``Authorization: Bearer``
  or ``X-API-Key``); the transport is stateless, so every request stands on its own key.
- Over **stdio** (``superbiz mcp``), the process acts for the key in ``SUPERBIZ_MCP_API_KEY``
  (required when API keys are configured; without keys it is ``anonymous``, as the HTTP API).

Tools (each with input and output schemas): ``diagnose`` (progress notifications per stage;
cancelling the call stops the run at its next stage, resumable), ``resume_diagnosis``,
``get_diagnosis``, ``list_diagnoses``, ``get_evidence``, ``reverify``, ``search_runbooks``.
Resources: ``superbiz://diagnoses/{diagnosis_id}/answer`` and ``.../claims``. A refusal is an MCP
error whose message is the HTTP API's and whose data carries the HTTP status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from apps.auth import Caller, authenticate, presented_key, retry_after_header
from apps.http.guard import ApiError
from apps.http.service import Service, _failure, parse_chat
from apps.mcp import views
from graph.runner import RunStopped
from state.display import one_line
from tools.backend import BackendError

T = TypeVar("T")

AUTH_REQUIRED = -32001
"""The JSON-RPC error code of a call without a valid key (HTTP 401)."""
NOT_FOUND = -32002
"""The code of an unknown diagnosis, thread or evidence handle (HTTP 404)."""
CONFLICT = -32003
"""The code of a thread that is busy or a diagnosis that cannot be resumed (HTTP 409)."""
RATE_LIMITED = -32004
"""The code of a call over the key's rate (HTTP 429)."""
UNAVAILABLE = -32005
"""The code of a database or model endpoint that is unavailable (HTTP 502, 503)."""

_CODES = {401: AUTH_REQUIRED, 404: NOT_FOUND, 409: CONFLICT, 429: RATE_LIMITED}
PATH = "/mcp"
"""Where the HTTP API mounts the MCP endpoint."""
MAX_LISTED = 100


def mcp_error(error: ApiError) -> MCPError:
    """The MCP error of an API refusal: the same message, the HTTP status in ``data``."""
    if error.status in _CODES:
        code = _CODES[error.status]
    elif error.status in (502, 503):
        code = UNAVAILABLE
    elif 400 <= error.status < 500:
        code = INVALID_PARAMS
    else:
        code = INTERNAL_ERROR
    data: dict[str, Any] = {"status": error.status}
    if "Retry-After" in error.headers:
        data["retry_after"] = error.headers["Retry-After"]
    return MCPError(code, error.message, data)


# --------------------------------------------------------------------------- output schemas


class EvidenceHandle(BaseModel):
    """One evidence binding of a claim."""

    handle: str = Field(description="<invocation_id>#<raw_path>; pass it to get_evidence")
    invocation_id: str
    raw_path: str
    tool: str | None
    excerpt: str | None = Field(description="the text the claim quotes from the ref")
    verified: bool = Field(description="whether the Gatekeeper found the excerpt in the ref")
    ref_text: str | None = Field(description="the cited ref's text")


class ClaimView(BaseModel):
    """One claim with its label."""

    claim_id: str
    claim_type: str | None
    text: str | None
    label: str = Field(
        description="direct_observation, reasonable_inference, overstated, unsupported, "
        "external_unknown, contradicted, or unchecked"
    )
    confirmed: bool = Field(description="whether the answer may present it as established")
    detail: str | None
    evidence: list[EvidenceHandle]


class RootCauseView(BaseModel):
    """The verified root cause: kept only when every claim it names was confirmed."""

    service: str
    mechanism: str
    claim_ids: list[str] = Field(description="the confirmed claims that state it")


class Diagnosis(BaseModel):
    """A diagnosis: verdict, score, root cause, answer, and the claims with their evidence."""

    diagnosis_id: str
    thread_id: str
    question: str
    status: str = Field(description="running, done, failed or abandoned")
    note: str | None
    verdict: str | None = Field(description="PASS, LOW_CONFID or REJECT")
    score: float | None = Field(description="groundedness score, 0 to 1")
    rounds: int
    offline: bool
    root_cause: RootCauseView | None = Field(
        description="the verified root cause, when the diagnosis names one"
    )
    answer: str | None
    claims: list[ClaimView]
    invocations: int = Field(description="tool calls recorded")
    created_at: str
    updated_at: str


class DiagnosisEntry(BaseModel):
    """One diagnosis in a listing."""

    diagnosis_id: str
    thread_id: str
    question: str
    status: str
    verdict: str | None
    score: float | None
    services: list[str]
    created_at: str


class DiagnosisList(BaseModel):
    """The caller's diagnoses, newest first."""

    diagnoses: list[DiagnosisEntry]
    total: int = Field(description="how many matched before the limit")


class EvidenceRefView(BaseModel):
    """One citable ref of an invocation."""

    handle: str
    raw_path: str
    source_type: str
    text: str


class Evidence(BaseModel):
    """One invocation behind a claim, or one ref of it with the raw entry."""

    invocation_id: str
    diagnosis_id: str
    tool: str
    arguments: dict[str, Any]
    round: int
    status: str
    error: str | None
    started_at: str
    duration_ms: float
    handle: str | None = None
    raw_path: str | None = None
    source_type: str | None = None
    text: str | None = Field(default=None, description="the ref's text, as claims quote it")
    entry: Any = Field(default=None, description="the raw entry the ref was rendered from")
    refs: list[EvidenceRefView] | None = Field(
        default=None, description="every ref of the invocation (when no raw_path was asked)"
    )


class Reverification(BaseModel):
    """A re-check of a recorded diagnosis against its stored evidence (no tool is called)."""

    diagnosis_id: str
    verifier_mode: str
    invocations: int
    before: dict[str, Any]
    after: dict[str, Any]
    changes: list[str]


class RunbookDocument(BaseModel):
    """One runbook section found."""

    doc_id: str | None
    title: str | None
    source: str | None
    score: float | None
    chunk: str | None


class RunbookHits(BaseModel):
    """Runbook sections matching a query, best first."""

    documents: list[RunbookDocument]


# --------------------------------------------------------------------------- access


class Access:
    """Who is calling: the request's key over HTTP, the process's key over stdio.

    Args:
        service: The API's service (its keys, limits and rate limiter).
        key: The stdio process's key; None over HTTP, where each request carries its own.
        http: Whether calls arrive over HTTP.
    """

    def __init__(self, service: Service, *, http: bool, key: str | None = None) -> None:
        self.service = service
        self.http = http
        self.key = key

    async def admit(self, ctx: Context) -> Caller:
        """Authenticate the call and spend one token of its key's rate.

        Raises:
            MCPError: 401 without a valid key, 429 over the rate, 500 when misconfigured.
        """
        try:
            keys, limits, rate = await self.service.config_async()
        except Exception as exc:
            raise mcp_error(_failure(exc, "request")) from None
        if self.http:
            headers = {name.lower(): value for name, value in (ctx.headers or {}).items()}
            request = ctx.request_context.request
            address = getattr(request, "client", None)
            client = str(getattr(address, "host", None) or "mcp-http")
        else:
            headers = {"authorization": f"Bearer {self.key}"} if self.key else {}
            client = "mcp-stdio"
        caller = authenticate(keys, headers, client)
        if caller is None:
            missing = presented_key(headers) is None
            if self.http:
                reason = (
                    "missing API key: send Authorization: Bearer <key> or X-API-Key: <key>"
                    if missing
                    else "invalid API key"
                )
            else:
                reason = (
                    "missing API key: set SUPERBIZ_MCP_API_KEY in the MCP server's environment"
                    if missing
                    else "invalid API key (SUPERBIZ_MCP_API_KEY)"
                )
            raise mcp_error(ApiError(401, reason))
        wait = rate.take(caller.bucket)
        if wait is not None:
            after = retry_after_header(wait)
            raise mcp_error(
                ApiError(
                    429,
                    f"rate limit exceeded: {limits.rate_per_minute} requests per minute per API "
                    f"key; retry in {after} s",
                    {"Retry-After": after},
                )
            )
        return caller


async def _blocking(work: Callable[[], T], action: str) -> T:
    """Run a blocking service call off the event loop; API refusals become MCP errors."""
    try:
        return await anyio.to_thread.run_sync(work)
    except MCPError:
        raise
    except Exception as exc:
        raise mcp_error(_failure(exc, action)) from None


# --------------------------------------------------------------------------- the server


INSTRUCTIONS = (
    "Incident diagnosis whose every stated claim is checked against the evidence it gathered. "
    "Call diagnose with a question; read the verdict (PASS, LOW_CONFID, REJECT), the answer and "
    "the claims: a claim is established only when confirmed is true. Each claim's evidence "
    "handles open the raw evidence with get_evidence."
)


def build_server(service: Service, access: Access) -> MCPServer:
    """The MCP server over ``service``, calls admitted by ``access``."""
    server = MCPServer(
        "superbiz",
        title="superbiz incident diagnosis",
        instructions=INSTRUCTIONS,
        warn_on_duplicate_tools=False,
    )
    api = service  # a tool's own argument named service shadows the name
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

    async def diagnosis_of(identity: str, diagnosis_id: str) -> Diagnosis:
        found = await _blocking(lambda: service.diagnosis(identity, diagnosis_id), "request")
        record = {key: value for key, value in found.items() if key != "invocations"}
        return Diagnosis.model_validate(views.diagnosis_view(record, found["invocations"]))  # type: ignore[arg-type]

    async def run(
        ctx: Context,
        identity: str,
        work: Callable[[Callable[[dict[str, object]], None], threading.Event], Any],
        action: str,
    ) -> Diagnosis:
        """Run a diagnosis (or resume) in a worker thread, reporting each stage as progress."""
        stop = threading.Event()
        stages = 0

        def on_event(event: dict[str, object]) -> None:
            nonlocal stages
            stages += 1
            message = one_line(_stage_text(event), 200)
            try:
                anyio.from_thread.run(ctx.report_progress, stages, None, message)
            except Exception:  # the client is gone: the run still finishes and is recorded
                return

        persistence, _ = await _blocking(service.open, action)
        try:
            summary = await anyio.to_thread.run_sync(
                lambda: work(on_event, stop),
                abandon_on_cancel=True,
                limiter=service.runs(persistence),
            )
        except anyio.get_cancelled_exc_class():
            stop.set()  # the client cancelled: the run stops at its next stage, resumable
            raise
        except RunStopped as exc:
            raise mcp_error(ApiError(409, str(exc))) from None
        except MCPError:
            raise
        except Exception as exc:
            raise mcp_error(_failure(exc, action)) from None
        diagnosis_id = summary.get("diagnosis_id")
        if not diagnosis_id:
            raise mcp_error(ApiError(500, f"{action} failed: the run recorded no diagnosis"))
        return await diagnosis_of(identity, str(diagnosis_id))

    @server.tool(
        description="Diagnose an incident question (e.g. 'why does order-service return 500?'). "
        "Returns the verdict, groundedness score, root cause (when verified), the answer, and "
        "each claim with its label and evidence handles. Sends a progress notification per "
        "stage; cancelling the call stops the run at its next stage (resume_diagnosis finishes "
        "it).",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False
        ),
    )
    async def diagnose(
        ctx: Context,
        question: str = Field(description="the question, in any language"),
        language: str | None = Field(default=None, description="answer language: zh or en"),
        thread: str | None = Field(
            default=None, description="a thread to continue (default: a new thread)"
        ),
        offline: bool | None = Field(
            default=None,
            description="deterministic rules instead of models (default: the server's)",
        ),
        options: Annotated[
            dict[str, Any] | None,
            Field(
                description="run settings as the HTTP API's settings object, e.g. "
                '{"max_tool_calls_per_round": 4, "composer_mode": "template"}'
            ),
        ] = None,
    ) -> Diagnosis:
        caller = await access.admit(ctx)
        _, limits, _ = await service.config_async()
        body: dict[str, Any] = {"question": question}
        if thread is not None:
            body["thread_id"] = thread
        if language is not None:
            body["language"] = language
        settings = dict(options or {})
        if offline is not None:
            settings["offline"] = offline
        if settings:
            body["settings"] = settings
        try:
            chat = parse_chat(json.dumps(body).encode("utf-8"), limits)
        except ApiError as exc:
            raise mcp_error(exc) from None
        return await run(
            ctx,
            caller.identity,
            lambda on_event, stop: service.diagnose(
                caller.identity, chat, on_event=on_event, stop=stop
            ),
            "diagnosis",
        )

    @server.tool(
        description="Finish an interrupted or cancelled diagnosis from its last checkpoint, "
        "with the settings it started with. Returns it as diagnose does.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def resume_diagnosis(
        ctx: Context, diagnosis_id: str = Field(description="the diagnosis to finish")
    ) -> Diagnosis:
        caller = await access.admit(ctx)
        return await run(
            ctx,
            caller.identity,
            lambda on_event, stop: service.resume(
                caller.identity, diagnosis_id, on_event=on_event, stop=stop
            ),
            "resume",
        )

    @server.tool(
        description="One of your diagnoses: verdict, score, root cause, answer, and the claims "
        "with their labels and evidence handles.",
        annotations=read_only,
    )
    async def get_diagnosis(
        ctx: Context, diagnosis_id: str = Field(description="e.g. diag-...")
    ) -> Diagnosis:
        caller = await access.admit(ctx)
        return await diagnosis_of(caller.identity, diagnosis_id)

    @server.tool(
        description="Your diagnoses, newest first, filtered by thread, verdict, status or the "
        "service they queried.",
        annotations=read_only,
    )
    async def list_diagnoses(
        ctx: Context,
        thread: str | None = Field(default=None, description="only this thread"),
        verdict: str | None = Field(default=None, description="PASS, LOW_CONFID or REJECT"),
        status: str | None = Field(default=None, description="running, done, failed, abandoned"),
        service: str | None = Field(
            default=None, description="only diagnoses that queried this service"
        ),
        limit: int = Field(default=20, ge=1, le=MAX_LISTED, description="at most this many"),
    ) -> DiagnosisList:
        caller = await access.admit(ctx)

        def read() -> list[dict[str, Any]]:
            if thread is not None:
                found = api.thread_diagnoses(caller.identity, thread)["diagnoses"]
            else:
                found = []
                for owned in api.threads(caller.identity)["threads"]:
                    found += api.thread_diagnoses(caller.identity, owned["thread_id"])["diagnoses"]
            return [views.listing_entry(record) for record in found]

        entries = await _blocking(read, "request")
        chosen = [
            entry
            for entry in entries
            if (verdict is None or entry["verdict"] == verdict)
            and (status is None or entry["status"] == status)
            and (service is None or service in entry["services"])
        ]
        chosen.sort(key=lambda entry: (entry["created_at"], entry["diagnosis_id"]), reverse=True)
        return DiagnosisList.model_validate({"diagnoses": chosen[:limit], "total": len(chosen)})

    @server.tool(
        description="The evidence behind a claim: one evidence handle (<invocation_id>#"
        "<raw_path>) gives the ref's text and the raw entry; a bare invocation id gives the "
        "call (tool, arguments, time, status) with every ref.",
        annotations=read_only,
    )
    async def get_evidence(
        ctx: Context,
        diagnosis_id: str = Field(description="the diagnosis the evidence belongs to"),
        handle: str = Field(description="inv-3#logs[0], or inv-3"),
    ) -> Evidence:
        caller = await access.admit(ctx)
        found = await _blocking(lambda: service.diagnosis(caller.identity, diagnosis_id), "request")
        invocation_id, raw_path = views.split_handle(handle)
        invocation = next(
            (inv for inv in found["invocations"] if inv["invocation_id"] == invocation_id), None
        )
        if invocation is None:
            raise mcp_error(
                ApiError(404, f"no invocation {invocation_id!r} in diagnosis {diagnosis_id!r}")
            )
        try:
            view = views.evidence_view(invocation, raw_path)
        except KeyError:
            raise mcp_error(
                ApiError(404, f"invocation {invocation_id!r} has no evidence ref {raw_path!r}")
            ) from None
        return Evidence.model_validate(view)

    @server.tool(
        description="Re-run the Gatekeeper and the Verifier on a diagnosis's stored evidence "
        "(no tool is called again) and say what changed.",
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    async def reverify(
        ctx: Context,
        diagnosis_id: str = Field(description="the diagnosis to re-check"),
        offline: bool = Field(default=False, description="use the deterministic verifier"),
    ) -> Reverification:
        caller = await access.admit(ctx)
        report = await _blocking(
            lambda: service.reverify(caller.identity, diagnosis_id, offline=offline),
            "re-verification",
        )
        return Reverification.model_validate(report)

    @server.tool(
        description="Search the runbooks and postmortems the diagnoses use (as lookup_knowledge "
        "does), best first.",
        annotations=read_only,
    )
    async def search_runbooks(
        ctx: Context,
        query: str = Field(description='what to look for, e.g. "KubePodCrashLooping"'),
        top_k: int = Field(default=3, ge=1, le=10, description="documents at most"),
    ) -> RunbookHits:
        await access.admit(ctx)
        if not query.strip():
            raise mcp_error(ApiError(422, "query is empty"))

        def search() -> list[dict[str, Any]]:
            try:
                found = service.backend().lookup_knowledge(query=query, top_k=top_k)
            except BackendError as exc:
                raise ApiError(503, f"the runbooks cannot be searched: {exc}") from None
            return [dict(doc) for doc in found["documents"]]

        documents = await _blocking(search, "runbook search")
        return RunbookHits.model_validate(
            {
                "documents": [
                    {
                        "doc_id": doc.get("doc_id"),
                        "title": doc.get("title"),
                        "source": doc.get("source"),
                        "score": doc.get("score"),
                        "chunk": doc.get("chunk"),
                    }
                    for doc in documents
                ]
            }
        )

    @server.resource(
        "superbiz://diagnoses/{diagnosis_id}/answer",
        name="diagnosis-answer",
        description="The composed answer of a diagnosis, with its verdict",
        mime_type="text/markdown",
    )
    async def answer_resource(diagnosis_id: str, ctx: Context) -> str:
        caller = await access.admit(ctx)
        view = (await diagnosis_of(caller.identity, diagnosis_id)).model_dump()
        head = (
            f"Diagnosis {view['diagnosis_id']}: verdict {view['verdict'] or '-'}, score "
            f"{view['score'] if view['score'] is not None else '-'}\n\n"
        )
        root = view["root_cause"]
        if root is not None:
            head += f"Root cause: {root['service']}: {root['mechanism']}\n\n"
        return head + (view["answer"] or "(no answer recorded)") + "\n"

    @server.resource(
        "superbiz://diagnoses/{diagnosis_id}/claims",
        name="diagnosis-claims",
        description="The claims table of a diagnosis: label, text and evidence handles",
        mime_type="text/markdown",
    )
    async def claims_resource(diagnosis_id: str, ctx: Context) -> str:
        caller = await access.admit(ctx)
        return views.claims_table((await diagnosis_of(caller.identity, diagnosis_id)).model_dump())

    return server


def _stage_text(event: Mapping[str, object]) -> str:
    """One progress line of a stage event (``stage`` and what it says)."""
    stage = event.get("stage") or event.get("node") or "stage"
    parts = [str(stage)]
    for key in ("round", "diagnosis_id", "invocation_id", "tool", "status", "verdict", "score"):
        value = event.get(key)
        if value is not None:
            parts.append(f"{key}={value}")
    return " ".join(parts)


class _KeyRequired:
    """ASGI wrapper of the HTTP endpoint: the API's 401 and 413 before the MCP transport.

    401 without a valid key; 413 for a body over the limit its ``Content-Length`` declares (the
    transport bounds the others).
    """

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self._app = app
        self._service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a request without a valid key; pass the others to the MCP transport."""
        if scope["type"] == "http":
            request = Request(scope, receive)
            try:
                keys, limits, _ = await self._service.config_async()
            except Exception as exc:
                await _failure(exc, "request").response()(scope, receive, send)
                return
            client = request.client.host if request.client else "unknown"
            if authenticate(keys, request.headers, client) is None:
                reason = (
                    "missing API key: send Authorization: Bearer <key> or X-API-Key: <key>"
                    if presented_key(request.headers) is None
                    else "invalid API key"
                )
                error = ApiError(401, reason, {"WWW-Authenticate": "Bearer"})
                await error.response()(scope, receive, send)
                return
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) > limits.max_body_bytes:
                too_large = (
                    f"the request body is larger than the limit of {limits.max_body_bytes} bytes"
                )
                await ApiError(413, too_large).response()(scope, receive, send)
                return
        await self._app(scope, receive, send)


def http_routes(service: Service) -> tuple[list[BaseRoute], MCPServer]:
    """The streamable HTTP endpoint's route (``/mcp``, stateless) and its server.

    The HTTP API adds the route to its own and runs ``server.session_manager.run()`` in its
    lifespan. The host checks are the API guard's (``apps/http/guard.py``), which covers ``/mcp``.
    """
    server = build_server(service, Access(service, http=True))
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    routes: list[BaseRoute] = []
    for route in app.routes:
        if isinstance(route, Route) and route.path == PATH:
            routes.append(Route(PATH, endpoint=_KeyRequired(route.app, service)))
    return routes, server


def run_stdio(service: Service, key: str | None) -> None:
    """Serve MCP over this process's stdin and stdout until the client closes them."""
    build_server(service, Access(service, http=False, key=key)).run("stdio")
