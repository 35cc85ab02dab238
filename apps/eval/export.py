"""Export a recorded diagnosis as a replayable scenario (docs/contracts.md §9, "Replays").

``export_scenario`` reads one finished diagnosis's audit record and its invocations and writes
the scenario that replays it: the question and language, a replay environment of every recorded
tool call (``evidence.replay``), the recorded model replies as the script (or ``"offline": true``
when the diagnosis ran the offline rules, or its replies were not recorded), the round's tool
budget, and an ``expect`` block filled from the recorded outcome: verdict, model verdict, rounds,
route, Gatekeeper status, severity and failed rules, score, confirmed claims, question coverage
and the answer. The user then edits ``expect`` to what the diagnosis should have given.

``notes`` say what the scenario cannot reproduce (replies not recorded, texts cut at the
record's bound or with a secret taken out, a run stopped by a budget); they are also in the
scenario's ``description``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from pydantic import TypeAdapter

from apps.eval.scenario import ExecutorStep, Expect, Reply, Scenario, ScriptRound, validate_scenario
from evidence.replay import ReplayCall
from persistence.audit import StoredRecordError, stored_channel, verifier_evaluation_of
from persistence.store import Records
from state.records import DiagnosisRecord, Invocation, ModelCallRecord, ReplayRecord

_REPLAY: TypeAdapter[ReplayRecord] = TypeAdapter(ReplayRecord)

OFF_NOTE = (
    "model replies were not recorded (SUPERBIZ_RECORD_MODEL_REPLIES was off), so the scenario "
    "runs the offline rules as planner, executor and verifier over the recorded tool results; "
    "its outcome can differ from the recorded one, and a call the offline rules make that the "
    "recording lacks is an error invocation"
)


class ExportError(ValueError):
    """A diagnosis cannot be exported; the one-line message says why and what to do."""


@dataclass
class Export:
    """An exported scenario and what it cannot reproduce."""

    scenario: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The scenario file's text (indented JSON, a newline last)."""
        return json.dumps(self.scenario, ensure_ascii=False, indent=2) + "\n"


def _replay_channel(record: DiagnosisRecord) -> ReplayRecord | None:
    return stored_channel(record, "replay", _REPLAY, "replay record", ExportError)


def replay_calls(invocations: list[Invocation]) -> list[ReplayCall]:
    """Every recorded invocation as a call of the replay environment, in call order."""
    return [
        ReplayCall(
            tool=row["tool_name"],
            arguments=dict(row["arguments"]),
            status=row["status"],
            output=cast(dict[str, Any], row["output"]) if row["output"] is not None else None,
            error=row["error"] if row["status"] == "error" else None,
        )
        for row in invocations
    ]


def _step(call: ModelCallRecord) -> ExecutorStep:
    step = ExecutorStep()
    calls = call["tool_calls"] or []
    if calls:
        step["tool_calls"] = [
            {"name": c["name"], "args": dict(c["args"]), "id": c["id"]} for c in calls
        ]
        if call["content"]:
            step["content"] = call["content"]
    else:
        step["content"] = call["content"] or ""
    return step


