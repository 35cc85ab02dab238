"""What a replay of a diagnosis needs from its model calls: one bounded record per call.

``call_record`` turns a model reply, as the node received it, into a ``ModelCallRecord``: the
role, the round, the reply text and tool calls (each call the executor acted on, a call whose
arguments were not JSON in the form the executor gives it), and the usage the endpoint reported.
Texts are bounded (``MAX_REPLY_CHARS``) and secrets the process knows of (the model API key,
backend tokens, passwords and header values) are replaced before anything is recorded. With
``record_model_replies`` off only the role, the round and the usage are kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from langchain_core.messages import AIMessage

from evidence import config as evidence_settings
from models.messages import INVALID_ARGUMENTS as INVALID_ARGUMENTS
from models.messages import message_text, readable_calls
from models.text_tool_calls import tool_call_source
from state import catalog
from state.configuration import Sources
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import (
    CONFIRMED_LABELS,
    JSONObject,
    ModelCallRecord,
    RecordedToolCall,
    ReplayRecord,
)
from state.settings import SettingsError
from verification.answer import select_material

REPLAY_VERSION = "replay.v1"

MAX_REPLY_CHARS = 32_000
"""Longest reply text (and tool-call arguments text) a record keeps; past it the text is cut and
the record marked ``truncated``."""

MAX_RECORDED_CALLS = 200
"""Most model calls one diagnosis's record keeps (the model-call budget bounds them first)."""

REDACTED = "****"

_MIN_SECRET_CHARS = 4


def known_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values this process was given, longest first.

    The value of every setting declared secret (the model API key, backend tokens, passwords
    and header values, API keys), from the environment or the configuration file; a JSON object
    (headers) gives its values. Longest first, so a secret containing another is replaced whole.
    """
    sources = Sources(environ)
    values: list[str] = []
    for setting in (*catalog.SETTINGS, *evidence_settings.SETTINGS):
        if not setting.secret:
            continue
        try:
            given = sources.given(setting)
        except SettingsError:  # an unreadable file holds nothing to hide
            given = None
        if given is None:
            continue
        raw = given.raw
        if isinstance(raw, str) and raw.lstrip().startswith("{"):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError:
                pass
        if isinstance(raw, dict):
            values.extend(str(item) for item in raw.values())
        else:
            values.append(str(raw))
    kept = {value.strip() for value in values if len(value.strip()) >= _MIN_SECRET_CHARS}
    return sorted(kept, key=len, reverse=True)


def _scrub(text: str, secrets: Sequence[str]) -> tuple[str, bool]:
    found = False
    for secret in secrets:
        if secret in text:
            text, found = text.replace(secret, REDACTED), True
    return text, found


def _bounded(text: str) -> tuple[str, bool]:
    return (text[:MAX_REPLY_CHARS], True) if len(text) > MAX_REPLY_CHARS else (text, False)


def call_record(
    reply: AIMessage,
    *,
    role: str,
    round: int,
    record_replies: bool,
    secrets: Sequence[str] | None = None,
    max_tokens: int | None = None,
) -> ModelCallRecord:
    """The record of one model call (see the module docstring).

    ``max_tokens`` is the output limit the request carried; ``finish_reason`` says whether the
    reply reached it (``length``), and ``tool_call_source`` where its tool calls came from.
    """
    usage = getattr(reply, "usage_metadata", None) or {}
    finish = reply.response_metadata.get("finish_reason")
    record = ModelCallRecord(
        role=role,
        round=round,
        content=None,
        tool_calls=None,
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        truncated=False,
        redacted=False,
        tool_call_source=tool_call_source(reply),
        finish_reason=finish if isinstance(finish, str) else None,
        max_tokens=max_tokens,
    )
    if not record_replies:
        return record
    hidden = known_secrets() if secrets is None else list(secrets)
    text, cut = _bounded(message_text(reply))
    text, scrubbed = _scrub(text, hidden)
    calls: list[RecordedToolCall] = []
    for call in readable_calls(reply):
        args_text, args_cut = _bounded(json.dumps(call["args"], ensure_ascii=False))
        args_text, args_scrubbed = _scrub(args_text, hidden)
        cut, scrubbed = cut or args_cut, scrubbed or args_scrubbed
        args: JSONObject
        try:
            loaded = json.loads(args_text)
            args = loaded if isinstance(loaded, dict) else {INVALID_ARGUMENTS: args_text}
        except json.JSONDecodeError:  # cut mid-way: kept as the text the record holds
            args = {INVALID_ARGUMENTS: args_text}
        calls.append(RecordedToolCall(name=call["name"], args=args, id=call["id"]))
    record["content"], record["tool_calls"] = text, calls
    record["truncated"], record["redacted"] = cut, scrubbed
    return record


def replay_record(state: DiagnosisState, ctx: Context) -> ReplayRecord:
    """The ``self_evaluation.replay`` channel of a finished diagnosis."""
    calls = list(state.get("model_calls") or [])
    usage = state.get("usage") or {"calls": 0}
    return ReplayRecord(
        version=REPLAY_VERSION,
        model_replies="recorded" if ctx.record_model_replies else "off",
        model_calls=calls,
        calls_dropped=max(0, int(usage["calls"]) - len(calls)),
        known_services=list(state.get("known_services") or []),
        route=[*state.get("route", []), "audit"],
        confirmed_claims=confirmed_claims(state),
    )


def confirmed_claims(state: DiagnosisState) -> list[str]:
    """Final-round claim ids the answer presents as established.

    A claim counts when its final label is direct_observation or reasonable_inference, the
    answer material selects it as confirmed (``select_material``), and its text is in the answer
    (a degraded answer leaves inferences out).
    """
    if "verifier_result" not in state:
        return []
    checks = state["verifier_result"]["claim_checks"]
    labels = {check["claim_id"]: check["verification"] for check in checks}
    material = select_material(checks, state["executor_answer"], state["gatekeeper_result"])
    answer = state.get("answer", "")
    found = [
        item["claim_id"]
        for item in material["confirmed"]
        if labels.get(item["claim_id"]) in CONFIRMED_LABELS and item["claim_text"] in answer
    ]
    return sorted(set(found))
