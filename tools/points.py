"""The points of a metric series kept with its invocation, bounded.

A series entry may carry ``points``: ``[[unix_seconds, value], ...]`` in time order, the samples
the summary (min, max, last) was computed from. They are kept so that a reader of the diagnosis
can see the curve; they are never evidence text (refs name only the summary fields). At most
``MAX_POINTS`` are kept: the first, the last, the lowest and the highest sample always, and
samples evenly spaced in between, so a chart of the kept points shows the same min, max and last
as the summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from state.json_shape import is_number

MAX_POINTS = 120
"""Upper bound on the points kept per series."""


def _finite(value: object) -> float | None:
    if not is_number(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _sequence(value: object) -> Sequence[object]:
    """A list or tuple (any sequence but text) as it is, else an empty one."""
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def bounded_points(points: object, limit: int = MAX_POINTS) -> list[list[float]]:
    """``points`` as plain ``[time, value]`` pairs, at most ``limit`` of them.

    Pairs that are not two finite numbers are left out; the extremes and the last sample are
    always among those kept.
    """
    pairs: list[list[float]] = []
    for point in map(_sequence, _sequence(points)):
        if len(point) != 2:
            continue
        when, value = _finite(point[0]), _finite(point[1])
        if when is not None and value is not None:
            pairs.append([when, value])
    if len(pairs) <= limit or limit < 4:
        return pairs[:limit] if limit < 4 else pairs
    values = [value for _, value in pairs]
    keep = {0, len(pairs) - 1, values.index(min(values)), values.index(max(values))}
    while len(keep) < limit:  # split the widest gap between kept samples until full
        ordered = sorted(keep)
        start, end = max(zip(ordered, ordered[1:], strict=False), key=lambda g: g[1] - g[0])
        keep.add((start + end) // 2)
    return [pairs[index] for index in sorted(keep)]
