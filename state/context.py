"""Run settings for one diagnosis (the graph's ``context_schema``).

Environment variables fill the defaults; a value passed by the caller for a run always wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

ROLES = ("planner", "executor", "verifier", "composer")

Language = Literal["zh", "en"]
ComposerMode = Literal["template", "model"]


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _env_bool(name: str) -> bool:
    return (_env(name) or "").strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    raw = _env(name)
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def _env_float(name: str, default: float) -> float:
    raw = _env(name)
    try:
        return float(raw) if raw is not None else default
    except ValueError:
        return default


def _model_override(role: str) -> Any:
    """The field of a per-role model override, read from ``SUPERBIZ_<ROLE>_MODEL``."""
    variable = f"SUPERBIZ_{role.upper()}_MODEL"
    return field(
        default_factory=lambda: _env(variable),
        metadata={"description": f"{role.capitalize()} model override ({variable})."},
    )


@dataclass(kw_only=True)
class Context:
    """Settings of one run; shown as a form in LangGraph Studio."""

    model: str = field(
        default_factory=lambda: _env("SUPERBIZ_MODEL", "gpt-4o-mini") or "gpt-4o-mini",
        metadata={"description": "Default chat model name for every role (SUPERBIZ_MODEL)."},
    )
    planner_model: str | None = _model_override("planner")
    executor_model: str | None = _model_override("executor")
    verifier_model: str | None = _model_override("verifier")
    composer_model: str | None = _model_override("composer")
    offline: bool = field(
        default_factory=lambda: _env_bool("SUPERBIZ_OFFLINE") or not _env("OPENAI_API_KEY"),
        metadata={
            "description": "Deterministic rule-based planner, executor and verifier; no model "
            "is called. On by default when OPENAI_API_KEY is not set."
        },
    )
    language: Language = field(
        default_factory=lambda: "en" if _env("SUPERBIZ_LANGUAGE") == "en" else "zh",
        metadata={"description": "Answer language: zh (default) or en."},
    )
    composer_mode: ComposerMode = field(
        default_factory=lambda: (
            "model" if _env("SUPERBIZ_COMPOSER_MODE") == "model" else "template"
        ),
        metadata={"description": "template (fixed safe template) or model (checked model text)."},
    )
    max_tool_calls_per_round: int = field(
        default_factory=lambda: _env_int("SUPERBIZ_MAX_TOOL_CALLS", 8),
        metadata={"description": "Tool calls the executor may make in one round."},
    )
    tool_timeout_s: float = field(
        default_factory=lambda: _env_float("SUPERBIZ_TOOL_TIMEOUT_S", 30.0),
        metadata={"description": "Seconds one tool call may take before it is an error."},
    )
    model_timeout_s: float = field(
        default_factory=lambda: _env_float("SUPERBIZ_MODEL_TIMEOUT_S", 120.0),
        metadata={"description": "Seconds one model request may take."},
    )

    def __post_init__(self) -> None:
        """Reject settings that cannot work, with the reason."""
        if self.language not in ("zh", "en"):
            raise ValueError(f"language must be 'zh' or 'en', got {self.language!r}")
        if self.composer_mode not in ("template", "model"):
            raise ValueError(
                f"composer_mode must be 'template' or 'model', got {self.composer_mode!r}"
            )
        if self.max_tool_calls_per_round < 1:
            raise ValueError("max_tool_calls_per_round must be at least 1")

    def model_for(self, role: str) -> str:
        """Model name for ``role``: its override, else the default model."""
        override = getattr(self, f"{role}_model", None)
        return override or self.model
