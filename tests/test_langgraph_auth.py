"""The LangGraph server's auth handler in-process: who a request is, and Studio locally.

The live behaviour (filters, owners, 404s) is tested against ``langgraph dev`` in
``tests/test_langgraph_serving.py``; here, the identity rules of ``authenticate`` one by one.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import Auth

from apps.langgraph_server import auth as langgraph_auth

ROOT = Path(__file__).resolve().parents[1]
LOCAL: dict[str, Any] = {"client": ("127.0.0.1", 50000)}
REMOTE: dict[str, Any] = {"client": ("203.0.113.7", 50000)}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(langgraph_auth, "_keys", None)
    monkeypatch.setenv("SUPERBIZ_API_KEYS", "key-alice=alice,key-bob=bob")
    monkeypatch.delenv("SUPERBIZ_API_KEYS_FILE", raising=False)
    monkeypatch.delenv("SUPERBIZ_STUDIO_IDENTITY", raising=False)


def _who(headers: dict[bytes, bytes], scope: dict[str, Any] = LOCAL) -> str:
    user = asyncio.run(langgraph_auth.authenticate(headers, scope))
    return str(user["identity"])


def _refusal(headers: dict[bytes, bytes], scope: dict[str, Any] = LOCAL) -> str:
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        _who(headers, scope)
    assert refused.value.status_code == 401
    return str(refused.value.detail)


def test_langgraph_auth_keys_give_the_api_identities() -> None:
    assert _who({b"authorization": b"Bearer key-alice"}) == "alice"
    assert _who({b"x-api-key": b"key-bob"}) == "bob"
    assert "invalid API key" in _refusal({b"authorization": b"Bearer key-eve"})
    assert "missing API key" in _refusal({})


def test_langgraph_auth_without_keys_everyone_is_anonymous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SUPERBIZ_API_KEYS")

    assert _who({}, REMOTE) == "anonymous"
    assert _who({b"x-auth-scheme": b"langsmith"}) == "anonymous"  # Studio works as before


def test_langgraph_auth_studio_acts_as_the_configured_identity_from_loopback_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    studio = {b"x-auth-scheme": b"langsmith", b"x-api-key": b"lsv2-langsmith-key"}
    assert "SUPERBIZ_STUDIO_IDENTITY" in _refusal(studio)

    monkeypatch.setenv("SUPERBIZ_STUDIO_IDENTITY", "alice")

    assert _who(studio, LOCAL) == "alice"
    assert "SUPERBIZ_STUDIO_IDENTITY" in _refusal(studio, REMOTE)
    assert "missing API key" in _refusal({}, LOCAL)  # only Studio's requests, not anyone local
    assert _who({**studio, b"authorization": b"Bearer key-bob"}, REMOTE) == "bob"


def test_langgraph_auth_is_configured_in_langgraph_json_for_every_request() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))

    assert config["auth"] == {
        "path": "./apps/langgraph_server/auth.py:auth",
        "disable_studio_auth": True,
    }
    # Every resource and action has a handler or falls to the refusing default.
    assert langgraph_auth.auth._global_handlers
