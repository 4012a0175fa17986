"""The second hop of a bridge question, for every flow that searches documents (the agent, Research Flow).

A bridge question names the entity it asks about only by its relation to another ("Where was the
director of Harbour Lights born?"): the passages found for the question's own words name the
director, and the answer is in the director's passages. This module reads which phrase of a question
is the bridge (`bridge_of`), asks the model which name the first passages give for it (`hop_query`,
`parse_hop`), finds that name without a model when the reply gives none (`bridge_entities`), chooses
the names to look up (`hop_names`) and writes the follow-up search (`hop_search`). The flows that
send the searches are thoughtloom.search.agent.kinds (`follow_bridge`) and thoughtloom.search.research.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..grounding.claims import STOPWORDS, query_terms
from .base import Query, few_shot_query, one_line

#: Largest follow-up search count the command-line flags take (`--bridge-hops`).
MAX_BRIDGE_HOPS = 10
#: Characters of a passage shown in a prompt (the naming call here; the research flow's prompts too).
PASSAGE_CHARS = 600
#: Sampling temperature of the naming call: the name is copied from the passages, not invented.
HOP_TEMPERATURE = 0.2

#: "the director of Harbour Lights", "the woman who portrayed Corliss Archer", "the arena where the X played":
#: a role (after up to two modifiers), a link word, up to four lowercase words, then the capitalised name.
_BRIDGE = re.compile(
    r"\b(?:[Tt]he|[Aa]n?) (?:[a-z-]+ ){0,2}(?!same\b)(?P<role>[a-z-]+) (?:of|who|whose|that|which|where) "
    r"(?P<link>(?:[a-z-]+ ){0,4}?)[\"“]?(?P<subject>[A-Z0-9][\w'’.&-]*"
    r"(?: (?:(?:of|the|and|de|la|von|van) )*[A-Z0-9][\w'’.&-]*)*)")
#: Words a passage states a role by that do not share the role's stem ("the writer of X": "X was written by").
_ROLE_WORDS = {"writer": ("wrote", "written", "writer"), "author": ("wrote", "written", "author"),
               "singer": ("sang", "sung", "singer"), "composer": ("composed", "composer")}
#: A name in a passage: one to four capitalised words ("Jane Doe", "J. R. Smith", "Spielberg").
_NAME = re.compile(r"(?:[A-Z][\w'’-]*\.?)(?:\s+(?:[A-Z][\w'’-]*\.?)){0,3}")
_HOP_SYSTEM = (
    "You read search results to find who or what a question is about. Reply with one line, NAME: then the "
    "name exactly as the passages write it, or NAME: none if the passages do not say."
)
_HOP_EXAMPLE = (
    ("Passages:\n[1] # The Long Road The Long Road is a 1990 film directed by Ann Smith.\n"
     "Question: In which year was the director of The Long Road born?\nWho or what is the director of The Long Road?"),
    "NAME: Ann Smith",
)
_HOP_NAME = re.compile(r"^\s*\**\s*name\s*\**\s*:\s*\**\s*(.+?)\s*\**\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)


class HopError(ValueError):
    """A reply meant to name the question's bridge entity that does not name one the passages give."""


@dataclass(frozen=True, slots=True)
class Bridge:
    """A bridge question's relation: the phrase that names the bridge ("the director of Harbour Lights"), its role
    ("director"), the words stating the relation ("portrayed" in "the woman who portrayed X"), whose it is
    ("Harbour Lights"), the question, and the question's other words, which ask about the bridge entity ("born")."""

    phrase: str
    role: str
    link: str
    subject: str
    question: str
    rest: str


def bridge_of(question: str) -> Bridge | None:
    """The bridge of a question asking about an entity named only by its relation to another ("Where was the
    director of Harbour Lights born?"); None when there is none, or the question asks for no more than the
    relation's entity ("Who is the director of Harbour Lights?": the first search answers it)."""
    m = _BRIDGE.search(question)
    if m is None:
        return None
    rest = query_terms(f"{question[:m.start()]} {question[m.end():]}")
    if not rest:
        return None
    return Bridge(m.group(0), m.group("role"), m.group("link").strip(), m.group("subject").strip(" .?"), question,
                  " ".join(rest))


def bridge_hops_error(hops: int) -> str | None:
    """Why a follow-up search count (`bridge_hops`) is refused; None when it is valid."""
    return None if hops >= 0 else f"bridge_hops must be >= 0; got {hops}"


def hop_search(bridge: Bridge, name: str) -> str:
    """The follow-up search: the name the passages gave for the bridge, then the question's other words."""
    return f"{name} {bridge.rest}"


def numbered(passages: Sequence[tuple[str, str]]) -> str:
    """Passages as the model sees them: [1] text, one per line."""
    return "\n".join(f"[{i}] {one_line(text, PASSAGE_CHARS)}" for i, (_, text) in enumerate(passages, 1))


