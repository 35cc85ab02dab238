"""Checkpoint storage per diagnosis, before and after retention pruning (``superbiz db prune``).

Runs offline diagnoses of the bundled sample incident on SQLite (a temp file) and PostgreSQL (a
throw-away database), some threads with one question and some with two, then prunes every
finished thread (``prune_finished(keep_days=0)``: the newest checkpoint of each thread is kept,
the audit rows are never touched) and prints the checkpoint bytes per diagnosis before and after.
Bytes are the stored row sizes of LangGraph's tables (SQLite: ``length()`` of the checkpoint,
metadata and write values; PostgreSQL: ``pg_column_size`` of the rows of ``checkpoints``,
``checkpoint_blobs`` and ``checkpoint_writes``), so a table's free pages do not count.

    .venv/bin/python bench/storage_per_diagnosis.py [--runs N] [--quick]
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import fmt_bytes, machine, run_count, table, throwaway_postgres, verdict_line

TARGET_BYTES = 25 * 1024
"""Checkpoint bytes per diagnosis after pruning (the issue measured about 100 KB unpruned)."""
QUESTIONS = ("order-service 为什么报 500 错误？", "inventory-service 为什么变慢？")


def _bytes(db: Any) -> int:
    with db.transaction() as tx:
        if tx.dialect == "sqlite":
            rows = tx.execute(
                "SELECT (SELECT COALESCE(SUM(length(checkpoint) + length(metadata)), 0) "
                "FROM checkpoints) + (SELECT COALESCE(SUM(length(value)), 0) FROM writes) AS n"
            )
        else:
            rows = tx.execute(
                "SELECT (SELECT COALESCE(SUM(pg_column_size(c.*)), 0) FROM checkpoints c) "
                "+ (SELECT COALESCE(SUM(pg_column_size(b.*)), 0) FROM checkpoint_blobs b) "
                "+ (SELECT COALESCE(SUM(pg_column_size(w.*)), 0) FROM checkpoint_writes w) AS n"
            )
    return int(rows[0]["n"])


def _count(db: Any, table_name: str) -> int:
    with db.transaction() as tx:
        return int(tx.execute(f"SELECT COUNT(*) AS n FROM {table_name}")[0]["n"])


def measure(url: str, diagnoses: int) -> dict[str, Any]:
    """Run ``diagnoses`` diagnoses on ``url``, prune, and measure both sides."""
    from evidence.sample import SampleBackend, default_environment
    from graph.compile import compile_graph
    from graph.runner import run_diagnosis
    from persistence.retention import prune_finished
    from persistence.store import open_persistence
    from state.context import Context

    persistence = open_persistence(url)
    try:
        app = compile_graph(persistence, SampleBackend(default_environment()))
        done = 0
        while done < diagnoses:
            thread = f"bench-{uuid.uuid4().hex[:10]}"
            for question in QUESTIONS[: 1 + done % 2]:  # alternately one and two questions
                if done == diagnoses:
                    break
                run_diagnosis(
                    app,
                    thread_id=thread,
                    context=Context(offline=True),
                    audit=persistence.audit,
                    question=question,
                )
                done += 1
        before = _bytes(persistence.db)
        rows_before = _count(persistence.db, "checkpoints")
        audit_before = _count(persistence.db, "diagnosis_session")
        started = time.perf_counter()
        report = prune_finished(persistence.db, keep_days=0)
        seconds = time.perf_counter() - started
        after = _bytes(persistence.db)
        return {
            "diagnoses": diagnoses,
            "threads": report.threads,
            "before": before / diagnoses,
            "after": after / diagnoses,
            "checkpoints_before": rows_before,
            "checkpoints_after": _count(persistence.db, "checkpoints"),
            "audit_kept": _count(persistence.db, "diagnosis_session") == audit_before,
            "prune_s": seconds,
        }
    finally:
        persistence.close()


def main(argv: list[str] | None = None) -> int:
    runs, _ = run_count(__doc__ or "", 20, 6, "6 diagnoses per database", argv)
    os.environ.pop("OPENAI_API_KEY", None)
    print(f"storage per diagnosis after pruning: {runs} diagnoses per database; {machine()}")
    results: list[tuple[str, dict[str, Any] | str]] = []
    with tempfile.TemporaryDirectory() as folder:
        results.append(("SQLite", measure(f"sqlite:///{Path(folder) / 'bench.sqlite'}", runs)))
    try:
        with throwaway_postgres() as conninfo:
            from psycopg.conninfo import conninfo_to_dict

            parts = conninfo_to_dict(conninfo)
            url = (
                f"postgresql://{parts.get('user', 'postgres')}@{parts.get('host', '127.0.0.1')}:"
                f"{parts.get('port', '5432')}/{parts['dbname']}"
            )
            results.append(("PostgreSQL", measure(url, runs)))
    except Exception as exc:  # the PostgreSQL row says why; the SQLite row still stands
        results.append(("PostgreSQL", f"not measured: {exc}"))

    rows = []
    met = True
    for name, result in results:
        if isinstance(result, str):
            rows.append([name, result, "", "", "", "", "", ""])
            continue
        ok = result["after"] <= TARGET_BYTES and result["audit_kept"]
        met = met and ok
        rows.append(
            [
                name,
                fmt_bytes(result["before"]),
                fmt_bytes(result["after"]),
                f"{result['before'] / max(result['after'], 1):.1f}x",
                f"{result['checkpoints_before']} -> {result['checkpoints_after']}",
                "yes" if result["audit_kept"] else "NO",
                f"{result['prune_s'] * 1000:.0f} ms",
                "met" if ok else "missed",
            ]
        )
    print(
        table(
            [
                "database",
                "before / diagnosis",
                "after / diagnosis",
                "smaller",
                "checkpoint rows",
                "audit rows kept",
                "prune took",
                f"<= {fmt_bytes(TARGET_BYTES)}",
            ],
            rows,
        )
    )
    measured = [r for _, r in results if not isinstance(r, str)]
    worst = max((r["after"] for r in measured), default=float("nan"))
    print(
        verdict_line(
            met,
            f"at most {fmt_bytes(worst)} of checkpoints per diagnosis after pruning "
            f"(target {fmt_bytes(TARGET_BYTES)}), audit rows kept",
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
