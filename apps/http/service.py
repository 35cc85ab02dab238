"""The service behind the HTTP API and the MCP server: configuration, database, graph, runs.

``Service`` opens the database and compiles the graph on first use and runs, resumes and reads
diagnoses for an identity; ``parse_chat`` validates a chat request; ``_failure`` turns an
exception into the API's error. The HTTP handlers (``apps/http/api.py``) and the MCP tools
(``apps/mcp/server.py``) both call these, so a message, a limit or an ownership rule is written
once. This module builds no app at import (the LangGraph server loads ``api.py`` by path, and
the MCP server imports this module, never ``api.py``).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

import anyio
import anyio.from_thread
import anyio.to_thread
import psycopg
from langgraph.graph.state import CompiledStateGraph
from psycopg_pool import PoolTimeout
from sqlalchemy.exc import SQLAlchemyError

from apps.auth import (
    ApiKeys,
    ConfigError,
    Limits,
    RateLimiter,
)
from apps.eval.export import ExportError, export_scenario
from apps.http.guard import ApiError
from apps.resuming import backend_for, environment_ref
from evidence.composed import configured_backend
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
        """The caller's threads, oldest first, and how many threads no API identity owns.

        ``unowned`` counts the command line's threads on the same database: the page says why
        it does not list them (blocking).
        """
        persistence, _ = self.open()
        owners = ThreadOwners(persistence.db)
        return {"threads": owners.threads_of(identity), "unowned": owners.unowned_count()}


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
