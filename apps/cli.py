"""The ``superbiz`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

from apps.evaluation import eval_command
from apps.maintenance import PruneUsageError, add_prune_parser, prune_command
from apps.resuming import backend_for, environment_ref, plan_for
from apps.reverify import NotReverifiable, reverify
from apps.sweeper import sweep_quietly
from graph.builder import build_graph
from graph.models import make_model_factory
from graph.resume import ResumeRefused
from graph.runner import NothingToResume, run_diagnosis, summary_of
from persistence.audit import StoredRecordError, verifier_evaluation_of
from persistence.database import DatabaseError, migrate, open_database
from persistence.store import Persistence, open_persistence
from state.context import Context
from state.records import DiagnosisRecord, Invocation
from tools.backend import EvidenceBackend
from tools.environment import EnvironmentFileError, default_environment, load_environment
from tools.sample import SampleBackend
from verification.text import error_line

DB_HELP = (
    "database: postgresql://user@host/db, sqlite:///path or a file path "
    "(default: $SUPERBIZ_DATABASE_URL, else an SQLite file in the user data directory)"
)


class UsageError(Exception):
    """Bad input from the command line; the message is the one-line reason."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="superbiz",
        description="Incident diagnosis whose every stated fact is checked against the evidence "
        "it gathered.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    diagnose = commands.add_parser(
        "diagnose",
        help="diagnose one question and print the verified answer",
        description="Plan, query logs, metrics and runbooks, verify every claim against the "
        "evidence, and print the composed answer with its verdict and score. Progress goes to "
        "stderr. Exit status is 0 for every verdict.",
    )
    diagnose.add_argument(
        "question", nargs="?", help='the question, e.g. "order-service 为什么报 500？"'
    )
    diagnose.add_argument("--thread", metavar="ID", help="conversation thread id (default: new)")
    diagnose.add_argument(
        "--resume",
        action="store_true",
        help="finish the thread's interrupted diagnosis from its last checkpoint (needs --thread)",
    )
    diagnose.add_argument(
        "--lang", choices=("zh", "en"), default=None, help="answer language (default: zh)"
    )
    diagnose.add_argument(
        "--offline",
        action="store_true",
        help="use the deterministic rule-based planner, executor and verifier (no model); "
        "the default when OPENAI_API_KEY is not set",
    )
    diagnose.add_argument(
        "--env",
        metavar="FILE",
        help="evidence environment JSON (a scenario file or a bare environment); "
        "default: the bundled sample incident",
    )
    diagnose.add_argument(
        "--composer",
        choices=("template", "model"),
        default=None,
        help="how the answer is written: fixed template (default) or checked model text",
    )
    diagnose.add_argument(
        "--max-tool-calls", type=int, metavar="N", help="tool calls allowed per round (default 8)"
    )
    diagnose.add_argument("--json", action="store_true", help="print one JSON object instead")
    diagnose.add_argument("--db", metavar="URL", help=DB_HELP)

    sessions = commands.add_parser(
        "sessions", help="list and inspect recorded diagnoses", description="Read the audit log."
    )
    session_commands = sessions.add_subparsers(dest="sessions_command", metavar="ACTION")
    session_commands.required = True
    listing = session_commands.add_parser("list", help="list diagnoses, oldest first")
    listing.add_argument("--thread", metavar="ID", help="only this thread")
    listing.add_argument(
        "--verdict", choices=("PASS", "LOW_CONFID", "REJECT"), help="only this verdict"
    )
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.add_argument("--db", metavar="URL", help=DB_HELP)
    show = session_commands.add_parser("show", help="show one diagnosis in full")
    show.add_argument("diagnosis_id", metavar="DIAGNOSIS_ID")
    show.add_argument("--json", action="store_true", help="print the full record as JSON")
    show.add_argument("--db", metavar="URL", help=DB_HELP)

    recheck = commands.add_parser(
        "reverify",
        help="re-run the Gatekeeper and the Verifier on a diagnosis's stored evidence",
        description="Re-check a recorded diagnosis against its stored invocations (no tool is "
        "called again) and show what changed: verdict, score, Gatekeeper result, claim labels.",
    )
    recheck.add_argument("diagnosis_id", metavar="DIAGNOSIS_ID")
    recheck.add_argument(
        "--offline", action="store_true", help="use the deterministic verifier (no model)"
    )
    recheck.add_argument("--json", action="store_true", help="print one JSON object instead")
    recheck.add_argument("--db", metavar="URL", help=DB_HELP)

    evaluate = commands.add_parser(
        "eval",
        help="run scenario files against the real graph with scripted model replies",
        description="Run scenario files (format: docs/contracts.md, Scenario files): the real "
        "graph, tools over each "
        "scenario's environment, Gatekeeper, verdict code, routing and Composer; only the model "
        "replies are scripted. Prints one line per scenario, the metrics, and 'N passed, N "
        "failed'. Exit 1 if any scenario failed, 2 for a missing path.",
    )
    evaluate.add_argument("paths", nargs="+", metavar="PATH", help="scenario files or folders")
    evaluate.add_argument("--json", metavar="FILE", help="also write the results as JSON")

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", metavar="ACTION")
    db_commands.required = True
    upgrade = db_commands.add_parser(
        "upgrade", help="create or migrate the audit tables (also done at every start)"
    )
    upgrade.add_argument("--db", metavar="URL", help=DB_HELP)
    add_prune_parser(db_commands, DB_HELP)

    serve = commands.add_parser(
        "serve",
        help="run the HTTP API (chat, streamed chat, diagnosis records, health)",
        description="Serve the HTTP API with uvicorn. API keys come from SUPERBIZ_API_KEYS "
        "(key=identity,...) and/or SUPERBIZ_API_KEYS_FILE; without keys access is open and only "
        "a loopback address may be bound. Several workers need PostgreSQL.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    serve.add_argument(
        "--workers", type=int, default=1, help="worker processes (default 1; more need PostgreSQL)"
    )
    serve.add_argument("--db", metavar="URL", help=DB_HELP)
    return parser