def hop_query(bridge: Bridge, passages: Sequence[tuple[str, str]]) -> Query:
    """Ask which name the passages give for the question's bridge phrase, as one `NAME:` line."""
    return few_shot_query(_HOP_SYSTEM, [_HOP_EXAMPLE], f"Passages:\n{numbered(passages)}\nQuestion: {bridge.question}\n"
                          f"Who or what is {bridge.phrase}?", max_tokens=24, stop=("\n",), temperature=HOP_TEMPERATURE)


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[\w'’-]+", text)}


def parse_hop(reply: str, bridge: Bridge, passages: Sequence[tuple[str, str]]) -> str:
    """The name a `NAME:` reply gives; raises HopError when there is none, or it is not in the passages (made up),
    or the question names it already (no new hop)."""
    m = _HOP_NAME.search(reply)
    if m is None:
        raise HopError(f"no NAME: line in the reply {one_line(reply, 80)!r}")
    name = m.group(1).strip().strip("\"'`").strip()
    if not name or name.lower() in ("none", "unknown", "n/a"):
        raise HopError("the reply names no one")
    if not any(name.lower() in text.lower() for _, text in passages):
        raise HopError(f"the passages do not name {name!r}")
    if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", bridge.question, re.IGNORECASE):
        # Only as a phrase: "the university whose campus is in Lawrence, Kansas" does not name the University of
        # Kansas, though it holds each of its words.
        raise HopError(f"{name!r} is named by the question itself")
    return name


def name_spans(text: str) -> list[tuple[int, str]]:
    """The names a text writes, with where each starts: runs of capitalised words, without the function words
    that open a sentence ("The film", "It")."""
    out = []
    for m in _NAME.finditer(text):
        words = m.group(0).rstrip(".").split()
        while words and words[0].lower().strip(".") in STOPWORDS:
            words = words[1:]
        if words:
            out.append((m.start(), " ".join(words)))
    return out


def _stems(bridge: Bridge) -> tuple[str, ...]:
    # "director" -> "direc": finds "directed" and "director"; "portrayed" -> "portra": "portrays".
    words = [bridge.role, *(w for w in bridge.link.split() if w not in STOPWORDS)]
    return tuple(s for w in words for s in _ROLE_WORDS.get(w, (w[: max(5, len(w) - 3)],)))


def bridge_entities(bridge: Bridge, passages: Sequence[tuple[str, str]]) -> list[str]:
    """The names the passages give the bridge by, without a model: in each sentence stating the relation
    ("directed by"), the capitalised name nearest the relation's word that the question does not name; first
    passages first, each name once."""
    stems = _stems(bridge)
    known = _words(bridge.question)
    out: list[str] = []
    for _, text in passages:
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        for sentence in re.split(r"(?<=[a-z0-9)][.!?])\s+|\n+", body):
            low = sentence.lower()
            at = min((i for s in stems if (i := low.find(s)) >= 0), default=-1)
            if at < 0:
                continue
            names = [(abs(start - at), name) for start, name in name_spans(sentence)
                     if not _words(name) <= known and not any(w.lower().startswith(stems) for w in name.split())]
            for _, name in sorted(names)[:1]:
                if name not in out:
                    out.append(name)
    return out


def has_page(name: str, passages: Sequence[tuple[str, str]]) -> bool:
    """True when one of the passages is the named entity's own page (headed `# NAME`)."""
    return any(line.strip().lower() == f"# {name}".lower() for _, text in passages for line in text.splitlines()[:1])


@dataclass(frozen=True, slots=True)
class HopPlan:
    """The names to look up after the first passages, best first, each with how it was found; or, when there
    are none, why not."""

    names: tuple[tuple[str, str], ...]
    why_none: str = ""


def hop_names(bridge: Bridge, passages: Sequence[tuple[str, str]], reply: str | None) -> HopPlan:
    """The bridge entities to search for, best first: the model's `NAME:` reply when it names one the passages
    give, then the names `bridge_entities` finds; none when the best one's own page is already among the passages."""
    try:
        if reply is None:
            raise HopError("no model reply")
        names = [(parse_hop(reply, bridge, passages), "named by the model")]
        found = "found in the passages"
    except HopError as exc:
        names, found = [], f"found in the passages ({exc})"
    names += [(name, found) for name in bridge_entities(bridge, passages) if name not in {n for n, _ in names}]
    if not names:
        return HopPlan((), f"the passages name no one for {bridge.phrase!r}")
    if has_page(names[0][0], passages):
        # The bridge entity's own page was read: a search for it finds nothing new.
        return HopPlan((), f"{names[0][0]}'s own page is among the passages")
    return HopPlan(tuple((name, how) for name, how in names if not has_page(name, passages)))
