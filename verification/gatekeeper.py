"""Deterministic Gatekeeper: checks every claim binding against the recorded invocations.

Runs after the executor's output has been read (``verification.executor_output``, which yields the
``schema.executor_v2`` findings) and before the Verifier model. A binding is *verified* when it
passes every evidence rule, in this order, each failure stopping the binding: invocation id,
tool name, ``raw_path`` given, refs recorded, ``raw_path`` known, excerpt contained. A claim with
a verified binding is then checked for ``evidence.unbound_specifics``, and every claim for
``evidence.fabricated`` (``verification.fabrication``). The rules' switches,
severities and parameters come from the catalog (``verification.catalog``); an unexpected
exception fails closed (``fail`` / ``reject``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from state.records import (
    SEVERITIES,
    Binding,
    Claim,
    EvidenceRef,
    ExecutorAnswer,
    Finding,
    GatekeeperResult,
    GatekeeperStatus,
    Invocation,
    JSONObject,
    ParseStatus,
    RuleId,
    VerifiedExcerpt,
)
from tools.refs import grounding_text
from tools.registry import is_guidance
from verification.catalog import (
    DEFAULT_RULE_SET_VERSION,
    EXCERPT_MISMATCH,
    FABRICATED,
    INTERNAL_ERROR,
    INVOCATION_REF,
    KNOWN_RULE_IDS,
    RAW_PATH,
    RAW_PATH_MISSING,
    REFS_MISSING,
    UNBOUND_SPECIFICS,
    Catalog,
    Settings,
    settings_for,
)
from verification.executor_output import read_answer
from verification.fabrication import Evidence, fabricated, named
from verification.text import contains_whole, grounded, normalize, specifics

_SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}


class _Check:
    """The findings of one evaluation, and the index of the diagnosis's invocations."""

    def __init__(self, settings: Settings, invocations: Sequence[Invocation]) -> None:
        self.settings = settings
        self.errors: list[Finding] = []
        self.warnings: list[Finding] = []
        self.by_id: dict[str, Invocation] = {}
        self.by_tool: dict[str, list[str]] = {}
        for row in invocations:
            if row["invocation_id"] not in self.by_id:
                self.by_id[row["invocation_id"]] = row
                self.by_tool.setdefault(row["tool_name"], []).append(row["invocation_id"])

    def error(self, rule_id: RuleId, at: _Target, message: str) -> bool:
        """Record an error; returns whether it counted (the rule is enabled)."""
        if not self.settings.on(rule_id):
            return False
        self.errors.append(at.finding(rule_id, message))
        return True

    def warn(self, rule_id: RuleId, at: _Target, message: str) -> None:
        if self.settings.on(rule_id):
            self.warnings.append(at.finding(rule_id, message))


class _Target:
    """Where a finding points: a claim, and one of its bindings or its text."""

    def __init__(self, claim: Claim, binding: Binding | None = None, field: str = "") -> None:
        self.claim = claim
        self.binding = binding
        self.field = field

    def finding(self, rule_id: RuleId, message: str) -> Finding:
        target = f"claims[{self.claim['index']}]"
        if self.binding is not None:
            target += f".evidence_bindings[{self.binding['index']}]"
        if self.field:
            target += f".{self.field}"
        return Finding(
            rule_id=rule_id,
            target=target,
            message=message,
            claim_id=self.claim["claim_id"],
            binding_index=None if self.binding is None else self.binding["index"],
        )


# --------------------------------------------------------------------------- invocation id


def _resolve_invocation_id(check: _Check, binding: Binding, at: _Target) -> str | None:
    """Find the one invocation a binding cites (singular, legacy plural, or narrow backfill)."""
    if "source_invocation_id" in binding["bad_fields"]:
        check.error(INVOCATION_REF, at, "source_invocation_id must be a string")
        return None
    singular = binding["source_invocation_id"]
    if singular is not None:
        invocation_id = singular.strip()
        # Every id a binding names must exist, the plural ones beside a singular one too.
        unknown = [
            value.strip()
            for value in [singular, *(binding["source_invocation_ids"] or [])]
            if value.strip() not in check.by_id
        ]
        for value in dict.fromkeys(unknown):
            field = "source_invocation_id" if value == invocation_id else "source_invocation_ids"
            message = f"{field} {value!r} is not an invocation of this diagnosis"
            check.error(INVOCATION_REF, at, message)
        return None if unknown else invocation_id
    if "source_invocation_ids" in binding["bad_fields"]:
        message = "source_invocation_ids must be an array of invocation ids"
        check.error(INVOCATION_REF, at, message)
        return None
    bad_entries = [
        value
        for name, value in binding["bad_fields"].items()
        if name.startswith("source_invocation_ids[")
    ]
    if binding["source_invocation_ids"] is not None or bad_entries:
        return _resolve_plural(check, binding, bad_entries, at)
    return _backfill(check, binding, at)