def _requested(args: argparse.Namespace) -> dict[str, Any]:
    """The run settings the command line sets explicitly (a resume must not change them)."""
    requested: dict[str, Any] = {"language": args.lang, "composer_mode": args.composer}
    requested["max_tool_calls_per_round"] = args.max_tool_calls
    if args.offline:
        requested["offline"] = True
    return {name: value for name, value in requested.items() if value is not None}


def _context(args: argparse.Namespace) -> Context:
    overrides: dict[str, Any] = {}
    if args.lang:
        overrides["language"] = args.lang
    if args.offline:
        overrides["offline"] = True
    if args.composer:
        overrides["composer_mode"] = args.composer
    if args.max_tool_calls is not None:
        if args.max_tool_calls < 1:
            raise UsageError("--max-tool-calls must be at least 1")
        overrides["max_tool_calls_per_round"] = args.max_tool_calls
    try:
        return Context(**overrides)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _progress(event: dict[str, Any], err: TextIO) -> None:
    stage = event.get("stage")
    round_no = event.get("round")
    if stage == "intake":
        mode = (
            "offline mode: deterministic rules, no language model"
            if event.get("offline")
            else "model mode"
        )
        line = f"diagnosis {event.get('diagnosis_id')} ({mode})"
    elif stage == "tool":
        line = f"{event.get('invocation_id')} {event.get('tool')} -> {event.get('status')}"
    elif stage == "verdict":
        line = f"verdict {event.get('verdict')} (score {float(event.get('score') or 0):.2f})"
    elif stage == "retry":
        line = f"evidence too thin ({event.get('previous_verdict')}); one more round"
    elif stage == "done":
        line = f"done: {event.get('verdict')}"
    else:
        line = str(stage)
    err.write(f"[round {round_no}] {line}\n" if round_no else f"{line}\n")
    err.flush()


def _open(args: argparse.Namespace, *, sweep: bool = True) -> Persistence:
    try:
        persistence = open_persistence(args.db)
    except DatabaseError as exc:
        raise UsageError(str(exc)) from exc
    if sweep:  # diagnoses orphaned by a dead process are marked failed
        sweep_quietly(persistence)
    return persistence


