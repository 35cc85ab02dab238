"""Deterministic Gatekeeper: checks the executor's evidence contract before the Verifier runs.

The rule catalog (``gatekeeper_catalog.json`` beside this module) is data: ids, descriptions,
enabled flags, default severities and simple parameters. The behaviour of every rule is code in this
module. Everything crossing the module boundary is plain data (dicts, lists, strings, numbers).

Result shape of :func:`run_gatekeeper`::

    {"status": "pass|warn|fail", "severity": "none|low_confid|reject", "checked_bindings": 3,
     "failed_rules": [...], "warnings": [{"rule_id", "target", "message"}],
     "errors": [{"rule_id", "target", "message"}],
     "verified_excerpts": {"c1": [{"binding", "invocation_id", "tool_name", "raw_path", "text"}]},
     "rule_set_version": "...", "rules": [{"id", "enabled", "default_severity"}]}
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

DEFAULT_RULE_SET_VERSION = "gatekeeper-rules.v1"
"""Version of the bundled rule catalog; carried by the fallback result."""

CATALOG_RESOURCE = "gatekeeper_catalog.json"

RULE_SCHEMA = "schema.executor_v2"
RULE_INVOCATION_REF = "evidence.invocation_ref"
RULE_RAW_PATH_MISSING = "evidence.raw_path_missing"
RULE_REFS_MISSING = "evidence.refs_missing"
RULE_RAW_PATH = "evidence.raw_path"
RULE_EXCERPT_MISMATCH = "evidence.excerpt_mismatch"
RULE_UNBOUND_SPECIFICS = "evidence.unbound_specifics"
RULE_INTERNAL_ERROR = "gatekeeper.internal_error"

KNOWN_RULE_IDS: tuple[str, ...] = (
    RULE_SCHEMA,
    RULE_INVOCATION_REF,
    RULE_RAW_PATH_MISSING,
    RULE_REFS_MISSING,
    RULE_RAW_PATH,
    RULE_EXCERPT_MISMATCH,
    RULE_UNBOUND_SPECIFICS,
)

SEVERITIES: tuple[str, ...] = ("none", "low_confid", "reject")
_SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}

_DEFAULT_SCHEMA_PARAMETERS: dict[str, Any] = {
    "answer_version": "executor_evidence_v2",
    "forbidden_keys": ["diagnosis_summary", "user_facing_answer"],
    "required_claim_fields": ["claim_id", "claim_type", "claim_text", "support_level"],
    "allowed_claim_types": [
        "observation",
        "negative_observation",
        "correlation",
        "causal",
        "state",
    ],
    "allowed_support_levels": ["direct", "indirect"],
    "required_arrays": ["hypotheses", "recommended_actions", "missing_info"],
}
_DEFAULT_SUFFIXES: tuple[str, ...] = ("Exception", "Error")
_DEFAULT_STRIP_PUNCTUATION = ".:/-"
_UNICODE_FORMS = ("NFKC", "NFC", "NFKD", "NFD", "none")

_FULLWIDTH_PUNCTUATION = re.compile(
    "[\u3000-\u303f\uff01-\uff04\uff06-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]"
)
_SPECIFIC_RUN = re.compile(r"[A-Za-z0-9._%:/-]+")
_WHITESPACE = re.compile(r"\s+")


class CatalogError(ValueError):
    """Raised when a Gatekeeper rule catalog does not have the expected shape."""


# --------------------------------------------------------------------------- catalog


def load_catalog(path: str | Path | None = None) -> dict[str, Any]:
    """Load and validate a Gatekeeper rule catalog.

    Args:
        path: A JSON file to read. ``None`` reads the catalog bundled with this package.

    Returns:
        The validated catalog: ``{"rule_set_version": str, "rules": [{"id", "description",
        "enabled", "default_severity", "parameters"}]}``.

    Raises:
        CatalogError: The file cannot be read, is not JSON, or does not have the catalog shape.
    """
    source = str(path) if path is not None else f"verification/{CATALOG_RESOURCE}"
    try:
        if path is None:
            resource = resources.files("verification").joinpath(CATALOG_RESOURCE)
            text = resource.read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read rule catalog {source}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"rule catalog {source} is not valid JSON: {exc}") from exc
    return validate_catalog(data)


@lru_cache(maxsize=1)
def _bundled_catalog() -> dict[str, Any]:
    """The bundled catalog, read and validated once per process (treat as read-only)."""
    return load_catalog()


def validate_catalog(catalog: Any) -> dict[str, Any]:
    """Check that ``catalog`` has the rule-catalog shape.

    Every known rule must appear exactly once; unknown rule ids are refused because a rule's
    behaviour is code and an id without code would silently check nothing.

    Args:
        catalog: The parsed catalog.

    Returns:
        The same catalog object.

    Raises:
        CatalogError: A field is missing or has the wrong type or value.
    """
    if not isinstance(catalog, dict):
        raise CatalogError("rule catalog must be a JSON object")
    version = catalog.get("rule_set_version")
    if not isinstance(version, str) or not version.strip():
        raise CatalogError("rule catalog: 'rule_set_version' must be a non-empty string")
    rules = catalog.get("rules")
    if not isinstance(rules, list) or not rules:
        raise CatalogError("rule catalog: 'rules' must be a non-empty array")
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        where = f"rule catalog: rules[{index}]"
        if not isinstance(rule, dict):
            raise CatalogError(f"{where} must be an object")
        rule_id = rule.get("id")
        if not isinstance(rule_id, str) or not rule_id:
            raise CatalogError(f"{where}: 'id' must be a non-empty string")
        where = f"rule catalog: rule {rule_id!r}"
        if rule_id not in KNOWN_RULE_IDS:
            raise CatalogError(f"{where} is unknown (known: {', '.join(KNOWN_RULE_IDS)})")
        if rule_id in seen:
            raise CatalogError(f"{where} appears more than once")
        seen.add(rule_id)
        if not isinstance(rule.get("description"), str):
            raise CatalogError(f"{where}: 'description' must be a string")
        if not isinstance(rule.get("enabled"), bool):
            raise CatalogError(f"{where}: 'enabled' must be true or false")
        if rule.get("default_severity") not in SEVERITIES:
            raise CatalogError(
                f"{where}: 'default_severity' must be one of {', '.join(SEVERITIES)}"
            )
        parameters = rule.get("parameters")
        if not isinstance(parameters, dict):
            raise CatalogError(f"{where}: 'parameters' must be an object")
        _validate_parameters(rule_id, parameters, where)
    missing = [rule_id for rule_id in KNOWN_RULE_IDS if rule_id not in seen]
    if missing:
        raise CatalogError(f"rule catalog: missing rules {', '.join(missing)}")
    return catalog


def _validate_parameters(rule_id: str, parameters: dict[str, Any], where: str) -> None:
    def string_list(name: str) -> None:
        value = parameters.get(name)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(item, str) for item in value)
        ):
            raise CatalogError(f"{where}: parameter {name!r} must be an array of strings")

    def boolean(name: str) -> None:
        value = parameters.get(name)
        if value is not None and not isinstance(value, bool):
            raise CatalogError(f"{where}: parameter {name!r} must be true or false")

    if rule_id == RULE_SCHEMA:
        version = parameters.get("answer_version")
        if version is not None and not isinstance(version, str):
            raise CatalogError(f"{where}: parameter 'answer_version' must be a string")
        for name in (
            "forbidden_keys",
            "required_claim_fields",
            "allowed_claim_types",
            "allowed_support_levels",
            "required_arrays",
        ):
            string_list(name)
    elif rule_id == RULE_INVOCATION_REF:
        boolean("narrow_backfill")
    elif rule_id == RULE_EXCERPT_MISMATCH:
        form = parameters.get("unicode_normalization")
        if form is not None and form not in _UNICODE_FORMS:
            forms = ", ".join(_UNICODE_FORMS)
            raise CatalogError(f"{where}: parameter 'unicode_normalization' must be one of {forms}")
        boolean("casefold")
        boolean("collapse_whitespace")
    elif rule_id == RULE_UNBOUND_SPECIFICS:
        string_list("identifier_suffixes")
        punctuation = parameters.get("strip_punctuation")
        if punctuation is not None and not isinstance(punctuation, str):
            raise CatalogError(f"{where}: parameter 'strip_punctuation' must be a string")
        boolean("case_insensitive")


def rules_summary(catalog: dict[str, Any]) -> list[dict[str, Any]]:
    """Summarise a validated catalog's rules for audit output.

    Args:
        catalog: A validated rule catalog.

    Returns:
        ``[{"id", "enabled", "default_severity"}]`` in catalog order.
    """
    return [
        {
            "id": rule["id"],
            "enabled": rule["enabled"],
            "default_severity": rule["default_severity"],
        }
        for rule in catalog["rules"]
    ]


# --------------------------------------------------------------------------- text helpers


@lru_cache(maxsize=8192)
def normalize_text(
    text: str,
    *,
    unicode_form: str = "NFKC",
    casefold: bool = True,
    collapse_whitespace: bool = True,
) -> str:
    """Normalise text for excerpt comparison.

    Args:
        text: The text to normalise.
        unicode_form: A ``unicodedata`` normal form (``NFKC`` folds full-width characters to
            half-width), or ``"none"``.
        casefold: Whether to casefold.
        collapse_whitespace: Whether to collapse whitespace runs to one space and strip the ends.

    Returns:
        The normalised text.
    """
    if unicode_form != "none":
        text = unicodedata.normalize(unicode_form, text)  # type: ignore[arg-type]
    if casefold:
        text = text.casefold()
    if collapse_whitespace:
        text = _WHITESPACE.sub(" ", text).strip()
    return text


_DIGIT = re.compile(r"\d")
# A maximal run of the specific characters that holds a digit (faster than every run + a test).
_DIGIT_RUN = re.compile(r"(?<![A-Za-z0-9._%:/-])[A-Za-z0-9._%:/-]*[0-9][A-Za-z0-9._%:/-]*")


@lru_cache(maxsize=32)
def _identifier_pattern(suffixes: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(suffix) for suffix in suffixes)
    return re.compile(
        rf"(?<![A-Za-z0-9_$.])[A-Za-z_$][A-Za-z0-9_$.]*(?:{alternatives})(?![A-Za-z0-9_$])"
    )


def extract_specifics(
    text: str,
    *,
    identifier_suffixes: list[str] | tuple[str, ...] = _DEFAULT_SUFFIXES,
    strip_punctuation: str = _DEFAULT_STRIP_PUNCTUATION,
) -> list[str]:
    """Find the specifics a claim text states.

    A specific is a maximal run of ``[A-Za-z0-9._%:/-]`` containing a digit (numbers,
    percentages, durations, HTTP status and error codes, versions, ids), with ``strip_punctuation``
    characters removed from both ends, or an identifier ending in one of ``identifier_suffixes``
    (case-sensitive, with at least one character before the suffix, e.g. ``NullPointerException``).
    The text is NFKC-normalised first, so full-width digits and letters count; full-width
    punctuation (such as the Chinese colon in ``HTTP 500：timeout``) separates runs, as it does
    in the original text, except ``％``, which is a percent sign.

    Args:
        text: The claim text.
        identifier_suffixes: Suffixes marking exception or error identifiers.
        strip_punctuation: Characters stripped from both ends of a run before it is kept.

    Returns:
        Distinct specifics (case-insensitively) in order of first appearance.
    """
    normalised = unicodedata.normalize("NFKC", _FULLWIDTH_PUNCTUATION.sub(" ", text))
    found: list[tuple[int, str]] = []
    for match in _DIGIT_RUN.finditer(normalised):
        token = match.group().strip(strip_punctuation)
        if _DIGIT.search(token):
            found.append((match.start(), token))
    suffixes = tuple(suffix for suffix in identifier_suffixes if suffix)
    if suffixes:
        identifier = _identifier_pattern(suffixes)
        for match in identifier.finditer(normalised):
            token = match.group().strip(strip_punctuation)
            if any(token.endswith(suffix) and len(token) > len(suffix) for suffix in suffixes):
                found.append((match.start(), token))
    found.sort(key=lambda item: item[0])
    result: list[str] = []
    seen: set[str] = set()
    for _, token in found:
        key = token.casefold()
        if key not in seen:
            seen.add(key)
            result.append(token)
    return result


def contains_specific(needle: str, haystack: str) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as a whole number, not inside a longer one.

    ``2`` is not found in ``2026`` and ``0.2`` not in ``0.23``, while ``500`` is found in
    ``status=500`` and ``500s``. Both arguments are expected already normalised.
    """
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        before = haystack[start - 1] if start > 0 else ""
        after = haystack[end] if end < len(haystack) else ""
        after_next = haystack[end + 1] if end + 1 < len(haystack) else ""
        digit_edge = needle[:1].isdigit() and (
            before.isdigit() or (before == "." and start > 1 and haystack[start - 2].isdigit())
        )
        digit_tail = needle[-1:].isdigit() and (
            after.isdigit() or (after == "." and after_next.isdigit())
        )
        if not digit_edge and not digit_tail:
            return True
        start = haystack.find(needle, start + 1)
    return False