def script_of(calls: list[ModelCallRecord]) -> tuple[dict[str, Any] | None, str | None]:
    """The scenario script replaying ``calls``, or None and why the calls do not make one."""
    rounds: dict[int, dict[str, list[ModelCallRecord]]] = {}
    composer: list[ModelCallRecord] = []
    for call in calls:
        if call["content"] is None:
            return None, "a model reply was not recorded"
        if call["role"] == "composer":
            composer.append(call)
            continue
        if call.get("superseded"):
            continue  # asked again in the same node visit: the script replays the reply used
        if call["role"] not in ("planner", "executor", "verifier"):
            return None, f"a model call of unknown role {call['role']!r} was recorded"
        rounds.setdefault(call["round"], {}).setdefault(call["role"], []).append(call)
    script_rounds: list[ScriptRound] = []
    for number in sorted(rounds):
        roles = rounds[number]
        missing = [r for r in ("planner", "executor", "verifier") if not roles.get(r)]
        if missing or len(roles["planner"]) != 1:
            return None, (
                f"round {number} has no {', '.join(missing)} reply (a budget ended it early)"
                if missing
                else f"round {number} has {len(roles['planner'])} planner replies"
            )
        replies: list[Reply] = [str(call["content"]) for call in roles["verifier"]]
        script_rounds.append(
            ScriptRound(
                planner=str(roles["planner"][0]["content"]),
                executor=[_step(call) for call in roles["executor"]],
                verifier=replies,
            )
        )
    if not script_rounds:
        return None, "no model call was recorded"
    if len(composer) > 1:
        return None, f"{len(composer)} composer replies were recorded"
    script: dict[str, Any] = {"rounds": script_rounds}
    if composer:
        script["composer"] = str(composer[0]["content"])
    return script, None


def _expect(record: DiagnosisRecord, replay: ReplayRecord | None) -> Expect:
    try:
        evaluation = verifier_evaluation_of(record)
    except StoredRecordError as exc:
        raise ExportError(str(exc)) from None
    if evaluation is None:
        raise ExportError(f"diagnosis {record['id']} has no verifier evaluation to export")
    gatekeeper = evaluation["gatekeeper_result"]
    expect = Expect(
        verdict=evaluation["verdict"],
        model_verdict=evaluation["model_verdict"],
        rounds=int(record["rounds"]),
    )
    if replay is not None:
        expect["route"] = list(replay["route"])
    expect["gatekeeper_status"] = gatekeeper["status"]
    expect["gatekeeper_severity"] = gatekeeper["severity"]
    expect["gatekeeper_failed_rules"] = list(gatekeeper["failed_rules"])
    expect["groundedness_score"] = float(evaluation["groundedness_score"])
    if replay is not None:
        expect["confirmed_claims"] = list(replay["confirmed_claims"])
    coverage = evaluation.get("question_coverage")
    if coverage is not None:
        expect["question_coverage"] = {
            "status": coverage["status"],
            "asked": list(coverage["asked"]),
            "unanswered": list(coverage["unanswered"]),
        }
    if record["final_answer"]:
        expect["answer_contains"] = [record["final_answer"]]
    return expect


def default_scenario_id(diagnosis_id: str) -> str:
    """The id an exported scenario gets unless another is given."""
    return "replay-" + re.sub(r"^diag-", "", diagnosis_id)


