"""Markdown runbooks are read by one module (``knowledge/markdown.py``): one title rule.

The title is the first level-1 heading, else the front matter's ``title:``, else the file name;
the runbook index and the runbook ranking read the same title from the same file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from knowledge.markdown import Line, read_markdown
from knowledge.rank import markdown_fields, markdown_headings
from knowledge.runbook_text import read_runbook
from tests.corpora import runbook_corpus

ROOT = Path(__file__).resolve().parents[1]

FRONT_AND_HEADING = "---\ntitle: Kube Pod Crash Looping\nweight: 20\n---\n\n# KubePodCrashLooping\n"


@pytest.mark.parametrize(
    ("text", "name", "title"),
    [
        (FRONT_AND_HEADING + "\n## Meaning\n", "f", "KubePodCrashLooping"),
        ("---\ntitle: Disk Full\n---\n## Meaning\nx\n", "f", "Disk Full"),
        ("## Meaning\nx\n", "DiskFull", "DiskFull"),
        ("Disk Full\n=========\n\nSection\n-------\n", "f", "Disk Full"),
        ("```\n# not a title\n```\n## Meaning\n", "DiskFull", "DiskFull"),
        ("## First\n\n# Second is the title\n", "f", "Second is the title"),
        ("intro\n---\ntitle: not front matter\n---\n", "f", "f"),
    ],
    ids=[
        "heading-over-front-matter",
        "front-matter-without-heading",
        "file-name",
        "setext",
        "fenced-hash",
        "first-level-one",
        "front-matter-only-on-line-one",
    ],
)
def test_markdown_title_rule(text: str, name: str, title: str) -> None:
    assert read_markdown(text).title(name) == title
    assert read_runbook(text, name=name).title == title
    assert markdown_fields(text, name)[0] == title


def test_markdown_lines_know_fences_and_setext_headings() -> None:
    text = "# T\n\nintro\n~~~~\n```\n# inside\n~~~~\n- item\n---\nSub\n---\n"
    lines = read_markdown(text).lines
    assert [line for line in lines if line.kind == "heading"] == [
        Line("heading", "T", 1),
        Line("heading", "Sub", 2),
    ]
    assert [line.text for line in lines if line.kind == "code"] == [
        "~~~~",
        "```",
        "# inside",
        "~~~~",
    ]
    # A list item is no setext heading: its underline stays text.
    assert Line("text", "- item") in lines and Line("text", "---") in lines
    assert markdown_headings(text) == ["T", "Sub"]


def test_markdown_title_on_the_real_corpus_is_the_alert_name() -> None:
    path = runbook_corpus() / "kubernetes" / "KubePodCrashLooping.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n") and "title:" in text.split("---")[1]
    assert read_runbook(text, name=path.stem).title == "KubePodCrashLooping"
    assert markdown_fields(text, path.stem)[0] == "KubePodCrashLooping"


def test_markdown_is_read_in_one_module() -> None:
    """No other knowledge or evidence module matches Markdown headings or fences itself."""
    found = []
    for package in ("knowledge", "evidence", "models", "verification"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "markdown.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if "#{1,6}" in node.value or "(```|~~~)" in node.value or "`{3,}" in node.value:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "Markdown read outside knowledge/markdown.py: " + ", ".join(found)
