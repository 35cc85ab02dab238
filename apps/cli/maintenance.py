"""``superbiz db prune``: delete old checkpoints of finished diagnoses, keep the audit rows."""

from __future__ import annotations

import argparse
from typing import Any, TextIO


class PruneUsageError(ValueError):
    """Bad input to ``db prune``; the message is the one-line reason."""


def add_prune_parser(db_commands: Any, db_help: str) -> None:
    """Add ``db prune`` to the ``db`` subcommands."""
    prune = db_commands.add_parser(
        "prune",
        help="delete old checkpoints of finished diagnoses (the audit rows are kept)",
        description="Keep only the newest checkpoint of every thread whose diagnoses all "
        "finished more than N days ago (enough to continue its conversation or resume it); "
        "delete the others, then give an SQLite file's free space back (VACUUM). Audit rows "
        "and tool invocations are kept, so sessions show and reverify still work. "
        "Servers do the same hourly when SUPERBIZ_RETENTION_DAYS is set.",
    )
    prune.add_argument(
        "--keep-days",
        type=float,
        required=True,
        metavar="N",
        help="keep every checkpoint of threads active within the last N days (0: prune all "
        "finished threads)",
    )
    prune.add_argument("--db", metavar="URL", help=db_help)


def _megabytes(size: int) -> str:
    return f"{max(size, 0) / 1_000_000:.1f} MB"


def prune_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``db prune`` and print what it deleted.

    Raises:
        PruneUsageError: for a negative ``--keep-days`` or a database that cannot be used.
    """
    from persistence.database import DatabaseError
    from persistence.retention import prune_finished, reclaim_space
    from persistence.store import open_persistence

    if args.keep_days < 0:
        raise PruneUsageError(f"--keep-days must be at least 0, got {args.keep_days:g}")
    try:
        persistence = open_persistence(args.db)
    except DatabaseError as exc:
        raise PruneUsageError(str(exc)) from exc
    try:
        report = prune_finished(persistence.db, persistence.checkpointer, keep_days=args.keep_days)
        sizes = reclaim_space(persistence.db)
    except DatabaseError as exc:
        raise PruneUsageError(str(exc)) from exc
    finally:
        persistence.close()
    out.write(
        f"{persistence.db.target.display}: pruned {report.threads} thread(s) finished more than "
        f"{args.keep_days:g} day(s) ago to their newest checkpoint; audit rows kept\n"
    )
    if sizes is not None:
        before, after = sizes
        out.write(
            f"reclaimed {_megabytes(before - after)} of free space; the file and its log now "
            f"take {_megabytes(after)}\n"
        )
    if report.busy:
        out.write(f"skipped {len(report.busy)} thread(s) busy with a run\n")
    return 0