def _resolve_plural(
    check: _Check, binding: Binding, bad_entries: list[str], at: _Target
) -> str | None:
    for value in bad_entries:
        check.error(INVOCATION_REF, at, f"source_invocation_ids holds a non-id value {value}")
    ids: list[str] = []
    unknown = False
    for value in binding["source_invocation_ids"] or []:
        invocation_id = value.strip()
        if invocation_id not in check.by_id:
            check.error(
                INVOCATION_REF,
                at,
                f"source_invocation_ids entry {invocation_id!r} is not an invocation of this "
                "diagnosis",
            )
            unknown = True
        elif invocation_id not in ids:
            ids.append(invocation_id)
    if unknown or bad_entries:
        return None
    if len(ids) == 1:
        return ids[0]
    for invocation_id in ids:
        _tool_name_matches(check, binding, invocation_id, at)
    check.error(
        RAW_PATH_MISSING,
        at,
        f"legacy source_invocation_ids {', '.join(ids)} cannot name one evidence ref; "
        "cite one source_invocation_id with a raw_path",
    )
    return None


def _backfill(check: _Check, binding: Binding, at: _Target) -> str | None:
    tool_name = binding["tool_name"]
    if tool_name is None:
        check.error(INVOCATION_REF, at, "binding has no invocation id and no tool_name")
        return None
    candidates = check.by_tool.get(tool_name, [])
    allowed = check.settings.narrow_backfill
    if allowed and len(candidates) == 1:
        check.warn(
            INVOCATION_REF,
            at,
            f"source_invocation_id backfilled with {candidates[0]}, the only {tool_name} "
            "invocation in this diagnosis",
        )
        return candidates[0]
    if not allowed:
        reason = "backfill is disabled"
    elif not candidates:
        reason = f"no {tool_name} invocation exists in this diagnosis"
    else:
        reason = (
            f"{len(candidates)} {tool_name} invocations could match "
            f"({', '.join(candidates)}); backfill needs exactly one"
        )
    check.error(INVOCATION_REF, at, f"binding has no invocation id: {reason}")
    return None


def _tool_name_matches(check: _Check, binding: Binding, invocation_id: str, at: _Target) -> bool:
    """False when the binding's tool_name differs from the recorded invocation's."""
    recorded = check.by_id[invocation_id]["tool_name"]
    claimed = binding["tool_name"]
    if claimed == recorded:
        return True
    if "tool_name" in binding["bad_fields"]:
        message = (
            f"tool_name {binding['bad_fields']['tool_name']} differs from {invocation_id}'s "
            f"recorded tool {recorded!r}"
        )
    elif claimed is None:
        message = f"binding has no tool_name; {invocation_id} is a {recorded} invocation"
    else:
        message = f"tool_name {claimed!r} differs from {invocation_id}'s recorded tool {recorded!r}"
    return not check.error(INVOCATION_REF, at, message)


# --------------------------------------------------------------------------- binding


def _check_binding(check: _Check, binding: Binding, at: _Target) -> VerifiedExcerpt | None:
    """Apply the binding-level evidence rules; return the verified excerpt when all pass."""
    invocation_id = _resolve_invocation_id(check, binding, at)
    if invocation_id is None:
        return None
    invocation = check.by_id[invocation_id]
    verified = _tool_name_matches(check, binding, invocation_id, at)
    raw_path = binding["raw_path"]
    if raw_path is None and "raw_path" not in binding["bad_fields"]:
        check.error(
            RAW_PATH_MISSING,
            at,
            f"binding to {invocation_id} has no raw_path (it is never synthesised)",
        )
        return None
    refs = invocation["retrieval_details"].get("evidence_refs")
    if refs is None:
        check.error(
            REFS_MISSING, at, f"invocation {invocation_id} has no retrieval_details.evidence_refs"
        )
        return None
    if raw_path is None:
        message = f"raw_path must be a string, got {binding['bad_fields']['raw_path']}"
        check.error(RAW_PATH, at, message)
        return None
    raw_path = raw_path.strip()
    ref = next((item for item in refs if item["raw_path"] == raw_path), None)
    if ref is None:
        check.error(
            RAW_PATH, at, f"raw_path {raw_path!r} is not among the evidence refs of {invocation_id}"
        )
        return None
    if check.settings.on(EXCERPT_MISMATCH) and not _excerpt_matches(
        check, binding["evidence_excerpt"], ref, at, invocation_id
    ):
        verified = False
    if not verified:
        return None
    return VerifiedExcerpt(
        binding=binding["index"],
        invocation_id=invocation_id,
        tool_name=invocation["tool_name"],
        raw_path=raw_path,
        text=ref["text"],
    )


