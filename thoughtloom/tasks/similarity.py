"""Paraphrase detection for circular-reasoning checks: no network, no model, a few microseconds a pair.

A thought is reduced to a *fingerprint*: its content words (lower-cased, stopwords dropped,
stemmed by the project's one stemmer, `grounding.stemming`, common reasoning synonyms folded
together), the numbers it states and the operators it uses. Two thoughts are compared by

    similarity(a, b) = (W_JACCARD * jaccard(words) + (1 - W_JACCARD) * cosine(trigrams))
                       * numbers * opposites

where ``jaccard`` is over the stemmed word sets, ``cosine`` is over the character trigrams of
the stemmed text (it catches what the stemmer misses: "recomput" vs "recomputation" stems,
shared roots), and ``numbers`` is the factor that keeps arithmetic apart: 1 when neither states a
number, the multiset Jaccard of their numbers when both do (a paraphrase keeps its numbers, so
"4 + 5 = 9 (left: 6 9 10)" and "4 * 5 = 20 (left: 6 10 20)" are different steps), and
NUMBER_MISMATCH when only one does; ``opposites`` is ANTONYM_FACTOR when a word of one text is
the opposite of a word only the other has ("ascending"/"descending"), else 1. The weights and
thresholds were chosen on the hand-written pairs in tests/test_similarity.py.

Limits: synonyms are a small fixed table, so a paraphrase in unrelated vocabulary can be missed
("multiply 6 by 4" / "6 * 4", "store it in a dictionary" / "keep it in a dict" is caught only
because both pairs are in the table).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from ..grounding.stemming import stem


class PathThought(Protocol):
    """A thought with its place in the tree (the controller's PathThought is one)."""

    @property
    def id(self) -> int: ...
    @property
    def content(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def path(self) -> tuple[str, ...]: ...

#: Weight of the word Jaccard in the blend; the rest goes to the trigram cosine.
W_JACCARD = 0.7
#: The `numbers` factor when one text states numbers and the other none.
NUMBER_MISMATCH = 0.75
#: At or above this similarity two thoughts restate each other.
PARAPHRASE_THRESHOLD = 0.7

STOPWORDS: frozenset[str] = frozenset(
    """
    a an the this that these those there here it its it's they them their theirs we us our ours you
    your yours i me my mine he him his she her hers one ones
    is are was were be been being am do does did done doing have has had having will would shall
    should can could may might must let lets
    of to in into onto on at by for from with without within about as than then so such
    and or but if else also just only very too quite really
    each every any all some both either neither other another same own
    what which who whom whose when where why how
    up down out over under again further once more most much many few
    now step steps ok okay well get gets got so thus hence therefore see through here final
    first firstly then next finally lastly afterwards whether
    """.split()
)

#: Groups of words that say the same thing in reasoning steps; each folds onto its first word.
SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("split", "divide", "partition", "separate", "halve", "bisect", "decompose", "break"),
    ("merge", "combine", "join", "concatenate"),
    ("compute", "calculate", "evaluate", "work"),
    ("cache", "memoize", "memoise"),
    ("avoid", "prevent"),
    ("check", "verify", "validate", "confirm", "test"),
    ("start", "begin", "commence", "initially"),
    ("find", "locate", "identify", "determine"),
    ("use", "employ", "utilize", "utilise", "apply"),
    ("reduce", "decrease", "lower", "shrink", "minimize", "minimise"),
    ("increase", "raise", "grow", "maximize", "maximise"),
    ("remove", "delete", "drop", "eliminate", "discard"),
    ("add", "sum", "plus"),
    ("multiply", "product"),
    ("subtract", "minus", "difference"),
    ("result", "outcome", "output"),
    ("answer", "solution"),
    ("approach", "method", "strategy", "technique", "way"),
    ("problem", "issue"),
    ("list", "array", "sequence"),
    ("create", "make", "build", "construct", "generate"),
    ("show", "prove", "demonstrate"),
    ("need", "require"),
    ("consider", "examine", "analyze", "analyse", "inspect", "look"),
    ("try", "attempt"),
    ("iterate", "loop", "traverse"),
    ("maximum", "max"),
    ("minimum", "min"),
    ("store", "keep", "save", "record"),
    ("dictionary", "dict", "hashmap"),
    ("fix", "repair", "correct"),
    ("bug", "error", "mistake", "fault", "defect"),
    ("big", "large", "huge"),
    ("small", "little", "tiny"),
    ("fast", "quick", "rapid", "speedy"),
    ("slow", "sluggish"),
)

#: Pairs of opposites: a thought that says one where the other says its opposite is a different step.
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("ascending", "descending"),
    ("increase", "decrease"),
    ("before", "after"),
    ("add", "remove"),
    ("min", "max"),
    ("minimum", "maximum"),
    ("smallest", "largest"),
    ("true", "false"),
    ("left", "right"),
    ("open", "close"),
    ("read", "write"),
    ("start", "end"),
    ("success", "failure"),
    ("include", "exclude"),
    ("upper", "lower"),
    ("enable", "disable"),
    ("valid", "invalid"),
    ("accept", "reject"),
    ("possible", "impossible"),
    ("always", "never"),
    ("above", "below"),
    ("inside", "outside"),
    ("push", "pop"),
    ("encode", "decode"),
    ("encrypt", "decrypt"),
    ("input", "output"),
    ("sorted", "unsorted"),
)
#: The factor applied when the two texts differ by a pair of opposites.
ANTONYM_FACTOR = 0.5