# --------------------------------------------------------------------------- evaluation state


@dataclass
class _Findings:
    """Catalog view plus the findings collected during one evaluation."""

    order: list[str]
    enabled: dict[str, bool]
    severity: dict[str, str]
    parameters: dict[str, dict[str, Any]]
    errors: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_catalog(cls, catalog: dict[str, Any]) -> _Findings:
        rules = catalog["rules"]
        return cls(
            order=[rule["id"] for rule in rules],
            enabled={rule["id"]: rule["enabled"] for rule in rules},
            severity={rule["id"]: rule["default_severity"] for rule in rules},
            parameters={rule["id"]: rule["parameters"] for rule in rules},
        )

    def on(self, rule_id: str) -> bool:
        return self.enabled.get(rule_id, False)

    def param(self, rule_id: str, name: str, default: Any) -> Any:
        value = self.parameters.get(rule_id, {}).get(name)
        return default if value is None else value

    def error(self, rule_id: str, target: str, message: str) -> bool:
        """Record an error; returns whether it counted (the rule is enabled)."""
        if not self.on(rule_id):
            return False
        self.errors.append({"rule_id": rule_id, "target": target, "message": message})
        return True

    def warn(self, rule_id: str, target: str, message: str) -> None:
        if self.on(rule_id):
            self.warnings.append({"rule_id": rule_id, "target": target, "message": message})


