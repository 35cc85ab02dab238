"""Helpers shared by the benchmark scripts: statistics, tables, throw-away databases."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import statistics
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from state.records import VerifierInput

PG_ADMIN_DSN = os.environ.get(
    "SUPERBIZ_BENCH_PG", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)
"""Where the throw-away benchmark database is created (trust auth on this machine)."""


def bench_parser(
    doc: str, default: int, quick_help: str, runs_help: str = "timed repetitions per case"
) -> argparse.ArgumentParser:
    """A parser with ``--runs N`` (``default``) and ``--quick``; a benchmark may add more."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=default, help=runs_help)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    return parser


def run_count(
    doc: str, default: int, quick: int, quick_help: str, argv: list[str] | None
) -> tuple[int, bool]:
    """Parse ``--runs N`` and ``--quick`` (``quick`` runs); return the runs and the flag."""
    args = bench_parser(doc, default, quick_help).parse_args(argv)
    return (quick if args.quick else max(args.runs, 1)), bool(args.quick)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values."""
    return statistics.median(values) if values else math.nan


def fmt(value: float, digits: int = 2) -> str:
    """A number for a table cell (``-`` for NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def fmt_bytes(size: float) -> str:
    """Bytes in B / KB / MB (1 KB = 1024 B)."""
    if size < 1024:
        return f"{size:.0f} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1024 / 1024:.2f} MB"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, markdown: bool = False) -> str:
    """A plain aligned table (numbers right-aligned), or a Markdown table."""
    cells = [[str(cell) for cell in row] for row in rows]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines)
    widths = [len(h) for h in headers]
    for row in cells:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))

    def numeric(text: str) -> bool:
        stripped = text.replace(",", "").replace(".", "").replace("x", "").replace("%", "")
        return stripped.strip("-+ ").replace(" ", "").isdigit()

    def line(row: Sequence[str]) -> str:
        parts = []
        for index, cell in enumerate(row):
            parts.append(cell.rjust(widths[index]) if numeric(cell) else cell.ljust(widths[index]))
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return "\n".join(out)


def machine() -> str:
    """One line describing where the figures were taken."""
    try:
        load = f", load average {os.getloadavg()[0]:.2f}"
    except OSError:
        load = ""
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}{load}"
    )


def verdict_line(ok: bool, text: str) -> str:
    """A target line that is easy to spot in the output."""
    return f"{'TARGET MET' if ok else 'TARGET MISSED'}: {text}"


class Targets:
    """The targets a benchmark checks: a line for each as it is checked, a summary line last."""

    def __init__(self) -> None:
        self.ok = True

    def check(self, met: bool, text: str) -> None:
        """Print the target line of one target, met or missed."""
        self.ok = self.ok and met
        print(verdict_line(met, text))

    def summary(self) -> int:
        """Print whether every target was met; the exit status (a benchmark never fails)."""
        print("all targets met" if self.ok else "some targets missed (see above)")
        return 0  # a benchmark reports; it never fails (see bench/README.md)


VALID_PARSE: Any = {"status": "valid", "fence_stripped": False, "error": None}
"""The parse status of an executor answer that is valid JSON (no fence)."""


def verifier_input(**fields: Any) -> VerifierInput:
    """What the Verifier is given in round 1 for a valid executor answer (no retry).

    ``fields`` are the input's ``question``, ``final_answer``, ``structured_output`` (the
    answer object), ``trace_summary`` and ``gatekeeper_result``; the answer is read from them.
    """
    from state.records import VerifierInput
    from verification.executor_output import read_answer

    answer = read_answer(VALID_PARSE, fields["structured_output"])
    return VerifierInput(
        parse_status=VALID_PARSE, answer=answer, retry_context=None, round=1, **fields
    )


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Create ``bench_<random>`` and yield its conninfo; drop it ``WITH (FORCE)`` afterwards."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_conninfo(PG_ADMIN_DSN, dbname=name)
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
