"""The ``superbiz`` command line."""

from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import socket
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

# Only light modules at start-up: ``--help``, ``sessions list`` and ``db upgrade`` must not pay
# for LangGraph, langchain or a model client. Each command imports what it needs when it runs.
from apps.cli.maintenance import PruneUsageError, add_prune_parser, prune_command
from state import catalog, configuration
from state.context import Context, check_environment, parse_option
from state.display import error_line, one_line, terminal_safe
from state.settings import SettingsError

if TYPE_CHECKING:
    from graph.failures import DiagnosisFailed
    from graph.runner import Graph
    from persistence.database import DatabaseError
    from persistence.store import Persistence, Records
    from state.records import ConclusionCheck, DiagnosisRecord, Invocation, QuestionCoverage

T = TypeVar("T")

DB_HELP = (
    "database: postgresql://user@host/db, sqlite:///path or a file path "
    "(default: $SUPERBIZ_DATABASE_URL, else an SQLite file in the user data directory)"
)


EXIT_FAILED = 1
"""Exit status of a command that failed (a model endpoint refused the request, a bug...)."""
EXIT_USAGE = 2
"""Exit status for bad input: options, arguments, files, settings."""
EXIT_UNAVAILABLE = 3
"""Exit status when a dependency is down: the database, or the model endpoint after retries."""
DEBUG_VAR = catalog.DEBUG.variable
"""Set to 1 to print the traceback of a failure before its one-line reason."""


class UsageError(Exception):
    """Bad input from the command line; the message is the one-line reason."""


class Unavailable(Exception):
    """A dependency (database, model endpoint) is down; the message is the one-line reason."""


class CommandFailed(Exception):
    """The command failed and has said so; ``code`` is its exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def version() -> str:
    """The installed version of superbiz."""
    try:
        return metadata.version("superbiz-agent")
    except metadata.PackageNotFoundError:
        return "unknown"


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line with a hint (no usage block)."""

    def error(self, message: str) -> NoReturn:
        """Print ``superbiz: error: <message> (see <prog> --help)`` and exit 2."""
        self.exit(EXIT_USAGE, f"superbiz: error: {message} (see: {self.prog} --help)\n")


def _output_options(
    parser: argparse.ArgumentParser, json_help: str | None = None, *, db_help: str = DB_HELP
) -> None:
    """Add the options most commands share: ``--json`` (when ``json_help``) and ``--db URL``."""
    if json_help is not None:
        parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--db", metavar="URL", help=db_help)


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="superbiz",
        description="Incident diagnosis whose every stated fact is checked against the evidence "
        "it gathered. Exit status: 0 done (any verdict), 1 failed, 2 bad input, 3 a database "
        f"or model endpoint unavailable; {DEBUG_VAR}=1 prints the traceback of a failure.",
    )
    parser.add_argument("--version", action="version", version=f"superbiz {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    diagnose = commands.add_parser(
        "diagnose",
        help="diagnose one question and print the verified answer",
        description="Plan, query logs, metrics and runbooks, verify every claim against the "
        "evidence, and print the composed answer with its verdict and score. Progress goes to "
        "stderr. Exit status is 0 for every verdict; 1 when the diagnosis could not finish "
        "(the reason on stderr, a degraded answer on stdout), 3 when the database or the model "
        "endpoint is unavailable.",
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
        "--lang", metavar="{zh,en}", default=None, help="answer language (default: zh)"
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
        metavar="{template,model}",
        default=None,
        help="how the answer is written: fixed template (default) or checked model text",
    )
    diagnose.add_argument(
        "--max-tool-calls", metavar="N", help="tool calls allowed per round (default 8)"
    )
    _output_options(diagnose, "print one JSON object instead")

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
    _output_options(listing, "print a JSON array")
    show = session_commands.add_parser("show", help="show one diagnosis in full")
    show.add_argument("diagnosis_id", metavar="DIAGNOSIS_ID")
    _output_options(show, "print the full record as JSON")
    export = session_commands.add_parser(
        "export",
        help="write a finished diagnosis as a replayable scenario file",
        description="Write a scenario that replays the diagnosis without its real systems or "
        "models: its question, its recorded tool results, its recorded model replies, and an "
        "expect block filled from its outcome, to edit to what it should have been. Run it "
        "with superbiz eval.",
    )
    export.add_argument("diagnosis_id", metavar="DIAGNOSIS_ID")
    export.add_argument(
        "--scenario", metavar="FILE", required=True, help="the scenario file to write"
    )
    export.add_argument("--id", metavar="ID", help="the scenario's id (default replay-<id>)")
    export.add_argument("--force", action="store_true", help="overwrite an existing file")
    _output_options(export)

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
    _output_options(recheck, "print one JSON object instead")

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
    _output_options(upgrade)
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
    _output_options(serve)

    mcp = commands.add_parser(
        "mcp",
        help="serve MCP over stdin/stdout (for an MCP client such as an IDE or an assistant)",
        description="Serve the Model Context Protocol over this process's stdin and stdout: "
        "diagnose, get_diagnosis, list_diagnoses, get_evidence, reverify, search_runbooks, "
        "resume_diagnosis and each diagnosis's answer and claims as resources. With API keys "
        "configured it acts for the key in SUPERBIZ_MCP_API_KEY; without, as anonymous. Logs "
        "go to stderr.",
    )
    _output_options(mcp)

    doctor = commands.add_parser(
        "doctor",
        help="check that every configured backend answers",
        description="One line per configured backend (Prometheus, Alertmanager): version, a "
        "trivial query, the services found, or why it failed and the setting to check. Exit 0 "
        "when all answer, 1 otherwise.",
    )
    _output_options(
        doctor, "print one JSON object instead", db_help=DB_HELP + "; where the runbook index is"
    )
    _kb_parser(commands)
    config = commands.add_parser("config", help="show the backend configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION")
    config_commands.required = True
    config_commands.add_parser(
        "show", help="print the effective settings (environment over superbiz.toml), secrets masked"
    )
    return parser