@dataclass
class _Invocations:
    """Index of the diagnosis's invocations by id and by tool name."""

    by_id: dict[str, dict[str, Any]]
    by_tool: dict[str, list[str]]

    @classmethod
    def build(cls, invocations: Any) -> _Invocations:
        by_id: dict[str, dict[str, Any]] = {}
        by_tool: dict[str, list[str]] = {}
        rows = invocations if isinstance(invocations, list | tuple) else []
        for row in rows:
            if not isinstance(row, dict):
                continue
            invocation_id = row.get("invocation_id")
            if not isinstance(invocation_id, str) or not invocation_id or invocation_id in by_id:
                continue
            by_id[invocation_id] = row
            tool_name = row.get("tool_name")
            if isinstance(tool_name, str):
                by_tool.setdefault(tool_name, []).append(invocation_id)
        return cls(by_id=by_id, by_tool=by_tool)


def _present(value: Any) -> bool:
    """Whether a binding field counts as given (``None``, ``""`` and ``[]`` do not)."""
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return bool(value)
    return True


# --------------------------------------------------------------------------- schema rule


def _check_top_level(findings: _Findings, parse_status: Any, structured_output: Any) -> list[Any]:
    """Apply the document-level part of ``schema.executor_v2``; return the claims to check."""
    status = parse_status.get("status") if isinstance(parse_status, dict) else None
    if status != "valid":
        detail = parse_status.get("error") if isinstance(parse_status, dict) else None
        message = f"executor output parse status is {status or 'unknown'}"
        if isinstance(detail, str) and detail:
            message += f": {detail}"
        findings.error(RULE_SCHEMA, "executor_output", message)
    if structured_output is None:
        if status == "valid":
            findings.error(
                RULE_SCHEMA, "executor_output", "parse status is valid but no structured object"
            )
        return []
    if not isinstance(structured_output, dict):
        findings.error(RULE_SCHEMA, "executor_output", "structured output is not a JSON object")
        return []

    version = findings.param(RULE_SCHEMA, "answer_version", "executor_evidence_v2")
    actual = structured_output.get("answer_version")
    if actual != version:
        message = (
            "answer_version is missing"
            if actual is None
            else f"answer_version is {actual!r}, expected {version!r}"
        )
        findings.error(RULE_SCHEMA, "answer_version", message)
    forbidden = findings.param(
        RULE_SCHEMA, "forbidden_keys", _DEFAULT_SCHEMA_PARAMETERS["forbidden_keys"]
    )
    for key in forbidden:
        if key in structured_output:
            findings.error(RULE_SCHEMA, key, f"forbidden key {key!r} is present")
    arrays = findings.param(
        RULE_SCHEMA, "required_arrays", _DEFAULT_SCHEMA_PARAMETERS["required_arrays"]
    )
    for key in arrays:
        if key not in structured_output:
            findings.error(RULE_SCHEMA, key, f"{key!r} is missing")
        elif not isinstance(structured_output[key], list):
            findings.error(RULE_SCHEMA, key, f"{key!r} must be an array")
    claims = structured_output.get("claims")
    if not isinstance(claims, list):
        message = "'claims' is missing" if claims is None else "'claims' must be an array"
        findings.error(RULE_SCHEMA, "claims", message)
        return []
    return claims


