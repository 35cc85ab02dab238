"""The one retry layer of model calls: which failures are retried, how long to wait, when to stop.

Every request to an OpenAI-compatible endpoint goes through ``ResilientChatOpenAI``, whose client
retries nothing itself (``max_retries=0``), so retries are never stacked:

- **retried** with exponential backoff and jitter, honouring ``Retry-After``: 408, 409, 429, any
  5xx, a lost or refused connection, a timeout, a reply cut off or not valid JSON;
- **never retried**: 400 (including a context-length error), 401, 403, 404, 422: the diagnosis
  ends ``failed`` with a one-line reason that says what to fix;
- **bounded** by the number of retries (``model_retries``) and by the diagnosis deadline: the
  nodes pass the deadline (an epoch time) in the call's config metadata under ``DEADLINE_KEY``,
  and no wait ends after it.

A failure the layer gives up on is a ``ModelCallFailed`` carrying that reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, ClassVar, TypeVar

import openai
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr

from models.budget import DEADLINE_KEY
from models.chat_model import CallableChatModel, GenerateCall
from models.failures import ModelCallFailed, RetryPolicy
from state.display import one_line
from state.json_shape import is_number, obj

__all__ = ["ModelCallFailed", "ResilientChatOpenAI", "RetryPolicy", "call_with_retries"]

T = TypeVar("T")

RETRIED_STATUSES = frozenset({408, 409, 429})
"""Statuses below 500 that are retried (every 5xx is)."""


def retry_after_s(exc: BaseException, now: float) -> float | None:
    """The wait an error response asks for (``Retry-After`` seconds or date), if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(value).timestamp() - now
    except (TypeError, ValueError):
        return None


def _server_message(exc: openai.APIStatusError) -> str:
    body = obj(exc.body)
    inner = body.get("error", body)
    message = inner.get("message") if isinstance(inner, dict) else inner
    if message:
        return one_line(str(message), 200)
    return one_line(str(exc.message), 200)


def _is_context_length(exc: openai.APIStatusError) -> bool:
    code = getattr(exc, "code", None)
    text = _server_message(exc).lower()
    return code == "context_length_exceeded" or any(
        marker in text for marker in ("context length", "context_length", "maximum context")
    )


def fatal_reason(exc: openai.APIStatusError, model: str, endpoint: str) -> str | None:
    """The one-line reason for an answer that must not be retried, or None to retry it."""
    status = exc.status_code
    said = _server_message(exc)
    if status == 401:
        return (
            f"the model endpoint {endpoint} refused the API key (401: {said}); check OPENAI_API_KEY"
        )
    if status == 403:
        return (
            f"the model endpoint {endpoint} denied access to model {model!r} (403: {said}); "
            "check that the API key may use this model"
        )
    if status == 404:
        return (
            f"the model endpoint {endpoint} does not know model {model!r} (404: {said}); "
            "check SUPERBIZ_MODEL (or SUPERBIZ_<ROLE>_MODEL) and OPENAI_BASE_URL"
        )
    if status == 400 and _is_context_length(exc):
        return (
            f"the request is longer than model {model!r} accepts (400 context length: {said}); "
            "use a model with a larger context window, or lower SUPERBIZ_MAX_TOOL_CALLS"
        )
    if status in (400, 422):
        return (
            f"the model endpoint {endpoint} rejected the request for model {model!r} "
            f"({status}: {said}); check that the model supports chat with tool calls"
        )
    if status in RETRIED_STATUSES or status >= 500:
        return None
    return f"the model endpoint {endpoint} answered {status} for model {model!r}: {said}"


def call_with_retries(
    call: Callable[[], T],
    *,
    policy: RetryPolicy,
    model: str,
    endpoint: str,
    deadline: float | None,
    timeout_setting: str | None = None,
) -> T:
    """Run ``call`` under the retry rules above.

    Raises:
        ModelCallFailed: for an answer that is never retried, or when the retries or the
            deadline are spent; other exceptions pass through unchanged.
    """
    attempt = 0
    while True:
        # A retried failure says what it was (for the final reason) and its status, if any.
        try:
            return call()
        except openai.APIStatusError as exc:
            reason = fatal_reason(exc, model, endpoint)
            if reason is not None:
                raise ModelCallFailed(reason, status=exc.status_code) from exc
            status: int | None = exc.status_code
            label = "rate-limited the request" if status == 429 else "failed"
            failure: BaseException = exc
            text = f"{label} ({status}: {_server_message(exc)})"
        except openai.APITimeoutError as exc:
            failure, text, status = exc, "timed out", None
            if timeout_setting:
                text = f"timed out (raise {timeout_setting})"
        except openai.APIConnectionError as exc:
            failure, status = exc, None
            text = f"could not be reached at {endpoint} or dropped the reply"
        except (json.JSONDecodeError, openai.APIResponseValidationError) as exc:
            failure, text, status = exc, "sent a reply that is not valid JSON", None
        attempt += 1
        now = policy.clock()
        wait = policy.delay(attempt, retry_after_s(failure, now))
        tries = f"{attempt} attempt{'s' if attempt > 1 else ''}"
        if attempt > policy.retries:
            raise ModelCallFailed(
                f"the model endpoint {text} for model {model!r}, still after {tries}; try "
                "again later, check the endpoint, or raise SUPERBIZ_MODEL_RETRIES",
                status=status,
                unavailable=True,
            ) from failure
        if deadline is not None and now + wait > deadline:
            raise ModelCallFailed(
                f"the model endpoint {text} for model {model!r} and the diagnosis deadline "
                f"leaves no time to retry (after {tries}); try again later or raise "
                "SUPERBIZ_DIAGNOSIS_DEADLINE_S",
                status=status,
                unavailable=True,
            ) from failure
        policy.sleep(wait)


