"""query_logs over a local log file: the cost follows the window, not the file.

Two PostgreSQL-style log files end with the same last hour (``--lines`` entries, one ERROR in
ten); before it, the small one holds 10 MB of older lines and the big one 1 GB (200 MB with
``--quick``). Each call asks for the ERROR lines of the default window (the last hour) through
``FileLogs.query_logs``. Target: the big file's call within 1.5x of the small one's; also shown,
the Python-heap peak of one call (``tracemalloc``).

    .venv/bin/python bench/log_files.py [--runs N] [--quick]
"""

from __future__ import annotations

import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import fmt, fmt_bytes, machine, median, run_count, table, verdict_line

RATIO_TARGET = 1.5
WINDOW_LINES = 20_000


def _line(moment: datetime, number: int) -> str:
    level = "ERROR" if number % 10 == 0 else "LOG"
    stamp = moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"
    return f"{stamp} [{4000 + number % 50}] app@shop {level}:  request {number} took 12 ms\n"


def write_file(path: Path, old_bytes: int, now: datetime) -> None:
    """Old lines (a day ago and older) up to ``old_bytes``, then the last hour's lines."""
    start = now - timedelta(days=2)
    block = "".join(_line(start + timedelta(milliseconds=i), i) for i in range(10_000))
    with path.open("w") as handle:
        written = 0
        while written < old_bytes:  # the same old block again and again: fast to write
            handle.write(block)
            written += len(block)
        step = timedelta(hours=1) / (WINDOW_LINES + 1)
        first = now - timedelta(hours=1)
        handle.write("".join(_line(first + step * (i + 1), i) for i in range(WINDOW_LINES)))


def main(argv: list[str] | None = None) -> int:
    runs, quick = run_count(__doc__ or "", 5, 2, "a 200 MB big file, two runs", argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from evidence.logfiles import FileLogs

    big_bytes = (200 if quick else 1024) * 1024 * 1024
    now = datetime.now(UTC)
    print(f"log file benchmark ({machine()})")
    rows = []
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, size in (("small", 10 * 1024 * 1024), ("big", big_bytes)):
            path = Path(scratch) / f"{name}.log"
            started = time.perf_counter()
            write_file(path, size, now)
            written = time.perf_counter() - started
            backend = FileLogs([("shop", str(path))], now=lambda: now)
            times: list[float] = []
            total = 0
            for _ in range(runs):
                started = time.perf_counter()
                output = backend.query_logs(service="shop", level="ERROR")
                times.append((time.perf_counter() - started) * 1000)
                total = output["total"]
            tracemalloc.start()
            backend.query_logs(service="shop", level="ERROR")
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            medians[name] = median(times)
            rows.append(
                [
                    name,
                    fmt_bytes(path.stat().st_size),
                    f"{written:.1f}",
                    str(total),
                    fmt(median(times), 1),
                    fmt(max(times), 1),
                    fmt_bytes(peak),
                ]
            )
            path.unlink()
    print(
        table(
            ["file", "size", "written s", "matches", "call ms p50", "max", "heap peak"],
            rows,
        )
    )
    ratio = medians["big"] / medians["small"]
    print()
    print(
        verdict_line(
            ratio <= RATIO_TARGET,
            f"the big file's call takes {ratio:.2f}x the small one's (target <= "
            f"{RATIO_TARGET:g}x): the cost follows the window",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
