"""Comparison questions settled by exact comparison: each entity's fact extracted by the model, compared in code.

"Were Scott Derrickson and Ed Wood of the same nationality?" and "Who is older, Annie Morton or
Terry Richardson?" name two entities and ask how one fact of each compares. Asking a small model
whether a passage "supports yes" gets yes for both sides; here the model is asked only for each
entity's fact, from that entity's passages ("What is the nationality of Ed Wood?" -> "American"),
and the code compares the facts: nationalities through one table of demonyms and countries, dates
parsed to (year, month, day), numbers parsed. The answer is what HotpotQA expects: yes or no for
"the same ...?", the chosen entity's name (as the question writes it) for "which ..., X or Y?".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..grounding.claims import parse_number
from .base import Query, few_shot_query
from .hops import numbered
from .research import answer_key

#: What a comparison compares: the same fact ("same"), the earlier or later date, the larger or smaller number.
KINDS = ("same", "earlier", "later", "more", "fewer")

# "Were X and Y of the same nationality?", "Are X and Y located in the same neighborhood?", "Do X and Y share the same
# director?": two entities joined by "and", then the fact asked for after "the same".
_SAME = re.compile(r"^(?:are|were|is|was|do|did|does)\s+(?:both\s+)?(.+?)\s+and\s+(.+?)"
                   r"(?:\s+(?:both\s+)?(?:have|has|had|share|shared|born|\w+ed|\w+ing))?(?:\s+(?:of|from|in|at|on|to|by))?"
                   r"\s+(?:of\s+)?the\s+same\s+([a-z]+(?:\s+of\s+[a-z]+)?)\b", re.IGNORECASE)
# The two named: "..., X or Y?", "...: X or Y?", "..., X or Y, had more members?", "Is X or Y older?".
_PAIR = re.compile(r"(?:[,:]\s*|^(?:is|was|are|were|did|does|do)\s+)(?:the\s+)?(.+?)\s+or\s+(?:the\s+)?(.+?)\s*(?:[,?]|"
                   r"\s+(?:older|younger|first|earlier|later|born|founded|formed|released|established|created)\b|$)",
                   re.IGNORECASE)
_EARLIER = re.compile(r"\b(older|oldest|first|earlier|earliest|before|sooner)\b", re.IGNORECASE)
_LATER = re.compile(r"\b(younger|youngest|later|latest|last|newer|newest|more\s+recent(?:ly)?|after)\b", re.IGNORECASE)
_MORE = re.compile(r"\b(?:more|most|larger|largest|higher|highest|bigger|biggest|greater|greatest|taller|tallest|"
                   r"longer|longest)\s*([a-z]+)?", re.IGNORECASE)
_FEWER = re.compile(r"\b(?:fewer|fewest|less|least|smaller|smallest|lower|lowest|shorter|shortest)\s*([a-z]+)?",
                    re.IGNORECASE)
_WHICH = re.compile(r"^\s*(?:who|which|what)\b", re.IGNORECASE)
# Nationality questions ask this many ways; one table answers them all.
_NATIONALITY_WORDS = ("nationality", "country", "citizenship", "country of origin", "origin")


@dataclass(frozen=True, slots=True)
class Comparison:
    """A comparison question: what it compares (KINDS), the fact compared, and the two entities as written."""

    kind: str
    fact: str  # "nationality", "date", "number of members", or the word after "the same" ("neighborhood")
    entities: tuple[str, str]

    @property
    def choice(self) -> bool:
        """True when the answer names one of the entities (else it is yes or no)."""
        return self.kind != "same"


def _entity(text: str) -> str:
    return text.strip(" ,.?:;\"'")


def _pair(text: str) -> tuple[tuple[str, str], str] | None:
    """The two a question asks to choose between, and its words around them; None when it names no such pair."""
    if not _WHICH.match(text) and not re.match(r"^(?:is|was|are|were|did|does|do)\b", text, re.IGNORECASE):
        return None
    pair = _PAIR.search(text)
    if pair is None:
        return None
    entities = (_entity(pair.group(1)), _entity(pair.group(2)))
    if not all(entities) or any(len(e.split()) > 8 for e in entities):
        return None
    return entities, f"{text[: pair.start(1)]} {text[pair.end(2):]}"


def choice_of(question: str) -> tuple[str, str] | None:
    """The two a question asks to choose between ("Which writer was from England, Henry Roth or Robert Erskine
    Childers?"): its only possible answers; None for any other question."""
    found = _pair(" ".join(question.split()))
    return found[0] if found is not None else None


def comparison_of(question: str) -> Comparison | None:
    """The comparison a question asks ("same nationality?", "which is older, X or Y?"); None for any other."""
    text = " ".join(question.split())
    same = _SAME.match(text)
    if same is not None:
        fact = same.group(3).lower()
        return Comparison("same", "nationality" if fact in _NATIONALITY_WORDS else fact,
                          (_entity(same.group(1)), _entity(same.group(2))))
    found = _pair(text)
    if found is None:
        return None
    entities, rest = found
    if re.search(r"\b(?:ratio|percentage|proportion|rate)\b", rest, re.IGNORECASE):
        return None  # a ratio is no count the passages state
    if (more := _MORE.search(rest)) is not None:
        return Comparison("more", f"number of {more.group(1)}" if more.group(1) else "number", entities)
    if (fewer := _FEWER.search(rest)) is not None:
        return Comparison("fewer", f"number of {fewer.group(1)}" if fewer.group(1) else "number", entities)
    if _EARLIER.search(rest):
        return Comparison("earlier", "date", entities)
    if _LATER.search(rest):
        return Comparison("later", "date", entities)
    return None


# --- extracting one entity's fact ---------------------------------------------------------------------------

_FACT_SYSTEM = ("You read numbered passages and state one fact about one entity, in a few words, as the passages "
                "give it. Write unknown when the passages do not say.")
_FACT_EXAMPLE = (
    ("Passages:\n[1] Greta Lind (born 3 May 1961) is a Swedish film director.\nQuestion: What is the nationality "
     "of Greta Lind?"),
    "Swedish",
)


def fact_question(comparison: Comparison, entity: str) -> str:
    """The question one entity's passages are asked: its nationality, its date, its number."""
    if comparison.fact == "nationality":
        return f"What is the nationality of {entity} (or the country it is from)?"
    if comparison.fact == "date":
        return f"When was {entity} born, founded, formed or first released? Give the date."
    if comparison.fact.startswith("number"):
        what = comparison.fact.removeprefix("number of ").strip() or "them"
        return f"How many {what} does {entity} have? Give the number."
    return f"What is the {comparison.fact} of {entity}?"


def fact_query(comparison: Comparison, entity: str, passages: Sequence[tuple[str, str]]) -> Query:
    """Ask for one entity's fact from its passages (a few words, or unknown)."""
    return few_shot_query(_FACT_SYSTEM, [_FACT_EXAMPLE],
                          f"Passages:\n{numbered(passages)}\nQuestion: {fact_question(comparison, entity)}",
                          max_tokens=24, temperature=0.0)


# --- reading and comparing facts exactly --------------------------------------------------------------------

#: Demonyms and the names of their countries, by the country they are compared as.
_COUNTRIES: dict[str, tuple[str, ...]] = {
    "united states": ("american", "us", "usa", "u s", "u s a", "united states of america", "america"),
    "united kingdom": ("british", "uk", "u k", "britain", "great britain"),
    "england": ("english",), "scotland": ("scottish", "scots"), "wales": ("welsh",),
    "ireland": ("irish",), "canada": ("canadian",), "australia": ("australian",), "new zealand": ("new zealander",),
    "france": ("french",), "germany": ("german",), "italy": ("italian",), "spain": ("spanish",),
    "portugal": ("portuguese",), "netherlands": ("dutch", "holland"), "belgium": ("belgian",),
    "switzerland": ("swiss",), "austria": ("austrian",), "sweden": ("swedish",), "norway": ("norwegian",),
    "denmark": ("danish",), "finland": ("finnish",), "iceland": ("icelandic",), "poland": ("polish",),
    "russia": ("russian",), "ukraine": ("ukrainian",), "greece": ("greek",), "turkey": ("turkish",),
    "hungary": ("hungarian",), "czech republic": ("czech",), "romania": ("romanian",), "serbia": ("serbian",),
    "croatia": ("croatian",), "japan": ("japanese",), "china": ("chinese",), "korea": ("korean",),
    "south korea": ("south korean",), "india": ("indian",), "pakistan": ("pakistani",), "iran": ("iranian",),
    "israel": ("israeli",), "egypt": ("egyptian",), "nigeria": ("nigerian",), "south africa": ("south african",),
    "mexico": ("mexican",), "brazil": ("brazilian",), "argentina": ("argentine", "argentinian"),
    "chile": ("chilean",), "colombia": ("colombian",), "cuba": ("cuban",), "philippines": ("filipino",),
    "indonesia": ("indonesian",), "vietnam": ("vietnamese",), "thailand": ("thai",),
}
_NATIONALITY: dict[str, str] = {name: country for country, names in _COUNTRIES.items() for name in (country, *names)}
_UNKNOWN = {"unknown", "none", "not stated", "not given", "not known", "unclear", "n a"}


def nationality(text: str) -> str | None:
    """The country a nationality or country name says ("American", "the U.S." -> "united states"); the one named
    first in a longer reply; None when it names none."""
    key = answer_key(text)
    if not key or key in _UNKNOWN:
        return None
    words = key.split()
    # Longest names first at each position: "south korean" before "korean", "united states of america" before "us".
    for i in range(len(words)):
        for size in (4, 3, 2, 1):
            name = " ".join(words[i:i + size])
            if len(words) - i >= size and name in _NATIONALITY:
                return _NATIONALITY[name]
    return None


_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                       "september", "october", "november", "december"), 1)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_YEAR = re.compile(r"\b(\d{3,4})\b")
_BC = re.compile(r"\b(?:bc|bce)\b", re.IGNORECASE)
_DAY_MONTH = re.compile(r"\b(\d{1,2})\s+([a-z]+)\.?,?\s+(\d{3,4})\b", re.IGNORECASE)
_MONTH_DAY = re.compile(r"\b([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{3,4})\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(r"\b([a-z]+)\.?,?\s+(\d{3,4})\b", re.IGNORECASE)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")

