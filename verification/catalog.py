"""The Gatekeeper's rule catalog: data (ids, descriptions, switches, severities, parameters).

``gatekeeper_catalog.json`` beside this module is the bundled catalog. A catalog is validated once,
when it is loaded or handed to the Gatekeeper, and turned into ``Settings``: the typed switches and
parameters the rules read. A rule's behaviour is code (``verification.gatekeeper`` and
``verification.executor_output``), so the catalog must list exactly the known rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Final, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from state.records import (
    ANSWER_VERSION,
    CLAIM_TYPES,
    FORBIDDEN_KEYS,
    SUPPORT_LEVELS,
    JSONValue,
    RuleId,
    RuleSummary,
    Severity,
)
from state.records import Catalog as Catalog
from state.records import CatalogRule as CatalogRule
from verification.text import EDGE_PUNCTUATION, IDENTIFIER_SUFFIXES, UnicodeForm

CATALOG_RESOURCE = "gatekeeper_catalog.json"
DEFAULT_RULE_SET_VERSION = "gatekeeper-rules.v2"
"""Version of the bundled rule catalog; carried by results built without a usable catalog."""

SCHEMA: Final = "schema.executor_v2"
INVOCATION_REF: Final = "evidence.invocation_ref"
RAW_PATH_MISSING: Final = "evidence.raw_path_missing"
REFS_MISSING: Final = "evidence.refs_missing"
RAW_PATH: Final = "evidence.raw_path"
EXCERPT_MISMATCH: Final = "evidence.excerpt_mismatch"
UNBOUND_SPECIFICS: Final = "evidence.unbound_specifics"
FABRICATED: Final = "evidence.fabricated"
INTERNAL_ERROR: Final = "gatekeeper.internal_error"

_T = TypeVar("_T")

REQUIRED_CLAIM_FIELDS: Final = ("claim_id", "claim_type", "claim_text", "support_level")
REQUIRED_ARRAYS: Final = ("hypotheses", "recommended_actions", "missing_info")

KNOWN_RULE_IDS: Final[tuple[RuleId, ...]] = get_args(RuleId)[:-1]
"""The catalog rules, in catalog order (``gatekeeper.internal_error`` is not a catalog rule)."""


LATER_RULES: Final[dict[RuleId, CatalogRule]] = {
    FABRICATED: CatalogRule(
        id=FABRICATED,
        description="(not in this catalog's rule set: added in gatekeeper-rules.v2)",
        enabled=False,
        default_severity="reject",
        parameters={},
    ),
}
"""Rules added after the first rule set. A catalog written before one was added (recorded with
an older diagnosis) gets it disabled, so that re-checking that diagnosis applies its own rules."""


class CatalogError(ValueError):
    """A rule catalog does not have the expected shape; the message says what is wrong."""


# --------------------------------------------------------------------------- validation models


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _SchemaParameters(_Strict):
    answer_version: StrictStr | None = None
    forbidden_keys: list[StrictStr] | None = None
    required_claim_fields: list[StrictStr] | None = None
    allowed_claim_types: list[StrictStr] | None = None
    allowed_support_levels: list[StrictStr] | None = None
    required_arrays: list[StrictStr] | None = None


class _InvocationRefParameters(_Strict):
    narrow_backfill: StrictBool | None = None


class _ExcerptParameters(_Strict):
    unicode_normalization: UnicodeForm | None = None
    casefold: StrictBool | None = None
    collapse_whitespace: StrictBool | None = None


class _SpecificsParameters(_Strict):
    identifier_suffixes: list[StrictStr] | None = None
    strip_punctuation: StrictStr | None = None
    case_insensitive: StrictBool | None = None


_PARAMETERS: dict[str, type[_Strict]] = {
    SCHEMA: _SchemaParameters,
    INVOCATION_REF: _InvocationRefParameters,
    EXCERPT_MISMATCH: _ExcerptParameters,
    UNBOUND_SPECIFICS: _SpecificsParameters,
}


class _Rule(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    id: StrictStr = Field(min_length=1)
    description: StrictStr
    enabled: StrictBool
    default_severity: Severity
    parameters: dict[str, Any]


class _Catalog(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    rule_set_version: StrictStr = Field(min_length=1, pattern=r"\S")
    rules: list[_Rule] = Field(min_length=1)


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"])
    return f"{where.lstrip('.') or 'catalog'}: {first['msg']}"


def validate_catalog(catalog: object) -> Catalog:
    """Check that ``catalog`` is a rule catalog listing every known rule exactly once.

    Unknown rule ids are refused: a rule's behaviour is code, and an id without code would
    silently check nothing.

    Raises:
        CatalogError: naming the field and what is wrong with it.
    """
    try:
        model = _Catalog.model_validate(catalog)
    except ValidationError as exc:
        raise CatalogError(f"rule catalog: {_problem(exc)}") from None
    seen: set[str] = set()
    for rule in model.rules:
        where = f"rule catalog: rule {rule.id!r}"
        if rule.id not in KNOWN_RULE_IDS:
            raise CatalogError(f"{where} is unknown (known: {', '.join(KNOWN_RULE_IDS)})")
        if rule.id in seen:
            raise CatalogError(f"{where} appears more than once")
        seen.add(rule.id)
        parameters = _PARAMETERS.get(rule.id)
        if parameters is not None:
            try:
                parameters.model_validate(rule.parameters)
            except ValidationError as exc:
                raise CatalogError(f"{where}: parameter {_problem(exc)}") from None
    missing = [
        rule_id for rule_id in KNOWN_RULE_IDS if rule_id not in seen and rule_id not in LATER_RULES
    ]
    if missing:
        raise CatalogError(f"rule catalog: missing rules {', '.join(missing)}")
    rules = [
        CatalogRule(
            id=rule.id,
            description=rule.description,
            enabled=rule.enabled,
            default_severity=rule.default_severity,
            parameters=rule.parameters,
        )
        for rule in model.rules
    ]
    rules += [rule.copy() for rule_id, rule in LATER_RULES.items() if rule_id not in seen]
    return Catalog(rule_set_version=model.rule_set_version, rules=rules)


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read and validate a rule catalog (``None``: the bundled one).

    Raises:
        CatalogError: The file cannot be read, is not JSON, or is not a rule catalog.
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


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class SchemaSettings:
    """Parameters of ``schema.executor_v2``."""

    enabled: bool = True
    answer_version: str = ANSWER_VERSION
    forbidden_keys: tuple[str, ...] = FORBIDDEN_KEYS
    required_claim_fields: tuple[str, ...] = REQUIRED_CLAIM_FIELDS
    allowed_claim_types: tuple[str, ...] = CLAIM_TYPES
    allowed_support_levels: tuple[str, ...] = SUPPORT_LEVELS
    required_arrays: tuple[str, ...] = REQUIRED_ARRAYS


@dataclass(frozen=True)
class Settings:
    """A validated catalog as the rules read it.

    ``catalog`` is the catalog itself: recorded with each diagnosis, so that a re-check of it
    uses the same rules.
    """

    catalog: Catalog
    rule_set_version: str
    order: tuple[RuleId, ...]
    enabled: dict[RuleId, bool]
    severity: dict[RuleId, Severity]
    schema: SchemaSettings
    narrow_backfill: bool
    excerpt_form: UnicodeForm
    excerpt_casefold: bool
    excerpt_collapse_whitespace: bool
    identifier_suffixes: tuple[str, ...]
    strip_punctuation: str
    specifics_case_insensitive: bool

    def on(self, rule_id: RuleId) -> bool:
        """Whether a rule is enabled."""
        return self.enabled.get(rule_id, False)

    def summary(self) -> list[RuleSummary]:
        """``[{id, enabled, default_severity}]`` in catalog order, for results."""
        return [
            RuleSummary(id=rule_id, enabled=self.enabled[rule_id], default_severity=sev)
            for rule_id, sev in self.severity.items()
        ]


def _parameters(catalog: Catalog, rule_id: str) -> dict[str, JSONValue]:
    rule = next(rule for rule in catalog["rules"] if rule["id"] == rule_id)
    return rule["parameters"]


def _known(rule_id: str) -> RuleId:
    return next(known for known in KNOWN_RULE_IDS if known == rule_id)


def _or(value: _T | None, default: _T) -> _T:
    return default if value is None else value


def settings_of(catalog: Catalog) -> Settings:
    """The typed settings of a validated catalog (unset parameters take their defaults)."""
    rules = [(_known(rule["id"]), rule) for rule in catalog["rules"]]
    enabled = {rule_id: rule["enabled"] for rule_id, rule in rules}
    schema = _SchemaParameters.model_validate(_parameters(catalog, SCHEMA))
    backfill = _InvocationRefParameters.model_validate(_parameters(catalog, INVOCATION_REF))
    excerpt = _ExcerptParameters.model_validate(_parameters(catalog, EXCERPT_MISMATCH))
    spec = _SpecificsParameters.model_validate(_parameters(catalog, UNBOUND_SPECIFICS))
    base = SchemaSettings()
    return Settings(
        catalog=catalog,
        rule_set_version=catalog["rule_set_version"],
        order=tuple(rule_id for rule_id, _ in rules),
        enabled=enabled,
        severity={rule_id: rule["default_severity"] for rule_id, rule in rules},
        schema=SchemaSettings(
            enabled=enabled[SCHEMA],
            answer_version=_or(schema.answer_version, base.answer_version),
            forbidden_keys=tuple(_or(schema.forbidden_keys, base.forbidden_keys)),
            required_claim_fields=tuple(
                _or(schema.required_claim_fields, base.required_claim_fields)
            ),
            allowed_claim_types=tuple(_or(schema.allowed_claim_types, base.allowed_claim_types)),
            allowed_support_levels=tuple(
                _or(schema.allowed_support_levels, base.allowed_support_levels)
            ),
            required_arrays=tuple(_or(schema.required_arrays, base.required_arrays)),
        ),
        narrow_backfill=_or(backfill.narrow_backfill, True),
        excerpt_form=_or(excerpt.unicode_normalization, "NFKC"),
        excerpt_casefold=_or(excerpt.casefold, True),
        excerpt_collapse_whitespace=_or(excerpt.collapse_whitespace, True),
        identifier_suffixes=tuple(_or(spec.identifier_suffixes, IDENTIFIER_SUFFIXES)),
        strip_punctuation=_or(spec.strip_punctuation, EDGE_PUNCTUATION),
        specifics_case_insensitive=_or(spec.case_insensitive, True),
    )


@lru_cache(maxsize=1)
def bundled_settings() -> Settings:
    """The settings of the bundled catalog, read and validated once per process."""
    return settings_of(load_catalog())


def settings_for(catalog: Catalog | None) -> Settings:
    """The settings of ``catalog`` (validated), or of the bundled catalog when None.

    Raises:
        CatalogError: when ``catalog`` is not a valid rule catalog.
    """
    return bundled_settings() if catalog is None else settings_of(validate_catalog(catalog))
