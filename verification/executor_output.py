"""The executor's final message: parsed as JSON, then read into an ``ExecutorAnswer``.

This is where the executor's untrusted output becomes typed records, once. Parsing is about JSON
only (``valid`` / ``missing`` / ``malformed``, one surrounding code fence tolerated and
recorded). Reading never fails: every shape problem is a ``schema.executor_v2`` finding (or, for a
binding field of the wrong type, a note on the binding that the evidence rules report), and the
claims the object does contain are still read, so they are checked and scored.
"""

from __future__ import annotations

import json

from state.display import clean_text
from state.json_shape import json_type
from state.records import (
    Binding,
    Claim,
    Conclusion,
    ConclusionAnswer,
    ExecutorAnswer,
    Finding,
    Hypothesis,
    JSONObject,
    JSONValue,
    MissingInfo,
    ParseStatus,
    RecommendedAction,
    RootCause,
)
from verification.catalog import SCHEMA, SchemaSettings
from verification.text import normalize_id, strip_fence

_BINDING_STRINGS = ("source_type", "tool_name", "source_invocation_id", "raw_path")


MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted in a model's JSON reply."""


def depth(value: JSONValue) -> int:
    """How deeply arrays and objects nest in a JSON value (a scalar is 0), without recursing."""
    deepest = 0
    stack: list[tuple[JSONValue, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest


def parse_json(text: str) -> tuple[JSONValue, str | None]:
    """Parse a model's JSON text; ``(None, reason)`` when it is not JSON or nests too deeply.

    Unstorable characters (lone surrogates, NUL) are replaced first; nesting deeper than
    ``MAX_DEPTH`` is refused, whether the parser or a later serialiser would fail on it.
    """
    try:
        data: JSONValue = json.loads(clean_text(text))
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        return None, f"not JSON: nested deeper than {MAX_DEPTH} levels"
    if depth(data) > MAX_DEPTH:
        return None, f"nested deeper than {MAX_DEPTH} levels"
    return data, None


def parse_executor_output(text: str | None) -> tuple[ParseStatus, JSONObject | None]:
    """Parse the executor's final text.

    Returns:
        ``(parse_status, object)``. ``valid`` means one JSON object (after stripping one
        surrounding Markdown fence, recorded as ``fence_stripped``); ``missing`` means no final
        message; anything else is ``malformed`` with the reason in ``error``.
    """
    if text is None or not text.strip():
        return ParseStatus(status="missing", fence_stripped=False, error="no final message"), None
    body, fenced = strip_fence(text)
    data, error = parse_json(body)
    if error is not None:
        return ParseStatus(status="malformed", fence_stripped=fenced, error=error), None
    if not isinstance(data, dict):
        error = f"expected one JSON object, got {type(data).__name__}"
        return ParseStatus(status="malformed", fence_stripped=fenced, error=error), None
    return ParseStatus(status="valid", fence_stripped=fenced, error=None), data


def given(value: object) -> bool:
    """Whether a field counts as given (``None``, ``""`` and ``[]`` do not)."""
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return bool(value)
    return True


class _Reader:
    """Collects the findings of reading one object."""

    def __init__(self, schema: SchemaSettings) -> None:
        self.schema = schema
        self.findings: list[Finding] = []

    def fail(
        self,
        target: str,
        message: str,
        claim_id: str | None = None,
        binding_index: int | None = None,
    ) -> None:
        if self.schema.enabled:
            self.findings.append(
                Finding(
                    rule_id=SCHEMA,
                    target=target,
                    message=message,
                    claim_id=claim_id,
                    binding_index=binding_index,
                )
            )

    def top_level(self, parse_status: ParseStatus, raw: object) -> list[JSONValue]:
        """Check the document-level part of the contract; return the raw claims."""
        status = parse_status["status"]
        if status != "valid":
            message = f"executor output parse status is {status}"
            if parse_status["error"]:
                message += f": {parse_status['error']}"
            self.fail("executor_output", message)
        if raw is None:
            if status == "valid":
                self.fail("executor_output", "parse status is valid but no structured object")
            return []
        if not isinstance(raw, dict):
            self.fail("executor_output", "structured output is not a JSON object")
            return []
        actual = raw.get("answer_version")
        if actual != self.schema.answer_version:
            message = (
                "answer_version is missing"
                if actual is None
                else f"answer_version is {actual!r}, expected {self.schema.answer_version!r}"
            )
            self.fail("answer_version", message)
        for key in self.schema.forbidden_keys:
            if key in raw:
                self.fail(key, f"forbidden key {key!r} is present")
        for key in self.schema.required_arrays:
            if key not in raw:
                self.fail(key, f"{key!r} is missing")
            elif not isinstance(raw[key], list):
                self.fail(key, f"{key!r} must be an array")
        claims = raw.get("claims")
        if not isinstance(claims, list):
            missing = "'claims' is missing" if claims is None else "'claims' must be an array"
            self.fail("claims", missing)
            return []
        return claims

    def claim(self, index: int, raw: JSONValue, seen: set[str]) -> Claim:
        target = f"claims[{index}]"
        if not isinstance(raw, dict):
            known_as = _known_as(index, None, seen)
            self.fail(target, "claim must be a JSON object", known_as)
            text = raw if isinstance(raw, str) else ""
            return _claim(index, known_as, False, {"claim_text": text}, [])
        raw_id = raw.get("claim_id")
        claim_id = normalize_id(raw_id) if isinstance(raw_id, str) else None
        claim_id = claim_id or None
        repeated = claim_id is not None and claim_id in seen
        known_as = _known_as(index, None if repeated else claim_id, seen)
        for name in self.schema.required_claim_fields:
            value = raw.get(name)
            if not isinstance(value, str) or not value.strip():
                message = (
                    f"claim is missing {name!r}"
                    if value is None
                    else f"{name!r} must be a non-empty string"
                )
                self.fail(f"{target}.{name}", message, known_as)
        for name, allowed in (
            ("claim_type", self.schema.allowed_claim_types),
            ("support_level", self.schema.allowed_support_levels),
        ):
            value = raw.get(name)
            if isinstance(value, str) and value.strip() and allowed and value not in allowed:
                message = f"{name} {value!r} is not one of {', '.join(allowed)}"
                self.fail(f"{target}.{name}", message, known_as)
        if repeated:
            self.fail(f"{target}.claim_id", f"claim_id {claim_id!r} is repeated", known_as)
        bindings = raw.get("evidence_bindings")
        if not isinstance(bindings, list) or not bindings:
            if bindings is None:
                message = "claim is missing 'evidence_bindings'"
            elif isinstance(bindings, list):
                message = "evidence_bindings is empty"
            else:
                message = "evidence_bindings must be an array"
            self.fail(f"{target}.evidence_bindings", message, known_as)
            bindings = bindings if isinstance(bindings, list) else []
        read = [
            self.binding(target, known_as, position, item) for position, item in enumerate(bindings)
        ]
        return _claim(index, known_as, claim_id is not None and not repeated, raw, read)

    def binding(self, claim_target: str, claim_id: str, index: int, raw: JSONValue) -> Binding:
        if not isinstance(raw, dict):
            target = f"{claim_target}.evidence_bindings[{index}]"
            self.fail(target, "evidence binding must be a JSON object", claim_id, index)
            return _binding(index, {}, {"binding": json_type(raw)})
        bad: dict[str, str] = {}
        for name in _BINDING_STRINGS:
            value = raw.get(name)
            if given(value) and not isinstance(value, str):
                bad[name] = repr(value)
        plural = raw.get("source_invocation_ids")
        if given(plural):
            if not isinstance(plural, list):
                bad["source_invocation_ids"] = repr(plural)
            else:
                for position, value in enumerate(plural):
                    if not isinstance(value, str) or not value.strip():
                        bad[f"source_invocation_ids[{position}]"] = repr(value)
        return _binding(index, raw, bad)


def _text(raw: JSONObject, name: str) -> str:
    value = raw.get(name)
    return value if isinstance(value, str) else ""


def _string(raw: JSONObject, name: str) -> str | None:
    value = raw.get(name)
    return value if isinstance(value, str) and given(value) else None


def _binding(index: int, raw: JSONObject, bad: dict[str, str]) -> Binding:
    plural = raw.get("source_invocation_ids")
    ids = (
        [value for value in plural if isinstance(value, str) and value.strip()]
        if isinstance(plural, list) and plural
        else None
    )
    excerpt = raw.get("evidence_excerpt")
    return Binding(
        index=index,
        source_type=_string(raw, "source_type"),
        tool_name=_string(raw, "tool_name"),
        source_invocation_id=_string(raw, "source_invocation_id"),
        source_invocation_ids=ids,
        raw_path=_string(raw, "raw_path"),
        evidence_excerpt=excerpt if isinstance(excerpt, str) else None,
        bad_fields=bad,
    )


def _known_as(index: int, claim_id: str | None, seen: set[str]) -> str:
    """The id a claim is known by: its own, or its position when it has no usable one.

    A position id never equals an id already taken (``claims[1]`` may be a real id), so no claim
    can take another's label or evidence; ids are unique by construction.
    """
    known_as = claim_id if claim_id is not None else f"claims[{index}]"
    suffix = 1
    while claim_id is None and known_as in seen:
        suffix += 1
        known_as = f"claims[{index}]#{suffix}"
    seen.add(known_as)
    return known_as


def _claim(
    index: int, claim_id: str, id_valid: bool, raw: JSONObject, bindings: list[Binding]
) -> Claim:
    return Claim(
        index=index,
        claim_id=claim_id,
        id_valid=id_valid,
        claim_type=_text(raw, "claim_type"),
        claim_text=_text(raw, "claim_text").strip(),
        support_level=_text(raw, "support_level"),
        evidence_bindings=bindings,
    )


def _query(item: JSONObject) -> JSONObject | None:
    query = item.get("suggested_query")
    return query if isinstance(query, dict) else None


def _items(raw: object, key: str) -> list[JSONObject]:
    """The object (or bare-string) items of one list field; a bare string is a ``text``."""
    values = raw.get(key) if isinstance(raw, dict) else None
    items: list[JSONObject] = []
    for item in values if isinstance(values, list) else []:
        if isinstance(item, dict):
            items.append(item)
        elif isinstance(item, str):
            items.append({"text": item})
    return items


def _root_cause(raw: object) -> RootCause | None:
    """The root cause the executor proposes: ``{service, mechanism, claim_ids}``, else None.

    A proposal without a service or without a claim id to rest on is no proposal.
    """
    found = raw.get("root_cause") if isinstance(raw, dict) else None
    if not isinstance(found, dict):
        return None
    service = _string(found, "service")
    ids = found.get("claim_ids")
    claim_ids = (
        [i.strip() for i in ids if isinstance(i, str) and given(i)] if isinstance(ids, list) else []
    )
    if service is None or not claim_ids:
        return None
    return RootCause(
        service=service.strip(), mechanism=_text(found, "mechanism").strip(), claim_ids=claim_ids
    )


def read_answer(
    parse_status: ParseStatus, raw: object, schema: SchemaSettings | None = None
) -> ExecutorAnswer:
    """Read the executor's parsed object into an ``ExecutorAnswer`` (never raises).

    Args:
        parse_status: How the final message parsed.
        raw: The parsed object (``None`` when there is none; anything else is a finding).
        schema: The ``schema.executor_v2`` parameters; ``None`` uses the defaults.

    Returns:
        The claims (each with the id it is known by), hypotheses, recommended actions, missing
        information, and the schema findings of reading them.
    """
    reader = _Reader(schema or SchemaSettings())
    seen: set[str] = set()
    claims = [
        reader.claim(index, item, seen)
        for index, item in enumerate(reader.top_level(parse_status, raw))
    ]
    return ExecutorAnswer(
        claims=claims,
        hypotheses=[
            Hypothesis(text=_text(item, "text"), basis=_text(item, "basis"))
            for item in _items(raw, "hypotheses")
        ],
        recommended_actions=[
            RecommendedAction(text=_text(item, "text"), source=_text(item, "source"))
            for item in _items(raw, "recommended_actions")
        ],
        missing_info=[
            MissingInfo(text=_text(item, "text"), suggested_query=_query(item))
            for item in _items(raw, "missing_info")
        ],
        schema_findings=reader.findings,
        root_cause=_root_cause(raw),
        conclusion=_conclusion(raw),
    )


_ANSWERS: dict[str, ConclusionAnswer] = {
    "yes": "yes",
    "no": "no",
    "value": "value",
    "unknown": "unknown",
}


def _conclusion(raw: object) -> Conclusion | None:
    """The optional ``conclusion`` object: its text, answer and the claim ids it rests on.

    Anything unreadable is no conclusion (the question is then left without one); an answer
    other than the four is ``unknown``.
    """
    item = raw.get("conclusion") if isinstance(raw, dict) else None
    if isinstance(item, str) and item.strip():
        item = {"text": item}
    if not isinstance(item, dict):
        return None
    text = _text(item, "text").strip()
    said = _text(item, "answer").strip().casefold()
    rests = item.get("rests_on")
    values = rests if isinstance(rests, list) else []
    rests_on = [normalize_id(v) for v in values if isinstance(v, str)]
    if not text:
        return None
    return Conclusion(text=text, answer=_ANSWERS.get(said, "unknown"), rests_on=rests_on)
