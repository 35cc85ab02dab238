"""``superbiz doctor`` and ``superbiz config show``.

Doctor: does every configured backend answer, and in model mode what each role's model does
(``models.probe``: reachable, name known, tool calls native or written as text, JSON schema,
tokens/s) and what to expect of it. Config show: every declared setting's effective
value and where it came from (the evidence sources', the run settings, the program's), secrets
masked, and which source serves each tool.
"""

from __future__ import annotations

import json
from typing import TextIO

from evidence.composed import check_backends, configured_backend, part_names
from evidence.config import ConfigError, Settings, describe, load_settings, redact
from models.probe import ModelProbe, expectations
from state import catalog, configuration
from state.context import ROLES, RULES, Context
from state.settings import SettingsError
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


def _probe_models() -> list[ModelProbe]:
    """Probe each role's model when model mode is configured (none offline)."""
    try:
        ctx = Context()
    except SettingsError:
        return []
    if ctx.offline or not catalog.models_configured():
        return []
    import openai

    from models.factory import max_tokens
    from models.probe import probe_model

    # The client reads the API key itself, as the models the factory builds do.
    client = openai.OpenAI(
        base_url=configuration.value(catalog.MODEL_BASE_URL),
        timeout=ctx.model_timeout_s,
        max_retries=0,
    )
    by_model: dict[str, list[str]] = {}
    for role in ROLES:
        by_model.setdefault(ctx.model_for(role), []).append(role)
    return [
        probe_model(client, model, roles, max_tokens=min(128, max_tokens(roles[0])))
        for model, roles in by_model.items()
    ]


def _model_ok(found: ModelProbe) -> bool:
    return found.reachable and found.listed is not False and found.tool_calls in ("native", "text")


def _model_line(found: ModelProbe) -> str:
    status = "ok" if _model_ok(found) else "FAIL"
    speed = f"; {found.tokens_per_s:.1f} tokens/s" if found.tokens_per_s else ""
    detail = (
        f"{found.model} ({', '.join(found.roles)}): tool calls {found.tool_calls}; "
        f"JSON schema {found.schema}{speed}"
    )
    if found.tool_calls == "none":
        detail += f"; model {found.model!r} does not call tools"
    return f"{'model':<13} {status:<4}  {detail}"


def _database_report(value: str) -> BackendReport:
    """Whether the database ``--db`` names answers; nothing is created or migrated.

    An SQLite file that does not exist yet is fine: the first diagnosis creates it.
    """
    from persistence.database import Database, DatabaseError, resolve_target

    try:
        target = resolve_target(value)
    except DatabaseError as exc:
        return BackendReport(
            backend="database", url=None, status="error", detail=str(exc), setting="--db"
        )
    if target.path is not None and not target.path.exists():
        return BackendReport(
            backend="database",
            url=None,
            status="ok",
            detail=f"{target.display} does not exist yet; the first diagnosis creates it",
        )
    db = Database(value, migrate=False)
    try:
        db.open()
    except DatabaseError as exc:
        return BackendReport(
            backend="database", url=None, status="error", detail=str(exc), setting="--db"
        )
    finally:
        db.close()
    return BackendReport(
        backend="database", url=None, status="ok", detail=f"{target.display} answers"
    )


def doctor_command(as_json: bool, out: TextIO, err: TextIO, *, database: str | None = None) -> int:
    """Check every configured backend (and the ``--db`` database), one line each.

    Returns 0 when all answer, else 1.
    """
    try:
        settings = load_settings()
    except ConfigError as exc:
        if as_json:
            out.write(json.dumps({"ok": False, "config_error": str(exc), "backends": []}) + "\n")
        else:
            out.write(f"config        FAIL  {exc}\n")
        return 1
    reports = check_backends(configured_backend(settings, database=database, progress=None))
    if database is not None and not settings.runbooks:  # else the runbook index's line says it
        reports.append(_database_report(database))
    secrets = settings.secrets()
    for report in reports:
        report["detail"] = redact(report["detail"], secrets)
    probes = _probe_models()
    models_ok = all(_model_ok(found) for found in probes)
    ok = all(report["status"] == "ok" for report in reports) and models_ok
    if as_json:
        data = {"ok": ok, "backends": reports, "models": [found.as_json() for found in probes]}
        out.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        return 0 if ok else 1
    for report in reports:
        out.write(_line(report) + "\n")
    for found in probes:
        out.write(_model_line(found) + "\n")
        for line in [*found.problems, *expectations(found)]:
            out.write(f"{'':<14}{line}\n")
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