def _excerpt_matches(
    check: _Check, excerpt: str | None, ref: EvidenceRef, at: _Target, invocation_id: str
) -> bool:
    settings = check.settings
    if excerpt is None:
        check.error(EXCERPT_MISMATCH, at, "evidence_excerpt is missing or not a string")
        return False

    def norm(text: str) -> str:
        return normalize(
            text,
            unicode_form=settings.excerpt_form,
            casefold=settings.excerpt_casefold,
            collapse_whitespace=settings.excerpt_collapse_whitespace,
        )

    wanted = norm(excerpt)
    if not wanted.strip():
        check.error(EXCERPT_MISMATCH, at, "evidence_excerpt is empty")
        return False
    if wanted not in norm(ref["text"]):
        check.error(
            EXCERPT_MISMATCH,
            at,
            f"evidence_excerpt is not contained in the text of {invocation_id} {ref['raw_path']}",
        )
        return False
    return True


def _check_specifics(
    check: _Check, claim: Claim, verified: list[VerifiedExcerpt], evidence: Evidence
) -> None:
    """Apply ``evidence.unbound_specifics`` to a claim with verified evidence.

    Only incident evidence grounds specifics: knowledge refs never do, and the timestamp and
    instance of a log line ground times, dates and names, never counts or values. A name the
    claim gives (``verification.fabrication.named``) that its verified texts lack but other
    evidence of the diagnosis holds is unbound too (one no evidence holds is fabricated).
    """
    if not check.settings.on(UNBOUND_SPECIFICS):
        return
    settings = check.settings
    incident = [entry for entry in verified if not is_guidance(entry["tool_name"])]
    texts = [grounding_text(check.by_id[e["invocation_id"]], e["raw_path"]) for e in incident]
    name_texts = [entry["text"] for entry in incident]
    tokens = specifics(
        claim["claim_text"],
        identifier_suffixes=settings.identifier_suffixes,
        strip_punctuation=settings.strip_punctuation,
    )
    unbound = [
        token
        for token in tokens
        if not grounded(
            token, texts, casefold=settings.specifics_case_insensitive, name_texts=name_texts
        )
    ]
    seen = {token.casefold() for token in tokens}
    names = [name for name in named(claim["claim_text"]) if name.casefold() not in seen]
    if names:
        held = [normalize(entry["text"], collapse_whitespace=False) for entry in verified]
        unbound += [
            name
            for name in names
            if not any(contains_whole(normalize(name), text) for text in held)
            and evidence.has(name)
        ]
    if unbound:
        check.error(
            UNBOUND_SPECIFICS,
            _Target(claim, field="claim_text"),
            "claim states specifics found in none of its verified evidence: " + ", ".join(unbound),
        )


def _gathered(invocations: Sequence[Invocation], question: str) -> Iterator[str]:
    """Every text the diagnosis gathered: the question; each call's refs, arguments, output."""
    yield question
    for row in invocations:
        for ref in row["retrieval_details"].get("evidence_refs") or []:
            yield ref["text"]
        yield json.dumps(row["arguments"], ensure_ascii=False)
        if row["output"] is not None:
            yield json.dumps(row["output"], ensure_ascii=False)
        if row["error"]:
            yield row["error"]


def _check_fabricated(
    check: _Check, claim: Claim, verified: list[VerifiedExcerpt], evidence: Evidence
) -> None:
    """Apply ``evidence.fabricated``: names, codes and causes found in nothing gathered."""
    if not check.settings.on(FABRICATED) or not claim["claim_text"]:
        return
    missing = fabricated(claim["claim_text"], evidence, [entry["text"] for entry in verified])
    if missing:
        check.error(
            FABRICATED,
            _Target(claim, field="claim_text"),
            "claim names what none of the evidence gathered in this diagnosis holds: "
            + "; ".join(missing),
        )


# --------------------------------------------------------------------------- entry points


def check_answer(
    answer: ExecutorAnswer,
    invocations: Sequence[Invocation],
    settings: Settings,
    *,
    question: str = "",
) -> GatekeeperResult:
    """Check a read executor answer against the diagnosis's invocations (may raise).

    ``question`` is the user's: what it names is no fabrication (``evidence.fabricated``).
    """
    check = _Check(settings, invocations)
    evidence = Evidence(_gathered(invocations, question))
    checked_bindings = 0
    verified_excerpts: dict[str, list[VerifiedExcerpt]] = {}
    for claim in answer["claims"]:
        verified: list[VerifiedExcerpt] = []
        for binding in claim["evidence_bindings"]:
            checked_bindings += 1
            if "binding" in binding["bad_fields"]:
                continue  # not an object: a schema finding already
            entry = _check_binding(check, binding, _Target(claim, binding))
            if entry is not None:
                verified.append(entry)
        if verified:
            _check_specifics(check, claim, verified, evidence)
            if claim["id_valid"]:
                verified_excerpts[claim["claim_id"]] = verified
        _check_fabricated(check, claim, verified, evidence)
    errors = [*answer["schema_findings"], *check.errors]
    failed = {error["rule_id"] for error in errors}
    worst = max((_SEVERITY_RANK[settings.severity[e["rule_id"]]] for e in errors), default=0)
    status: GatekeeperStatus = "fail" if errors else "warn" if check.warnings else "pass"
    return GatekeeperResult(
        status=status,
        severity=SEVERITIES[worst],
        checked_bindings=checked_bindings,
        failed_rules=[rule_id for rule_id in settings.order if rule_id in failed],
        warnings=check.warnings,
        errors=errors,
        verified_excerpts=verified_excerpts,
        rule_set_version=settings.rule_set_version,
        rules=settings.summary(),
    )


