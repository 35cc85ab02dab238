"""Replies constrained to a JSON schema where the endpoint takes ``response_format``.

``with_schema(model, name)`` asks for a reply shaped by the schema ``name``
(``verification.output_schemas``) when the model is one that sends requests to an
OpenAI-compatible endpoint (``ResilientChatOpenAI``). OpenAI, vLLM, llama.cpp's server and Ollama
accept ``{"type": "json_schema", ...}``; an endpoint that refuses it with 400 or 422 is asked the
same request without it, and the model stops sending it (``models.calls``). Scripted and offline
models are returned as they are. Either way the reply is parsed and checked as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from state.records import JSONObject
from verification.output_schemas import SCHEMAS

RESPONSE_FORMAT = "response_format"


def response_format(name: str, schema: JSONObject | None = None) -> JSONObject:
    """The ``response_format`` request field for the schema ``name`` (or ``schema``, sent as it)."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": name,
            "schema": SCHEMAS[name] if schema is None else schema,
            "strict": False,
        },
    }


def from_endpoint(model: BaseChatModel) -> bool:
    """Whether ``model`` sends requests to an endpoint (not a scripted or offline model)."""
    return bool(getattr(model, "accepts_response_format", False))


def accepts_schema(model: BaseChatModel) -> bool:
    """Whether ``model`` can send a ``response_format`` (and has not had one refused)."""
    return bool(getattr(model, "accepts_response_format", False)) and not getattr(
        model, "schema_refused", False
    )


def with_schema(
    model: BaseChatModel,
    name: str,
    schema: JSONObject | None = None,
    *,
    tools: Sequence[JSONObject] | None = None,
) -> Runnable[Any, Any]:
    """``model`` asked for a reply shaped by the schema ``name``, where it can send one.

    ``schema`` replaces the static schema of that name for this request (the executor's
    final answer bound to the diagnosis's recorded refs: ``executor_schema_for``). ``tools``
    are offered with it: a server that turns the schema into a grammar (llama.cpp) then still
    answers by the schema, and the request keeps the tool definitions of the turns before it,
    so the server can reuse their evaluated prompt instead of reading it all again.
    """
    if not accepts_schema(model):
        return model if tools is None else model.bind_tools(list(tools))
    if tools is None:
        return model.bind(response_format=response_format(name, schema))
    # With tools, the OpenAI client would parse the reply itself and insist on strict tools:
    # the field goes in the request body as it is, and the reply is read as text, as always.
    return model.bind_tools(list(tools)).bind(
        extra_body={RESPONSE_FORMAT: response_format(name, schema)}
    )