Date = tuple[int, int | None, int | None]


def parse_date(text: str) -> Date | None:
    """The first date a text gives, as (year, month, day) with what it leaves out None ("3 May 1961",
    "May 3, 1961", "May 1961", "1961", "1961-05-03"); a year before Christ is negative; None without a year."""
    sign = -1 if _BC.search(text) else 1
    found: list[tuple[int, Date]] = []
    if (m := _ISO.search(text)) is not None:
        found.append((m.start(), (int(m.group(1)), int(m.group(2)), int(m.group(3)))))
    for m in _DAY_MONTH.finditer(text):
        if m.group(2).lower() in _MONTHS:
            found.append((m.start(), (sign * int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))))
            break
    for m in _MONTH_DAY.finditer(text):
        if m.group(1).lower() in _MONTHS:
            found.append((m.start(), (sign * int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)))))
            break
    for m in _MONTH_YEAR.finditer(text):
        if m.group(1).lower() in _MONTHS:
            found.append((m.start(), (sign * int(m.group(2)), _MONTHS[m.group(1).lower()], None)))
            break
    if (m := _YEAR.search(text)) is not None:
        found.append((m.start(), (sign * int(m.group(1)), None, None)))
    if not found:
        return None
    # The fullest date among those that start first: "3 May 1961" over its own "May 1961" and "1961".
    first = min(at for at, _ in found)
    year_at = min(at for at, d in found if d[1] is None) if any(d[1] is None for _, d in found) else first
    near = [d for at, d in found if at <= year_at]
    return max(near, key=lambda d: (d[1] is not None, d[2] is not None))


