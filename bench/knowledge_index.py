"""The runbook index: indexing the shared corpus, re-indexing it, and one lookup.

Targets: ``superbiz kb index`` on the prometheus-operator corpus (118 runbooks) under 5 s, from an
empty database; one ``lookup_knowledge`` under 50 ms. Measured on SQLite (the embedded default,
FTS5) and on PostgreSQL (``tsvector`` + GIN) when it can be reached.

- **index**: ``RunbookIndex.sync()`` into a fresh database per run (migrations not timed), the
  whole path the command takes: walking the folders, reading and hashing, chunking, tokenising,
  one transaction of inserts.
- **re-index**: the same call again with nothing changed (one ``stat`` per file).
- **command**: ``superbiz kb index`` as a user runs it, in a fresh process (imports and
  migrations included), once.
- **lookup**: ``lookup_knowledge`` through the tool runner (validation, the database's ranking,
  relevance, the refs), for real alert names and plain-words queries, after one warm-up each.

The corpus is found as the tests find it: ``SUPERBIZ_TEST_RUNBOOK_CORPUS``, else
``../shared/corpora/prometheus-operator-runbooks`` beside the checkout.

    .venv/bin/python bench/knowledge_index.py [--runs N] [--quick]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    ROOT,
    fmt,
    machine,
    median,
    percentile,
    run_count,
    table,
    throwaway_postgres,
    verdict_line,
)

INDEX_TARGET_S = 5.0
LOOKUP_TARGET_MS = 50.0
QUERIES = (
    "KubePodCrashLooping",
    "TargetDown",
    "NodeFilesystemSpaceFillingUp",
    "etcdMembersDown",
    "pod crash looping restarts",
    "disk filling up on the node",
    "alertmanager failed to reload its configuration",
    "证书 过期 kubelet",
)


def corpus() -> Path | None:
    """The runbook corpus folder, or None when it is not there."""
    folder = Path(
        os.environ.get("SUPERBIZ_TEST_RUNBOOK_CORPUS")
        or ROOT.parent / "shared" / "corpora" / "prometheus-operator-runbooks"
    )
    return folder if (folder / "LICENSE").is_file() else None


def measure(database: str, folder: Path, runs: int, make_db: object) -> dict[str, object]:
    """Index, re-index and lookup timings on one kind of database."""
    from evidence.composed import ComposedBackend, RealClock, Unavailable
    from knowledge.runbooks import RunbookIndex
    from persistence.ledger import InMemoryLedger
    from tools.runner import ToolRunner

    index_s: list[float] = []
    reindex_s: list[float] = []
    lookups_ms: list[float] = []
    files = chunks = 0
    for run in range(runs):
        url = make_db(run)  # type: ignore[operator]
        index = RunbookIndex([str(folder)], database=url, progress=None)
        try:
            index.db.open()  # migrations are not part of the figure
            started = time.perf_counter()
            report = index.sync()
            index_s.append(time.perf_counter() - started)
            files, chunks = report.files, report.chunks
            started = time.perf_counter()
            index.sync()
            reindex_s.append(time.perf_counter() - started)
            backend = ComposedBackend(
                logs=Unavailable("log", "-"),
                metrics=Unavailable("metrics", "-"),
                knowledge=index,
                clock=RealClock(),
            )
            runner = ToolRunner(backend, InMemoryLedger())
            for number, query in enumerate(QUERIES):
                call = {"name": "lookup_knowledge", "args": {"query": query}}
                runner.run(
                    {**call, "id": f"w{number}"}, diagnosis_id=f"w{run}", thread_id="t", round=1
                )
                started = time.perf_counter()
                row = runner.run(
                    {**call, "id": f"q{number}"}, diagnosis_id=f"d{run}", thread_id="t", round=1
                )
                lookups_ms.append((time.perf_counter() - started) * 1000)
                assert row["status"] in ("ok", "no_hit"), row["error"]
        finally:
            index.close()
    return {
        "files": files,
        "chunks": chunks,
        "index_s": index_s,
        "reindex_s": reindex_s,
        "lookups_ms": lookups_ms,
    }


def main(argv: list[str] | None = None) -> int:
    runs, _ = run_count(__doc__ or "", 5, 1, "one run per database", argv)
    print(f"runbook index benchmark ({machine()})")
    folder = corpus()
    if folder is None:
        print(
            "the runbook corpus is not there: set SUPERBIZ_TEST_RUNBOOK_CORPUS to "
            "prometheus-operator-runbooks (nothing measured)"
        )
        return 0
    print(f"corpus: {folder}, {runs} run(s) per database\n")
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        results["SQLite"] = measure(
            "sqlite", folder, runs, lambda run: f"sqlite:///{scratch}/kb-{run}.sqlite"
        )
    try:
        with throwaway_postgres() as conninfo:
            from psycopg.conninfo import conninfo_to_dict

            parts = conninfo_to_dict(conninfo)
            url = (
                f"postgresql://{parts.get('user', 'postgres')}@{parts.get('host', '127.0.0.1')}:"
                f"{parts.get('port', 5432)}/{parts['dbname']}"
            )

            def fresh(run: int) -> str:
                import psycopg

                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("DROP TABLE IF EXISTS kb_chunk, kb_file, superbiz_schema CASCADE")
                return url

            results["PostgreSQL"] = measure("postgres", folder, runs, fresh)
    except Exception as exc:  # the PostgreSQL row says why; SQLite is still measured
        print(f"PostgreSQL not measured: {type(exc).__name__}: {exc}\n")
    rows = []
    met = True
    for name, result in results.items():
        index_s = result["index_s"]
        lookups = result["lookups_ms"]
        assert isinstance(index_s, list) and isinstance(lookups, list)
        reindex = result["reindex_s"]
        assert isinstance(reindex, list)
        worst_index = max(index_s)
        p90 = percentile(lookups, 90)
        ok = worst_index < INDEX_TARGET_S and max(lookups) < LOOKUP_TARGET_MS
        met = met and ok
        rows.append(
            [
                name,
                str(result["files"]),
                str(result["chunks"]),
                fmt(median(index_s), 3),
                fmt(worst_index, 3),
                fmt(median(reindex) * 1000, 1),
                fmt(median(lookups), 2),
                fmt(p90, 2),
                fmt(max(lookups), 2),
                "met" if ok else "missed",
            ]
        )
    print(
        table(
            [
                "database",
                "files",
                "chunks",
                "index s p50",
                "index s max",
                "re-index ms",
                "lookup ms p50",
                "p90",
                "max",
                "target",
            ],
            rows,
        )
    )
    print()
    for name, result in results.items():
        index_s, lookups = result["index_s"], result["lookups_ms"]
        assert isinstance(index_s, list) and isinstance(lookups, list)
        print(
            verdict_line(
                max(index_s) < INDEX_TARGET_S,
                f"{name} kb index {max(index_s):.3f} s at most (target < {INDEX_TARGET_S:g} s)",
            )
        )
        print(
            verdict_line(
                max(lookups) < LOOKUP_TARGET_MS,
                f"{name} lookup {max(lookups):.2f} ms at most, {median(lookups):.2f} ms p50 "
                f"(target < {LOOKUP_TARGET_MS:g} ms)",
            )
        )
    command = command_seconds(folder)
    print(
        verdict_line(
            command < INDEX_TARGET_S,
            f"the whole command `superbiz kb index` (a fresh process: imports, migrations, "
            f"indexing) {command:.2f} s on SQLite (target < {INDEX_TARGET_S:g} s)",
        )
    )
    met = met and command < INDEX_TARGET_S
    print(verdict_line(met, "every figure within its target") if results else "nothing measured")
    return 0


def command_seconds(folder: Path) -> float:
    """Wall time of ``superbiz kb index CORPUS`` in a fresh process on a fresh SQLite file."""
    import subprocess

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "apps.cli",
                "kb",
                "index",
                str(folder),
                "--db",
                f"sqlite:///{scratch}/kb.sqlite",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