# Irregular forms the stemmer cannot join to their word.
_IRREGULAR = MappingProxyType({"ran": "run", "made": "make", "halves": "half"})

_TOKEN = re.compile(
    r"(?P<number>\d+(?:\.\d+)?(?:/\d+)?)"
    r"|(?P<word>[a-z]+(?:['’-][a-z]+)*)"
    r"|(?P<op>[-+*/×÷=^<>])"
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def _build_synonyms() -> MappingProxyType[str, str]:
    table: dict[str, str] = {}
    for group in SYNONYM_GROUPS:
        head = stem(group[0])
        for word in group:
            table[stem(word)] = head
    return MappingProxyType(table)


_SYNONYMS = _build_synonyms()


def _canonical(word: str) -> str:
    s = stem(_IRREGULAR.get(word, word))
    return _SYNONYMS.get(s, s)


_OPPOSITES: frozenset[tuple[str, str]] = frozenset(
    pair for a, b in ANTONYMS for pair in ((_canonical(a), _canonical(b)), (_canonical(b), _canonical(a)))
)


def _opposed(a: frozenset[str], b: frozenset[str]) -> bool:
    only_a, only_b = a - b, b - a
    return any((x, y) in _OPPOSITES for x in only_a for y in only_b)


def _canonical_number(text: str) -> str:
    if "/" in text:
        return text
    value = float(text)
    return str(int(value)) if value.is_integer() else repr(value)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, token) pairs: kind is "number", "word" or "op"."""
    lowered = _THOUSANDS.sub("", text.lower())
    out: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(lowered):
        kind = match.lastgroup or "word"
        token = match.group()
        if kind == "word":
            token = token.replace("’", "'")
            if token.endswith("n't"):
                out.append(("word", "not"))
                continue
            token = token.removesuffix("'s").replace("'", "").replace("-", "")
        elif kind == "number":
            token = _canonical_number(token)
        out.append((kind, token))
    return out


def normalize_words(text: str) -> list[str]:
    """Content words of `text`, in order: lower-cased, stopwords dropped, stemmed, synonyms folded.

    Numbers are kept (canonical: "1,000" and "1000.0" are "1000") and so are arithmetic operators,
    because in arithmetic steps they are the content.
    """
    words: list[str] = []
    for kind, token in _tokens(text):
        if kind == "word":
            if token in STOPWORDS:
                continue
            words.append(_canonical(token))
        else:
            words.append(token)
    return words


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What similarity compares, computed once per text."""

    words: frozenset[str]
    trigrams: Counter[str]
    trigram_norm: float
    numbers: Counter[str]


def fingerprint(text: str) -> Fingerprint:
    """The precomputed form of `text` that `fingerprint_similarity` compares."""
    normalized = normalize_words(text)
    padded = f" {' '.join(normalized)} "
    grams = Counter(padded[i : i + 3] for i in range(len(padded) - 2)) if normalized else Counter()
    numbers = Counter(w for kind, w in _tokens(text) if kind == "number")
    return Fingerprint(
        words=frozenset(normalized),
        trigrams=grams,
        trigram_norm=math.sqrt(sum(c * c for c in grams.values())),
        numbers=numbers,
    )


