"""Every setting is declared once, read by one module, documented by the README as declared.

- The declarations: the run settings are ``Context``'s fields, the evidence sources' are in
  ``evidence/config.py``, the others in ``state/catalog.py``; no variable is declared twice and
  no product module names a ``SUPERBIZ_*`` variable that is not declared.
- One reader: only ``state/configuration.py`` touches ``os.environ`` (or ``os.getenv``).
- One offline rule: only ``state/catalog.py`` looks at ``OPENAI_API_KEY``.
- The README's settings tables match the declarations (variable, file key, default), and every
  declared setting has a row.
- ``config show`` lists every declared setting, secrets as ``****``.
- A backend is one declaration: its variables, file keys and checks follow from it.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
from pathlib import Path

import pytest

import evidence.config as evidence_config
import graph.resume
import models.factory
from apps.cli.doctor import config_show_command
from evidence.config import Backend, ConfigError, Key, load_settings
from state import catalog, configuration
from state.context import RULES, Context
from state.settings import Setting, SettingsError, describe

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = (
    "analysis",
    "apps",
    "evidence",
    "graph",
    "knowledge",
    "models",
    "nodes",
    "persistence",
    "state",
    "tools",
    "verification",
)
EVERY: tuple[Setting, ...] = (*RULES, *catalog.SETTINGS, *evidence_config.SETTINGS)

READER = "state/configuration.py"
"""The one module that reads the environment (and writes it, for worker processes)."""
ENVIRONMENT_READS: dict[str, str] = {}
"""Other product modules allowed to read the environment, with the reason (none: variables that
are not settings, such as ``XDG_DATA_HOME``, are read through ``configuration.other_variable``)."""


def _product_files() -> list[Path]:
    return [path for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))]


def _environment_uses(path: Path) -> list[str]:
    """Where a module touches the process environment: ``os.environ``, ``os.getenv``, ..."""
    found: list[str] = []
    names = {"environ", "getenv", "putenv", "unsetenv", "environb"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append(f"line {node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"line {node.lineno}: from os import {a.name}" for a in node.names]
    return found


def test_settings_catalog_only_the_reader_reads_the_environment() -> None:
    readers = {
        str(path.relative_to(ROOT)): uses
        for path in _product_files()
        if (uses := _environment_uses(path))
    }
    allowed = {READER, *ENVIRONMENT_READS}
    unexpected = {name: uses for name, uses in readers.items() if name not in allowed}
    assert not unexpected, f"read the environment through state.configuration: {unexpected}"
    assert READER in readers  # the check finds a use where there is one


def test_settings_catalog_other_variables_are_listed_with_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "/srv/data")
    assert configuration.other_variable("XDG_DATA_HOME") == "/srv/data"
    assert all(reason for reason in configuration.OTHER_VARIABLES.values())
    with pytest.raises(KeyError, match="not listed"):
        configuration.other_variable("HOME")


def test_settings_catalog_every_setting_is_declared_once() -> None:
    variables = [setting.variable for setting in EVERY]
    names = [setting.name for setting in EVERY]
    twice = sorted({v for v in variables if variables.count(v) > 1})
    assert not twice, twice
    assert len(set(names)) == len(names)
    keys = [setting.toml_key for setting in EVERY if setting.toml_key]
    assert len(set(keys)) == len(keys)


def test_settings_catalog_product_code_names_only_declared_variables() -> None:
    declared = {setting.variable for setting in EVERY}
    pattern = re.compile(r"\b(?:SUPERBIZ|OPENAI)_[A-Z0-9_]*[A-Z0-9]")
    undeclared: set[str] = set()
    for path in _product_files():
        for name in pattern.findall(path.read_text(encoding="utf-8")):
            # a prefix stands for its family in prose ("SUPERBIZ_API_*"); <ROLE> for each role
            if name not in declared and not any(v.startswith(name + "_") for v in declared):
                undeclared.add(f"{path.relative_to(ROOT)}: {name}")
    assert not undeclared, sorted(undeclared)


def test_settings_catalog_context_fields_are_the_run_declarations() -> None:
    fields = dataclasses.fields(Context)
    assert tuple(spec.metadata["setting"] for spec in fields) == RULES
    for spec in fields:
        setting: Setting = spec.metadata["setting"]
        assert setting.name == spec.name and setting.run
        assert spec.metadata["description"] == describe(setting)
    assert all(not setting.run for setting in (*catalog.SETTINGS, *evidence_config.SETTINGS))


def test_settings_catalog_a_field_without_a_declaration_is_refused() -> None:
    from state.context import _settings

    class Plain:
        language: str = "zh"

    with pytest.raises(TypeError, match="declared with run_setting"):
        _settings(Plain)


# --------------------------------------------------------------------------- the offline rule


def _names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} | {
        node.id for node in ast.walk(tree) if isinstance(node, ast.Name)
    }


def test_settings_catalog_the_offline_rule_exists_once() -> None:
    users = [
        str(path.relative_to(ROOT))
        for path in _product_files()
        if "MODEL_API_KEY" in _names_used(path)
    ]
    assert users == ["state/catalog.py"]
    # the factory, resume and the run settings ask the same function
    assert graph.resume.models_configured is catalog.models_configured
    assert "models_configured" in _names_used(Path(models.factory.__file__))


@pytest.mark.parametrize(
    ("environ", "offline"),
    [
        pytest.param({}, True, id="no-key"),
        pytest.param({"OPENAI_API_KEY": "  "}, True, id="blank-key"),
        pytest.param({"OPENAI_API_KEY": "k"}, False, id="key"),
        pytest.param({"OPENAI_API_KEY": "k", "SUPERBIZ_OFFLINE": "1"}, True, id="forced"),
        pytest.param({"SUPERBIZ_OFFLINE": "0"}, False, id="model-mode-asked"),
    ],
)
def test_settings_catalog_offline_default_follows_the_rule(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], offline: bool
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SUPERBIZ_OFFLINE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert Context().offline is offline
    assert Context(offline=True).offline is True  # --offline and a caller's value win


# --------------------------------------------------------------------------- README tables

_ROW_VARIABLE = re.compile(r"`((?:SUPERBIZ|OPENAI)_[A-Z0-9_<>]+)`(?:\s*\(`([^`]+)`[^)]*\))?")


def _readme_tables() -> list[tuple[list[str], list[list[str]]]]:
    """Every README table whose first column is ``variable ...``: header and rows."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        if lines[index].startswith("| variable") and lines[index + 1].startswith("|---"):
            header = [cell.strip() for cell in lines[index].strip("|").split("|")]
            rows: list[list[str]] = []
            index += 2
            while index < len(lines) and lines[index].startswith("|"):
                rows.append([cell.strip() for cell in lines[index].strip().strip("|").split("|")])
                index += 1
            tables.append((header, rows))
        index += 1
    return tables