def _kb_parser(commands: Any) -> None:
    kb = commands.add_parser(
        "kb",
        help="the runbook index: build it, search it",
        description="Index Markdown runbooks and postmortems (chunked by headings) in the "
        "configured database, and search them as lookup_knowledge does.",
    )
    kb_commands = kb.add_subparsers(dest="kb_command", metavar="ACTION")
    kb_commands.required = True
    index = kb_commands.add_parser(
        "index",
        help="bring the index in line with runbook folders (default SUPERBIZ_RUNBOOKS)",
        description="Index every *.md / *.markdown file below the folders: unchanged files are "
        "skipped (size, modification time, content hash), changed ones re-chunked, deleted ones "
        "and those of folders not named removed. Progress goes to stderr.",
    )
    index.add_argument("folders", nargs="*", metavar="DIR", help="runbook folders")
    _output_options(index)
    search = kb_commands.add_parser(
        "search", help="look a query up in the index (the folders of SUPERBIZ_RUNBOOKS)"
    )
    search.add_argument("query", help='what to look for, e.g. "KubePodCrashLooping"')
    search.add_argument("--top-k", type=int, default=3, help="documents at most (1-10, default 3)")
    _output_options(search, "print the documents as JSON")


def kb_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kb index`` and ``kb search``."""
    from apps.cli.knowledge import KnowledgeUsageError, kb_index_command, kb_search_command

    try:
        if args.kb_command == "index":
            return kb_index_command(args.folders, args.db, out, err)
        return kb_search_command(args.query, args.top_k, args.db, args.json, out, err)
    except KnowledgeUsageError as exc:
        raise UsageError(str(exc)) from exc


_OPTIONS = (
    ("lang", "--lang", "language"),
    ("composer", "--composer", "composer_mode"),
    ("max_tool_calls", "--max-tool-calls", "max_tool_calls_per_round"),
)
"""Options of ``diagnose`` that set a run setting: attribute, option, setting."""


def _context(args: argparse.Namespace, **fixed: object) -> Context:
    """The run settings of the command: its options, checked by the rules of every entry."""
    overrides: dict[str, object] = dict(fixed)
    problems: list[str] = []
    if getattr(args, "offline", False):
        overrides["offline"] = True
    for attribute, option, name in _OPTIONS:
        value = getattr(args, attribute, None)
        if value is None:
            continue
        try:
            overrides[name] = parse_option(name, str(value), option)
        except SettingsError as exc:
            problems.extend(exc.problems)
    try:
        context = Context(**overrides)
    except SettingsError as exc:
        problems.extend(exc.problems)
    if problems:
        raise UsageError("; ".join(problems))
    return context


def _requested(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    """The run settings the command line sets explicitly (a resume must not change them)."""
    requested = {
        name: getattr(ctx, name)
        for attribute, _, name in _OPTIONS
        if getattr(args, attribute, None) is not None
    }
    if args.offline:
        requested["offline"] = True
    return requested


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


def _database_problem(exc: DatabaseError) -> Exception:
    """A database error as the command's error: unavailable (exit 3) or bad setting (exit 2)."""
    from persistence.database import DatabaseUnavailable

    if isinstance(exc, DatabaseUnavailable):
        return Unavailable(str(exc))
    return UsageError(str(exc))


