"""The bilingual incident vocabulary: concepts and the English and Chinese words that name them.

An SRE asks about "延迟" or "latency", "磁盘" or "disk", "连接池" or "connection pool"; a runbook
title says "Node Filesystem Space Filling Up". Each concept here has one id (an English word)
and its surface forms in both languages. ``concept_tokens`` turns any text into tokens in which
every surface form is replaced by its concept id, so a Chinese question and its English twin
give the same tokens, and both meet an English title on the same words. Words that name no
concept stay as they are (ASCII words; CJK text as character bigrams).

Used by the runbook ranking (``knowledge.rank``), the question analysis
(``verification.question``) and the offline rules. Data only, no storage.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Final

# fmt: off
CONCEPTS: Final[dict[str, tuple[str, ...]]] = {
    # Resources and what is measured.
    "cpu": ("cpu", "cpus", "processor", "处理器"),
    "memory": ("memory", "mem", "rss", "heap", "oom", "oomkilled", "内存", "堆内存"),
    "latency": (
        "latency", "latencies", "p99", "p95", "p90", "p50", "duration", "response time",
        "响应时间", "延迟", "时延", "耗时",
    ),
    "error_rate": (
        "error rate", "error ratio", "errors ratio", "5xx rate", "5xx ratio", "failure rate",
        "错误率", "失败率", "报错率", "5xx 比例",
    ),
    "pool": ("pool", "pools", "hikaripool", "connection pool", "连接池"),
    "disk": (
        "disk", "disks", "filesystem", "filesystems", "file system", "volume", "volumes",
        "storage", "inode", "inodes", "persistentvolume", "space left", "磁盘", "硬盘", "存储",
        "卷",
    ),
    "lag": (
        "lag", "lagging", "backlog", "consumer lag", "消费延迟", "消费积压", "积压", "堆积",
    ),
    "certificate": ("certificate", "certificates", "cert", "certs", "x509", "tls", "ssl", "证书"),
    "throughput": ("throughput", "qps", "rps", "requests per second", "吞吐", "吞吐量"),
    # Symptoms.
    "error": (
        "error", "errors", "exception", "exceptions", "fail", "fails", "failed", "failing",
        "failure", "failures", "错误", "报错", "异常", "失败", "出错",
    ),
    "5xx": (
        "5xx", "5xxs", "500", "500s", "502", "502s", "503", "503s", "504", "504s",
    ),
    "timeout": ("timeout", "timeouts", "timed out", "time out", "times out", "超时"),
    "slow": ("slow", "slowly", "slowness", "sluggish", "慢", "缓慢", "变慢", "卡顿"),
    "full": ("full", "filling", "fill", "fills", "filled", "满", "已满", "写满"),
    "exhaustion": ("exhaustion", "exhausted", "exhaust", "saturated", "saturation", "耗尽", "打满"),
    "expire": (
        "expire", "expires", "expired", "expiry", "expiring", "expiration", "过期", "到期", "失效",
    ),
    "crash": ("crash", "crashes", "crashing", "crashloop", "crashlooping", "崩溃"),
    "restart": ("restart", "restarts", "restarting", "reboot", "重启"),
    "throttle": ("throttle", "throttled", "throttling", "限流", "节流"),
    "down": ("down", "unavailable", "unreachable", "outage", "不可用", "宕机", "挂了"),
    "lock": ("lock", "locks", "locking", "deadlock", "deadlocks", "锁", "死锁", "锁等待"),
    "wait": ("wait", "waits", "waiting", "waited", "等待"),
    "queue": ("queue", "queues", "queued", "排队", "队列"),
    "retry": ("retry", "retries", "retrying", "重试"),
    "connection": ("connection", "connections", "connect", "连接"),
    # Things and places.
    "database": ("database", "databases", "db", "sql", "mysql", "postgres", "postgresql", "数据库"),
    "query": ("query", "queries", "查询"),
    "kafka": ("kafka", "消息队列"),
    "consumer": ("consumer", "consumers", "consumer group", "消费者", "消费组", "消费"),
    "gateway": ("gateway", "gateways", "网关"),
    "node": ("node", "nodes", "节点"),
    "space": ("space", "空间"),
    "ingress": ("ingress", "入口"),
    "upstream": ("upstream", "upstreams", "上游"),
    "alert": ("alert", "alerts", "alerting", "alarm", "alarms", "告警", "报警"),
    "deploy": ("deploy", "deploys", "deployment", "rollout", "release", "发布", "上线", "部署"),
    "network": ("network", "networking", "dns", "网络"),
}
# fmt: on
"""Concept id -> surface forms (English words or phrases, Chinese terms), matched whole."""

STOPWORDS: Final[frozenset[str]] = frozenset(
    "a an the of on in at to for from by with and or is are was were be been being it its "
    "this that these those there what whats which who why how when where does do did has have "
    "had can could should would will may might must shall not no any all some my our your "
    "their me us we you i he she they them than then so if as about into over under up out "
    "now currently current right please show tell give me much many high low value level "
    "runbook runbooks service services playbook guide".split()
)
"""ASCII words that carry no topic (questions and titles are full of them)."""

# fmt: off
CJK_STOPWORDS: Final[tuple[str, ...]] = (
    "为什么", "什么", "怎么", "是否", "有没有", "是不是", "多少", "现在", "目前", "当前",
    "一下", "哪些", "哪个", "服务", "问题", "情况", "的", "了", "吗", "呢", "是", "有", "在",
    "和", "与", "及", "或", "请", "把", "被", "给", "从", "到", "对", "就", "都", "也", "还",
    "报", "出", "个", "这", "那", "么", "啊", "吧",
)
# fmt: on
"""Chinese function words and question words, removed before bigrams are formed."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_ASCII_WORD = re.compile(r"[a-z0-9_]+")  # "_" only joins the words of a concept id
_CJK_RUN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_HAS_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _by_length(forms: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(forms.items(), key=lambda item: (-len(item[0]), item[0]))


_WORD_FORMS: Final[dict[str, str]] = {
    form: concept
    for concept, forms in CONCEPTS.items()
    for form in forms
    if " " not in form and not _HAS_CJK.search(form)
}
_ASCII_PHRASES: Final[list[tuple[str, str]]] = _by_length(
    {
        form: concept
        for concept, forms in CONCEPTS.items()
        for form in forms
        if " " in form and not _HAS_CJK.search(form)
    }
)
_CJK_FORMS: Final[list[tuple[str, str]]] = _by_length(
    {
        form.replace(" ", ""): concept
        for concept, forms in CONCEPTS.items()
        for form in forms
        if _HAS_CJK.search(form)
    }
)


def split_identifiers(text: str) -> str:
    """``HighErrorRate`` -> ``High Error Rate``; ``cpu_usage_percent`` -> ``cpu usage percent``."""
    return _CAMEL.sub(" ", text).replace("_", " ")


def fold(text: str) -> str:
    """NFKC (full-width to half-width), identifiers split into words, case folded."""
    return split_identifiers(unicodedata.normalize("NFKC", text)).casefold()


def _ascii_tokens(text: str) -> list[str]:
    for phrase, concept in _ASCII_PHRASES:
        text = re.sub(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", f" {concept} ", text)
    tokens: list[str] = []
    for word in _ASCII_WORD.findall(text):
        named = _WORD_FORMS.get(word)
        if named is not None:
            tokens.append(named)
        elif word in CONCEPTS:
            tokens.append(word)
        elif word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            tokens.append(word)
    return tokens


def _cjk_tokens(run: str) -> list[str]:
    """Concepts named in a CJK run (longest form first), then bigrams of what is left."""
    found: list[tuple[int, str]] = []
    marked = list(run)
    for form, concept in _CJK_FORMS:
        start = "".join(marked).find(form)
        while start >= 0:
            found.append((start, concept))
            for i in range(start, start + len(form)):
                marked[i] = " "
            start = "".join(marked).find(form, start + len(form))
    rest = "".join(marked)
    for word in CJK_STOPWORDS:
        rest = rest.replace(word, " ")
    for piece in rest.split():
        if len(piece) == 1:
            continue
        found.extend((run.find(piece) + i, piece[i : i + 2]) for i in range(len(piece) - 1))
    return [token for _, token in sorted(found, key=lambda item: item[0])]


@lru_cache(maxsize=4096)
def _concept_tokens(text: str) -> tuple[str, ...]:
    folded = fold(text)
    tokens: list[str] = []
    position = 0
    for match in _CJK_RUN.finditer(folded):
        tokens += _ascii_tokens(folded[position : match.start()])
        tokens += _cjk_tokens(match.group(0))
        position = match.end()
    tokens += _ascii_tokens(folded[position:])
    return tuple(tokens)


def concept_tokens(text: str) -> list[str]:
    """The tokens of a text, surface forms replaced by their concept ids, in order.

    ``"磁盘满了"`` and ``"the disk is full"`` both give ``["disk", "full"]``;
    ``"NodeFilesystemSpaceFillingUp"`` gives ``["node", "disk", "space", "full"]``. ASCII words
    are split at case changes, underscores and punctuation; stopwords are dropped; CJK text
    that names no concept becomes character bigrams.
    """
    return list(_concept_tokens(text))


def concepts_in(text: str) -> list[str]:
    """The concept ids a text names, distinct, in order of appearance."""
    return list(dict.fromkeys(token for token in _concept_tokens(text) if token in CONCEPTS))
