"""Executor: a tool-calling loop bounded by the per-round tool budget.

The checkpointed conversation keeps each tool result as a small reference (its invocation id);
before every model turn the references are expanded from the invocation ledger into what the
model must read and cite (ids, raw paths, ref texts). The ref texts are thus stored once, in the
ledger, instead of in every checkpoint. What a chat model reads per turn is bounded
(``nodes.executor_context``): results it has seen are compacted to their id, raw paths and
summary line. A rule-based stand-in (offline) has no context window and reads every result.
"""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.runtime import Runtime

from models.budget import GetModel, Spend
from models.messages import content_chars, message_text, readable_calls
from models.structured import accepts_schema, from_endpoint, with_schema
from models.text_tool_calls import planned_call, read_text_calls
from nodes.common import Node, context_of, emit
from nodes.executor_context import bounded_history, expand_tool_messages
from nodes.prompts import load_prompt
from persistence.ledger import InvocationLedger
from state.catalog import local_profile
from state.context import Context
from state.graph_state import DiagnosisState
from state.records import CallNotRun, JSONObject
from tools.registry import tool_specs
from verification.executor_output import parse_executor_output
from verification.output_schemas import (
    citable_refs,
    executor_schema_for,
    ref_menu,
    written_out,
)
from verification.relevance import by_relevance


def readable_tool_calls(reply: AIMessage) -> AIMessage:
    """The executor's reply with each malformed tool call made into one the tools node answers.

    langchain keeps a call whose arguments are not valid JSON apart (``invalid_tool_calls``);
    dropped, it would end the round. Instead the tools node answers it with a readable error
    (``models.messages.readable_calls``), which also replaces lone surrogates and NUL characters
    in the calls' arguments.
    """
    calls = readable_calls(reply)
    if not reply.invalid_tool_calls and calls == reply.tool_calls:
        return reply
    return AIMessage(content=reply.content, tool_calls=calls, id=reply.id)


