"""The typed records of one diagnosis, in the order the data flows (see docs/contracts.md).

tool call -> ``Invocation`` (with its ``EvidenceRef`` list) -> ``TraceItem`` -> ``ExecutorAnswer``
(its ``Claim`` and ``Binding`` records) -> ``GatekeeperResult`` (``Finding``, ``VerifiedExcerpt``)
-> ``VerifierReply`` -> ``VerifierResult`` (``ClaimCheck``, ``FactCheck``) -> ``Material`` ->
the answer -> ``DiagnosisRecord``.

Everything here is plain data (``TypedDict``, ``Literal``), so it can sit in a checkpoint and in a
JSON column as it is. Untrusted input (the executor's and the Verifier's replies, scenario and
environment files, database rows, request bodies) is validated into these records once, where it
enters; code inside trusts them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, NotRequired, TypeAlias, get_args

from typing_extensions import TypedDict

# --------------------------------------------------------------------------- JSON

JSONScalar: TypeAlias = str | int | float | bool | None
if TYPE_CHECKING:
    JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
    """Any value a JSON document can hold."""
else:  # the same type, in a form pydantic can validate (records are checked at the edges)
    from pydantic import JsonValue as JSONValue
JSONObject: TypeAlias = dict[str, JSONValue]
"""A JSON object, e.g. the executor's raw final answer or a tool call's arguments."""

# --------------------------------------------------------------------------- closed sets

InvocationStatus = Literal["ok", "no_hit", "error"]
ToolCallSource = Literal["native", "text", "plan"]
"""Where a reply's tool calls came from: the endpoint's tool calls, its message text, or (local
profile) the plan step run as written when the model made no call."""
EvidenceLevel = Literal["direct", "none"]

ParseStatusName = Literal["valid", "missing", "malformed"]
ClaimType = Literal["observation", "negative_observation", "correlation", "causal", "state"]
SupportLevel = Literal["direct", "indirect"]
CLAIM_TYPES: Final[tuple[ClaimType, ...]] = get_args(ClaimType)
SUPPORT_LEVELS: Final[tuple[SupportLevel, ...]] = get_args(SupportLevel)
ANSWER_VERSION: Final = "executor_evidence_v2"
FORBIDDEN_KEYS: Final[tuple[str, ...]] = ("diagnosis_summary", "user_facing_answer")

RuleId = Literal[
    "schema.executor_v2",
    "evidence.invocation_ref",
    "evidence.raw_path_missing",
    "evidence.refs_missing",
    "evidence.raw_path",
    "evidence.excerpt_mismatch",
    "evidence.unbound_specifics",
    "evidence.fabricated",
    "gatekeeper.internal_error",
]
GatekeeperStatus = Literal["pass", "warn", "fail"]
Severity = Literal["none", "low_confid", "reject"]
SEVERITIES: Final[tuple[Severity, ...]] = get_args(Severity)

Verdict = Literal["PASS", "LOW_CONFID", "REJECT"]
VERDICTS: Final[tuple[Verdict, ...]] = get_args(Verdict)
ClaimLabel = Literal[
    "direct_observation",
    "reasonable_inference",
    "overstated",
    "unsupported",
    "external_unknown",
    "contradicted",
]
CLAIM_LABELS: Final[tuple[ClaimLabel, ...]] = get_args(ClaimLabel)
CONFIRMED_LABELS: Final[tuple[ClaimLabel, ...]] = ("direct_observation", "reasonable_inference")
"""Labels under which a claim may be presented as established."""
FactLabel = Literal["direct_evidence", "indirect_support", "no_evidence", "contradicted"]
"""The legacy ``facts_checked`` labels, derived from the claim labels."""
VerifierMode = Literal["model", "fallback", "offline"]

ComposerSection = Literal["pass", "uncertain", "degraded"]
ComposerOutputMode = Literal["model", "template", "fallback"]
DirectionKind = Literal["hypothesis", "overstated"]
GapKind = Literal[
    "unsupported",
    "external_unknown",
    "missing_info",
    "not_checked",
    "unanswered",
    "not_run",
    "failed",
    "conclusion_gap",
    "model",
]

DiagnosisStatus = Literal["running", "done", "failed", "abandoned"]
MAX_ROUNDS: Final = 2
"""A diagnosis has at most two rounds: the first, and one extra on thin evidence."""

# --------------------------------------------------------------------------- task


class Task(TypedDict):
    """What the planner, then the executor, work from (sent to their models as JSON)."""

    question: str
    round: int
    language: str
    known_services: list[str]
    retry_context: NotRequired[RetryContext]
    plan: NotRequired[str]
    draft_plan: NotRequired[str]


NotRunReason = Literal["budget_skipped", "dropped_after_budget"]
"""Why a tool call the executor asked for did not run: the ``tools`` node skipped it because the
round's tool budget was spent (``budget_skipped``), or the executor asked for it in the turn it
was told to answer, and it was dropped (``dropped_after_budget``)."""


class CallNotRun(TypedDict):
    """A tool call the executor asked for that did not run, and why."""

    tool_name: str
    arguments: JSONObject
    reason: NotRunReason


# --------------------------------------------------------------------------- tools


class LogEntry(TypedDict, total=False):
    """One log line (``instance`` is optional everywhere)."""

    timestamp: str
    level: str
    service: str
    instance: str
    message: str


class AlertEntry(TypedDict, total=False):
    """One alert; ``state`` is e.g. firing, pending or resolved."""

    alert_name: str
    service: str
    severity: str
    state: str
    value: JSONScalar
    threshold: JSONScalar
    summary: str
    active_at: str
    runbook_url: str


class SeriesEntry(TypedDict, total=False):
    """One metric series, summarised over the window."""

    metric: str
    labels: dict[str, str]
    points_count: int
    min: float
    max: float
    last: float
    unit: str
    points: list[list[float]]
    """``[[unix_seconds, value], ...]``, at most ``tools.points.MAX_POINTS``; not evidence text."""


class DocumentEntry(TypedDict, total=False):
    """One knowledge chunk (runbook or past case)."""

    doc_id: str
    title: str
    source: str
    chunk: str
    score: float
    relevance: str
    deduped: bool


SpanKind = Literal["unspecified", "internal", "server", "client", "producer", "consumer"]
SpanStatus = Literal["unset", "ok", "error"]


class SpanEntry(TypedDict, total=False):
    """One span of a distributed trace, read from OTLP JSON (``evidence.otlp``).

    ``trace_id`` / ``span_id`` / ``parent_span_id`` are lowercase hex (a root span has no
    parent); ``service`` is the resource attribute ``service.name``; ``operation`` the span
    name; ``start`` ISO-8601 UTC with microseconds; ``duration_ms`` end minus start.
    ``attributes`` are the span's own, clipped, secret-looking values masked.
    """

    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    operation: str
    kind: SpanKind
    start: str
    duration_ms: float
    status: SpanStatus
    status_message: str
    attributes: dict[str, JSONScalar]


class EvidenceRef(TypedDict):
    """One citable unit of an invocation: ``logs[0]``, ``alerts[1]``, ..., or ``summary``.

    ``source_type`` is the entry array's (``tools.spec.EntryArray``): ``log``, ``alert``,
    ``metric``, ``knowledge``, ... and ``summary`` for the summary ref.
    """

    raw_path: str
    text: str
    source_type: str


class RetrievalDetails(TypedDict, total=False):
    """Per-invocation extras; ``evidence_refs`` is absent only on rows older than refs."""

    evidence_refs: list[EvidenceRef]
    layers: list[str]
    relevance: list[str | None]
    source_docs: list[str | None]
    deduped: list[str]
    runbook_urls: list[str]


class InvocationDraft(TypedDict):
    """A tool call as run, before the ledger gives it its ``invocation_id``."""

    diagnosis_id: str
    thread_id: str
    round: int
    tool_name: str
    arguments: JSONObject
    status: InvocationStatus
    output: JSONObject | None
    """What the tool returned, bounded by the runner and validated by the tool's own output
    model (``tools.spec.ToolSpec.output``; typed readers in the tool's module); None on error."""
    retrieval_details: RetrievalDetails
    idempotency_key: str
    started_at: str
    duration_ms: float
    error: str | None


class Invocation(InvocationDraft):
    """A recorded tool call (``inv-1``, ``inv-2``, ... in call order within the diagnosis)."""

    invocation_id: str


class TraceItem(TypedDict):
    """One line of the Verifier's tool trace summary (calls merged by tool and arguments)."""

    trace_ref: str
    tool_name: str
    round: int
    success: bool
    evidence_level: EvidenceLevel
    input_summary: str
    output_summary: str
    source_invocation_ids: list[str]
    query_samples: NotRequired[list[str]]
    retrieval_layers: NotRequired[list[str]]
    relevance_levels: NotRequired[list[str]]
    source_docs: NotRequired[list[str]]
    repeat_count: NotRequired[int]
    failed_count: NotRequired[int]
    no_hit_count: NotRequired[int]


# --------------------------------------------------------------------------- executor answer


class ParseStatus(TypedDict):
    """How the executor's final message parsed as JSON (not whether it follows the contract)."""

    status: ParseStatusName
    fence_stripped: bool
    error: str | None


class Binding(TypedDict):
    """One pointer from a claim into an invocation, as the executor wrote it.

    A field the executor gave with the wrong JSON type is ``None`` here and named in
    ``bad_fields`` (with the value it had, rendered), so the rules can say what was wrong.
    """

    index: int
    source_type: str | None
    tool_name: str | None
    source_invocation_id: str | None
    source_invocation_ids: list[str] | None
    raw_path: str | None
    evidence_excerpt: str | None
    bad_fields: dict[str, str]
    added_by: NotRequired[str]
    """Set when the binding was not written by the executor (``verification.citation_repair``)."""


class Claim(TypedDict):
    """A fact about the current incident as the executor stated it.

    ``claim_id`` is the id the claim is known by: the executor's id, or its position
    ``claims[<index>]`` when that id is missing, empty or repeats an earlier one
    (``id_valid`` false).
    """

    index: int
    claim_id: str
    id_valid: bool
    claim_type: str
    claim_text: str
    support_level: str
    evidence_bindings: list[Binding]


class Hypothesis(TypedDict):
    """A possible direction that the evidence does not establish."""

    text: str
    basis: str


class RecommendedAction(TypedDict):
    """A next step (may come from runbooks)."""

    text: str
    source: str


class MissingInfo(TypedDict):
    """An evidence gap, with the query that could close it."""

    text: str
    suggested_query: JSONObject | None
    about_model: NotRequired[bool]
    """Set by code (never read from a model) on a note about the model, not the incident: it
    made no tool call, or a reply reached its token limit."""


ConclusionAnswer = Literal["yes", "no", "value", "unknown"]
"""What a conclusion states: a yes, a no, a value or comparison, or that it cannot tell."""
ConclusionStatus = Literal["follows", "derived", "does_not_follow", "missing", "not_required"]
"""How a conclusion stands against the confirmed claims (``verification.conclusion``)."""


class Conclusion(TypedDict):
    """The executor's conclusion: what the answer concludes and the claims it rests on."""

    text: str
    answer: ConclusionAnswer
    rests_on: list[str]


class ConclusionCheck(TypedDict):
    """A conclusion checked by code against the claims it rests on.

    ``stated`` is what the answer concludes, ``expected`` what its confirmed claims support
    (``None``: they support neither); ``claim_id`` names the claim that states it when the
    conclusion is a claim's own yes or no.
    """

    status: ConclusionStatus
    kind: str
    text: str
    stated: str | None
    expected: str | None
    rests_on: list[str]
    claim_id: str | None
    reason: str
    """Why it does not follow, in English (empty when it follows)."""
    reason_code: NotRequired[str]
    """The reason's code in ``verification.conclusion.REASONS`` (absent on older records)."""
    reason_args: NotRequired[dict[str, str]]
    """The reason's arguments (absent on older records)."""


class RootCause(TypedDict):
    """The most likely root cause: a service, its mechanism, the claims stating it.

    The executor proposes one in its answer (``root_cause``); the diagnosis keeps it only when
    every claim it names was confirmed (``verification.root_cause``).
    """

    service: str
    mechanism: str
    claim_ids: list[str]


class SuspectBrief(TypedDict):
    """One ranked suspect of the incident analysis (``analyze_incident``), as outputs show it."""

    rank: int
    service: str
    score: float
    mechanism: str
    onset: str | None
    root_cause: bool


class ExecutorAnswer(TypedDict):
    """The executor's ``executor_evidence_v2`` object, read into records.

    ``schema_findings`` are the ``schema.executor_v2`` (and binding shape) findings of reading it;
    the claims it does contain are still checked and scored. ``root_cause``: the root cause the
    executor proposes (absent or None when it proposes none).
    """

    claims: list[Claim]
    hypotheses: list[Hypothesis]
    recommended_actions: list[RecommendedAction]
    missing_info: list[MissingInfo]
    schema_findings: list[Finding]
    conclusion: NotRequired[Conclusion | None]
    """The answer's conclusion, when the executor stated one (``None``: none stated)."""
    root_cause: NotRequired[RootCause | None]


# --------------------------------------------------------------------------- Gatekeeper


class Finding(TypedDict):
    """A Gatekeeper error or warning, with the claim and binding it concerns.

    ``claim_id`` and ``binding_index`` are absent only on findings recorded by older versions.
    """

    rule_id: RuleId
    target: str
    message: str
    claim_id: NotRequired[str | None]
    binding_index: NotRequired[int | None]


class VerifiedExcerpt(TypedDict):
    """A binding that passed every evidence rule; ``text`` is the full text of its ref."""

    binding: int
    invocation_id: str
    tool_name: str
    raw_path: str
    text: str


class RuleSummary(TypedDict):
    """One catalog rule as reported in a result."""

    id: str
    enabled: bool
    default_severity: Severity


class GatekeeperResult(TypedDict):
    """The deterministic Gatekeeper's result."""

    status: GatekeeperStatus
    severity: Severity
    checked_bindings: int
    failed_rules: list[RuleId]
    warnings: list[Finding]
    errors: list[Finding]
    verified_excerpts: dict[str, list[VerifiedExcerpt]]
    rule_set_version: str
    rules: list[RuleSummary]
    fallback: NotRequired[bool]


class EvidenceCallCounts(TypedDict):
    """Evidence tool calls by status."""

    ok: int
    no_hit: int
    error: int


class CatalogRule(TypedDict):
    """One rule of a Gatekeeper rule catalog (``verification.catalog``)."""

    id: str
    description: str
    enabled: bool
    default_severity: Severity
    parameters: dict[str, JSONValue]


class Catalog(TypedDict):
    """A Gatekeeper rule catalog: its version and its rules, in order."""

    rule_set_version: str
    rules: list[CatalogRule]


class RuleEvaluation(TypedDict):
    """The deterministic evidence score of a round (``self_evaluation.rule_evaluation``)."""

    formula_version: str
    evidence_calls: EvidenceCallCounts
    claim_count: int
    verified_claims: int
    verified_claim_fraction: float
    distinct_refs_cited: int
    bindings_checked: int
    bindings_valid: int
    score: float


# --------------------------------------------------------------------------- Verifier


class TraceCitation(TypedDict):
    """A Verifier pointer from a claim check into the trace summary."""

    trace_ref: str
    tool_name: str
    source_invocation_ids: list[str]


class VerifierInput(TypedDict):
    """What the Verifier is given (docs/contracts.md, "Flow"), with the answer read from it.

    ``answer`` is for the code that decides after the reply; the model sees only the other
    fields, in the bounded payload of ``verification.verifier_payload``.
    """

    question: str
    final_answer: str
    parse_status: ParseStatus
    structured_output: JSONObject | None
    answer: ExecutorAnswer
    trace_summary: list[TraceItem]
    gatekeeper_result: GatekeeperResult
    retry_context: RetryContext | None
    round: int
    not_run: NotRequired[list[str]]


class ProposedCheck(TypedDict):
    """One claim check as the Verifier (model or claim checker) proposed it.

    ``verification`` is the label as written (it may be unknown); ``evidence_refs`` holds
    the citations that are well formed (their trace refs are checked later).
    """

    claim_id: str
    verification: str | None
    detail: str
    evidence_refs: list[RawCitation]


class RawCitation(TypedDict):
    """A citation as proposed: ``trace_ref`` and the invocation ids it names."""

    trace_ref: str
    source_invocation_ids: list[str]


class VerifierReply(TypedDict):
    """A Verifier reply read into records; ``notes`` say what was unreadable and ignored."""

    verdict: Verdict | None
    groundedness_score: float | None
    claim_checks: list[ProposedCheck] | None
    rationale: str
    notes: list[str]
    question_coverage: NotRequired[CoverageReport | None]


class ClaimCheck(TypedDict):
    """The final label of one claim, decided in code."""

    claim_id: str
    verification: ClaimLabel
    detail: str
    evidence_refs: list[TraceCitation]
    model_verification: str | None


class FactCheck(TypedDict):
    """A legacy ``facts_checked`` item (every claim is a critical fact)."""

    fact: str
    is_critical: bool
    verification: FactLabel
    detail: str
    evidence_refs: list[TraceCitation]


class ReplyParse(TypedDict):
    """How the Verifier's replies parsed."""

    fence_stripped: bool
    repair_attempts: int
    errors: list[str]


class Verdicts(TypedDict):
    """The verdicts of a round and what they rest on."""

    verdict: Verdict
    model_verdict: Verdict | None
    derived_verdict: Verdict
    groundedness_score: float
    critical_fact_count: int
    claim_checks: list[ClaimCheck]
    facts_checked: list[FactCheck]
    rationale: str
    verifier_mode: VerifierMode


class Decision(Verdicts):
    """A round decided by ``verification.verdict.decide``; ``notes`` say what code changed.

    ``unchecked`` names the claims the Verifier never saw (left out of its bounded input).
    """

    notes: list[str]
    unchecked: list[str]
    question_coverage: QuestionCoverage
    conclusion: NotRequired[ConclusionCheck]
    """The answer's conclusion checked against its claims (absent on older records)."""


class VerifierResult(Decision):
    """A ``Decision`` with how it was reached."""

    reply_parse: ReplyParse
    model: str


class RoundSummary(TypedDict):
    """One round of a diagnosis, as the audit keeps it."""

    round: int
    verdict: Verdict
    model_verdict: Verdict | None
    derived_verdict: Verdict
    groundedness_score: float
    verifier_mode: VerifierMode
    executor_output_parse_status: ParseStatusName
    gatekeeper_status: GatekeeperStatus
    gatekeeper_severity: Severity
    failed_rules: list[RuleId]
    claims: int


class GapNote(TypedDict):
    """Something round 1 lacked."""

    claim_id: str | None
    verification: str
    text: str


class RetryContext(TypedDict):
    """What round 1 lacked, handed to round 2's planner and Verifier."""

    previous_round: int
    previous_verdict: Verdict
    previous_score: float
    gaps: list[GapNote]
    failed_rules: list[RuleId]
    suggested_queries: list[JSONObject]


# --------------------------------------------------------------------------- question coverage

QuestionKind = Literal["value", "confirm", "why", "overview"]
"""What a question asks for: a value, a yes/no confirmation, an explanation, or an overview."""
FacetKind = Literal["service", "alert", "metric"]
CoverageStatus = Literal["answered", "partial", "unanswered"]
COVERAGE_STATUSES: Final[tuple[CoverageStatus, ...]] = get_args(CoverageStatus)


class Facet(TypedDict):
    """One thing a question names: a service, an alert name, or a metric (its concept id).

    ``known`` tells, for a service, whether the evidence backend knows it (alerts and metrics:
    always true).
    """

    kind: FacetKind
    name: str
    known: bool


class QuestionFacets(TypedDict):
    """A question read deterministically (``verification.question.analyze_question``).

    ``services`` are the known services it names, ``unknown_services`` the names that look like
    services the backend does not know; ``metrics`` and ``symptoms`` are concept ids of
    ``knowledge.vocabulary`` (``latency``, ``cpu``; ``error``, ``timeout``).
    """

    kind: QuestionKind
    facets: list[Facet]
    services: list[str]
    unknown_services: list[str]
    alerts: list[str]
    metrics: list[str]
    symptoms: list[str]
    status_codes: list[str]
    about_alerts: bool
    about_errors: bool
    error_level: str
    """The log level that counts as "the errors" asked about: a level the question names as a
    word (``FATAL``, ``PANIC``, ``CRITICAL``), else ``ERROR``."""


class CoverageReport(TypedDict):
    """Whether a question was answered: ``asked`` its facets, ``unanswered`` those left open."""

    status: CoverageStatus
    asked: list[str]
    unanswered: list[str]


class QuestionCoverage(CoverageReport):
    """The coverage of a round, decided in code (``verification.coverage``).

    The strictest of the deterministic ``floor`` and the Verifier's ``model`` report (None when
    its reply had none): a model can lower the coverage, never lift it. ``not_run`` lists the
    tool calls the executor asked for that the tool budget cut, ``failed`` the calls that only
    ever failed, with their error (either makes it at most partial).
    """

    floor: CoverageReport
    model: CoverageReport | None
    not_run: list[str]
    failed: NotRequired[list[str]]


# --------------------------------------------------------------------------- answer


class EvidenceLine(TypedDict):
    """One verified incident excerpt shown under a confirmed fact."""

    invocation_id: str
    raw_path: str
    text: str


class ConfirmedItem(TypedDict):
    """A claim the answer may present as established (an inference is marked)."""

    claim_id: str
    claim_text: str
    inference: bool
    evidence: list[EvidenceLine]


class DirectionItem(TypedDict):
    """A possible direction: a hypothesis or an overstated claim."""

    text: str
    kind: DirectionKind
    basis: str
    claim_id: str | None


class GapItem(TypedDict):
    """An evidence gap: an unsupported or knowledge-only claim, or missing information."""

    text: str
    kind: GapKind
    claim_id: str | None


class NextStep(TypedDict):
    """A recommended action with its source."""

    text: str
    source: str


class Material(TypedDict):
    """The Verifier-allowed material an answer is built from, and nothing else."""

    confirmed: list[ConfirmedItem]
    directions: list[DirectionItem]
    gaps: list[GapItem]
    next_steps: list[NextStep]
    withheld_steps: int
    """Recommended actions left out because they state a cause as established."""
    conclusion: NotRequired[str]
    """The conclusion, shown first, only when code found it follows from confirmed claims."""
    root_cause: NotRequired[str]
    """The kept root cause worded, first of the confirmed facts (``select_material``)."""


class ComposerOutput(TypedDict):
    """How the answer was written."""

    mode: ComposerOutputMode
    parse_status: Literal["valid", "invalid", "not_applicable"]
    language: str
    composer_mode: ComposerSection
    violations: NotRequired[list[str]]


# --------------------------------------------------------------------------- audit


class RunInfo(TypedDict):
    """How a diagnosis is run: offline rules or models, and the model per role."""

    offline: bool
    language: str
    models: dict[str, str]


class ModelUsage(TypedDict):
    """Model calls of one diagnosis, the characters sent and the tokens the endpoint reported."""

    calls: int
    input_tokens: int
    output_tokens: int
    input_chars: NotRequired[int]
    """Content characters sent to the models (absent in checkpoints written before it)."""


def add_usage(left: ModelUsage | None, right: ModelUsage | None) -> ModelUsage:
    """Reducer: the sum of two usages."""
    a = left or ModelUsage(calls=0, input_tokens=0, output_tokens=0)
    b = right or ModelUsage(calls=0, input_tokens=0, output_tokens=0)
    return ModelUsage(
        calls=a["calls"] + b["calls"],
        input_tokens=a["input_tokens"] + b["input_tokens"],
        output_tokens=a["output_tokens"] + b["output_tokens"],
        input_chars=a.get("input_chars", 0) + b.get("input_chars", 0),
    )


class RecordedToolCall(TypedDict):
    """A tool call of a recorded model reply, as the executor acted on it."""

    name: str
    args: JSONObject
    id: str | None


class ModelCallRecord(TypedDict):
    """One model call of a diagnosis, as a replay needs it (``self_evaluation.replay``).

    ``content`` and ``tool_calls`` are None when model replies were not recorded
    (``record_model_replies`` off); ``truncated`` says the text was cut at the record's bound,
    ``redacted`` that a secret was taken out of it.
    """

    role: str
    round: int
    content: str | None
    tool_calls: list[RecordedToolCall] | None
    input_tokens: int
    output_tokens: int
    truncated: bool
    redacted: bool
    tool_call_source: NotRequired[ToolCallSource | None]
    """``native`` or ``text`` (``models.text_tool_calls``) when the reply made tool calls."""
    finish_reason: NotRequired[str | None]
    """Why the endpoint stopped (``length``: the role's token limit was reached)."""
    max_tokens: NotRequired[int | None]
    """The role's output token limit sent with the request."""
    superseded: NotRequired[bool]
    """The node asked again in the same visit (an executor answer before any tool call, or an
    unreadable final answer) and used the later reply; a replay script leaves this one out."""


class ReplayRecord(TypedDict):
    """The ``self_evaluation.replay`` channel: what a replay needs besides the ledger (§7, §9)."""

    version: str
    model_replies: Literal["recorded", "off"]
    model_calls: list[ModelCallRecord]
    calls_dropped: int
    """Model calls past the record's bound, not kept."""
    known_services: list[str]
    route: list[str]
    """The nodes the diagnosis ran, in order (``audit`` last)."""
    confirmed_claims: list[str]
    """The claim ids the answer presents as established (``models.recording.confirmed_claims``)."""


class UsageRecord(ModelUsage):
    """The ``self_evaluation.usage`` channel: totals, the budgets, and why a round stopped early."""

    budgets: dict[str, float]
    stopped: str | None


class FailureRecord(TypedDict):
    """The ``self_evaluation.failure`` channel of a diagnosis that could not finish."""

    reason: str
    error_type: str
    round: int
    route: list[str]
    """The nodes that finished before the failure, in order."""


class PromptRef(TypedDict):
    """A prompt's name and version (never its text)."""

    name: str
    version: str


class PromptAudit(TypedDict):
    """Which prompts a diagnosis used."""

    version: str
    prompts: dict[str, PromptRef]


class VerifierEvaluation(Verdicts):
    """The ``self_evaluation.verifier_evaluation`` channel: everything a re-check needs."""

    executor_output_parse_status: ParseStatus
    executor_structured_output: JSONObject | None
    executor_final_answer: str
    retry_context: RetryContext | None
    tool_trace_summary: list[TraceItem]
    traceability_version: str
    gatekeeper_result: GatekeeperResult
    composer_output: ComposerOutput
    prompt_audit: PromptAudit
    offline: bool
    models: dict[str, str]
    rounds: list[RoundSummary]
    question_coverage: NotRequired[QuestionCoverage]
    conclusion: NotRequired[ConclusionCheck]
    """The final round's conclusion check (absent on records made before it was kept)."""
    gatekeeper_catalog: NotRequired[Catalog]
    """The rule catalog the run's Gatekeeper used (absent from records made before it was
    kept: a re-check then uses the bundled catalog)."""


class DiagnosisOutcome(TypedDict):
    """What a finished diagnosis records on its row."""

    status: DiagnosisStatus
    rounds: int
    verdict: Verdict | None
    score: float | None
    answer: str | None


class GatekeeperBrief(TypedDict):
    """The Gatekeeper outcome in a diagnosis summary."""

    status: GatekeeperStatus | None
    severity: Severity | None
    failed_rules: list[RuleId]


class DiagnosisSummary(TypedDict):
    """What ``diagnose --json`` prints and ``POST /api/chat`` answers."""

    diagnosis_id: str | None
    thread_id: str
    verdict: str | None
    model_verdict: Verdict | None
    groundedness_score: float | None
    rounds: int | None
    offline: bool
    answer: str | None
    gatekeeper: GatekeeperBrief
    root_cause: RootCause | None
    """The confirmed root cause (``verification.root_cause``), else None."""
    suspects: list[SuspectBrief]
    """The incident analysis's ranked suspects (none when it did not run)."""


class DiagnosisRecord(TypedDict):
    """One ``diagnosis_session`` row."""

    id: str
    thread_id: str
    question: str
    status: DiagnosisStatus
    rounds: int
    verdict: Verdict | None
    score: float | None
    final_answer: str | None
    note: str | None
    created_at: str
    updated_at: str
    self_evaluation: JSONObject | None
    run_settings: JSONObject | None
    """The settings the diagnosis started with (``state.run_settings.RunSettings``); None for
    rows recorded before they were stored."""
