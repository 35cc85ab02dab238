"""Metric points kept with the invocation: bounded, extremes and last kept, never evidence text."""

from __future__ import annotations

import math

import pytest

from evidence.environment import Environment, default_environment
from evidence.sample import SampleBackend
from persistence.ledger import InMemoryLedger
from state.records import SeriesEntry
from tools import query_metrics
from tools.points import MAX_POINTS, bounded_points
from tools.runner import ToolRunner


def test_bounded_points_keeps_min_max_first_and_last_within_the_bound() -> None:
    points = [[1_000.0 + i, math.sin(i / 50) * 10 + (500 if i == 777 else 0)] for i in range(5000)]
    points[4321][1] = -99.0

    kept = bounded_points(points)

    assert len(kept) == MAX_POINTS
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert [1777.0, points[777][1]] in kept and [5321.0, -99.0] in kept
    assert [p[0] for p in kept] == sorted(p[0] for p in kept)


def test_bounded_points_drops_pairs_that_are_not_two_finite_numbers() -> None:
    given = [[1, 2], [2, math.nan], ["x", 1], [3, True], [4], [5, math.inf], [6, 7.5]]

    assert bounded_points(given) == [[1.0, 2.0], [6.0, 7.5]]
    assert bounded_points("not points") == []


def test_runner_bounds_the_points_a_backend_returns_and_keeps_refs_unchanged() -> None:
    series = SeriesEntry(
        metric="queue_depth",
        labels={"service": "order-service"},
        points_count=3000,
        min=0.0,
        max=2999.0,
        last=2999.0,
        points=[[float(i), float(i)] for i in range(3000)],
    )
    runner = ToolRunner(SampleBackend(Environment(series=[series])), InMemoryLedger())

    row = runner.run(
        {"name": "query_metrics", "args": {"service": "order-service"}, "id": "c1"},
        diagnosis_id="d1",
        thread_id="t1",
        round=1,
    )

    kept = query_metrics.result(row["output"])["series"][0]["points"]
    assert len(kept) == MAX_POINTS and kept[0] == [0.0, 0.0] and kept[-1] == [2999.0, 2999.0]
    texts = [ref["text"] for ref in row["retrieval_details"]["evidence_refs"]]
    assert "queue_depth{service=order-service} min=0 max=2999 last=2999 points=3000" in texts
    assert not any("[" in text for text in texts)


def test_sample_series_points_agree_with_their_summaries() -> None:
    for entry in default_environment()["series"]:
        values = [value for _, value in entry["points"]]
        assert len(values) == entry["points_count"]
        assert (min(values), max(values), values[-1]) == (entry["min"], entry["max"], entry["last"])


@pytest.mark.parametrize("count", [121, 122, 239, 240, 241, 250, 1000])
def test_bounded_points_keeps_exactly_the_bound_whatever_the_count(count: int) -> None:
    points = [[float(i), float((i * 37) % 101)] for i in range(count)]

    kept = bounded_points(points)

    assert len(kept) == MAX_POINTS
    assert len({t for t, _ in kept}) == MAX_POINTS