def _open(args: argparse.Namespace, *, sweep: bool = True) -> Persistence:
    from apps.sweeper import sweep_quietly
    from persistence.database import DatabaseError
    from persistence.store import open_persistence

    try:
        persistence = open_persistence(args.db)
    except DatabaseError as exc:
        raise _database_problem(exc) from exc
    if sweep:  # diagnoses orphaned by a dead process are marked failed
        sweep_quietly(persistence)
    return persistence


def _open_records(args: argparse.Namespace) -> Records | None:
    """The database for reading only (never created nor changed); None when there is none."""
    from persistence.database import DatabaseError, NoDatabase
    from persistence.store import open_records

    try:
        return open_records(args.db)
    except NoDatabase:
        return None
    except DatabaseError as exc:
        raise _database_problem(exc) from exc


def _resume_command(args: argparse.Namespace, thread: str) -> str:
    """The command that finishes an interrupted diagnosis with the same options."""
    words = ["superbiz", "diagnose", "--resume", "--thread", thread]
    for option, value in (
        ("--db", args.db),
        ("--env", args.env),
        ("--lang", args.lang),
        ("--composer", args.composer),
        ("--max-tool-calls", args.max_tool_calls),
    ):
        if value is not None:
            words += [option, str(value)]
    if args.offline:
        words.append("--offline")
    return shlex.join(words)


NOT_SAVED_NOTE = (
    "failed: interrupted before the diagnosis saved its first checkpoint, so it cannot be "
    "resumed; ask the question again"
)


def _interrupted(
    app: Graph,
    thread: str,
    args: argparse.Namespace,
    persistence: Persistence,
    err: TextIO,
    *,
    note: bool,
) -> None:
    """Record how an interrupted run ended and say it in one line.

    Resumable (the thread's last checkpoint holds this diagnosis with work left): the resume
    command, the diagnosis left resumable. Otherwise the diagnosis, if it had started, is
    ``failed`` with the reason, never left ``running``. ``note``: the run's own guard did not
    record the interruption (the run was left behind in its thread).
    """
    from graph.guard import RunGuard
    from graph.runner import saved_run

    diagnosis_id = persistence.locks.current(thread)
    try:
        if diagnosis_id is None:  # the run's guard has let go of it: its record says
            running = [r for r in persistence.audit.list(thread) if r["status"] == "running"]
            diagnosis_id = str(running[-1]["id"]) if running else None
        saved = saved_run(app, thread)
        resumable = bool(saved.next) and saved.resumed_diagnosis_id() not in (None, "")
        if diagnosis_id is not None:
            resumable = resumable and saved.resumed_diagnosis_id() == diagnosis_id
    except Exception:  # the database went away with the interrupt: say it plainly
        resumable = False
    guard = RunGuard(persistence.locks, persistence.audit)
    try:
        if resumable and note:
            guard.left(thread, KeyboardInterrupt())
        elif not resumable and diagnosis_id is not None:
            guard.note(diagnosis_id, "failed", NOT_SAVED_NOTE)
        persistence.locks.release(thread)
    except Exception:  # the database went away: the sweep finds the diagnosis later
        pass
    if resumable:
        err.write(f"superbiz: interrupted; resume with: {_resume_command(args, thread)}\n")
    else:
        err.write(
            "superbiz: interrupted before the diagnosis saved its first checkpoint; it cannot "
            "be resumed: ask the question again\n"
        )
    err.flush()


