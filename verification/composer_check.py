"""The check of a model-written answer summary: only Verifier-allowed material, nothing new.

The composer model is asked for a short summary that cites the confirmed claims it states.
Code accepts it only when it cites confirmed claims (on REJECT: direct observations only), every
specific it states is stated by one of those claims as a whole token (``verification.text``), it
repeats no gap or direction as established, carries no executor JSON, and a REJECT reply gives no
directions. Anything else falls back to the template.
"""

from __future__ import annotations

import re

from state.display import one_line
from state.records import ConfirmedItem, JSONObject, Material
from verification.conclusion import stated_answer
from verification.text import contains_whole, normalize, specifics

SUMMARY_CHARS = 1000
"""Longest model summary accepted (the prompt asks for one or two sentences)."""

# Fragments of the executor contract: a summary carrying them leaks executor JSON.
_CONTRACT_FRAGMENTS = (
    "answer_version",
    "executor_evidence_v2",
    "evidence_bindings",
    "claim_id",
    "support_level",
    "source_invocation_id",
    "evidence_excerpt",
    "user_facing_answer",
    "diagnosis_summary",
)


TRACEABLE_SHARE = 0.8
"""Share of a sentence's content words that must come from the claims it cites."""

_SENTENCE = re.compile(r"[^.!?;。！？；\n]+")
_WORD = re.compile(r"[a-z0-9]+")
# Name-like tokens: hyphenated or dotted (order-service), with digits (OrderService5xxHigh), or
# in capitals (HTTP): a name no cited claim gives is a new entity.
_NAME = re.compile(
    r"[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)+|[A-Za-z]+[0-9][A-Za-z0-9]*|[A-Z]{2,}"
)
_CJK = re.compile("[\u4e00-\u9fff]")
# Wider than ``asserts_cause``: a summary may not even suggest a cause its claims do not state.
_CAUSAL = re.compile(
    r"\b(?:because|caused|causes|causing|cause|due to|owing to|result of|resulted|resulting|"
    r"led to|leads? to|since|therefore|thus|hence|so that)\b|原因|因为|由于|导致|造成|所以|根因",
    re.IGNORECASE,
)
_NUMBER_WORDS = re.compile(
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
    r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|"
    r"eighty|ninety|hundreds?|thousands?|millions?|dozens?|twice|thrice|half)\b"
    "|[一二两三四五六七八九十百千万亿]",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"\b(?:inferred|inference|likely|probably|possibly|may|might|suggests?|appears?)\b|推断|可能|似乎",
    re.IGNORECASE,
)
_FUNCTION_WORDS = frozenset(
    "a an and also are as at be been being both but by for from had has have in is it its of on "
    "or the their them there these they this those to was were which while with".split()
)
_CJK_FUNCTION = frozenset("的了在和与及也是有为并且而其中")


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _untraceable(sentence: str, allowed: str) -> str | None:
    """Why one sentence is not traceable to the allowed text (normalised), or None."""
    norm = normalize(sentence)
    for pattern, what in ((_CAUSAL, "a cause"), (_NUMBER_WORDS, "a number in words")):
        found = pattern.search(norm)
        if found and found.group(0).lower() not in allowed:
            return f"states {what} ({found.group(0)!r}) that no cited claim states"
    for name in _NAME.findall(one_line(sentence)):
        if not contains_whole(normalize(name), allowed):
            return f"names {name!r}, which no cited claim names"
    stems = {_stem(word) for word in _WORD.findall(allowed)}
    words = [w for w in _WORD.findall(norm) if w not in _FUNCTION_WORDS and not w.isdigit()]
    chars = [c for c in _CJK.findall(norm) if c not in _CJK_FUNCTION]
    content = [_stem(word) in stems for word in words] + [char in allowed for char in chars]
    if content and sum(content) / len(content) < TRACEABLE_SHARE:
        return "is not a restatement of the claims it cites"
    return None


def usable_confirmed(material: Material, verdict: str) -> list[ConfirmedItem]:
    """The confirmed claims a model may state for this verdict.

    On REJECT the answer gives no root cause: confirmed claims that are only inferences
    (possibly causal) are withheld, exactly as the template withholds them.
    """
    return [item for item in material["confirmed"] if verdict != "REJECT" or not item["inference"]]


