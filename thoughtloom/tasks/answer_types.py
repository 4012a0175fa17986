"""The answer a question's form asks for, and a span of that type read from passages, with no model.

`answer_type` reads the expected type from the question's words ("In what year ...?" a year, "how
many" a number, "Who ...?" a person); `fits` says whether a candidate answer can be of that type (a
title such as "Arnold Schwarzenegger filmography" is no year); `typed_span` re-extracts a span of
the type from passages: one in a sentence naming a given entity (the bridge the lane answered with)
first, else the one whose sentence shares the most of the question's words, nearest to them. The span
rules every HotpotQA lane shares (tasks/answers.span_answer) use all three, so every lane is held to them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum

from ..grounding.claims import is_content_word, sentence_spans
from ..grounding.stemming import stem
from .comparison import choice_of


class AnswerType(StrEnum):
    """What kind of answer a question asks for."""

    YES_NO = "yes/no"
    YEAR = "year"
    DATE = "date"
    PERIOD = "period"  # two ends: "during what years", "what timeframe"
    NUMBER = "number"
    PERSON = "person"
    PLACE = "place"
    OTHER = "other"


_PERSON_NOUNS = ("actor|actress|writer|author|screenwriter|director|producer|singer|songwriter|musician|composer|"
                 "artist|painter|poet|novelist|player|driver|pilot|coach|manager|president|vice president|"
                 "politician|king|queen|person|man|woman|scientist|physicist|founder|journalist|comedian")
_PLACE_NOUNS = ("city|country|state|town|county|province|region|island|continent|village|neighborhood|"
                "neighbourhood|nation|borough|district")
# Checked in this order: the first that matches names the type (a relative "where" or "who" inside the question
# does not, so "The arena where ... can seat how many people?" is a number question).
_FORMS: tuple[tuple[AnswerType, re.Pattern[str]], ...] = (
    (AnswerType.PERIOD, re.compile(r"\b(?:what|which)\s+(?:years|period|time\s*frame|timeframe|span)\b|"
                                   r"\btime\s*frame\b|\btimeframe\b", re.IGNORECASE)),
    (AnswerType.YEAR, re.compile(r"\b(?:what|which)\s+year\b|\byear\s+(?:did|was|were|is|does)\b", re.IGNORECASE)),
    (AnswerType.NUMBER, re.compile(r"\bhow\s+(?:many|much|long|old|tall|far|big|large|high)\b|"
                                   r"\b(?:what|which)\s+(?:number|percentage|amount|population)\b", re.IGNORECASE)),
    (AnswerType.DATE, re.compile(r"^\s*when\b|\bwhen\s*\?\s*$|\b(?:what|which)\s+(?:date|day|month|decade|century)\b",
                                 re.IGNORECASE)),
    (AnswerType.PERSON, re.compile(rf"^\s*(?:who|whom)\b|\b(?:by|to|for|with|from)\s+(?:who|whom)\s*\?\s*$|"
                                   rf"\b(?:what|which)\s+(?:[\w-]+\s+){{0,5}}?(?:{_PERSON_NOUNS})\b", re.IGNORECASE)),
    (AnswerType.PLACE, re.compile(rf"^\s*where\b|\bwhere\s+(?:is|was|are|were|does|did|do)\b[^?]*\?\s*$|"
                                  rf"\b(?:what|which)\s+(?:[\w-]+\s+){{0,3}}?(?:{_PLACE_NOUNS})\b", re.IGNORECASE)),
)
#: The types a span can be read out of passages for without a model (a person or a place needs a reader).
EXTRACTABLE = frozenset({AnswerType.YEAR, AnswerType.DATE, AnswerType.PERIOD, AnswerType.NUMBER})

_MONTH = (r"(?:January|February|March|April|May|June|July|August|September|October|November|December|"
          r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?")
# A year stands alone: not inside a larger number, not a season ("2012–13"), not glued to letters ("VJM04").
_YEAR_CORE = r"(?<![\w.,–-])(?:1[0-9]{3}|20[0-9]{2})(?!\w|,\d|\s*[–—-]\s*\d{2}\b)"
_YEAR = re.compile(_YEAR_CORE)
_ANY_YEAR = re.compile(r"(?<!\d)(?:1[0-9]{3}|20[0-9]{2})(?!\d)")
_DATE = re.compile(rf"(?<!\w)(?:\d{{1,2}}\s+{_MONTH},?\s+|{_MONTH}\s+(?:\d{{1,2}}(?:st|nd|rd|th)?,?\s+)?)?"
                   rf"(?:1[0-9]{{3}}|20[0-9]{{2}})(?!\w|,\d)")
_PERIOD = re.compile(rf"{_YEAR_CORE}\s*(?:–|—|-|to|until|till|through)\s*(?:(?:1[0-9]{{3}}|20[0-9]{{2}})(?!\w|,\d)|"
                     rf"present\b)")
_NUMBER = re.compile(r"(?<![\w.,–-])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\w|,\d)|(?<![\w.,–-])\d+(?:\.\d+)?(?!\w|,\d|[–-]\d)"
                     r"(?:\s+(?:million|billion|thousand|hundred))?")
_NUMBER_WORDS = re.compile(r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|dozen|hundred|"
                           r"thousand|million|billion)\b", re.IGNORECASE)
_DECADE = re.compile(r"\b\d{2,4}s\b|\bcentury\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_YES_NO_QUESTION = re.compile(r"^(is|are|was|were|am|do|does|did|can|could|has|have|had|will|would|should|shall|"
                              r"may|might|must)\b", re.IGNORECASE)
_WH = re.compile(r"\b(who|whom|whose|what|which|when|where|why|how)\b", re.IGNORECASE)
_BOTH_SAME = re.compile(r"\b(both|same)\b", re.IGNORECASE)
# "Is X or Y older?" asks to choose one of the two named; "either" and "both" keep it a yes/no question.
_CHOICE = re.compile(r"\bor\b", re.IGNORECASE)
#: What a given entity (the bridge a lane found) named in the span's passage adds to its score (a page about it, or
#: one that mentions it); named in the span's own sentence, the span comes first whatever the question's words
#: say (they describe the first hop, not the sentence that states the bridge's fact).
PASSAGE_ENTITY_WEIGHT = 1.0
# Words of the question that name the type, not what the answer is about.
_TYPE_WORDS = frozenset({"year", "years", "date", "day", "month", "when", "timeframe", "time", "frame", "period",
                         "number", "many", "much", "long"})


def is_yes_no(question: str) -> bool:
    """True for a question answered by yes or no: it opens with an auxiliary verb ("Were ...?", "Is ...?")
    and does not ask to choose between two named ("Is X or Y older?"), or it asks whether two are
    "both" or "the same" without a question word."""
    text = " ".join(question.split())
    if _YES_NO_QUESTION.match(text):
        return not _CHOICE.search(text) or _BOTH_SAME.search(text) is not None or "either" in text.lower()
    return _BOTH_SAME.search(text) is not None and _WH.search(text) is None


def offers_choice(question: str) -> bool:
    """True when the question says "or" (it may ask to choose between two it names: its words are then an answer)."""
    return _CHOICE.search(question) is not None


def answer_type(question: str) -> AnswerType:
    """The type of answer the question's form asks for; OTHER for a choice between two it names (its answer is
    one of them) and for any form not recognised."""
    text = " ".join(question.split())
    if is_yes_no(text):
        return AnswerType.YES_NO
    if choice_of(text) is not None:
        return AnswerType.OTHER
    return next((kind for kind, form in _FORMS if form.search(text)), AnswerType.OTHER)


def _years(text: str) -> set[str]:
    return {m.group(0) for m in _YEAR.finditer(text)}


def _stated(question: str) -> set[str]:
    """The years and numbers the question states, a season's ("2011–12": 2011) included: never its answer."""
    return set(_ANY_YEAR.findall(question)) | {m.group(0) for m in _NUMBER.finditer(question)}