def date_order(a: Date, b: Date) -> int | None:
    """-1 when a is earlier, 1 when later, 0 the same day; None when what both give does not decide it."""
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            return None
        if x != y:
            return -1 if x < y else 1
    return 0


_NUMBER_WORDS = {w: i for i, w in enumerate(("zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                             "nine", "ten", "eleven", "twelve"))}


def parse_count(text: str) -> float | None:
    """The first number a text gives ("3,677", "four members" -> 4); None without one."""
    for token in re.findall(r"[\w,.]+", text.lower()):
        value = parse_number(token.strip(",.")) if any(c.isdigit() for c in token) else _NUMBER_WORDS.get(token)
        if value is not None:
            return float(value)
    return None


def fact_value(comparison: Comparison, reply: str) -> str | Date | float | None:
    """What a fact reply says, in the form it is compared in; None when it says nothing comparable."""
    if comparison.fact == "nationality":
        return nationality(reply)
    if comparison.kind in ("earlier", "later"):
        return parse_date(reply)
    if comparison.kind in ("more", "fewer"):
        return parse_count(reply)
    key = answer_key(reply)
    return key if key and key not in _UNKNOWN else None


def compare(comparison: Comparison, values: Sequence[str | Date | float | None]) -> str | None:
    """The answer the two facts give: yes or no (the same?), or the entity chosen (as the question names it);
    None when a fact is missing or the two do not decide it (two dates in the same year, one without a month)."""
    a, b = values
    if a is None or b is None:
        return None
    first, second = comparison.entities
    if comparison.kind == "same":
        return "yes" if a == b else "no"
    if comparison.kind in ("earlier", "later"):
        order = date_order(a, b)  # type: ignore[arg-type]
        if not order:
            return None
        return first if (order < 0) == (comparison.kind == "earlier") else second
    if a == b:
        return None
    return first if (a > b) == (comparison.kind == "more") else second  # type: ignore[operator]