def diagnose(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run (or resume) one diagnosis and print it."""
    question = (args.question or "").strip()
    if args.resume:
        if not args.thread:
            raise UsageError("--resume needs --thread ID: the thread whose diagnosis to finish")
        if question:
            raise UsageError("--resume continues the interrupted question; give no new question")
    elif not question:
        raise UsageError(
            'the question is empty; ask e.g. superbiz diagnose "is order-service failing?"'
        )
    ctx = _context(args)
    try:
        environment = load_environment(args.env) if args.env else default_environment()
    except EnvironmentFileError as exc:
        raise UsageError(str(exc)) from exc
    persistence = _open(args)
    try:
        thread = args.thread or f"thread-{uuid.uuid4().hex[:12]}"
        backend: EvidenceBackend = SampleBackend(environment)
        env_ref = environment_ref(args.env)
        try:
            if args.resume:  # the settings and environment the diagnosis started with
                plan = plan_for(persistence, thread, requested=_requested(args))
                if args.env and env_ref != plan.environment:
                    raise ResumeRefused(
                        f"diagnosis {plan.diagnosis_id} ran on {plan.environment}; a resume "
                        "continues it on the same evidence, so drop --env"
                    )
                ctx, env_ref = plan.context, plan.environment
                backend = backend_for(env_ref)
            app = build_graph(
                backend=backend,
                ledger=persistence.ledger,
                audit=persistence.audit,
                locks=persistence.locks,
                environment=env_ref,
            ).compile(checkpointer=persistence.checkpointer)
            values = run_diagnosis(
                app,
                thread_id=thread,
                context=ctx,
                audit=persistence.audit,
                question=question,
                resume=args.resume,
                on_event=lambda event: _progress(event, err),
            )
        except (DatabaseError, NothingToResume, ResumeRefused) as exc:
            raise UsageError(str(exc)) from exc
    finally:
        persistence.close()
    result = summary_of(values, thread)
    if args.json:
        out.write(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    else:
        out.write(f"{result['answer']}\n\n")
        out.write(
            f"verdict: {result['verdict']}  score: {float(result['groundedness_score'] or 0):.2f}  "
            f"rounds: {result['rounds']}  diagnosis: {result['diagnosis_id']}  thread: {thread}\n"
        )
    return 0


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def sessions(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``sessions list`` and ``sessions show``."""
    persistence = _open(args)
    try:
        if args.sessions_command == "list":
            records = persistence.audit.list(args.thread)
            if args.verdict:
                records = [r for r in records if r["verdict"] == args.verdict]
            if args.json:
                out.write(json.dumps(records, ensure_ascii=False, indent=2) + "\n")
                return 0
            if not records:
                err.write(
                    "no diagnoses recorded"
                    + (f" on thread {args.thread}" if args.thread else "")
                    + "\n"
                )
                return 0
            rows = [
                [
                    "DIAGNOSIS",
                    "THREAD",
                    "STATUS",
                    "VERDICT",
                    "SCORE",
                    "ROUNDS",
                    "CREATED",
                    "QUESTION",
                ]
            ]
            for r in records:
                score = "" if r["score"] is None else f"{float(r['score']):.2f}"
                question = " ".join(str(r["question"]).split())
                rows.append(
                    [
                        r["id"],
                        r["thread_id"],
                        r["status"],
                        r["verdict"] or "",
                        score,
                        str(r["rounds"]),
                        str(r["created_at"])[:19],
                        question[:60],
                    ]
                )
            out.write(_table(rows) + "\n")
            return 0
        record = persistence.audit.get(args.diagnosis_id)
        if record is None:
            raise UsageError(
                f"no diagnosis {args.diagnosis_id!r} in {persistence.db.target.display}; "
                "see superbiz sessions list"
            )
        invocations = persistence.ledger.list(args.diagnosis_id)
    finally:
        persistence.close()
    if args.json:
        out.write(
            json.dumps({**record, "invocations": invocations}, ensure_ascii=False, indent=2) + "\n"
        )
    else:
        out.write(render_session(record, invocations) + "\n")
    return 0


def render_session(record: DiagnosisRecord, invocations: list[Invocation]) -> str:
    """A readable view of one audit record."""
    score = "-" if record["score"] is None else f"{record['score']:.2f}"
    note = f"  ({record['note']})" if record["note"] else ""
    try:
        evaluation = verifier_evaluation_of(record)
        unreadable = ""
    except StoredRecordError as exc:
        evaluation, unreadable = None, str(exc)
    model = f"  model verdict {evaluation['model_verdict']}" if evaluation else ""
    lines = [
        f"diagnosis  {record['id']}  (thread {record['thread_id']})",
        f"question   {record['question']}",
        f"status     {record['status']}{note}",
        f"verdict    {record['verdict'] or '-'}  score {score}  rounds {record['rounds']}{model}",
        f"created    {record['created_at']}   updated {record['updated_at']}",
    ]
    if unreadable:
        lines.append(f"evaluation {unreadable}")
    if evaluation is not None:
        gate = evaluation["gatekeeper_result"]
        lines.append(
            f"gatekeeper {gate['status']} / {gate['severity']}  "
            f"failed rules: {', '.join(gate['failed_rules']) or 'none'}  "
            f"({gate['rule_set_version']})"
        )
        lines += [
            f"  - {issue['rule_id']} {issue['target']}: {issue['message']}"
            for issue in gate["errors"] + gate["warnings"]
        ]
        if evaluation["claim_checks"]:
            lines.append("claim checks")
            lines += [
                f"  - {check['claim_id']}: {check['verification']}  {check['detail']}".rstrip()
                for check in evaluation["claim_checks"]
            ]
    if invocations:
        lines.append("evidence")
        for inv in invocations:
            args_text = " ".join(f"{k}={v}" for k, v in sorted(inv["arguments"].items()))
            head = f"  - {inv['invocation_id']} r{inv['round']} {inv['tool_name']} {args_text}"
            tail = f" ({inv['error']})" if inv["error"] else ""
            lines.append(f"{head} -> {inv['status']}{tail}")
    if record["final_answer"]:
        lines += ["answer", record["final_answer"]]
    return "\n".join(lines)


def reverify_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``reverify DIAGNOSIS_ID``."""
    ctx = Context(offline=True) if args.offline else Context()
    persistence = _open(args)
    try:
        report = reverify(
            args.diagnosis_id,
            audit=persistence.audit,
            ledger=persistence.ledger,
            get_model=make_model_factory(),
            context=ctx,
        )
    except NotReverifiable as exc:
        raise UsageError(str(exc)) from exc
    finally:
        persistence.close()
    if args.json:
        out.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
        return 0
    before, after = report["before"], report["after"]
    out.write(
        f"diagnosis {report['diagnosis_id']}: {report['invocations']} stored invocations, "
        f"verifier {report['verifier_mode']}\n"
        f"recorded   {before['verdict']}  score {before['groundedness_score']}\n"
        f"re-checked {after['verdict']}  score {after['groundedness_score']}\n"
    )
    if report["changes"]:
        out.write("changes\n" + "".join(f"  - {c}\n" for c in report["changes"]))
    else:
        out.write("no changes\n")
    return 0


def db_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``db upgrade`` and ``db prune``."""
    if args.db_command == "prune":
        try:
            return prune_command(args, out)
        except PruneUsageError as exc:
            raise UsageError(str(exc)) from exc
    try:
        db = open_database(args.db)
    except DatabaseError as exc:
        raise UsageError(str(exc)) from exc
    try:
        before, after = migrate(db)
    finally:
        db.close()
    out.write(
        f"{db.target.display}: schema version {after}"
        + (" (up to date)" if before == after else f" (from {before})")
        + "\n"
    )
    return 0


def serve_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``serve``: check the configuration and the database, then run uvicorn."""
    from apps.auth import ApiKeys, ConfigError, Limits, is_loopback
    from persistence.database import ENV_VAR, resolve_target

    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be between 1 and 65535, got {args.port}")
    try:
        keys = ApiKeys.from_env()
        Limits.from_env()
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    if keys.open and not is_loopback(args.host):
        raise UsageError(
            f"refusing to serve on {args.host} without API keys: anyone who can reach it could "
            "use the API; set SUPERBIZ_API_KEYS or SUPERBIZ_API_KEYS_FILE, or bind to 127.0.0.1"
        )
    try:
        target = resolve_target(args.db)
    except DatabaseError as exc:
        raise UsageError(str(exc)) from exc
    if target.dialect == "sqlite" and args.workers > 1:
        raise UsageError(
            f"--workers {args.workers} needs PostgreSQL: an SQLite database serves one worker "
            "process; use --workers 1 or --db postgresql://user@host/db"
        )
    # Migrate and set up checkpoints once, before the workers start.
    _open(args, sweep=False).close()  # the workers sweep, resuming what they can
    if args.db:
        os.environ[ENV_VAR] = args.db  # the workers read the database from the environment
    if keys.open:
        err.write(
            f"superbiz: no API keys configured (SUPERBIZ_API_KEYS, SUPERBIZ_API_KEYS_FILE): "
            f"access is open to anyone who can reach {args.host}:{args.port}, as identity "
            "'anonymous'\n"
        )
    else:
        err.write(f"superbiz: {len(keys)} API key(s) configured\n")
    err.write(f"superbiz: serving the API on http://{args.host}:{args.port} ({target.display})\n")
    err.flush()
    import uvicorn

    uvicorn.run(
        "apps.api:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level="info",
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``superbiz`` command."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "diagnose":
            return diagnose(args, sys.stdout, sys.stderr)
        if args.command == "sessions":
            return sessions(args, sys.stdout, sys.stderr)
        if args.command == "db":
            return db_command(args, sys.stdout, sys.stderr)
        if args.command == "reverify":
            return reverify_command(args, sys.stdout, sys.stderr)
        if args.command == "eval":
            return eval_command(args.paths, args.json, sys.stdout, sys.stderr)
        if args.command == "serve":
            return serve_command(args, sys.stdout, sys.stderr)
    except UsageError as exc:
        print(f"superbiz: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("superbiz: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # A failure during the run (model endpoint, backend, a bug): one line, no traceback.
        print(f"superbiz: error: diagnosis failed: {error_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