def _check_claim_fields(
    findings: _Findings, claim: dict[str, Any], target: str, seen_ids: set[str]
) -> str | None:
    """Apply the claim-level part of ``schema.executor_v2``; return a usable claim id."""
    required = findings.param(
        RULE_SCHEMA, "required_claim_fields", _DEFAULT_SCHEMA_PARAMETERS["required_claim_fields"]
    )
    for name in required:
        value = claim.get(name)
        if not isinstance(value, str) or not value.strip():
            message = (
                f"claim is missing {name!r}"
                if value is None
                else f"{name!r} must be a non-empty string"
            )
            findings.error(RULE_SCHEMA, f"{target}.{name}", message)
    checks = (
        ("claim_type", "allowed_claim_types"),
        ("support_level", "allowed_support_levels"),
    )
    for name, parameter in checks:
        allowed = findings.param(RULE_SCHEMA, parameter, _DEFAULT_SCHEMA_PARAMETERS[parameter])
        value = claim.get(name)
        if isinstance(value, str) and value.strip() and allowed and value not in allowed:
            findings.error(
                RULE_SCHEMA,
                f"{target}.{name}",
                f"{name} {value!r} is not one of {', '.join(allowed)}",
            )
    claim_id = claim.get("claim_id")
    if not isinstance(claim_id, str) or not claim_id.strip():
        return None
    if claim_id in seen_ids:
        findings.error(RULE_SCHEMA, f"{target}.claim_id", f"claim_id {claim_id!r} is repeated")
        return None
    seen_ids.add(claim_id)
    return claim_id


