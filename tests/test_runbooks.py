"""The runbook index: chunking, both databases (SQLite FTS5, PostgreSQL tsvector), incremental
re-indexing, runbook_url first, indexing on first use, the command line and doctor.

The corpus is the prometheus-operator runbook library beside the checkout (``tests/corpora.py``).
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.cli.doctor import doctor_command
from apps.cli.main import main
from evidence.composed import configured_backend
from evidence.config import load_settings
from evidence.environment import default_environment
from knowledge.runbook_text import CHUNK_CHARS, read_runbook, tokens
from knowledge.runbooks import RunbookIndex, chunk_rows
from persistence.ledger import InMemoryLedger
from persistence.store import open_persistence
from state.records import AlertEntry, InvocationDraft
from tests.corpora import runbook_corpus
from tests.records import json_output
from tools import lookup_knowledge
from tools.query_metrics import MetricsResult
from tools.runner import ToolRunner

ALERT_RUNBOOKS = {
    "KubePodCrashLooping": "kubernetes/KubePodCrashLooping.md",
    "TargetDown": "general/TargetDown.md",
    "NodeFilesystemSpaceFillingUp": "node/NodeFilesystemSpaceFillingUp.md",
    "KubeJobFailed": "kubernetes/KubeJobFailed.md",
    "etcdMembersDown": "etcd/etcdMembersDown.md",
    "AlertmanagerFailedReload": "alertmanager/AlertmanagerFailedReload.md",
    "PrometheusRuleFailures": "prometheus/PrometheusRuleFailures.md",
    "KubeletDown": "kubernetes/KubeletDown.md",
    "CPUThrottlingHigh": "kubernetes/CPUThrottlingHigh.md",
    "KubeNodeNotReady": "kubernetes/KubeNodeNotReady.md",
}

RUNBOOK = """---
title: Checkout Latency
weight: 10
---

# CheckoutLatencyHigh

Checkout p99 latency is above 2 s.

## Diagnosis

Check the payment gateway dashboard.

```bash
# not a heading: a comment in a code block
kubectl -n shop logs deploy/checkout
```

### Database

