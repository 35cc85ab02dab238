"""What a model call failure is, and how retries wait: no model client needed.

Kept apart from ``models/calls.py`` (which loads ``openai`` and ``langchain_openai``) so
that offline runs, the command line and the failure records do not load the model client.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class ModelCallFailed(RuntimeError):
    """A model call failed for good; ``reason`` is one line saying what to fix.

    Attributes:
        reason: the one-line reason.
        status: the HTTP status of the last answer, if there was one.
        unavailable: True when the endpoint could not be reached or kept failing (a dependency
            that is down), False when the request or the configuration is wrong.
    """

    def __init__(self, reason: str, *, status: int | None = None, unavailable: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.unavailable = unavailable


@dataclass(frozen=True)
class RetryPolicy:
    """How retries wait: exponential backoff with jitter, or what ``Retry-After`` asks.

    The clock, the sleep and the jitter can be replaced (tests wait milliseconds).
    """

    retries: int = 4
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    clock: Callable[[], float] = field(default=time.time, repr=False)
    jitter: Callable[[], float] = field(default=random.random, repr=False)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (1 for the first retry)."""
        if retry_after is not None:
            return max(0.0, retry_after)
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return float(backoff * (0.5 + 0.5 * self.jitter()))  # "equal jitter": never less than half