def fits(candidate: str, kind: AnswerType, question: str) -> bool:
    """True when the candidate can be an answer of this type: a year (or date, period, number) it states that
    the question does not; a person's or a place's name capitalised and without digits; anything for the rest."""
    asked = _stated(question)
    if kind in (AnswerType.YEAR, AnswerType.PERIOD):
        return bool(_years(candidate) - asked)
    if kind is AnswerType.DATE:
        return bool(_years(candidate) - asked) or bool(re.search(_MONTH, candidate)) or bool(_DECADE.search(candidate))
    if kind is AnswerType.NUMBER:
        numbers = {m.group(0) for m in _NUMBER.finditer(candidate)} - asked
        return bool(numbers) or bool(_NUMBER_WORDS.search(candidate))
    if kind in (AnswerType.PERSON, AnswerType.PLACE):
        name = candidate.strip(" \"'“”‘’`*_")
        return bool(name) and name[0].isupper() and not any(ch.isdigit() for ch in name)
    return True


def _terms(text: str) -> set[str]:
    return {stem(w) for w in _WORD.findall(text.lower()) if is_content_word(w) and w not in _TYPE_WORDS}


def _spans(kind: AnswerType, sentence: str) -> list[re.Match[str]]:
    """The spans of the type in a sentence (a period's two ends together; a count never a bare year)."""
    if kind is AnswerType.PERIOD:
        return list(_PERIOD.finditer(sentence))
    if kind is AnswerType.YEAR:
        return list(_YEAR.finditer(sentence))
    if kind is AnswerType.DATE:
        return list(_DATE.finditer(sentence))
    return [m for m in _NUMBER.finditer(sentence) if not _YEAR.fullmatch(m.group(0))]