Look for <b>slow queries</b> in [pg_stat_statements](https://example.invalid/pgss).

Mitigation
----------

Scale the checkout deployment.
"""


# --- chunking --------------------------------------------------------------------------------


def test_runbook_chunks_follow_headings_with_title_and_heading_path() -> None:
    title, rows = chunk_rows(RUNBOOK, source="shop/checkout.md", name="checkout")

    assert title == "CheckoutLatencyHigh"
    assert [(r.title, r.doc_id) for r in rows] == [
        ("CheckoutLatencyHigh", "shop/checkout.md#intro"),
        ("CheckoutLatencyHigh > Diagnosis", "shop/checkout.md#diagnosis"),
        ("CheckoutLatencyHigh > Diagnosis > Database", "shop/checkout.md#diagnosis/database"),
        ("CheckoutLatencyHigh > Mitigation", "shop/checkout.md#mitigation"),
    ]
    assert rows[1].chunk == (
        "Check the payment gateway dashboard. ```bash # not a heading: a comment in a code block "
        "kubectl -n shop logs deploy/checkout ```"
    )
    assert rows[2].chunk == "Look for slow queries in pg_stat_statements."
    assert "\n" not in "".join(r.chunk for r in rows)


def test_runbook_title_falls_back_to_front_matter_then_file_name() -> None:
    assert (
        read_runbook("---\ntitle: Disk Full\n---\n## Meaning\nx\n", name="f").title == "Disk Full"
    )
    assert read_runbook("## Meaning\nx\n", name="DiskFull").title == "DiskFull"


def test_runbook_long_sections_are_cut_under_the_field_cap() -> None:
    text = "# Big\n\n## Steps\n\n" + " ".join(f"Step {i} restarts pod {i}." for i in range(400))
    _, rows = chunk_rows(text, source="big.md", name="big")

    assert len(rows) > 3
    assert all(len(r.chunk) <= CHUNK_CHARS for r in rows)
    assert rows[0].title == "Big > Steps, part 1" and rows[0].doc_id == "big.md#steps-1"
    assert " ".join(r.chunk for r in rows).split() == text.split("## Steps", 1)[1].split()


def test_runbook_tokens_split_identifiers_and_make_cjk_bigrams() -> None:
    assert tokens("KubePodCrashLooping fired") == [
        "kubepodcrashlooping",
        "kube",
        "pod",
        "crash",
        "looping",
        "fired",
    ]
    assert tokens("数据库连接池 pool") == ["数据", "据库", "库连", "连接", "接池", "pool"]


# --- the index in both databases -------------------------------------------------------------


@pytest.fixture
def corpus_index(database_url: str) -> Iterator[RunbookIndex]:
    index = RunbookIndex([str(runbook_corpus())], database=database_url, progress=None)
    try:
        yield index
    finally:
        index.close()


def test_runbook_index_alert_names_find_their_runbook_first(corpus_index: RunbookIndex) -> None:
    report = corpus_index.sync()
    assert report.files > 100 and report.added == report.files and report.chunks > 300

    corpus = runbook_corpus().name
    for alert, path in ALERT_RUNBOOKS.items():
        documents = corpus_index.lookup_knowledge(query=alert, top_k=3)["documents"]
        assert documents, alert
        assert documents[0]["source"] == f"{corpus}/{path}", (alert, documents[0])
        assert documents[0]["relevance"] == "high"
        assert documents[0]["title"].split(" > ")[0] in {alert, "CPU Throttling High"}


def test_runbook_index_plain_words_and_scores(corpus_index: RunbookIndex) -> None:
    corpus_index.sync()
    documents = corpus_index.lookup_knowledge(query="pod crash looping", top_k=5)["documents"]

    assert documents[0]["source"].endswith("kubernetes/KubePodCrashLooping.md")
    scores = [d["score"] for d in documents]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert len({d["doc_id"] for d in documents}) == len(documents)
    assert corpus_index.lookup_knowledge(query="zzqxv unknownword", top_k=3)["documents"] == []


@pytest.mark.parametrize(
    ("question", "names"),
    [
        (
            "节点磁盘空间快满了怎么办？",
            ("NodeFilesystemAlmostOutOfSpace.md", "NodeFilesystemSpaceFillingUp.md"),
        ),
        ("pod 一直崩溃重启", ("KubePodCrashLooping.md",)),
        ("CPU 被限流", ("CPUThrottlingHigh.md",)),
    ],
    ids=["disk-zh", "crash-zh", "cpu-zh"],
)
def test_runbook_index_answers_a_chinese_question_from_english_runbooks(
    corpus_index: RunbookIndex, question: str, names: tuple[str, ...]
) -> None:
    corpus_index.sync()
    documents = corpus_index.lookup_knowledge(query=question, top_k=3)["documents"]

    assert documents, question
    assert documents[0]["source"].rsplit("/", 1)[-1] in names, documents[0]
    assert documents[0]["relevance"] in {"high", "medium"}, documents[0]


def test_runbook_index_is_incremental_by_hash_and_drops_deleted_files(
    database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "books"
    (folder / "db").mkdir(parents=True)
    (folder / "db" / "pool.md").write_text("# PoolExhausted\n\n## Mitigation\n\nRaise the pool.\n")
    (folder / "disk.md").write_text("# DiskFull\n\n## Mitigation\n\nDelete old files.\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "ignored.md").write_text("# Hidden\n\nnever indexed\n")
    index = RunbookIndex([str(folder)], database=database_url, progress=None)
    try:
        first = index.sync()
        assert (first.files, first.added, first.chunks) == (2, 2, 2)

        again = index.sync()
        assert (again.added, again.changed, again.removed, again.read) == (0, 0, 0, [])

        os.utime(folder / "disk.md")  # touched, same content: not re-chunked
        (folder / "db" / "pool.md").write_text(
            "# PoolExhausted\n\n## Mitigation\n\nRaise the pool to 50 connections.\n"
        )
        (folder / "cert.md").write_text("# CertExpiring\n\n## Mitigation\n\nRenew it.\n")
        changed = index.sync()
        assert (changed.added, changed.changed, changed.removed) == (1, 1, 0)
        assert sorted(changed.read) == ["books/cert.md", "books/db/pool.md"]
        hit = index.lookup_knowledge(query="PoolExhausted", top_k=1)["documents"][0]
        assert hit["chunk"] == "Raise the pool to 50 connections."

        (folder / "disk.md").unlink()
        removed = index.sync()
        assert (removed.removed, removed.files) == (1, 2)
        assert index.lookup_knowledge(query="DiskFull", top_k=3)["documents"] == []
        assert index.store.stats().files == 2

        other = tmp_path / "other"
        other.mkdir()
        (other / "dns.md").write_text("# DNSFailing\n\nCheck CoreDNS.\n")
        moved = index.sync([str(other)])  # the index mirrors the folders it is given
        assert (moved.added, moved.removed) == (1, 2)
        assert index.store.stats().files == 1
    finally:
        index.close()


def test_runbook_index_finds_chinese_and_english_text(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "zh"
    folder.mkdir()
    (folder / "pool.md").write_text(
        "# 数据库连接池耗尽\n\n## 处理\n\n先检查慢查询，再扩大连接池（HikariPool）。\n"
    )
    (folder / "disk.md").write_text("# 磁盘写满\n\n## 处理\n\n清理旧日志。\n")
    index = RunbookIndex([str(folder)], database=database_url, progress=None)
    try:
        index.sync()
        pool = index.lookup_knowledge(query="连接池 耗尽", top_k=2)["documents"]
        assert pool[0]["title"] == "数据库连接池耗尽 > 处理"
        assert pool[0]["relevance"] == "high"
        assert index.lookup_knowledge(query="HikariPool", top_k=1)["documents"][0]["source"] == (
            "zh/pool.md"
        )
        assert index.lookup_knowledge(query="磁盘", top_k=1)["documents"][0]["source"] == (
            "zh/disk.md"
        )
    finally:
        index.close()


def test_runbook_url_of_an_alert_is_followed_first(corpus_index: RunbookIndex) -> None:
    corpus_index.sync()
    url = "https://runbooks.prometheus-operator.dev/runbooks/general/targetdown/"
    plain = corpus_index.lookup_knowledge(query="pod crash looping", top_k=3)["documents"]
    followed = corpus_index.lookup_knowledge(
        query="pod crash looping", top_k=3, runbook_urls=[url]
    )["documents"]

    assert not plain[0]["source"].endswith("TargetDown.md")
    assert [d["source"].rsplit("/", 1)[-1] for d in followed] == ["TargetDown.md"] * 3
    in_query = corpus_index.lookup_knowledge(query=f"see {url}", top_k=1)["documents"]
    assert in_query[0]["source"].endswith("general/TargetDown.md")


def test_runbook_url_comes_from_the_alerts_of_the_same_diagnosis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", f"sqlite:///{tmp_path / 'kb.sqlite'}")
    settings = load_settings({"SUPERBIZ_RUNBOOKS": str(runbook_corpus())}, cwd=tmp_path)
    ledger = InMemoryLedger()
    runner = ToolRunner(configured_backend(settings, progress=None), ledger)
    alert = AlertEntry(
        alert_name="KubeJobFailed",
        service="billing",
        state="firing",
        runbook_url="https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubejobfailed",
    )
    ledger.record(
        InvocationDraft(
            diagnosis_id="d1",
            thread_id="t1",
            round=1,
            tool_name="query_metrics",
            arguments={"service": "billing"},
            status="ok",
            output=json_output(MetricsResult(alerts=[alert], series=[])),
            retrieval_details={"evidence_refs": []},
            idempotency_key="d1:r1:m1",
            started_at="2026-03-01T10:00:00Z",
            duration_ms=1.0,
            error=None,
        )
    )
    call = {"name": "lookup_knowledge", "args": {"query": "billing disk filling up"}, "id": "k1"}
    row = runner.run(call, diagnosis_id="d1", thread_id="t1", round=1)
    other = runner.run({**call, "id": "k2"}, diagnosis_id="d2", thread_id="t1", round=1)

    documents = lookup_knowledge.result(row["output"])["documents"]
    assert documents[0]["source"].endswith("kubernetes/KubeJobFailed.md")
    assert row["retrieval_details"].get("runbook_urls") == [alert["runbook_url"]]
    assert not lookup_knowledge.result(other["output"])["documents"][0]["source"].endswith(
        "KubeJobFailed.md"
    )
    assert {r["source_type"] for r in row["retrieval_details"]["evidence_refs"]} == {
        "knowledge",
        "summary",
    }


def test_offline_diagnosis_reads_the_runbook_its_question_names_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The question an alert notification builds names each alert's runbook_url; the sample's
    # alerts carry none, so only the question can point at it (and at a runbook that matches
    # none of the question's words).
    db = f"sqlite:///{tmp_path / 'kb.sqlite'}"
    environment = tmp_path / "sample.json"
    environment.write_text(json.dumps(default_environment()))
    monkeypatch.setenv("SUPERBIZ_RUNBOOKS", str(runbook_corpus()))
    url = "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubejobfailed"
    question = (
        "Alertmanager reports 1 firing alert(s):\n"
        "- OrderServiceHigh5xxRate for order-service, firing since 2026-03-01T10:09:00Z; "
        f"runbook: {url}\n"
        "Why is OrderServiceHigh5xxRate firing and what is the cause? Read each alert's runbook "
        "first."
    )
    argv = ["diagnose", "--offline", "--lang", "en", "--db", db, "--env", str(environment)]
    assert main([*argv, question]) == 0
    diagnosis = re.search(r"diagnosis: (diag-\w+)", capsys.readouterr().out)
    assert diagnosis is not None

    persistence = open_persistence(db, origin="cli")
    try:
        rows = persistence.ledger.list(diagnosis.group(1))
    finally:
        persistence.close()
    (lookup,) = [r for r in rows if r["tool_name"] == "lookup_knowledge"]
    assert url in str(lookup["arguments"]["query"])
    documents = lookup_knowledge.result(lookup["output"])["documents"]
    assert documents[0]["source"].endswith("kubernetes/KubeJobFailed.md"), documents[0]


# --- first use, dedup, command line, doctor --------------------------------------------------


def test_runbooks_are_indexed_on_first_use_with_progress_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", f"sqlite:///{tmp_path / 'kb.sqlite'}")
    settings = load_settings({"SUPERBIZ_RUNBOOKS": str(runbook_corpus())}, cwd=tmp_path)
    runner = ToolRunner(configured_backend(settings), InMemoryLedger())
    call = {"name": "lookup_knowledge", "args": {"query": "TargetDown", "top_k": 2}}
    first = runner.run({**call, "id": "k1"}, diagnosis_id="d1", thread_id="t1", round=1)
    again = runner.run({**call, "id": "k2"}, diagnosis_id="d1", thread_id="t1", round=1)

    err = capsys.readouterr().err
    assert re.search(r"indexing runbooks: \d+ of \d+ files to read", err)
    assert re.search(r"runbook index: \d+ files \(\d+ new, 0 changed, 0 removed\)", err)
    assert first["status"] == "ok"
    assert [d["deduped"] for d in lookup_knowledge.result(first["output"])["documents"]] == [
        False,
        False,
    ]
    assert [d["deduped"] for d in lookup_knowledge.result(again["output"])["documents"]] == [
        True,
        True,
    ]
    assert again["retrieval_details"]["deduped"] == [
        d["doc_id"] for d in lookup_knowledge.result(first["output"])["documents"]
    ]


def test_kb_index_and_search_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'kb.sqlite'}"
    corpus = str(runbook_corpus())
    assert main(["kb", "index", corpus, "--db", db]) == 0
    captured = capsys.readouterr()
    assert re.fullmatch(
        r"runbook index: (\d+) files \(\1 new, 0 changed, 0 removed\), \d+ chunks written in "
        r"\S+ s; the index holds \1 files, \d+ chunks \(SQLite file \S+\)\n",
        captured.out,
    ), captured.out
    assert "indexing runbooks:" in captured.err

    assert main(["kb", "index", corpus, "--db", db]) == 0
    assert "(0 new, 0 changed, 0 removed), 0 chunks written" in capsys.readouterr().out

    monkeypatch.setenv("SUPERBIZ_RUNBOOKS", corpus)
    assert main(["kb", "search", "KubeletDown", "--db", db, "--json", "--top-k", "1"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found[0]["source"].endswith("kubernetes/KubeletDown.md")

    monkeypatch.delenv("SUPERBIZ_RUNBOOKS")
    assert main(["kb", "index", "--db", db]) == 2
    assert "set SUPERBIZ_RUNBOOKS" in capsys.readouterr().err
    assert main(["kb", "index", str(tmp_path / "nope"), "--db", db]) == 2


def test_doctor_reports_the_runbook_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\n## Meaning\n\nx\n")
    db = f"sqlite:///{tmp_path / 'kb.sqlite'}"
    monkeypatch.setenv("SUPERBIZ_RUNBOOKS", str(folder))
    out = io.StringIO()
    assert doctor_command(False, out, io.StringIO(), database=db) == 0
    assert re.fullmatch(
        r"runbooks +ok +1 folder; index 0 files, 0 chunks in SQLite file \S+; last indexed never; "
        r"1 files changed since \(indexed on the next lookup or superbiz kb index\)\n",
        out.getvalue(),
    ), out.getvalue()

    assert main(["kb", "index", "--db", db]) == 0
    out = io.StringIO()
    assert doctor_command(True, out, io.StringIO(), database=db) == 0
    report = json.loads(out.getvalue())["backends"][0]
    assert report["backend"] == "runbooks"
    assert re.fullmatch(
        r"1 folder; index 1 files, 1 chunks in SQLite file \S+; last indexed \d{4}-\S+; up to date",
        report["detail"],
    ), report["detail"]


def test_config_show_names_the_log_and_knowledge_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SUPERBIZ_LOG_FILES", f"postgres={tmp_path}/*.log")
    monkeypatch.setenv("SUPERBIZ_RUNBOOKS", str(tmp_path))
    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", f"sqlite:///{tmp_path / 'kb.sqlite'}")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out

    assert re.search(
        rf"SUPERBIZ_LOG_FILES +postgres={re.escape(str(tmp_path))}/\*\.log +\(environment\)", out
    )
    assert re.search(
        rf"SUPERBIZ_RUNBOOKS +{re.escape(str(tmp_path.resolve()))} +\(environment\)", out
    )
    assert out.splitlines()[-1] == (
        "evidence: logs: log files (postgres); metrics: none; knowledge: runbook index "
        f"(1 folder, SQLite file {tmp_path / 'kb.sqlite'}); traces: none; time: real time"
    )
    assert not (tmp_path / "kb.sqlite").exists()  # showing the configuration opens nothing


def test_healthz_reports_the_log_files_and_the_runbook_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from starlette.testclient import TestClient

    from apps.http.api import create_app

    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a.md").write_text("# A\n\n## Meaning\n\nx\n")
    monkeypatch.setenv("SUPERBIZ_LOG_FILES", f"api={tmp_path}/missing/*.jsonl")
    monkeypatch.setenv("SUPERBIZ_RUNBOOKS", str(tmp_path / "books"))
    app = create_app(f"sqlite:///{tmp_path / 'api.sqlite'}", api_keys={})
    with TestClient(app, base_url="http://127.0.0.1") as client:
        health = client.get("/healthz")
    body = health.json()

    assert (health.status_code, body["database"]) == (200, "ok")
    assert body["backends"]["log_files"]["status"] == "error"
    assert body["backends"]["log_files"]["setting"] == "SUPERBIZ_LOG_FILES"
    assert "api: no file matches" in body["backends"]["log_files"]["detail"]
    runbooks = body["backends"]["runbooks"]
    assert runbooks["status"] == "ok"
    assert re.match(
        r"1 folder; index 0 files, 0 chunks in SQLite file \S+api\.sqlite", runbooks["detail"]
    )
