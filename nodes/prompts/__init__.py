"""Versioned prompt files, one per role, named and versioned in ``catalog.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from state.records import PromptAudit, PromptRef


@dataclass(frozen=True)
class Prompt:
    """A prompt's name, version and text."""

    role: str
    name: str
    version: str
    text: str


@cache
def _catalog() -> dict[str, Any]:
    raw = resources.files(__name__).joinpath("catalog.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(raw)
    return data


@cache
def load_prompt(role: str) -> Prompt:
    """Return the prompt registered for ``role``.

    Raises:
        KeyError: when the catalog has no prompt for ``role``.
    """
    entry = _catalog()["prompts"][role]
    text = resources.files(__name__).joinpath(entry["file"]).read_text(encoding="utf-8")
    return Prompt(role=role, name=entry["name"], version=entry["version"], text=text.strip())


def prompt_audit() -> PromptAudit:
    """Prompt names and versions for the audit record (never the prompt text)."""
    catalog = _catalog()
    return PromptAudit(
        version=catalog["version"],
        prompts={
            role: PromptRef(name=entry["name"], version=entry["version"])
            for role, entry in catalog["prompts"].items()
        },
    )
