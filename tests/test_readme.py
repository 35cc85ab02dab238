"""The README's quick start stays true: two commands, the demo, and the CI test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.test_layering import LAYERS

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL)]


def test_readme_quick_start_is_two_commands() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)
    assert "superbiz diagnose" in commands[0]
    assert '".[dev]"' in commands[1] and "pytest" in commands[1]


def test_readme_test_command_is_what_ci_runs() -> None:
    test_command = _quick_start_commands()[1]
    ci_lines = ROOT.joinpath(".ci", "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci_lines


def _section(title: str) -> str:
    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    return readme.split(title, 1)[1].split("\n#", 1)[0]


def test_readme_environment_file_example_is_a_valid_environment() -> None:
    from evidence.environment import ENVIRONMENT_KEYS, parse_environment

    section = _section("### Environment files")
    (example,) = re.findall(r"```json\n(.*?)```", section, re.DOTALL)
    environment = parse_environment(example, origin="README")
    assert set(environment) == set(ENVIRONMENT_KEYS)
    sample = re.search(r"\]\((evidence/data/[a-z_]+\.json)\)", section)
    assert sample is not None and ROOT.joinpath(sample.group(1)).is_file()
    for key in ENVIRONMENT_KEYS:
        assert f"| `{key}` |" in section


def test_readme_lists_every_run_setting_variable() -> None:
    from state.context import RULES

    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    for rule in RULES:
        if rule.name.endswith("_model") and rule.name != "model":
            continue  # the per-role overrides share one row
        assert f"`{rule.variable}" in readme, rule.variable


def _bullet(section: str, start: str) -> str:
    """The bullet of ``section`` that begins with ``start``, as one line of text."""
    found = re.search(rf"^- {re.escape(start)}(.*?)(?=^- |^```|\Z)", section, re.M | re.S)
    assert found is not None, f"the README has no bullet starting {start!r}"
    return " ".join(found.group(1).split())


def test_readme_says_what_a_keyless_non_loopback_server_exposes() -> None:
    langgraph = _bullet(
        _section("### LangGraph Studio and chat clients"), "**Without keys on a non-loopback"
    )
    for exposed in (
        "`langgraph dev --host 0.0.0.0`",
        "every thread",
        "questions and answers",
        "the store",
    ):
        assert exposed in langgraph, exposed
    for verb in ("list", "read", "run", "change", "delete", "start diagnoses"):
        assert verb in langgraph, verb
    assert "`SUPERBIZ_API_KEYS`" in langgraph and "`SUPERBIZ_API_KEYS_FILE`" in langgraph

    api = " ".join(_section("## HTTP API").split())
    assert "With no key configured, access is open and every caller is `anonymous`" in api
    assert "binds only to a loopback address" in api
    assert "refuses any other `--host` (exit 2)" in api


def test_readme_states_the_langgraph_dev_job_concurrency_and_what_a_crash_loses() -> None:
    section = _section("### LangGraph Studio and chat clients")
    jobs = _bullet(section, "**One run at a time.**")
    assert "`--n-jobs-per-worker N`" in jobs
    assert "the default is 10; for `dev` it is 1" in jobs
    assert "`pending`" in jobs
    # The flag and the default the README quotes are the installed CLI's.
    script = Path(sys.executable).with_name("langgraph")
    shown = subprocess.run(
        [str(script), "dev", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "--n-jobs-per-worker" in shown and "Default: 10" in " ".join(shown.split())

    crash = _bullet(section, "**What a crash loses.**")
    for lost in ("`.langgraph_api/`", "in-flight and queued runs", "thread created since"):
        assert lost in crash, lost
    for kept in ("Checkpoints", "audit rows", "tool invocations"):
        assert kept in crash, kept
    assert "`superbiz diagnose --resume --thread ID`" in crash


def _layout_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text[text.index("## Project layout") :]


def test_readme_layout_table_lists_every_package_folder_and_no_other() -> None:
    """Each top-level package has a row, and each row names a folder that exists."""
    layout = _layout_section()
    rows = set(re.findall(r"^\| `([a-z_]+)/` \|", layout, flags=re.MULTILINE))
    packages = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if not path.parent.name.startswith(".") and path.parent.name != "tests"
    }
    assert packages, "no package folders found beside the README"
    assert packages <= rows, f"folders without a row in the layout table: {sorted(packages - rows)}"
    assert all((ROOT / row).is_dir() for row in rows), "a layout row names a missing folder"


def test_readme_reading_order_names_files_that_exist() -> None:
    """The reading order points at real modules, so it cannot go stale silently."""
    layout = _layout_section()
    order = layout[layout.index("Reading order") :]
    order = order[: order.index("\n\n")] if "\n\n" in order else order
    named = re.findall(r"`([a-z_/]+(?:\.py)?/?)`", order)
    assert len(named) >= 8
    missing = [name for name in named if not (ROOT / name.rstrip("/")).exists()]
    assert not missing, f"the reading order names what does not exist: {missing}"


def test_readme_layering_sentence_matches_the_layering_test() -> None:
    """The layering order stated in the README is the order tests/test_layering.py enforces."""
    layout = _layout_section()
    sentence = layout[layout.index("Imports follow the layering") :]
    sentence = sentence[: sentence.index("\n\n")]
    stated = re.findall(r"`([a-z_]+)`", sentence)
    enforced = [package for layer in LAYERS for package in layer]
    assert stated[: len(enforced)] == enforced


def test_readme_says_what_the_tests_need_and_how_long_they_take() -> None:
    from tests.conftest import POSTGRES_ADMIN_URL
    from tests.corpora import CORPUS_VARIABLE
    from tests.test_web import CHROMIUM
    from tests.test_web_firefox import FIREFOX

    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    for needed in (
        "PostgreSQL",
        "SUPERBIZ_TEST_POSTGRES_URL",
        POSTGRES_ADMIN_URL,
        "../shared/corpora",
        CORPUS_VARIABLE,
        "Chromium",
        CHROMIUM,
        "Firefox ESR",
        FIREFOX,
        "SUPERBIZ_REQUIRE_COMPONENTS",
    ):
        assert needed in section, needed
    assert re.search(r"full suite takes \d+ to \d+ minutes", section)
