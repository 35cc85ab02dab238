"""Runbook ranking (knowledge/rank.py): BM25 over titles and headings, in both languages.

The real-world cases run on the prometheus-operator runbooks (Apache-2.0, with their LICENSE),
read from beside the checkout (``tests/corpora.py``); they are never copied into the repository.
"""

from __future__ import annotations

import functools

import pytest

from knowledge.rank import markdown_fields, procedure_sentence, query_terms, rank
from knowledge.runbook_text import read_runbook
from knowledge.vocabulary import concept_tokens, concepts_in
from tests.corpora import runbook_corpus


@functools.cache
def _corpus() -> tuple[list[str], list[tuple[str, list[str]]]]:
    files = sorted(
        path
        for path in runbook_corpus().rglob("*.md")
        if path.name not in {"_index.md", "SOURCE.md"}
    )
    return [path.stem for path in files], [
        markdown_fields(path.read_text(encoding="utf-8")) for path in files
    ]


SYNONYMS: list[tuple[str, str, str]] = [
    ("延迟", "latency", "latency"),
    ("错误", "errors", "error"),
    ("报错", "error", "error"),
    ("告警", "alert", "alert"),
    ("磁盘", "disk", "disk"),
    ("连接池", "connection pool", "pool"),
    ("CPU", "cpu", "cpu"),
    ("内存", "memory", "memory"),
    ("超时", "timeout", "timeout"),
    ("消费积压", "consumer lag", "lag"),
    ("证书", "certificate", "certificate"),
]
"""Words of the vocabulary: in Chinese, in English, the one concept both name."""
REAL_CORPUS_CASES: dict[str, tuple[str, str, str]] = {
    "disk": ("磁盘满了", "disk full", "NodeFilesystemSpaceFillingUp"),
    "certificate": ("证书过期", "certificate expiry", "KubeClientCertificateExpiration"),
    "crashloop": ("pod 崩溃重启", "pod crash looping", "KubePodCrashLooping"),
    "cpu": ("CPU 限流", "CPU throttling high", "CPUThrottlingHigh"),
    "volume": ("持久卷写满", "persistent volume filling up", "KubePersistentVolumeFillingUp"),
}
"""Questions on the real runbook corpus, by case: in Chinese, in English, the runbook they want."""


def _top(query: str, k: int = 3) -> list[str]:
    names, fields = _corpus()
    return [names[found.position] for found in rank(query, fields, top_k=k)]


def test_vocabulary_gives_chinese_and_english_the_same_tokens() -> None:
    assert concept_tokens("磁盘满了") == concept_tokens("the disk is full") == ["disk", "full"]
    assert concept_tokens("连接池耗尽") == ["pool", "exhaustion"]
    assert concept_tokens("connection pool exhaustion") == ["pool", "exhaustion"]
    assert concepts_in("order-service 的 p99 延迟是多少？") == ["latency"]
    assert concepts_in("Kafka 消费延迟") == ["kafka", "lag"]


@pytest.mark.parametrize(("chinese", "english", "concept"), SYNONYMS)
def test_vocabulary_synonyms_name_one_concept(chinese: str, english: str, concept: str) -> None:
    assert concepts_in(chinese) == concepts_in(english) == [concept]


def test_vocabulary_splits_identifiers() -> None:
    assert concept_tokens("NodeFilesystemSpaceFillingUp") == ["node", "disk", "space", "full"]
    assert concept_tokens("http_request_duration_p99_ms")[:3] == ["http", "request", "latency"]


def test_vocabulary_keeps_unknown_chinese_as_bigrams() -> None:
    assert concept_tokens("结算批次") == ["结算", "算批", "批次"]


def test_rank_orders_by_bm25_and_leaves_out_documents_without_a_query_term() -> None:
    docs: list[tuple[str, list[str]]] = [
        ("Runbook: elevated HTTP 5xx rate", []),
        ("Runbook: database connection pool exhaustion", []),
        ("Runbook: slow queries and lock waits", []),
    ]
    found = rank("connection pool exhaustion", docs)
    assert [item.position for item in found] == [1]
    assert found[0].matched == 2
    assert rank("kafka", docs) == []
    assert rank("", docs) == []


