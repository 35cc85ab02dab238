"""Pydantic models of the contracts: executor output V2, Verifier output, Gatekeeper result.

They document and validate the shapes; graph state only ever holds their ``model_dump()``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ClaimType = Literal["observation", "negative_observation", "correlation", "causal", "state"]
Verdict = Literal["PASS", "LOW_CONFID", "REJECT"]
Verification = Literal[
    "direct_observation",
    "reasonable_inference",
    "overstated",
    "unsupported",
    "external_unknown",
    "contradicted",
]


class EvidenceBinding(BaseModel):
    """One precise pointer from a claim into a recorded tool invocation."""

    model_config = ConfigDict(extra="allow")

    source_type: str = Field(description="log, alert, metric, knowledge or summary")
    tool_name: str
    source_invocation_id: str | None = None
    raw_path: str | None = None
    evidence_excerpt: str


class Claim(BaseModel):
    """A fact about the current incident, bound to evidence."""

    model_config = ConfigDict(extra="allow")

    claim_id: str
    claim_type: ClaimType
    claim_text: str
    support_level: Literal["direct", "indirect"]
    evidence_bindings: list[EvidenceBinding]


class Hypothesis(BaseModel):
    """A possible direction that is not established by evidence."""

    text: str
    basis: str = ""


class RecommendedAction(BaseModel):
    """A next step; may come from runbooks."""

    text: str
    source: str = "reasoning"


class MissingInfo(BaseModel):
    """An evidence gap, with the query that could close it."""

    text: str
    suggested_query: dict[str, Any] | None = None


class ExecutorOutputV2(BaseModel):
    """The executor's final message (contract ``executor_evidence_v2``)."""

    model_config = ConfigDict(extra="forbid")

    answer_version: Literal["executor_evidence_v2"] = "executor_evidence_v2"
    claims: list[Claim] = Field(default_factory=list)
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    recommended_actions: list[RecommendedAction] = Field(default_factory=list)
    missing_info: list[MissingInfo] = Field(default_factory=list)


class EvidenceRef(BaseModel):
    """A Verifier pointer into the trace summary."""

    trace_ref: str
    tool_name: str | None = None
    source_invocation_ids: list[str] = Field(default_factory=list)


class ClaimCheck(BaseModel):
    """The Verifier's classification of one claim (reasoning before decision)."""

    claim_id: str
    detail: str = ""
    verification: Verification
    evidence_refs: list[EvidenceRef] = Field(default_factory=list)


class VerifierOutput(BaseModel):
    """What the Verifier model returns; score and verdict are recomputed in code."""

    rationale: str = ""
    claim_checks: list[ClaimCheck] = Field(default_factory=list)
    critical_fact_count: int = 0
    groundedness_score: float = 0.0
    verdict: Verdict


class RuleIssue(BaseModel):
    """A Gatekeeper error or warning."""

    rule_id: str
    target: str
    message: str


class GatekeeperResult(BaseModel):
    """The deterministic Gatekeeper's result (contracts section 4)."""

    model_config = ConfigDict(extra="allow")

    status: Literal["pass", "warn", "fail"]
    severity: Literal["none", "low_confid", "reject"]
    checked_bindings: int = 0
    failed_rules: list[str] = Field(default_factory=list)
    warnings: list[RuleIssue] = Field(default_factory=list)
    errors: list[RuleIssue] = Field(default_factory=list)
    verified_excerpts: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    rule_set_version: str
    rules: list[dict[str, Any]] = Field(default_factory=list)