def diagnose(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run (or resume) one diagnosis and print it."""
    from apps.resuming import backend_for, environment_ref
    from evidence.composed import configured_backend
    from evidence.config import ConfigError
    from evidence.environment import EnvironmentFileError, load_environment
    from graph.compile import compile_graph
    from graph.failures import DiagnosisFailed
    from graph.resume import ResumeRefused, plan_resume
    from graph.runner import NothingToResume, run_diagnosis, summary_of
    from persistence.database import DatabaseError

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
        environment = load_environment(args.env) if args.env else None
        backend = configured_backend(environment=environment, database=args.db)
        env_ref = environment_ref(args.env)
    except (EnvironmentFileError, ConfigError) as exc:
        raise UsageError(str(exc)) from exc
    if ctx.offline and ctx.composer_mode == "model":
        source = "--composer model" if args.composer else "SUPERBIZ_COMPOSER_MODE=model"
        err.write(
            f"superbiz: note: {source} is ignored in offline mode: the answer is the fixed "
            "template (set OPENAI_API_KEY, without --offline, for model-written text)\n"
        )
    persistence = _open(args)
    err.write(f"database: {persistence.db.target.display}\n")
    try:
        thread = args.thread or f"thread-{uuid.uuid4().hex[:12]}"
        app: Graph | None = None
        try:
            if args.resume:  # the settings and environment the diagnosis started with
                plan = plan_resume(persistence, thread, requested=_requested(args, ctx))
                if args.env and env_ref != plan.environment:
                    raise ResumeRefused(
                        f"diagnosis {plan.diagnosis_id} ran on {plan.environment}; a resume "
                        "continues it on the same evidence, so drop --env"
                    )
                ctx, env_ref = plan.context, plan.environment
                backend = backend_for(env_ref, database=args.db)
            app = compile_graph(persistence, backend, environment=env_ref)
            graph = app
            values = _interruptible(
                lambda: run_diagnosis(
                    graph,
                    thread_id=thread,
                    context=ctx,
                    audit=persistence.audit,
                    question=question,
                    resume=args.resume,
                    on_event=lambda event: _progress(event, err),
                )
            )
        except _CtrlC:
            # A node is still running (a tool or model call that does not return): the run
            # would wait for it. Its last checkpoint is saved; note it, give back its lease
            # and leave at once. The database releases the thread's lock with the process.
            if app is not None:
                _interrupted(app, thread, args, persistence, err, note=True)
            else:
                print("superbiz: interrupted", file=err, flush=True)
            out.flush()
            os._exit(130)
        except KeyboardInterrupt:
            if app is None:
                raise
            _interrupted(app, thread, args, persistence, err, note=False)
            return 130
        except DiagnosisFailed as exc:
            _print_failed(exc, thread, args, out)
            raise CommandFailed(
                f"diagnosis failed: {exc.reason}", _failure_code(exc.cause)
            ) from exc
        except DatabaseError as exc:
            raise _database_problem(exc) from exc
        except (NothingToResume, ResumeRefused) as exc:
            raise UsageError(str(exc)) from exc
    finally:
        persistence.close()
    result = summary_of(values, thread)
    if args.json:
        out.write(_json(result) + "\n")
    else:
        out.write(f"{terminal_safe(str(result['answer']))}\n\n")
        out.write(
            f"verdict: {result['verdict']}  score: {float(result['groundedness_score'] or 0):.2f}  "
            f"rounds: {result['rounds']}  diagnosis: {result['diagnosis_id']}  "
            f"thread: {terminal_safe(thread)}\n"
        )
    return 0


class _CtrlC(Exception):
    """Ctrl-C arrived while the diagnosis was running in its worker thread."""


def _interruptible(run: Callable[[], T]) -> T:
    """``run()`` in a worker thread, so that Ctrl-C is noticed at once by this thread."""
    result: list[T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(run())
        except BaseException as exc:  # handed to the caller's thread as it is
            failure.append(exc)

    worker = threading.Thread(target=work, name="superbiz-diagnosis", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        raise _CtrlC from None
    if failure:
        raise failure[0]
    return result[0]


def _failure_code(cause: BaseException) -> int:
    """Exit status of a failed run: 3 when its dependency is down, else 1."""
    from models.failures import ModelCallFailed
    from persistence.database import DatabaseUnavailable

    if isinstance(cause, DatabaseUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(cause, ModelCallFailed) and cause.unavailable:
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


def _print_failed(exc: DiagnosisFailed, thread: str, args: argparse.Namespace, out: TextIO) -> None:
    """The degraded answer of a diagnosis that could not finish."""
    if args.json:
        failed = {
            "diagnosis_id": exc.diagnosis_id,
            "thread_id": thread,
            "status": "failed",
            "error": exc.reason,
            "verdict": None,
            "answer": exc.answer,
        }
        out.write(_json(failed) + "\n")
    else:
        out.write(f"{terminal_safe(exc.answer)}\n\n")
        out.write(
            f"status: failed  diagnosis: {exc.diagnosis_id}  thread: {terminal_safe(thread)}\n"
        )
    out.flush()


def _json(data: object) -> str:
    """Indented JSON whose strings carry no raw control character (all of them escaped)."""
    text = json.dumps(data, ensure_ascii=False, indent=2)
    return "".join(
        f"\\u{ord(ch):04x}" if 0x7F <= ord(ch) <= 0x9F or 0x202A <= ord(ch) <= 0x202E else ch
        for ch in text
    )


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def sessions(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``sessions list``, ``show`` and ``export`` (read only: they never create a database)."""
    persistence = _open_records(args)
    if args.sessions_command == "export":
        from apps.eval.export import ExportError, export_command

        try:
            return export_command(
                persistence,
                args.diagnosis_id,
                args.scenario,
                scenario_id=args.id,
                out=out,
                err=err,
                force=args.force,
            )
        except ExportError as exc:
            raise UsageError(str(exc)) from exc
    if persistence is None:
        if args.sessions_command == "list":
            if args.json:
                out.write("[]\n")
            else:
                err.write("no diagnoses recorded (there is no database yet)\n")
            return 0
        raise UsageError(
            f"no diagnosis {args.diagnosis_id!r}: there is no database yet; "
            "see superbiz sessions list"
        )
    try:
        if args.sessions_command == "list":
            records = persistence.audit.list(args.thread)
            if args.verdict:
                records = [r for r in records if r["verdict"] == args.verdict]
            if args.json:
                out.write(_json(records) + "\n")
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
                # Controls shown as escapes (terminal_safe), not removed: a reader sees them.
                question = one_line(terminal_safe(str(r["question"])), 60)
                rows.append(
                    [
                        r["id"],
                        r["thread_id"],
                        r["status"],
                        r["verdict"] or "",
                        score,
                        str(r["rounds"]),
                        str(r["created_at"])[:19],
                        question,
                    ]
                )
            out.write(_table([[terminal_safe(cell) for cell in row] for row in rows]) + "\n")
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
        out.write(_json({**record, "invocations": invocations}) + "\n")
    else:
        out.write(terminal_safe(render_session(record, invocations)) + "\n")
    return 0


def render_session(record: DiagnosisRecord, invocations: list[Invocation]) -> str:
    """A readable view of one audit record."""
    from persistence.audit import StoredRecordError, verifier_evaluation_of

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
    channels = record["self_evaluation"] or {}
    failure = channels.get("failure")
    if isinstance(failure, dict):
        lines.append(f"failed     {failure.get('reason')}")
    usage = channels.get("usage")
    if isinstance(usage, dict):
        budgets = usage.get("budgets")
        limit = budgets.get("max_model_calls") if isinstance(budgets, dict) else None
        lines.append(
            f"model use  {usage.get('calls')} calls"
            + (f" (budget {limit})" if limit is not None else "")
            + f", tokens in {usage.get('input_tokens')} / out {usage.get('output_tokens')}"
            + (f"; stopped early: {usage['stopped']}" if usage.get("stopped") else "")
        )
    root = channels.get("root_cause")
    if isinstance(root, dict):
        ids = root.get("claim_ids")
        claims = ", ".join(str(c) for c in ids) if isinstance(ids, list) else ""
        lines.append(
            f"root cause {root.get('service')} (inferred, claims {claims}): {root.get('mechanism')}"
        )
    ranked = channels.get("suspects")
    suspects = ranked.get("suspects") if isinstance(ranked, dict) else None
    if isinstance(suspects, list) and suspects:
        lines.append("suspects")
        lines += [
            f"  {s.get('rank')}. {s.get('service')} score {s.get('score')}: {s.get('mechanism')}"
            for s in suspects
            if isinstance(s, dict)
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
        coverage = evaluation.get("question_coverage")
        if coverage is not None:
            lines += coverage_lines(coverage)
        conclusion = evaluation.get("conclusion")
        if conclusion is not None and conclusion["status"] != "not_required":
            lines += conclusion_lines(conclusion)
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


def coverage_lines(coverage: QuestionCoverage) -> list[str]:
    """How ``sessions show`` states the question coverage of a diagnosis."""
    source = "floor and verifier" if coverage["model"] is not None else "floor"
    lines = [
        f"coverage   {coverage['status']} ({source})  asked: {', '.join(coverage['asked']) or '-'}"
        f"  unanswered: {', '.join(coverage['unanswered']) or 'none'}"
    ]
    lines += [f"  - not run (tool budget): {call}" for call in coverage["not_run"]]
    lines += [f"  - failed: {call}" for call in coverage.get("failed", [])]
    return lines


def conclusion_lines(conclusion: ConclusionCheck) -> list[str]:
    """How ``sessions show`` states the conclusion check of a diagnosis."""
    rests_on = ", ".join(conclusion["rests_on"]) or "-"
    line = (
        f"conclusion {conclusion['status']} ({conclusion['kind']})"
        f"  stated: {conclusion['stated'] or '-'}  expected: {conclusion['expected'] or '-'}"
        f"  rests on: {rests_on}"
    )
    lines = [line]
    if conclusion["text"]:
        lines.append(f"  - says: {one_line(conclusion['text'], 200)}")
    if conclusion["reason"]:
        lines.append(f"  - why: {conclusion['reason']}")
    return lines


def reverify_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``reverify DIAGNOSIS_ID``."""
    from graph.reverify import NotReverifiable, reverify
    from models.factory import make_model_factory

    ctx = _context(args)
    persistence = _open_records(args)
    if persistence is None:
        raise UsageError(
            f"no diagnosis {args.diagnosis_id!r}: there is no database yet; "
            "see superbiz sessions list"
        )
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
        out.write(_json(report) + "\n")
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
    from persistence.database import DatabaseError, migrate, open_database
    from persistence.migrations import migration_names

    if args.db_command == "prune":
        try:
            return prune_command(args, out)
        except PruneUsageError as exc:
            raise UsageError(str(exc)) from exc
    try:
        db = open_database(args.db, migrate=False)
    except DatabaseError as exc:
        raise _database_problem(exc) from exc
    try:
        before, after = migrate(db)
        target = db.target
    except DatabaseError as exc:
        raise _database_problem(exc) from exc
    finally:
        db.close()
    applied = [name for number, name in migration_names() if before < number <= after]
    if applied:
        out.write(
            f"{target.display}: schema version {after} (from {before}); applied "
            + ", ".join(applied)
            + "\n"
        )
    else:
        out.write(f"{target.display}: schema version {after} (up to date, nothing applied)\n")
    return 0


def serve_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``serve``: check the configuration and the database, then run uvicorn."""
    from apps.auth import ApiKeys, ConfigError, Limits, is_loopback
    from evidence.config import ConfigError as BackendConfigError
    from evidence.config import load_settings
    from persistence.database import resolve_target

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
    problems = check_environment()
    if problems:
        raise UsageError("; ".join(problems))
    try:  # every route would answer 500 with a backend configuration that cannot be used
        load_settings()
    except BackendConfigError as exc:
        raise UsageError(str(exc)) from exc
    _check_port_free(args.host, args.port)
    # Migrate and set up checkpoints once, before the workers start.
    _open(args, sweep=False).close()  # the workers sweep, resuming what they can
    if args.db:
        configuration.hand_down(catalog.DATABASE_URL, args.db)  # the workers read it there
    if keys.open:
        err.write(
            f"superbiz: no API keys configured (SUPERBIZ_API_KEYS, SUPERBIZ_API_KEYS_FILE): "
            f"access is open to anyone who can reach {args.host}:{args.port}, as identity "
            "'anonymous'\n"
        )
    else:
        err.write(f"superbiz: {len(keys)} API key(s) configured\n")
    err.write(f"superbiz: serving the API on http://{args.host}:{args.port} ({target.display})\n")
    err.write(f"superbiz: the web page: {_page_address(args.host, args.port)}\n")
    err.flush()
    import uvicorn

    uvicorn.run(
        "apps.http.api:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level="info",
    )
    return 0


def _page_address(host: str, port: int) -> str:
    """The web page's address for a browser on this machine (a wildcard bind is its loopback)."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def mcp_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``mcp``: check the key and the database, then serve MCP over stdio."""
    from apps.auth import ApiKeys, ConfigError, Limits
    from apps.http.service import Service
    from apps.mcp.server import run_stdio

    try:
        keys = ApiKeys.from_env()
        Limits.from_env()
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    key = configuration.value(catalog.MCP_API_KEY)
    if not keys.open:
        if key is None:
            raise UsageError(
                f"API keys are configured: set {catalog.MCP_API_KEY.variable} to the key this "
                "MCP server acts for"
            )
        if keys.identity_of(key) is None:
            raise UsageError(f"{catalog.MCP_API_KEY.variable} is not one of the API keys")
    problems = check_environment()
    if problems:
        raise UsageError("; ".join(problems))
    _open(args, sweep=False).close()  # migrate before the first call; a bad database fails here
    err.write("superbiz: serving MCP on stdin/stdout\n")
    err.flush()
    run_stdio(Service(args.db, None, None, None, None), key)
    return 0


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port another program already listens on (before saying we serve on it).

    Raises:
        UsageError: when the address is in use or cannot be bound.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UsageError(f"cannot bind to {host}: {exc}") from exc
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {port} on {host} is already in use by another program; stop it or "
                    "choose another with --port N"
                ) from exc
            raise UsageError(f"cannot bind to {host}:{port}: {exc.strerror or exc}") from exc


ACTIONS = {
    "diagnose": "diagnosis",
    "sessions": "reading the audit log",
    "reverify": "re-verification",
    "eval": "evaluation",
    "db": "database upgrade",
    "serve": "serving the API",
    "mcp": "serving MCP",
}
"""What each command does, for the one-line message of an unexpected failure."""


def _say(message: str) -> None:
    print(f"superbiz: error: {terminal_safe(message)}", file=sys.stderr)


def _debug(exc: BaseException) -> None:
    if configuration.value(catalog.DEBUG):
        traceback.print_exception(exc, file=sys.stderr)


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
            from apps.eval.evaluation import eval_command

            return eval_command(args.paths, args.json, sys.stdout, sys.stderr)
        if args.command == "serve":
            return serve_command(args, sys.stdout, sys.stderr)
        if args.command == "mcp":
            return mcp_command(args, sys.stdout, sys.stderr)
        if args.command == "doctor":
            from apps.cli.doctor import doctor_command

            return doctor_command(args.json, sys.stdout, sys.stderr, database=args.db)
        if args.command == "kb":
            return kb_command(args, sys.stdout, sys.stderr)
        if args.command == "config":
            from apps.cli.doctor import config_show_command

            return config_show_command(sys.stdout, sys.stderr)
    except UsageError as exc:
        _debug(exc)
        _say(str(exc))
        return EXIT_USAGE
    except Unavailable as exc:
        _debug(exc)
        _say(str(exc))
        return EXIT_UNAVAILABLE
    except CommandFailed as exc:
        _debug(exc)
        _say(str(exc))
        return exc.code
    except KeyboardInterrupt:
        print("superbiz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`superbiz sessions list | head`): nothing to say.
        # Standard output is pointed at /dev/null so the interpreter's last flush is quiet too.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (captured output)
            pass
        return EXIT_FAILED
    except Exception as exc:
        # An unexpected failure (a backend, a bug): one line, the traceback only when asked.
        _debug(exc)
        action = ACTIONS.get(str(args.command), "the command")
        _say(f"{action} failed: {error_line(exc)}")
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