def test_rank_reads_headings_but_not_the_body() -> None:
    body_only = ("Runbook: storage", ["Meaning"])
    heading = ("Runbook: storage", ["Disk full on the data volume"])
    assert [item.position for item in rank("disk full", [body_only, heading])] == [1, 0]
    assert [item.position for item in rank("full", [body_only, heading])] == [1]


def test_rank_title_weighs_more_than_a_heading() -> None:
    in_title: tuple[str, list[str]] = ("Certificate expiry", [])
    in_heading = ("Ingress", ["Certificate expiry"])
    assert [item.position for item in rank("certificate expiry", [in_heading, in_title])] == [1, 0]


@pytest.mark.parametrize(
    ("chinese", "english", "expected"), REAL_CORPUS_CASES.values(), ids=REAL_CORPUS_CASES.keys()
)
def test_rank_on_the_real_corpus_is_the_same_in_both_languages(
    chinese: str, english: str, expected: str
) -> None:
    names, fields = _corpus()
    zh = rank(chinese, fields, top_k=3)
    en = rank(english, fields, top_k=3)

    assert expected in [names[item.position] for item in en]
    assert expected in [names[item.position] for item in zh]
    assert len(names) > 100


def test_rank_on_the_real_corpus_chinese_equals_english_exactly() -> None:
    assert _top("磁盘满了", 5) == _top("disk full", 5)
    assert _top("证书过期", 5) == _top("certificate expiry", 5)
    assert query_terms("磁盘满了") == query_terms("disk full")


def test_markdown_fields_reads_the_title_as_the_index_does_and_the_other_headings() -> None:
    text = (
        "---\ntitle: Disk Full\nweight: 1\n---\n\n# DiskFull\n\n## Meaning\n\n```sh\n# not a"
        " heading\n```\n\n## Mitigation\ntext\n"
    )
    title, headings = markdown_fields(text)
    # The level-1 heading is the title (as in the runbook index), not the front matter's.
    assert title == "DiskFull" == read_runbook(text, name="disk").title
    assert headings == ["Meaning", "Mitigation"]
    assert markdown_fields("# Only heading\n\n## Steps\n") == ("Only heading", ["Steps"])
    # Without a level-1 heading the front matter names it, then the file name.
    assert markdown_fields("---\ntitle: Disk Full\n---\n## Meaning\n") == ("Disk Full", ["Meaning"])
    assert markdown_fields("## Meaning\n", name="DiskFull") == ("DiskFull", ["Meaning"])


def test_procedure_sentence_skips_impact_and_timeline() -> None:
    postmortem = (
        "Impact: 38 minutes of failed checkouts. Cause: a batch job held row locks. "
        "Follow-ups: call inventory outside the order transaction, and add an index."
    )
    assert procedure_sentence(postmortem) == (
        "Call inventory outside the order transaction, and add an index."
    )


def test_procedure_sentence_prefers_mitigation_over_diagnosis_and_skips_causes() -> None:
    text = (
        "# Runbook\n\n## Impact\n\nRestart nothing yet.\n\n## Diagnosis\n\nCheck the logs.\n\n"
        "## Mitigation\n\nThis happens because of load. Scale out the consumers.\n"
    )
    assert procedure_sentence(text) == "Scale out the consumers."
    assert procedure_sentence("## Impact\n\nUsers see errors.\n") is None


def test_procedure_sentence_on_the_real_corpus_is_an_instruction() -> None:
    text = (runbook_corpus() / "node" / "NodeFilesystemSpaceFillingUp.md").read_text(
        encoding="utf-8"
    )
    sentence = procedure_sentence(text)
    assert sentence is not None
    assert sentence.split()[0] in {"Debug", "Study", "Use", "Check"}
    assert "filesystem running full is very bad" not in sentence