def model_material(material: Material, verdict: str) -> JSONObject:
    """The material the composer model is shown for this verdict (no evidence texts)."""
    return {
        "confirmed": [
            {"claim_id": c["claim_id"], "claim_text": c["claim_text"], "inference": c["inference"]}
            for c in usable_confirmed(material, verdict)
        ],
        "directions": []
        if verdict == "REJECT"
        else [
            {"text": d["text"], "kind": d["kind"], "basis": d["basis"], "claim_id": d["claim_id"]}
            for d in material["directions"]
        ],
        "gaps": [
            {"text": g["text"], "kind": g["kind"], "claim_id": g["claim_id"]}
            for g in material["gaps"]
        ],
        "next_steps": [{"text": s["text"], "source": s["source"]} for s in material["next_steps"]],
        **(
            {"conclusion": material.get("conclusion", "")}
            if verdict == "PASS" and material.get("conclusion")
            else {}
        ),
    }


def check_composer_reply(reply: JSONObject | None, material: Material, verdict: str) -> list[str]:
    """Violations of the composer contract in a parsed model reply (empty when usable)."""
    if reply is None:
        return ["the reply is not one JSON object"]
    summary = reply.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        return ["summary is missing or empty"]
    problems: list[str] = []
    if len(summary) > SUMMARY_CHARS:
        problems.append(f"summary is longer than {SUMMARY_CHARS} characters")
    confirmed = {c["claim_id"]: c["claim_text"] for c in usable_confirmed(material, verdict)}
    withheld = {
        c["claim_id"]: c["claim_text"]
        for c in material["confirmed"]
        if c["claim_id"] not in confirmed
    }
    cited_raw = reply.get("summary_claim_ids")
    if not isinstance(cited_raw, list) or not cited_raw:
        problems.append("summary_claim_ids must list the confirmed claims the summary states")
        cited_raw = []
    cited = [str(claim_id) for claim_id in cited_raw]
    for claim_id in cited:
        if claim_id in withheld:
            problems.append(
                f"summary cites {claim_id!r}, an inference that a REJECT answer must not state"
            )
        elif claim_id not in confirmed:
            problems.append(f"summary cites {claim_id!r}, which is not a confirmed claim")
    presented = reply.get("confirmed")
    if presented is not None and not isinstance(presented, list):
        problems.append("confirmed must be a list")
        presented = []
    for item in presented or []:
        shown = item.get("claim_id") if isinstance(item, dict) else None
        if str(shown) not in confirmed:
            problems.append(f"{shown!r} is presented as confirmed but was not confirmed")
    allowed = normalize(" ".join(confirmed[c] for c in cited if c in confirmed))
    for sentence in _SENTENCE.findall(summary):
        if sentence.strip() and (reason := _untraceable(sentence, allowed)) is not None:
            problems.append(f"summary sentence {one_line(sentence, 60)!r} {reason}")
    inferences = [c["claim_id"] for c in material["confirmed"] if c["inference"]]
    for claim_id in (c for c in cited if c in inferences):
        if not _HEDGE.search(normalize(summary)):
            problems.append(f"summary states the inference {claim_id!r} as an observed fact")
    for token in specifics(summary):
        if not contains_whole(normalize(token), allowed):
            problems.append(f"summary states {token!r}, which no cited confirmed claim states")
    norm_summary = normalize(summary)
    problems += [
        f"summary carries executor JSON ({fragment!r})"
        for fragment in _CONTRACT_FRAGMENTS
        if fragment in norm_summary
    ]
    for kind, texts in (
        ("direction", [d["text"] for d in material["directions"]]),
        ("gap", [g["text"] for g in material["gaps"]]),
    ):
        for raw in texts:
            text = normalize(raw)
            if len(text) >= 8 and text in norm_summary:
                problems.append(f"summary presents a {kind} as established: {text[:60]!r}")
    for claim_id, withheld_text in withheld.items():
        text = normalize(withheld_text)
        if len(text) >= 8 and text in norm_summary:
            problems.append(f"summary states the inference {claim_id!r} in a REJECT answer")
    if verdict == "REJECT" and reply.get("directions"):
        problems.append("a REJECT answer must not give directions or a root cause")
    problems += _turned_conclusion(summary, material, verdict)
    return problems


def _turned_conclusion(summary: str, material: Material, verdict: str) -> list[str]:
    """A summary whose yes or no is not the verified conclusion's (or states one without it)."""
    said = stated_answer(summary)
    if said is None:
        return []
    conclusion = material.get("conclusion", "") if verdict == "PASS" else ""
    expected = stated_answer(conclusion) if conclusion else None
    if expected is None:
        return [f"summary answers {said!r}, but no verified conclusion says so"]
    if said != expected:
        return [f"summary answers {said!r} where the verified conclusion answers {expected!r}"]
    return []
