"""The ``superbiz`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from graph.builder import build_graph
from state.context import Context
from tools.sample import EnvironmentFileError, SampleBackend, default_environment, load_environment


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
    diagnose.add_argument("question", help='the question, e.g. "order-service 为什么报 500？"')
    diagnose.add_argument("--thread", metavar="ID", help="conversation thread id (default: new)")
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
    return parser


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


def diagnose(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one diagnosis and print it."""
    question = (args.question or "").strip()
    if not question:
        raise UsageError(
            'the question is empty; ask e.g. superbiz diagnose "is order-service failing?"'
        )
    ctx = _context(args)
    try:
        environment = load_environment(args.env) if args.env else default_environment()
    except EnvironmentFileError as exc:
        raise UsageError(str(exc)) from exc
    graph = build_graph(backend=SampleBackend(environment)).compile(checkpointer=InMemorySaver())
    thread = args.thread or f"thread-{uuid.uuid4().hex[:12]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    for chunk in graph.stream(
        {"messages": [HumanMessage(question)]}, config, context=ctx, stream_mode="custom"
    ):
        if isinstance(chunk, dict):
            _progress(chunk, err)
    state = graph.get_state(config).values
    gate = state.get("gatekeeper_result") or {}
    result: dict[str, Any] = {
        "diagnosis_id": state.get("diagnosis_id"),
        "thread_id": thread,
        "verdict": state.get("verdict"),
        "model_verdict": (state.get("verifier_result") or {}).get("model_verdict"),
        "groundedness_score": state.get("groundedness_score"),
        "rounds": state.get("round"),
        "offline": ctx.offline,
        "answer": state.get("answer"),
        "gatekeeper": {
            "status": gate.get("status"),
            "severity": gate.get("severity"),
            "failed_rules": gate.get("failed_rules", []),
        },
    }
    if args.json:
        out.write(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    else:
        out.write(f"{result['answer']}\n\n")
        out.write(
            f"verdict: {result['verdict']}  score: {float(result['groundedness_score'] or 0):.2f}  "
            f"rounds: {result['rounds']}  diagnosis: {result['diagnosis_id']}  thread: {thread}\n"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``superbiz`` command."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "diagnose":
            return diagnose(args, sys.stdout, sys.stderr)
    except UsageError as exc:
        print(f"superbiz: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("superbiz: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