def _named(entity: str, words: set[str]) -> bool:
    """True when every word of the entity is among the words (a text's, lower-cased) that name it."""
    own = _WORD.findall(entity.lower())
    return bool(own) and all(w in words for w in own)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _score(sentence: str, span: re.Match[str], terms: set[str]) -> float:
    """How many of the question's words the sentence shares, plus, for each, how near the span it stands."""
    words = [(m.start(), stem(m.group(0).lower())) for m in _WORD.finditer(sentence)]
    before = sum(1 for start, _ in words if start < span.start())
    after = sum(1 for start, _ in words if start < span.end())
    near: dict[str, float] = {}
    for i, (_, word) in enumerate(words):
        if word in terms:
            distance = before - i if i < before else max(0, i - after + 1)
            near[word] = max(near.get(word, 0.0), 1.0 / (1 + distance))
    return len(near) + 2 * sum(near.values())


def typed_span(question: str, passages: Sequence[tuple[str, str]], entities: Iterable[str] = (),
               kind: AnswerType | None = None) -> str | None:
    """A span of the question's answer type (`kind`, else `answer_type`) read from (title, text) passages: one
    in a sentence naming one of `entities` first, then the best-scored (`_score`: the question's words in its
    sentence and near it, the passage's title counting half, a passage naming an entity PASSAGE_ENTITY_WEIGHT
    more), an earlier passage first on a tie; never a year or number the question states; None for a type no
    span is read for, or when no passage has one (a period falls back to a year)."""
    kind = kind if kind is not None else answer_type(question)
    if kind not in EXTRACTABLE:
        return None
    terms = _terms(question)
    asked = _stated(question)
    names = [e for e in entities if e and e.strip()]
    best: tuple[bool, float, int, str] | None = None
    for order, (title, text) in enumerate(passages):
        words = _words(text)
        named = any(_named(e, words) for e in names)
        heading = 0.5 * len(_terms(title) & terms)
        for start, end in sentence_spans(text):
            sentence = text[start:end]
            if sentence.startswith("#"):
                continue
            for span in _spans(kind, sentence):
                if span.group(0) in asked or _years(span.group(0)) & asked:
                    continue
                said = named and any(_named(e, _words(sentence)) for e in names)
                rank = (said, _score(sentence, span, terms) + heading + PASSAGE_ENTITY_WEIGHT * named, -order,
                        span.group(0))
                if best is None or rank[:3] > best[:3]:
                    best = rank
    if best is None and kind is AnswerType.PERIOD:
        return typed_span(question, passages, names, AnswerType.YEAR)
    return " ".join(best[3].split()) if best is not None else None
