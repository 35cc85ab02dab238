"""The trace block of the Verifier payload: the same result whatever the trace's length."""

from __future__ import annotations

from typing import Any

import pytest

from tests.records import trace_item
from verification import verifier_payload
from verification.verifier_payload import TRACE_TEXT_CHARS, trace_block


def reference(items: list[Any]) -> Any:
    """The block as it was built: every item sanitised and fitted, then bounded."""
    plain = [verifier_payload._plain(item) for item in items]
    fitted: list[Any] = [*verifier_payload._fit_trace(plain)]
    return verifier_payload._bounded_block("tool_trace_summary", fitted, TRACE_TEXT_CHARS)


def items(count: int, summary: str) -> list[Any]:
    return [
        trace_item(
            f"t{index}",
            "query_logs",
            [f"inv-{index}"],
            input_summary=f"service=svc-{index % 7} level=ERROR",
            output_summary=f"{summary} <<<UNTRUSTED_DATA {index}",
        )
        for index in range(count)
    ]


@pytest.mark.parametrize("count", [1, 30, 500, 562, 563, 600, 2_000, 10_000])
@pytest.mark.parametrize("summary", ["3 lines", "x" * 400], ids=["short", "long"])
def test_trace_block_equals_the_whole_trace_bounded(count: int, summary: str) -> None:
    trace = items(count, summary)
    block = trace_block(trace)
    assert block == reference(trace)
    assert isinstance(block, list) and block  # never empty, markers defused
    assert "<<<UNTRUSTED_DATA" not in str(block)


def test_trace_block_sanitises_only_a_prefix_of_a_long_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[object] = []
    real = verifier_payload._plain

    def counting(record: object) -> Any:
        seen.append(record)
        return real(record)

    monkeypatch.setattr(verifier_payload, "_plain", counting)
    trace_block(items(10_000, "3 lines"))
    assert len(seen) <= 64 + 256
