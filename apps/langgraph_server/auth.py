"""The LangGraph server's auth: the HTTP API's keys and identities, the same thread owners.

``langgraph.json`` names ``auth`` below under its ``auth`` key (with ``disable_studio_auth``, so
every request, Studio's too, comes through ``authenticate``). The server loads this file by path:
absolute imports only.

- **Who calls.** The keys and identities of the HTTP API (``apps/auth.py``:
  ``SUPERBIZ_API_KEYS`` / ``SUPERBIZ_API_KEYS_FILE``), sent as ``Authorization: Bearer <key>`` or
  ``X-API-Key: <key>``; a missing or unknown key is 401. With no key configured, access is open
  and every caller is ``anonymous``, exactly as in the HTTP API.
- **Studio.** Studio marks its requests ``x-auth-scheme: langsmith``. Without keys it works as
  everyone does. With keys, Studio sends no key of ours: its requests are accepted as the identity
  in ``SUPERBIZ_STUDIO_IDENTITY`` when that is set and the request comes from a loopback address
  (a developer's browser on the same machine), else refused with 401.
- **What each identity sees.** Threads, runs, crons and assistants carry ``metadata.owner``, set
  by the server from the caller's identity on every create (a client's own value is overwritten)
  and required on every read, update, delete, search and run: another identity's resources
  answer 404 or are left out of listings. A thread id is also claimed in the ``thread_owner``
  table the HTTP API uses, so a LangGraph client can neither create nor run on a thread another
  identity owns through ``/api/chat`` (409/404), nor on one the command line created. The store
  is scoped to the caller: its namespace always starts with the caller's identity. Any other
  resource or action is refused (403).
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from typing import Any, cast

from langgraph_sdk import Auth

from apps.auth import ANONYMOUS, ApiKeys, ConfigError, presented_key
from apps.langgraph_server.database import database
from persistence.database import DatabaseError
from persistence.ownership import ThreadOwners
from state import catalog, configuration

OWNER = "owner"

auth = Auth()

_keys: ApiKeys | None = None
_keys_lock = threading.Lock()


def _configured_keys() -> ApiKeys:
    global _keys
    with _keys_lock:
        if _keys is None:
            _keys = ApiKeys.from_env()
        return _keys


def _unauthorized(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(
        status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


def _from_loopback(scope: dict[str, Any]) -> bool:
    client = scope.get("client") or ("", 0)
    try:
        return ipaddress.ip_address(str(client[0])).is_loopback
    except ValueError:
        return False


@auth.authenticate
async def authenticate(
    headers: dict[bytes, bytes], scope: dict[str, Any]
) -> Auth.types.MinimalUserDict:
    """The caller's identity from its API key (``anonymous`` when no key is configured)."""
    try:
        keys = await asyncio.to_thread(_configured_keys)
    except ConfigError as exc:
        raise Auth.exceptions.HTTPException(
            status_code=500, detail=f"the API is misconfigured: {exc}"
        ) from exc
    if keys.open:
        return {"identity": ANONYMOUS, "permissions": []}
    text = {
        name.decode("latin-1").lower(): value.decode("latin-1") for name, value in headers.items()
    }
    studio = text.get("x-auth-scheme", "").lower() == "langsmith"
    if studio:  # Studio's own X-API-Key is a LangSmith key, not one of ours
        text.pop("x-api-key", None)
    key = presented_key(text)
    if key is not None:
        identity = keys.identity_of(key)
        if identity is None:
            raise _unauthorized("invalid API key")
        return {"identity": identity, "permissions": []}
    studio_identity = configuration.value(catalog.STUDIO_IDENTITY) or ""
    if studio and studio_identity and _from_loopback(scope):
        return {"identity": studio_identity, "permissions": []}
    if studio:
        raise _unauthorized(
            "Studio sends no superbiz API key: set SUPERBIZ_STUDIO_IDENTITY to the identity "
            "Studio acts as on this machine, or send Authorization: Bearer <key>"
        )
    raise _unauthorized("missing API key: send Authorization: Bearer <key> or X-API-Key: <key>")


def _identity(ctx: Auth.types.AuthContext) -> str:
    return str(ctx.user.identity)


def _own(value: Any, identity: str) -> None:  # a TypedDict value is a dict at run time
    """Stamp the caller as the owner in a create (or update) value's metadata."""
    metadata = value.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
        value["metadata"] = metadata
    metadata[OWNER] = identity


async def _claim(thread_id: Any, identity: str) -> None:
    """Claim a thread id for the caller in ``thread_owner``, or refuse the request."""
    if thread_id is None:
        return
    try:
        mine = await asyncio.to_thread(ThreadOwners(database).claim, str(thread_id), identity)
    except DatabaseError as exc:
        raise Auth.exceptions.HTTPException(
            status_code=503, detail=f"database unavailable: {exc}"
        ) from exc
    if not mine:
        raise Auth.exceptions.HTTPException(status_code=404, detail=f"no thread {thread_id}")


@auth.on
async def refuse_anything_else(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Default: any resource or action without its own handler below is refused (403)."""
    return False


@auth.on(resources="threads", actions=["create", "create_run"])
async def create_on_thread(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """A new thread, or a new run and the thread it may create, is the caller's.

    Runs only on the caller's threads; a thread id must not be another identity's.
    """
    identity = _identity(ctx)
    _own(value, identity)
    await _claim(value.get("thread_id"), identity)
    return {OWNER: identity}


@auth.on.threads.update
async def update_thread(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsUpdate
) -> Auth.types.FilterType:
    """Only the caller's threads, and the owner cannot be changed."""
    identity = _identity(ctx)
    if isinstance(value.get("metadata"), dict):
        _own(value, identity)
    return {OWNER: identity}


@auth.on(resources="threads", actions=["read", "delete", "search"])
async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """Threads (and their runs, state and history) of the caller only."""
    return {OWNER: _identity(ctx)}


@auth.on(resources=["crons", "assistants"], actions="create")
async def create_owned(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """A new cron or assistant is the caller's."""
    identity = _identity(ctx)
    _own(value, identity)
    return {OWNER: identity}


@auth.on(resources="crons", actions=["read", "update", "delete", "search"])
@auth.on(resources="assistants", actions=["update", "delete"])
async def own_only(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """Crons, and assistants to change, of the caller only."""
    if ctx.action == "update" and isinstance(value.get("metadata"), dict):
        _own(value, _identity(ctx))
    return {OWNER: _identity(ctx)}


@auth.on(resources="assistants", actions=["read", "search"])
async def visible_assistants(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """The caller's assistants and the server's own (the graph's default assistant)."""
    either: Any = {"$or": [{OWNER: _identity(ctx)}, {"created_by": "system"}]}
    return cast(Auth.types.FilterType, either)


@auth.on.store
async def own_store(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Store items live under a namespace that starts with the caller's identity."""
    identity = _identity(ctx)
    for key in ("namespace", "namespace_prefix"):
        if key not in value:
            continue
        namespace = tuple(value[key] or ())
        if not namespace or namespace[0] != identity:
            value[key] = (identity, *namespace)
