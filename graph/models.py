"""Model factory: OpenAI-compatible chat models per role, or the offline rule-based models.

Configuration comes from the environment: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` (any
OpenAI-compatible endpoint: OpenAI, DeepSeek, Qwen, vLLM, Ollama), ``SUPERBIZ_MODEL`` and the
per-role overrides ``SUPERBIZ_<ROLE>_MODEL`` (read into ``Context``).
"""

from __future__ import annotations

import os
import threading

from langchain_core.language_models import BaseChatModel

from nodes.common import GetModel
from nodes.offline import OfflineExecutor, OfflineModel, OfflinePlanner, OfflineVerifier
from state.context import Context

_OFFLINE: dict[str, type[OfflineModel]] = {
    "planner": OfflinePlanner,
    "executor": OfflineExecutor,
    "verifier": OfflineVerifier,
}


class OfflineComposerUnavailable(LookupError):
    """Raised when a composer model is asked for in offline mode (the template is used)."""


class ModelConfigError(RuntimeError):
    """Raised when model mode is asked for but no model endpoint can be configured."""


def make_model_factory() -> GetModel:
    """Return ``get_model(role, context)`` that builds each distinct model once."""
    cache: dict[tuple[str, str, float, bool], BaseChatModel] = {}
    lock = threading.Lock()

    def get_model(role: str, ctx: Context) -> BaseChatModel:
        key = (role, ctx.model_for(role), ctx.model_timeout_s, ctx.offline)
        with lock:
            model = cache.get(key)
            if model is None:
                model = cache[key] = _build(role, ctx)
            return model

    return get_model


def _build(role: str, ctx: Context) -> BaseChatModel:
    if ctx.offline:
        if role not in _OFFLINE:
            raise OfflineComposerUnavailable(f"no offline model for role {role!r}")
        return _OFFLINE[role]()
    if not os.environ.get("OPENAI_API_KEY"):
        raise ModelConfigError(
            f"the {role} model {ctx.model_for(role)!r} needs OPENAI_API_KEY (any value for a "
            "local endpoint); set it, or run offline"
        )
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=ctx.model_for(role),
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        timeout=ctx.model_timeout_s,
        temperature=0,
        max_retries=2,
    )