def export_scenario(
    record: DiagnosisRecord, invocations: list[Invocation], *, scenario_id: str | None = None
) -> Export:
    """The scenario replaying a finished diagnosis (see the module docstring).

    Args:
        record: The diagnosis's audit record.
        invocations: Its recorded tool invocations, in call order.
        scenario_id: The scenario's id (default ``replay-<diagnosis id without diag->``).

    Raises:
        ExportError: The diagnosis did not finish, or its record cannot be read.
    """
    if record["status"] != "done":
        raise ExportError(
            f"diagnosis {record['id']} is {record['status']}: only a finished diagnosis can be "
            "exported (resume it first, or export another; see superbiz sessions list)"
        )
    settings: dict[str, Any] = dict(record["run_settings"] or {})
    context: dict[str, Any] = dict(settings.get("context") or {})
    replay = _replay_channel(record)
    notes: list[str] = []
    offline = bool(context.get("offline"))
    script: dict[str, Any] | None = None
    if replay is None:
        notes.append(
            "the diagnosis was recorded before replays were recorded: the services its backend "
            "knew, its route and its confirmed claims are unknown"
            + ("" if offline else ", and its model replies are missing")
        )
    elif replay["model_replies"] == "off" and not offline:
        notes.append(OFF_NOTE)
    elif not offline:
        if replay["calls_dropped"]:
            notes.append(
                f"{replay['calls_dropped']} model calls past the record's bound were not kept"
            )
        script, why = script_of(replay["model_calls"])
        if script is None:
            notes.append(
                f"the model replies cannot be replayed ({why}); the offline rules stand in"
            )
        cut = [c for c in replay["model_calls"] if c["truncated"]]
        hidden = [c for c in replay["model_calls"] if c["redacted"]]
        if cut:
            notes.append(
                f"{len(cut)} model replies were cut at the record's bound; the replay may differ"
            )
        if hidden:
            notes.append(
                f"a secret was taken out of {len(hidden)} model replies; the replay may differ"
            )
    usage: Any = (record["self_evaluation"] or {}).get("usage")
    stopped = usage.get("stopped") if isinstance(usage, dict) else None
    if stopped:
        notes.append(f"the recorded run stopped early ({stopped}); a replay runs with its budgets")
    language = context.get("language") if context.get("language") in ("zh", "en") else "zh"
    scenario: dict[str, Any] = {
        "id": scenario_id or default_scenario_id(record["id"]),
        "description": " ".join(
            [
                f"Exported from diagnosis {record['id']} (thread {record['thread_id']}, "
                f"{record['created_at']}); edit expect to what it should have given.",
                *(f"Note: {note}." for note in notes),
            ]
        ),
        "question": record["question"],
        "language": language,
        "environment": {
            "replay": {
                "services": list(replay["known_services"]) if replay else [],
                "calls": replay_calls(invocations),
            }
        },
    }
    if script is not None:
        scenario["script"] = script
    else:
        scenario["offline"] = True
    budget = context.get("max_tool_calls_per_round")
    if isinstance(budget, int) and budget >= 1:
        scenario["max_tool_calls"] = budget
    scenario["expect"] = _expect(record, replay)
    checked: Scenario = validate_scenario(scenario, origin=f"export of {record['id']}")
    del checked  # the file is written as built; checking it catches a record it cannot hold
    return Export(scenario=scenario, notes=notes)


def write_scenario(export: Export, path: str | Path) -> Path:
    """Write the scenario file whole, or not at all (a temporary file renamed into place).

    Raises:
        ExportError: The file cannot be written; the message names it and the reason.
    """
    target = Path(path)
    if target.is_dir():
        raise ExportError(
            f"{target} is a folder; give the scenario file's path, e.g. {target}/x.json"
        )
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(export.text(), encoding="utf-8")
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def export_command(
    records: Records | None,
    diagnosis_id: str,
    path: str,
    *,
    scenario_id: str | None,
    out: TextIO,
    err: TextIO,
    force: bool = False,
) -> int:
    """``superbiz sessions export DIAGNOSIS_ID --scenario FILE [--id ID] [--force]``.

    An existing file is overwritten only with ``force``.

    Prints what it wrote to stdout and each note to stderr.

    Returns:
        0 when the file was written.

    Raises:
        ExportError: No such diagnosis, it cannot be exported, or the file cannot be written.
    """
    if not force and Path(path).expanduser().exists():
        if records is not None:
            records.close()
        raise ExportError(f"{path} exists; pass --force to overwrite it")
    if records is None:
        raise ExportError(
            f"no diagnosis {diagnosis_id!r}: there is no database yet; see superbiz sessions list"
        )
    try:
        record = records.audit.get(diagnosis_id)
        if record is None:
            raise ExportError(
                f"no diagnosis {diagnosis_id!r} in {records.db.target.display}; "
                "see superbiz sessions list"
            )
        invocations = records.ledger.list(diagnosis_id)
    finally:
        records.close()
    export = export_scenario(record, invocations, scenario_id=scenario_id)
    target = write_scenario(export, path)
    for note in export.notes:
        err.write(f"note: {note}\n")
    played = "offline rules" if export.scenario.get("offline") else "recorded model replies"
    out.write(
        f"wrote scenario {export.scenario['id']} to {target}: {len(invocations)} recorded tool "
        f"calls, {played}; edit its expect block, then run: superbiz eval {target}\n"
    )
    return 0
