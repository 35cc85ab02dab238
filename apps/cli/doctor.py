"""``superbiz doctor`` and ``superbiz config show``.

Doctor: does every configured backend answer. Config show: every declared setting's effective
value and where it came from (the evidence sources', the run settings, the program's), secrets
masked, and which source serves each tool.
"""

from __future__ import annotations

import json
from typing import TextIO

from evidence.composed import check_backends, configured_backend, part_names
from evidence.config import ConfigError, Settings, describe, load_settings, redact
from state import catalog, configuration
from state.context import RULES
from tools.backend import BackendReport


def _settings(out: TextIO) -> Settings | None:
    try:
        return load_settings()
    except ConfigError as exc:
        out.write(f"config        FAIL  {exc}\n")
        return None


def _line(report: BackendReport) -> str:
    status = "ok" if report["status"] == "ok" else "FAIL"
    url = f"  {report['url']}" if report["url"] else ""
    return f"{report['backend']:<13} {status:<4}{url}  {report['detail']}"


def doctor_command(as_json: bool, out: TextIO, err: TextIO, *, database: str | None = None) -> int:
    """Check every configured backend, one line each; 0 when all answer, else 1."""
    try:
        settings = load_settings()
    except ConfigError as exc:
        if as_json:
            out.write(json.dumps({"ok": False, "config_error": str(exc), "backends": []}) + "\n")
        else:
            out.write(f"config        FAIL  {exc}\n")
        return 1
    reports = check_backends(configured_backend(settings, database=database, progress=None))
    secrets = settings.secrets()
    for report in reports:
        report["detail"] = redact(report["detail"], secrets)
    ok = all(report["status"] == "ok" for report in reports)
    if as_json:
        out.write(json.dumps({"ok": ok, "backends": reports}, ensure_ascii=False, indent=2) + "\n")
        return 0 if ok else 1
    for report in reports:
        out.write(_line(report) + "\n")
    failed = [r for r in reports if r["status"] != "ok"]
    if failed:
        err.write(
            f"{len(failed)} of {len(reports)} backends did not answer; check "
            + ", ".join(sorted({r.get("setting", "the configuration") for r in failed}))
            + "\n"
        )
    return 0 if ok else 1


def config_show_command(out: TextIO, err: TextIO) -> int:
    """Print every setting's effective value (secrets masked) and which source serves each tool.

    Exit 1 when a setting is invalid (each problem on a ``config FAIL`` line), else 0.
    """
    settings = _settings(out)
    if settings is None:
        return 1
    others, problems = configuration.describe((*RULES, *catalog.SETTINGS))
    rows = describe(settings) + others
    width = max(len(name) for name, _, _ in rows)
    for name, value, origin in rows:
        out.write(f"{name:<{width}}  {value}  ({origin})\n")
    backend = configured_backend(settings, progress=None, connect_mcp=False)
    out.write("evidence: " + "; ".join(part_names(backend)) + "\n")
    for problem in problems:
        out.write(f"config        FAIL  {problem}\n")
    return 1 if problems else 0