def _expand(variable: str) -> list[tuple[str, str | None]]:
    """``SUPERBIZ_<BACKEND>_TOKEN`` as each backend's variable (with the backend's name)."""
    if "<BACKEND>" not in variable:
        return [(variable, None)]
    return [
        (variable.replace("<BACKEND>", b.name.upper()), b.name) for b in evidence_config.BACKENDS
    ]


def _file_key(written: str, backend: str | None) -> str:
    """A README file key as the declaration writes it: ``[loki] url`` is ``loki.url``."""
    table = re.fullmatch(r"\[(\w+)\] (\w+)", written)
    if table:
        return f"{table.group(1)}.{table.group(2)}"
    return f"{backend}.{written}" if backend else written


def _plain(cell: str) -> str:
    return " ".join(cell.replace("`", "").split())


def test_settings_catalog_readme_tables_match_the_declarations() -> None:
    by_variable = {setting.variable: setting for setting in EVERY}
    documented: set[str] = set()
    problems: list[str] = []
    tables = _readme_tables()
    assert len(tables) >= 8
    for header, rows in tables:
        assert "default" in header, f"a settings table without a default column: {header}"
        default_column = header.index("default")
        for row in rows:
            found = _ROW_VARIABLE.findall(row[0])
            assert found, f"a settings row without a variable: {row}"
            for written, key in found:
                for variable, backend in _expand(written):
                    setting = by_variable.get(variable)
                    if setting is None:
                        problems.append(f"{variable}: in the README, not declared")
                        continue
                    documented.add(variable)
                    if key and _file_key(key, backend) != setting.toml_key:
                        declared = setting.toml_key
                        problems.append(f"{variable}: file key {key!r}, declared {declared}")
                    if not key and setting.toml_key:
                        problems.append(f"{variable}: the README omits its file key")
                    if _plain(row[default_column]) != setting.default_text:
                        problems.append(
                            f"{variable}: default {_plain(row[default_column])!r} in the "
                            f"README, declared {setting.default_text!r}"
                        )
    missing = sorted(set(by_variable) - documented)
    assert not problems, problems
    assert not missing, f"declared settings without a README row: {missing}"


# --------------------------------------------------------------------------- config show

SECRET = "sec-5d1e-very-secret"