def deadline_of(run_manager: CallbackManagerForLLMRun | None) -> float | None:
    """The diagnosis deadline a node put in the call's config metadata, if any."""
    metadata = getattr(run_manager, "metadata", None) or {}
    value = metadata.get(DEADLINE_KEY)
    return float(value) if is_number(value) else None


class ResilientChatOpenAI(CallableChatModel, ChatOpenAI):
    """``ChatOpenAI`` whose requests go through ``call_with_retries`` (and never stream).

    It sends ``response_format`` (``models.structured``) until the endpoint refuses it once:
    the refused request is sent again without it, and so is every later one.
    """

    accepts_response_format: ClassVar[bool] = True
    _policy: RetryPolicy = PrivateAttr(default_factory=RetryPolicy)
    _role: str = PrivateAttr(default="model")
    _schema_refused: bool = PrivateAttr(default=False)

    def with_policy(self, policy: RetryPolicy, *, role: str = "model") -> ResilientChatOpenAI:
        """Use ``policy`` for this model's retries (``role`` names its settings in messages)."""
        self._policy = policy
        self._role = role
        return self

    def _get_request_payload(
        self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        base = self.openai_api_base or ""
        if base and "api.openai.com" not in base and "max_completion_tokens" in payload:
            # Other OpenAI-compatible servers (Ollama, vLLM, llama.cpp) all read max_tokens.
            payload["max_tokens"] = payload.pop("max_completion_tokens")
        return payload

    @property
    def schema_refused(self) -> bool:
        """Whether the endpoint refused a ``response_format`` (it is no longer sent)."""
        return self._schema_refused

    def generate_for(self, call: GenerateCall) -> ChatResult:
        """``ChatOpenAI``'s generation under ``call_with_retries``, bounded by the deadline.

        Raises:
            ModelCallFailed: when the endpoint's answer is never retried, or the retries or the
                diagnosis deadline are spent.
        """
        with_schema = _sends_schema(call)
        if with_schema and self._schema_refused:
            call = _without_schema(call)
            with_schema = False
        try:
            return self._generate_once(call)
        except ModelCallFailed as exc:
            if not with_schema or not refuses_schema(exc):
                raise
            # The endpoint does not take a JSON schema: the same request without it, from now on.
            self._schema_refused = True
            return self._generate_once(_without_schema(call))

    def _generate_once(self, call: GenerateCall) -> ChatResult:
        deadline = deadline_of(call.run_manager)
        policy = self._policy

        def attempt() -> ChatResult:
            options: dict[str, Any] = {}
            if deadline is not None:
                # No single request may outlast the diagnosis deadline.
                remaining = max(0.05, deadline - policy.clock())
                limit = self.request_timeout
                if not is_number(limit) or remaining < limit:
                    options["timeout"] = remaining
            try:
                return call.run(partial(ChatOpenAI._generate, self), **options)
            except openai.LengthFinishReasonError as exc:
                # With a response_format the client refuses a reply cut at max_tokens; it is
                # read like any other cut reply (finish_reason "length").
                return self._create_chat_result(exc.completion)

        return call_with_retries(
            attempt,
            policy=policy,
            model=self.model_name,
            endpoint=self.openai_api_base or "https://api.openai.com/v1",
            deadline=deadline,
            timeout_setting=TIMEOUT_SETTING,
        )


def refuses_schema(exc: ModelCallFailed) -> bool:
    """Whether a failure is the endpoint refusing ``response_format`` (400 or 422 naming it)."""
    said = exc.reason.lower()
    return exc.status in (400, 422) and any(
        word in said for word in ("response_format", "json_schema", "schema", "grammar")
    )


TIMEOUT_SETTING = "SUPERBIZ_MODEL_TIMEOUT_S (or set SUPERBIZ_MODEL_PROFILE=local)"
"""What a timed-out request names to raise."""


def _sends_schema(call: GenerateCall) -> bool:
    """Whether the call sends a ``response_format`` (as an option, or in the request body)."""
    extra = call.kwargs.get("extra_body")
    return "response_format" in call.kwargs or (
        isinstance(extra, dict) and "response_format" in extra
    )


def _without_schema(call: GenerateCall) -> GenerateCall:
    kwargs = {key: value for key, value in call.kwargs.items() if key != "response_format"}
    extra = kwargs.get("extra_body")
    if isinstance(extra, dict) and "response_format" in extra:
        rest = {key: value for key, value in extra.items() if key != "response_format"}
        if rest:
            kwargs["extra_body"] = rest
        else:
            del kwargs["extra_body"]
    return GenerateCall(call.messages, call.stop, call.run_manager, kwargs)
