"""One ``_generate`` for the chat models the graph builds, each saying only what it adds.

The retrying OpenAI model (``models.calls``), the scripted models (``models.scripted``) and the
offline rule-based models (``models.offline``) all generate through ``CallableChatModel``: its
``_generate`` hands the call, as a ``GenerateCall``, to the subclass's ``generate_for``, which
answers it itself or runs a parent class's generation around what it adds (retries, a deadline,
the end of a script).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult


@dataclass(frozen=True)
class GenerateCall:
    """One ``_generate`` call: the messages and the rest of its arguments."""

    messages: list[BaseMessage]
    stop: list[str] | None
    run_manager: CallbackManagerForLLMRun | None
    kwargs: dict[str, Any]

    def run(self, generate: Callable[..., ChatResult], **options: Any) -> ChatResult:
        """Run ``generate`` (a parent class's ``_generate``) with this call's arguments.

        Args:
            generate: The generation to run, bound to the model.
            **options: Keyword arguments that replace or add to the call's own.
        """
        return generate(
            self.messages,
            stop=self.stop,
            run_manager=self.run_manager,
            **{**self.kwargs, **options},
        )


class CallableChatModel(BaseChatModel):
    """A chat model whose ``_generate`` hands each call to ``generate_for``."""

    def generate_for(self, call: GenerateCall) -> ChatResult:
        """Answer one call; subclasses implement it."""
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self.generate_for(GenerateCall(messages, stop, run_manager, kwargs))