# --------------------------------------------------------------------------- evidence rules


def _resolve_invocation_id(
    findings: _Findings, binding: dict[str, Any], target: str, index: _Invocations
) -> str | None:
    """Find the one invocation a binding cites (singular, legacy plural, or narrow backfill)."""
    singular = binding.get("source_invocation_id")
    plural = binding.get("source_invocation_ids")
    if _present(singular):
        if not isinstance(singular, str):
            findings.error(RULE_INVOCATION_REF, target, "source_invocation_id must be a string")
            return None
        invocation_id = singular.strip()
        if invocation_id not in index.by_id:
            findings.error(
                RULE_INVOCATION_REF,
                target,
                f"source_invocation_id {invocation_id!r} is not an invocation of this diagnosis",
            )
            return None
        return invocation_id
    if _present(plural):
        return _resolve_plural(findings, binding, plural, target, index)
    return _backfill(findings, binding, target, index)


def _resolve_plural(
    findings: _Findings,
    binding: dict[str, Any],
    plural: Any,
    target: str,
    index: _Invocations,
) -> str | None:
    if not isinstance(plural, list):
        findings.error(
            RULE_INVOCATION_REF, target, "source_invocation_ids must be an array of invocation ids"
        )
        return None
    ids: list[str] = []
    all_known = True
    for value in plural:
        if not isinstance(value, str) or not value.strip():
            findings.error(
                RULE_INVOCATION_REF, target, f"source_invocation_ids holds a non-id value {value!r}"
            )
            all_known = False
        elif value.strip() not in index.by_id:
            findings.error(
                RULE_INVOCATION_REF,
                target,
                f"source_invocation_ids entry {value.strip()!r} is not an invocation of this "
                "diagnosis",
            )
            all_known = False
        elif value.strip() not in ids:
            ids.append(value.strip())
    if not all_known:
        return None
    if len(ids) == 1:
        return ids[0]
    for invocation_id in ids:
        _check_tool_name(findings, binding, target, invocation_id, index)
    findings.error(
        RULE_RAW_PATH_MISSING,
        target,
        f"legacy source_invocation_ids {', '.join(ids)} cannot name one evidence ref; "
        "cite one source_invocation_id with a raw_path",
    )
    return None