def make_executor(
    get_model: GetModel,
    ledger: InvocationLedger,
    offered: Callable[[], list[JSONObject]] = tool_specs,
) -> Node:
    """Build the executor node: one model turn per visit; tools run in the ``tools`` node.

    ``offered`` lists the tools offered (default every registered tool; the graph offers those
    the evidence backend serves, ``tools.registry.offered``).

    While the round's tool budget lasts the model is offered the tools. Once it is spent the
    model is called without tools, after the ``executor_budget`` prompt: that call must answer.
    Tool calls it still asks for are dropped from the reply and listed in ``calls_not_run``.
    """
    prompt = load_prompt("executor")
    budget_spent = load_prompt("executor_budget")
    no_call_prompt = load_prompt("executor_no_call")
    final_repair = load_prompt("executor_final_repair")
    next_call_prompt = load_prompt("executor_next_call")
    answer_prompt = load_prompt("executor_answer")

    def executor(state: DiagnosisState, *, runtime: Runtime[Context]) -> DiagnosisState:
        ctx = context_of(runtime)
        used = state.get("tool_calls_used", 0)
        emit("executor", round=state.get("round", 1), tool_calls_used=used)
        spend = Spend(state, ctx)
        stopped = spend.stop()
        if stopped is not None:
            # A spent model budget ends the round with what was gathered: no final answer.
            return {
                "executor_messages": [AIMessage(content="")],
                "budget_note": stopped,
                "route": ["executor"],
            }
        model = get_model("executor", ctx)
        messages = state.get("executor_messages", [])
        # Tool calls a model wrote in its text are read as calls, with ids stable on a re-run.
        prefix = f"text-r{state.get('round', 1)}-m{len(messages)}"

        def read(reply: AIMessage) -> AIMessage:
            return read_text_calls(reply, prefix)

        def read2(reply: AIMessage) -> AIMessage:
            return read_text_calls(reply, prefix + "b")

        endpoint = from_endpoint(model)
        has_results = any(isinstance(m, ToolMessage) for m in messages)
        # Under the local profile a small model is guided: it answers only once the plan's
        # steps had their calls, and its answer can cite only what the ledger recorded.
        guided = endpoint and local_profile()
        steps = plan_steps(state.get("plan", ""))
        wanted = min(len(steps), ctx.max_tool_calls_per_round)
        spent = used >= ctx.max_tool_calls_per_round
        rows = ledger.list(state["diagnosis_id"]) if has_results else []
        # A step counts as done when a call of this round produced evidence or found nothing;
        # a call the tool refused (bad arguments) leaves its step to do.
        done = sum(
            1 for row in rows if row["round"] == state.get("round", 1) and row["status"] != "error"
        )
        answer_now = spent or (guided and has_results and done >= wanted)
        # The refs most relevant to the question come first: a small model takes the first ones.
        cited = by_relevance(
            citable_refs(rows), rows, state.get("question", ""), state.get("known_services", [])
        )
        # A guided model chooses its claims by key: the request lists what each key says.
        answer_text = answer_prompt.text.replace("{refs}", ref_menu(cited))
        nudge = HumanMessage(budget_spent.text if spent else answer_text)
        if has_results:
            if getattr(model, "offline", False):
                messages = expand_tool_messages(messages, rows)
            else:
                fixed = content_chars(
                    [SystemMessage(prompt.text), *([nudge] if answer_now else [])]
                )
                messages = bounded_history(
                    messages, rows, limit_chars=ctx.executor_context_chars, fixed_chars=fixed
                )
        # The final answer's schema lists the refs really recorded for this diagnosis. A guided
        # model is offered the tools with it (the schema still decides what it writes).
        tools = offered()
        final = with_schema(
            model,
            "executor_evidence_v2",
            executor_schema_for(cited, guided=guided),
            tools=tools if guided else None,
        )

        def answered(reply: AIMessage) -> AIMessage:
            # A guided answer names the refs it chooses; each is written out as its claim here.
            if not guided:
                return reply
            return AIMessage(
                content=written_out(message_text(reply), cited),
                tool_calls=reply.tool_calls,
                id=reply.id,
            )

        history = [SystemMessage(prompt.text), *messages]
        if answer_now:
            # The model must answer (a guided one is offered the tools, but its schema leaves no
            # room for a call). The budget is a hard bound: calls asked for all the same are
            # dropped, not run, and listed so the answer can say so.
            reply = answered(readable_tool_calls(spend.invoke(final, [*history, nudge], read=read)))
            dropped = [
                CallNotRun(
                    tool_name=call["name"],
                    arguments=dict(call.get("args") or {}),
                    reason="dropped_after_budget",
                )
                for call in reply.tool_calls
            ]
            if dropped and spent:
                reply = AIMessage(content=reply.content, id=reply.id)
            return {
                "executor_messages": [nudge, reply],
                **({"calls_not_run": dropped} if dropped and spent else {}),
                "usage": spend.added,
                "model_calls": spend.calls,
                "route": ["executor"],
            }
        # The registered tools, read per turn: a tool registered at run time is offered too.
        with_tools = model.bind_tools(tools)
        if guided:
            # A guided model is told what this turn is for before it writes anything: the call
            # of the plan's next step. If it answers instead (after some
            # evidence), that answer is asked for under the diagnosis's schema, without its
            # unconstrained answer in the request.
            ask = HumanMessage(
                next_call_prompt.text.replace("{steps}", str(len(steps)))
                .replace("{done}", str(done))
                .replace("{next_step}", steps[min(done, len(steps) - 1)])
                if steps
                else no_call_prompt.text
            )
            reply = readable_tool_calls(spend.invoke(with_tools, [*history, ask], read=read))
            planned = (
                planned_call(reply, steps[done], f"plan-r{state.get('round', 1)}-m{len(messages)}")
                if steps and done < len(steps) and not reply.tool_calls
                else None
            )
            if planned is not None:
                # The model made no call for a step its plan writes out as one (a 1.5B model
                # often replies blank here): the step runs as written, marked ``plan``.
                emit(
                    "plan_step_run", round=state.get("round", 1), tool=planned.tool_calls[0]["name"]
                )
                reply = planned
            guided_added: list[AnyMessage] = [ask, reply]
            if has_results and not reply.tool_calls and spend.stop() is None:
                answer = HumanMessage(answer_text)
                spend.supersede_last()
                again = answered(spend.invoke(final, [*history, answer]))
                guided_added += [answer, AIMessage(content=again.content, id=again.id)]
            return {
                "executor_messages": guided_added,
                "usage": spend.added,
                "model_calls": spend.calls,
                "route": ["executor"],
            }
        reply = readable_tool_calls(spend.invoke(with_tools, history, read=read))
        added: list[AnyMessage] = [reply]
        # Only a model behind an endpoint is asked again: scripted replies are replayed as they
        # were recorded, and the offline rules always call tools.
        called = reply.tool_calls or has_results
        if endpoint and not called and spend.stop() is None:
            # An answer before any tool result cites nothing: the model is asked once to call a
            # tool (a model that only writes calls as text is told how).
            no_call = HumanMessage(no_call_prompt.text)
            spend.supersede_last()
            retried = readable_tool_calls(
                spend.invoke(with_tools, [*history, reply, no_call], read=read2)
            )
            added += [no_call, retried]
            reply = retried
        if endpoint and not reply.tool_calls and spend.stop() is None:
            status, _ = parse_executor_output(message_text(reply))
            if status["status"] == "malformed" and accepts_schema(model):
                # An unreadable final answer is asked for once more, shaped by its schema.
                repair = HumanMessage(final_repair.text.replace("{error}", str(status["error"])))
                spend.supersede_last()
                again = spend.invoke(final, [*history, *added, repair])
                added += [repair, AIMessage(content=again.content, id=again.id)]
        return {
            "executor_messages": added,
            "usage": spend.added,
            "model_calls": spend.calls,
            "route": ["executor"],
        }

    return executor


def plan_steps(plan: str) -> list[str]:
    """The plan's steps, one per non-empty line (as ``nodes.planner.bounded_plan`` writes it)."""
    return [line.strip() for line in plan.splitlines() if line.strip()]