def test_settings_catalog_config_show_lists_every_setting_with_its_origin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("SUPERBIZ_API_KEYS", f"{SECRET}=alice")
    monkeypatch.setenv("SUPERBIZ_NOTIFY_WEBHOOK_URL", f"https://hooks.example/{SECRET}")
    monkeypatch.setenv("SUPERBIZ_LANGUAGE", "en")
    monkeypatch.setenv("SUPERBIZ_ALERT_QUEUE_MAX", "7")
    out = io.StringIO()

    assert config_show_command(out, io.StringIO()) == 0

    shown = out.getvalue()
    assert SECRET not in shown
    rows = {
        line.split()[0]: line for line in shown.splitlines() if line.startswith(("SUPER", "OPEN"))
    }
    for setting in (*RULES, *catalog.SETTINGS):
        assert setting.variable in rows, setting.variable
    assert rows["OPENAI_API_KEY"].split()[1:] == ["****", "(environment)"]
    assert rows["SUPERBIZ_API_KEYS"].split()[1:] == ["****", "(environment)"]
    assert rows["SUPERBIZ_NOTIFY_WEBHOOK_URL"].split()[1:] == ["****", "(environment)"]
    assert rows["SUPERBIZ_LANGUAGE"].split()[1:] == ["en", "(environment)"]
    assert rows["SUPERBIZ_ALERT_QUEUE_MAX"].split()[1:] == ["7", "(environment)"]
    assert rows["SUPERBIZ_OFFLINE"].split()[1:] == ["off", "(default)"]  # a key is set
    assert rows["SUPERBIZ_API_RATE_PER_MIN"].split()[1:] == ["60", "(default)"]


def test_settings_catalog_config_show_reports_an_invalid_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUPERBIZ_LANGUAGE", "fr")
    monkeypatch.setenv("SUPERBIZ_API_RATE_BURST", "lots")
    out = io.StringIO()

    assert config_show_command(out, io.StringIO()) == 1

    shown = out.getvalue()
    assert "config        FAIL  SUPERBIZ_LANGUAGE is 'fr': it must be 'zh' or 'en'" in shown
    assert "SUPERBIZ_API_RATE_BURST must be a whole number, got 'lots'" in shown


# --------------------------------------------------------------------------- backends


def test_settings_catalog_a_backend_is_one_declaration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def _org(value: object) -> str:
        if not isinstance(value, str) or not value.isalnum():
            raise ValueError("must be an organisation name (letters and digits)")
        return value

    zipkin = Backend("zipkin", "traces", (Key("org", _org, "organisation queried"),))
    monkeypatch.setattr(evidence_config, "BACKENDS", (*evidence_config.BACKENDS, zipkin))

    assert {s.variable for s in zipkin.settings.values()} >= {
        "SUPERBIZ_ZIPKIN_URL",
        "SUPERBIZ_ZIPKIN_TOKEN",
        "SUPERBIZ_ZIPKIN_ORG",
    }
    assert zipkin.settings["token"].secret and not zipkin.settings["org"].secret
    settings = load_settings(
        {"SUPERBIZ_ZIPKIN_URL": "http://127.0.0.1:9411/", "SUPERBIZ_ZIPKIN_ORG": "ops"},
        cwd=tmp_path,
    )
    zipkin_settings = settings.backend("zipkin")
    assert zipkin_settings is not None
    assert (zipkin_settings.url, zipkin_settings.options["org"]) == ("http://127.0.0.1:9411", "ops")

    with pytest.raises(ConfigError, match="unknown setting SUPERBIZ_ZIPKIN_ORGG"):
        load_settings({"SUPERBIZ_ZIPKIN_ORGG": "ops"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="SUPERBIZ_ZIPKIN_ORG='o p' must be an organisation"):
        load_settings(
            {"SUPERBIZ_ZIPKIN_URL": "http://h", "SUPERBIZ_ZIPKIN_ORG": "o p"}, cwd=tmp_path
        )
    (tmp_path / "superbiz.toml").write_text('[zipkin]\nurl = "http://h"\ntoken = 5\n')
    with pytest.raises(ConfigError, match=r"^zipkin\.token in .* must be a string$"):
        load_settings({}, cwd=tmp_path)


def test_settings_catalog_a_broken_file_does_not_stop_what_reads_no_file_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[prometheus\n")
    monkeypatch.setenv("SUPERBIZ_CONFIG", str(broken))

    assert Context(language="en").language == "en"
    with pytest.raises(SettingsError, match="is not valid TOML"):
        configuration.Sources().value(evidence_config.QUERY_TIMEOUT_S)


def test_settings_catalog_reading_a_variable_does_not_ask_for_the_working_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The LangGraph server refuses ``os.getcwd`` on its event loop, where settings are read."""
    import os

    from persistence.database import resolve_target

    calls: list[str] = []
    real = os.getcwd

    def recorded() -> str:
        calls.append("getcwd")
        return real()

    monkeypatch.setenv("SUPERBIZ_DATABASE_URL", "postgresql://u@127.0.0.1:5432/db")
    monkeypatch.setattr(os, "getcwd", recorded)
    context = Context(language="en")
    target = resolve_target()
    body = configuration.value(catalog.API_MAX_BODY_BYTES)
    monkeypatch.setattr(os, "getcwd", real)

    assert (context.language, target.dialect, body) == ("en", "postgres", 64 * 1024)
    assert calls == []