def _metadata(catalog: Catalog | None) -> Settings | None:
    try:
        return settings_for(catalog)
    except Exception:  # metadata is best effort on the fail-closed path
        return None


def internal_error(exc: BaseException, catalog: Catalog | None = None) -> GatekeeperResult:
    """The fail-closed result: ``fail`` / ``reject`` with the exception recorded."""
    settings = _metadata(catalog)
    if settings is not None:
        version, rules = settings.rule_set_version, settings.summary()
    else:
        given = catalog.get("rule_set_version") if isinstance(catalog, dict) else None
        version = given if isinstance(given, str) and given else DEFAULT_RULE_SET_VERSION
        rules = []
    return GatekeeperResult(
        status="fail",
        severity="reject",
        checked_bindings=0,
        failed_rules=[INTERNAL_ERROR],
        warnings=[],
        errors=[
            Finding(
                rule_id=INTERNAL_ERROR,
                target="gatekeeper",
                message=f"{type(exc).__name__}: {exc}",
                claim_id=None,
                binding_index=None,
            )
        ],
        verified_excerpts={},
        rule_set_version=version,
        rules=rules,
    )


def gatekeep(
    answer: ExecutorAnswer,
    invocations: Sequence[Invocation],
    settings: Settings,
    *,
    question: str = "",
) -> GatekeeperResult:
    """``check_answer`` that never raises: anything unexpected fails closed."""
    try:
        return check_answer(answer, invocations, settings, question=question)
    except Exception as exc:  # fail closed on anything unexpected
        return internal_error(exc)


def run_gatekeeper(
    parse_status: ParseStatus,
    structured_output: JSONObject | None,
    invocations: Sequence[Invocation],
    catalog: Catalog | None = None,
    *,
    question: str = "",
) -> GatekeeperResult:
    """Read the executor's parsed output and check it; never raises.

    Args:
        parse_status: How the executor's final message parsed.
        structured_output: The parsed object, or ``None``.
        invocations: Every invocation of the current diagnosis (all rounds).
        catalog: A rule catalog; ``None`` uses the bundled one. An invalid catalog fails closed.
        question: The user's question (what it names is no fabrication).

    Returns:
        The Gatekeeper result; ``verified_excerpts`` maps a claim id to the bindings that passed
        every evidence rule, each with the full text of the ref it cites.
    """
    try:
        settings = settings_for(catalog)
        return check_answer(
            read_answer(parse_status, structured_output, settings.schema),
            invocations,
            settings,
            question=question,
        )
    except Exception as exc:  # fail closed on anything unexpected
        return internal_error(exc, catalog)


def fallback_pass(catalog: Catalog | None = None) -> GatekeeperResult:
    """The pass result used when no Gatekeeper is configured (``fallback: true``)."""
    settings = _metadata(catalog)
    return GatekeeperResult(
        status="pass",
        severity="none",
        checked_bindings=0,
        failed_rules=[],
        warnings=[],
        errors=[],
        verified_excerpts={},
        rule_set_version=settings.rule_set_version if settings else DEFAULT_RULE_SET_VERSION,
        rules=settings.summary() if settings else [],
        fallback=True,
    )


def verified_excerpts_of(result: GatekeeperResult, claim_id: str) -> list[VerifiedExcerpt]:
    """The Gatekeeper-verified excerpts of one claim."""
    return result["verified_excerpts"].get(claim_id, [])


def only_knowledge(excerpts: Sequence[VerifiedExcerpt]) -> bool:
    """Whether a claim's verified evidence is knowledge only (never incident evidence)."""
    return bool(excerpts) and all(is_guidance(entry["tool_name"]) for entry in excerpts)


__all__ = [
    "KNOWN_RULE_IDS",
    "check_answer",
    "fallback_pass",
    "gatekeep",
    "internal_error",
    "only_knowledge",
    "run_gatekeeper",
    "verified_excerpts_of",
]
