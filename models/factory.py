"""Model factory: OpenAI-compatible chat models per role, or the offline rule-based models.

Configuration comes from the environment: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` (any
OpenAI-compatible endpoint: OpenAI, DeepSeek, Qwen, vLLM, Ollama), ``SUPERBIZ_MODEL`` and the
per-role overrides ``SUPERBIZ_<ROLE>_MODEL`` (read into ``Context``).
"""

from __future__ import annotations

import threading
from dataclasses import replace

from langchain_core.language_models import BaseChatModel

from models.budget import GetModel
from models.failures import ModelCallFailed, RetryPolicy
from models.offline import OfflineExecutor, OfflineModel, OfflinePlanner, OfflineVerifier
from state import catalog, configuration
from state.context import Context

_OFFLINE: dict[str, type[OfflineModel]] = {
    "planner": OfflinePlanner,
    "executor": OfflineExecutor,
    "verifier": OfflineVerifier,
}


class OfflineComposerUnavailable(LookupError):
    """Raised when a composer model is asked for in offline mode (the template is used)."""


__all__ = ["ModelCallFailed", "ModelConfigError", "OfflineComposerUnavailable", "RetryPolicy"]


class ModelConfigError(RuntimeError):
    """Raised when model mode is asked for but no model endpoint can be configured."""


def make_model_factory(policy: RetryPolicy | None = None) -> GetModel:
    """Return ``get_model(role, context)`` that builds each distinct model once.

    Args:
        policy: how model requests are retried (``models/calls.py``); its number of
            retries is the run's ``model_retries``. Tests pass one that waits milliseconds.
    """
    cache: dict[tuple[str, str, float, bool, int, int], BaseChatModel] = {}
    lock = threading.Lock()
    base = policy or RetryPolicy()

    def get_model(role: str, ctx: Context) -> BaseChatModel:
        key = (
            role,
            ctx.model_for(role),
            ctx.model_timeout_s,
            ctx.offline,
            ctx.model_retries,
            max_tokens(role),
        )
        with lock:
            model = cache.get(key)
            if model is None:
                model = cache[key] = _build(role, ctx, replace(base, retries=ctx.model_retries))
            return model

    return get_model


def max_tokens(role: str) -> int:
    """The output token limit of ``role`` (``SUPERBIZ_<ROLE>_MAX_TOKENS``)."""
    setting = catalog.MAX_TOKENS.get(role, catalog.EXECUTOR_MAX_TOKENS)
    return int(configuration.value(setting))


def _build(role: str, ctx: Context, policy: RetryPolicy) -> BaseChatModel:
    if ctx.offline:
        if role not in _OFFLINE:
            raise OfflineComposerUnavailable(f"no offline model for role {role!r}")
        return _OFFLINE[role]()
    if not catalog.models_configured():
        raise ModelConfigError(
            f"the {role} model {ctx.model_for(role)!r} needs OPENAI_API_KEY (any value for a "
            "local endpoint); set it, or run offline"
        )
    # The client retries nothing itself: models/calls.py is the one retry layer. Replies
    # are never streamed (every call inside the graph is internal). Loaded only in model mode.
    from models.calls import ResilientChatOpenAI

    return ResilientChatOpenAI(
        model=ctx.model_for(role),
        base_url=configuration.value(catalog.MODEL_BASE_URL),
        timeout=ctx.model_timeout_s,
        temperature=0,
        max_retries=0,
        disable_streaming=True,
        # Sent with every request: a model that rambles stops at its role's limit.
        max_completion_tokens=max_tokens(role),
    ).with_policy(policy, role=role)