def _multiset_jaccard(a: Counter[str], b: Counter[str]) -> float:
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 1.0


def fingerprint_similarity(a: Fingerprint, b: Fingerprint) -> float:
    """Similarity of two fingerprints in [0, 1] (the formula is in the module docstring)."""
    if not a.words or not b.words:
        return 1.0 if a.words == b.words else 0.0
    jaccard = len(a.words & b.words) / len(a.words | b.words)
    small, large = (a.trigrams, b.trigrams) if len(a.trigrams) <= len(b.trigrams) else (b.trigrams, a.trigrams)
    dot = sum(count * large[gram] for gram, count in small.items())
    cosine = dot / (a.trigram_norm * b.trigram_norm)
    if a.numbers and b.numbers:
        numbers = _multiset_jaccard(a.numbers, b.numbers)
    elif a.numbers or b.numbers:
        numbers = NUMBER_MISMATCH
    else:
        numbers = 1.0
    opposed = ANTONYM_FACTOR if _opposed(a.words, b.words) else 1.0
    return min(1.0, (W_JACCARD * jaccard + (1.0 - W_JACCARD) * cosine) * numbers * opposed)


def similarity(a: str, b: str) -> float:
    """How much `a` and `b` say the same thing, in [0, 1]."""
    return fingerprint_similarity(fingerprint(a), fingerprint(b))


def is_paraphrase(a: str, b: str, threshold: float = PARAPHRASE_THRESHOLD) -> bool:
    """Whether `a` and `b` restate each other."""
    return similarity(a, b) >= threshold


def _ancestors(thought: PathThought) -> tuple[str, ...]:
    # The path runs down to the thought itself; tolerate a path that stops at its parent.
    path = thought.path
    return path[:-1] if path and path[-1] == thought.content else path


def find_loops(
    thoughts: Sequence[PathThought], threshold: float = PARAPHRASE_THRESHOLD
) -> list[tuple[int, int, float]]:
    """Pairs (earlier, later, similarity) where the later thought restates the earlier one.

    `thoughts` are oldest first. Two kinds of loop are found: a thought that restates one of its
    own ancestors (from its path), and a thought that restates an earlier thought in `thoughts`
    (a sibling or cousin saying the same thing). `earlier` is the id of the restated thought when
    it is in `thoughts`; an ancestor that is not is given as ``-depth`` (its depth on the later
    thought's path, so always negative). `later` is always an id from `thoughts`. Each pair is
    reported once, with the later thought's id second; sorted by later id, then earlier.
    """
    prints: dict[str, Fingerprint] = {}

    def fp(text: str) -> Fingerprint:
        found = prints.get(text)
        if found is None:
            found = prints[text] = fingerprint(text)
        return found

    # (depth, content, path prefix) -> id, to name an ancestor by id when it is among `thoughts`.
    by_position = {(t.depth, t.path): t.id for t in thoughts}
    loops: dict[tuple[int, int], float] = {}

    def record(earlier: int, later: int, score: float) -> None:
        if score >= threshold and earlier != later:
            loops[(earlier, later)] = max(score, loops.get((earlier, later), 0.0))

    for j, thought in enumerate(thoughts):
        mine = fp(thought.content)
        ancestors = _ancestors(thought)
        for k, text in enumerate(ancestors):
            depth = k + 1
            earlier = by_position.get((depth, ancestors[:depth]), -depth)
            record(earlier, thought.id, fingerprint_similarity(fp(text), mine))
        for other in thoughts[:j]:
            record(other.id, thought.id, fingerprint_similarity(fp(other.content), mine))
    return sorted(((e, later, s) for (e, later), s in loops.items()), key=lambda x: (x[1], x[0]))


def restating_ids(loops: Iterable[tuple[int, int, float]]) -> tuple[int, ...]:
    """The ids of the thoughts that restate earlier ones (the later of each pair), sorted."""
    return tuple(sorted({later for _, later, _ in loops}))