def _backfill(
    findings: _Findings, binding: dict[str, Any], target: str, index: _Invocations
) -> str | None:
    tool_name = binding.get("tool_name")
    if not isinstance(tool_name, str) or not tool_name:
        findings.error(RULE_INVOCATION_REF, target, "binding has no invocation id and no tool_name")
        return None
    candidates = index.by_tool.get(tool_name, [])
    allowed = findings.param(RULE_INVOCATION_REF, "narrow_backfill", True)
    if allowed and len(candidates) == 1:
        findings.warn(
            RULE_INVOCATION_REF,
            target,
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
    findings.error(RULE_INVOCATION_REF, target, f"binding has no invocation id: {reason}")
    return None


def _check_tool_name(
    findings: _Findings,
    binding: dict[str, Any],
    target: str,
    invocation_id: str,
    index: _Invocations,
) -> bool:
    """Return False when the binding's tool_name differs from the recorded invocation's."""
    recorded = index.by_id[invocation_id].get("tool_name")
    claimed = binding.get("tool_name")
    if claimed == recorded:
        return True
    if claimed is None:
        message = f"binding has no tool_name; {invocation_id} is a {recorded} invocation"
    else:
        message = f"tool_name {claimed!r} differs from {invocation_id}'s recorded tool {recorded!r}"
    return not findings.error(RULE_INVOCATION_REF, target, message)


def _evidence_refs(invocation: dict[str, Any]) -> list[Any] | None:
    details = invocation.get("retrieval_details")
    if not isinstance(details, dict):
        return None
    refs = details.get("evidence_refs")
    return refs if isinstance(refs, list) else None


def _check_binding(
    findings: _Findings, binding: dict[str, Any], target: str, index: _Invocations
) -> dict[str, Any] | None:
    """Apply the binding-level evidence rules; return the verified entry when all pass."""
    invocation_id = _resolve_invocation_id(findings, binding, target, index)
    if invocation_id is None:
        return None
    invocation = index.by_id[invocation_id]
    verified = _check_tool_name(findings, binding, target, invocation_id, index)

    raw_path = binding.get("raw_path")
    if not _present(raw_path):
        findings.error(
            RULE_RAW_PATH_MISSING,
            target,
            f"binding to {invocation_id} has no raw_path (it is never synthesised)",
        )
        return None
    refs = _evidence_refs(invocation)
    if refs is None:
        findings.error(
            RULE_REFS_MISSING,
            target,
            f"invocation {invocation_id} has no retrieval_details.evidence_refs",
        )
        return None
    if not isinstance(raw_path, str):
        findings.error(RULE_RAW_PATH, target, f"raw_path must be a string, got {raw_path!r}")
        return None
    raw_path = raw_path.strip()
    ref = next(
        (item for item in refs if isinstance(item, dict) and item.get("raw_path") == raw_path),
        None,
    )
    if ref is None:
        findings.error(
            RULE_RAW_PATH,
            target,
            f"raw_path {raw_path!r} is not among the evidence refs of {invocation_id}",
        )
        return None
    text = ref.get("text")
    text = text if isinstance(text, str) else ""

    if findings.on(RULE_EXCERPT_MISMATCH) and not _excerpt_matches(
        findings, binding.get("evidence_excerpt"), text, target, invocation_id, raw_path
    ):
        verified = False
    if not verified:
        return None
    return {
        "invocation_id": invocation_id,
        "tool_name": invocation.get("tool_name"),
        "raw_path": raw_path,
        "text": text,
    }


def _excerpt_matches(
    findings: _Findings,
    excerpt: Any,
    text: str,
    target: str,
    invocation_id: str,
    raw_path: str,
) -> bool:
    form = findings.param(RULE_EXCERPT_MISMATCH, "unicode_normalization", "NFKC")
    fold = findings.param(RULE_EXCERPT_MISMATCH, "casefold", True)
    collapse = findings.param(RULE_EXCERPT_MISMATCH, "collapse_whitespace", True)
    if not isinstance(excerpt, str):
        findings.error(RULE_EXCERPT_MISMATCH, target, "evidence_excerpt is missing or not a string")
        return False
    wanted = normalize_text(excerpt, unicode_form=form, casefold=fold, collapse_whitespace=collapse)
    if not wanted.strip():
        findings.error(RULE_EXCERPT_MISMATCH, target, "evidence_excerpt is empty")
        return False
    haystack = normalize_text(text, unicode_form=form, casefold=fold, collapse_whitespace=collapse)
    if wanted not in haystack:
        findings.error(
            RULE_EXCERPT_MISMATCH,
            target,
            f"evidence_excerpt is not contained in the text of {invocation_id} {raw_path}",
        )
        return False
    return True


def _check_specifics(
    findings: _Findings, claim: dict[str, Any], target: str, texts: list[str]
) -> None:
    """Apply ``evidence.unbound_specifics`` to one claim with verified evidence."""
    claim_text = claim.get("claim_text")
    if not findings.on(RULE_UNBOUND_SPECIFICS) or not isinstance(claim_text, str):
        return
    suffixes = findings.param(RULE_UNBOUND_SPECIFICS, "identifier_suffixes", _DEFAULT_SUFFIXES)
    strip = findings.param(RULE_UNBOUND_SPECIFICS, "strip_punctuation", _DEFAULT_STRIP_PUNCTUATION)
    insensitive = findings.param(RULE_UNBOUND_SPECIFICS, "case_insensitive", True)
    haystacks = [
        normalize_text(text, casefold=insensitive, collapse_whitespace=False) for text in texts
    ]
    unbound = []
    for token in extract_specifics(
        claim_text, identifier_suffixes=suffixes, strip_punctuation=strip
    ):
        needle = token.casefold() if insensitive else token
        if not any(contains_specific(needle, haystack) for haystack in haystacks):
            unbound.append(token)
    if unbound:
        findings.error(
            RULE_UNBOUND_SPECIFICS,
            target,
            "claim states specifics found in none of its verified evidence: " + ", ".join(unbound),
        )


# --------------------------------------------------------------------------- entry points


def _evaluate(
    parse_status: Any, structured_output: Any, invocations: Any, catalog: dict[str, Any]
) -> dict[str, Any]:
    findings = _Findings.from_catalog(catalog)
    index = _Invocations.build(invocations)
    claims = _check_top_level(findings, parse_status, structured_output)

    checked_bindings = 0
    verified_excerpts: dict[str, list[dict[str, Any]]] = {}
    seen_ids: set[str] = set()
    for claim_index, claim in enumerate(claims):
        target = f"claims[{claim_index}]"
        if not isinstance(claim, dict):
            findings.error(RULE_SCHEMA, target, "claim must be a JSON object")
            continue
        claim_id = _check_claim_fields(findings, claim, target, seen_ids)
        bindings = claim.get("evidence_bindings")
        if not isinstance(bindings, list) or not bindings:
            if bindings is None:
                message = "claim is missing 'evidence_bindings'"
            elif isinstance(bindings, list):
                message = "evidence_bindings is empty"
            else:
                message = "evidence_bindings must be an array"
            findings.error(RULE_SCHEMA, f"{target}.evidence_bindings", message)
            bindings = bindings if isinstance(bindings, list) else []
        verified: list[dict[str, Any]] = []
        for binding_index, binding in enumerate(bindings):
            checked_bindings += 1
            binding_target = f"{target}.evidence_bindings[{binding_index}]"
            if not isinstance(binding, dict):
                findings.error(
                    RULE_SCHEMA, binding_target, "evidence binding must be a JSON object"
                )
                continue
            entry = _check_binding(findings, binding, binding_target, index)
            if entry is not None:
                verified.append({"binding": binding_index, **entry})
        if verified:
            _check_specifics(findings, claim, f"{target}.claim_text", [e["text"] for e in verified])
            if claim_id is not None:
                verified_excerpts[claim_id] = verified

    failed = {error["rule_id"] for error in findings.errors}
    worst = max(
        (_SEVERITY_RANK[findings.severity[error["rule_id"]]] for error in findings.errors),
        default=0,
    )
    if findings.errors:
        status = "fail"
    elif findings.warnings:
        status = "warn"
    else:
        status = "pass"
    return {
        "status": status,
        "severity": SEVERITIES[worst],
        "checked_bindings": checked_bindings,
        "failed_rules": [rule_id for rule_id in findings.order if rule_id in failed],
        "warnings": findings.warnings,
        "errors": findings.errors,
        "verified_excerpts": verified_excerpts,
        "rule_set_version": catalog["rule_set_version"],
        "rules": rules_summary(catalog),
    }


def _catalog_metadata(catalog: Any) -> tuple[str, list[dict[str, Any]]]:
    """Best-effort version and rules summary for results built without a usable catalog."""
    try:
        checked = validate_catalog(load_catalog() if catalog is None else catalog)
    except Exception:  # metadata is best effort on the fail-closed path
        version = catalog.get("rule_set_version") if isinstance(catalog, dict) else None
        return (version if isinstance(version, str) and version else DEFAULT_RULE_SET_VERSION), []
    return checked["rule_set_version"], rules_summary(checked)


def _internal_error_result(exc: BaseException, catalog: Any) -> dict[str, Any]:
    version, rules = _catalog_metadata(catalog)
    return {
        "status": "fail",
        "severity": "reject",
        "checked_bindings": 0,
        "failed_rules": [RULE_INTERNAL_ERROR],
        "warnings": [],
        "errors": [
            {
                "rule_id": RULE_INTERNAL_ERROR,
                "target": "gatekeeper",
                "message": f"{type(exc).__name__}: {exc}",
            }
        ],
        "verified_excerpts": {},
        "rule_set_version": version,
        "rules": rules,
    }


def run_gatekeeper(
    parse_status: dict[str, Any],
    structured_output: dict[str, Any] | None,
    invocations: list[dict[str, Any]],
    catalog: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check the executor's structured output against the diagnosis's invocations.

    Runs every enabled catalog rule (contracts section 4). Never raises: an unexpected exception
    (including an invalid catalog) yields a fail-closed result with ``severity="reject"`` and the
    rule id ``gatekeeper.internal_error``.

    Args:
        parse_status: ``{"status": "valid"|"missing"|"malformed", "fence_stripped", "error"}``.
        structured_output: The executor's parsed JSON object, or ``None``.
        invocations: Every invocation row of the current diagnosis (all rounds).
        catalog: A rule catalog; ``None`` uses the bundled one.

    Returns:
        ``{"status", "severity", "checked_bindings", "failed_rules", "warnings", "errors",
        "verified_excerpts", "rule_set_version", "rules"}``. ``verified_excerpts`` maps a claim id
        to ``[{"binding", "invocation_id", "tool_name", "raw_path", "text"}]`` where ``text`` is
        the full text of the cited evidence ref; only claims with a verified binding appear.
    """
    try:
        checked = _bundled_catalog() if catalog is None else validate_catalog(catalog)
        return _evaluate(parse_status, structured_output, invocations, checked)
    except Exception as exc:  # fail closed on anything unexpected
        return _internal_error_result(exc, catalog)


def fallback_pass(catalog: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the pass result used when no Gatekeeper is configured.

    Args:
        catalog: A rule catalog whose version and rules to report; ``None`` uses the bundled one
            (and, should it be unreadable, the default version with an empty rules summary).

    Returns:
        The result shape of :func:`run_gatekeeper` with ``status="pass"``, ``severity="none"``,
        no findings and ``"fallback": True``.
    """
    version, rules = _catalog_metadata(catalog)
    return {
        "status": "pass",
        "severity": "none",
        "checked_bindings": 0,
        "failed_rules": [],
        "warnings": [],
        "errors": [],
        "verified_excerpts": {},
        "rule_set_version": version,
        "rules": rules,
        "fallback": True,
    }
