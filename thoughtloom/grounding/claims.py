"""Claims in a thought, and the small text toolkit the research grounder judges them with.

A *claim* is a declarative sentence that a document could confirm or deny. `extract_claims`
splits a thought into sentences (markdown aware: headings, bullets and numbered items are their
own sentences, fenced code is skipped) and keeps a sentence only when

- it is not a question (ends with "?") and not a lead-in (ends with ":"),
- it is not a plan ("Let's ...", "We should ...", "I will ..."): plans are not true or false,
- it does not look like code or arithmetic (`=`, braces, `name(`),
- it has at least MIN_CLAIM_TOKENS words and numbers, at least half of them words, and at least
  MIN_CONTENT_WORDS content words, so "I think so." and "Maybe not." (hedges only) drop out.

A leading label ("Step 2:") or hedge ("I think that", "Probably,") is removed from the claim
text, since the document is asked about the statement, not about the speaker's certainty.

The rest of the module is shared with the index and the judge: one tokenizer, one stopword
list, and the project's one stemmer (`grounding.stemming`, re-exported here as `stem`), so that the claim
and the passage are reduced the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import MappingProxyType

from .stemming import stem

#: A claim needs this many word or number tokens ...
MIN_CLAIM_TOKENS = 3
#: ... and this many content words (not stopwords, hedges or negations).
MIN_CONTENT_WORDS = 2

STOPWORDS: frozenset[str] = frozenset(
    """
    a an the this that these those there here it its they them their theirs we us our ours you
    your yours i me my mine he him his she her hers one ones itself themselves
    is are was were be been being am do does did done doing have has had having will would
    shall should can could may must let lets 's
    of to in into onto on at by for from with within about as than then so such via per
    and or but if else also just only very too quite really even still
    each every any all some both either other another same own
    what which who whom whose when where why how
    up out over again further once more most much many few
    now ok okay well get gets got thus hence therefore see through
    first firstly next finally lastly afterwards whether
    """.split()
)

#: Words that say how sure the speaker is, not what is the case.
HEDGES: frozenset[str] = frozenset(
    """
    maybe perhaps probably possibly presumably apparently seemingly likely unlikely arguably
    seem seems seemed appear appears think thinks thought believe believes guess suppose assume
    suspect sure unsure hmm hm yes yeah right might
    """.split()
)

#: Words that negate what follows them (contractions ending in "n't" are negations too).
NEGATIONS: frozenset[str] = frozenset(
    "not no never none nobody nothing neither nor nowhere cannot without".split()
)

#: Pairs of opposites: a passage that says one where the claim says the other disagrees with it.
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("increase", "decrease"),
    ("increases", "decreases"),
    ("rise", "fall"),
    ("higher", "lower"),
    ("larger", "smaller"),
    ("greater", "smaller"),
    ("faster", "slower"),
    ("before", "after"),
    ("earlier", "later"),
    ("true", "false"),
    ("always", "never"),
    ("above", "below"),
    ("maximum", "minimum"),
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("allow", "forbid"),
    ("accept", "reject"),
    ("include", "exclude"),
    ("success", "failure"),
    ("succeed", "fail"),
    ("valid", "invalid"),
    ("possible", "impossible"),
    ("safe", "unsafe"),
    ("stable", "unstable"),
    ("supported", "unsupported"),
    ("synchronous", "asynchronous"),
    ("mutable", "immutable"),
    ("ascending", "descending"),
    ("hot", "cold"),
    ("win", "lose"),
)

# A number ("1,000", "3.14", "-5") or a word with inner apostrophes ("isn't"); numbers first so
# that "1,000" stays one token, and only when no letter is glued on ("90degrees" is a word).
_TOKEN = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?![^\W_])|[^\W_]+(?:'[^\W_]+)*")
_NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?")


def tokenize(text: str) -> list[str]:
    """Lower-cased word and number tokens of `text`, in order ("isn't" and "1,000" stay whole)."""
    return _TOKEN.findall(text.lower().replace("’", "'"))


def parse_number(token: str) -> float | None:
    """The value of a number token ("1,000" -> 1000.0), or None for a word."""
    if not _NUMBER.fullmatch(token):
        return None
    return float(token.replace(",", ""))


def is_negation(token: str) -> bool:
    """True for "not", "never", "cannot", "isn't", "doesn't", ..."""
    return token in NEGATIONS or token.endswith("n't")


def is_content_word(token: str) -> bool:
    """True for a token that carries meaning: a word of 2+ letters, not a stopword, hedge or negation."""
    return (
        len(token) >= 2
        and parse_number(token) is None
        and token not in STOPWORDS
        and token not in HEDGES
        and not is_negation(token)
    )


def content_words(text: str) -> list[str]:
    """The content words of `text`, lower-cased, in order, each once."""
    return list(dict.fromkeys(t for t in tokenize(text) if is_content_word(t)))


def query_terms(text: str) -> list[str]:
    """The terms worth looking up for `text`: its content words and numbers, each once."""
    return list(dict.fromkeys(t for t in tokenize(text) if is_content_word(t) or parse_number(t) is not None))


def _antonym_table() -> MappingProxyType[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for a, b in ANTONYMS:
        table.setdefault(stem(a), set()).add(stem(b))
        table.setdefault(stem(b), set()).add(stem(a))
    return MappingProxyType({k: frozenset(v) for k, v in table.items()})


#: stem -> the stems of its opposites.
OPPOSITES: MappingProxyType[str, frozenset[str]] = _antonym_table()

# --- sentences -----------------------------------------------------------------------------

# A line that starts a block of its own: heading, bullet, numbered item, quote, table, "Step 2:".
_BLOCK_START = re.compile(r"\s*(?:#{1,6}\s|[-*+]\s|\d{1,3}[.)]\s|>|\||(?i:step\s*\d+\s*[:.)]))")
# Sentence-ending punctuation, with closing quotes or brackets, followed by a space or the end.
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")
_ABBREVIATIONS = frozenset(
    "e.g. i.e. etc. vs. cf. approx. dr. mr. mrs. ms. prof. st. no. fig. eq. al. inc. ltd. jr. sr.".split()
)
_INITIALS = re.compile(r"(?:[A-Z]\.)+")  # "J." or "U.S."


def _blocks(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) offsets of paragraphs, headings and list items."""
    start: int | None = None
    end = 0
    offset = 0
    after_heading = False
    for line in text.split("\n"):
        line_start, line_end = offset, offset + len(line)
        offset = line_end + 1
        if not line.strip():
            if start is not None:
                yield start, end
            start, after_heading = None, False
            continue
        if start is not None and (after_heading or _BLOCK_START.match(line)):
            yield start, end
            start = None
        if start is None:
            start = line_start
        end = line_end
        after_heading = line.lstrip().startswith("#")
    if start is not None:
        yield start, end


def _ends_sentence(text: str, start: int, end: int, match: re.Match[str]) -> bool:
    # Not a boundary after "e.g." or an initial ("J. K."), nor when the next word is lower-case.
    word = text[start : match.end()].rsplit(None, 1)[-1].rstrip("\"')]")
    if word.lower() in _ABBREVIATIONS or (match.group().startswith(".") and _INITIALS.fullmatch(word)):
        return False
    rest = text[match.end() : end].lstrip()
    return not rest or not rest[0].islower()


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the sentences in `text`, trimmed; markdown blocks never share one."""
    spans: list[tuple[int, int]] = []
    for block_start, block_end in _blocks(text):
        start = block_start
        for match in _SENTENCE_END.finditer(text, block_start, block_end):
            if _ends_sentence(text, start, block_end, match):
                spans.append((start, match.end()))
                start = match.end()
        spans.append((start, block_end))
    trimmed = []
    for start, end in spans:
        chunk = text[start:end]
        lead = len(chunk) - len(chunk.lstrip())
        chunk = chunk.strip()
        if chunk:
            trimmed.append((start + lead, start + lead + len(chunk)))
    return trimmed


def sentences(text: str) -> list[str]:
    """The sentences of `text`, in order."""
    return [text[a:b] for a, b in sentence_spans(text)]


# --- claims --------------------------------------------------------------------------------

_CODE_FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1[^\n]*$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"^\s*(?:#{1,6}\s+|>\s*|[-*+]\s+|\d{1,3}[.)]\s+)+")
_LABEL = re.compile(
    r"^(?:step\s*\d+|claim|fact|answer|conclusion|hypothesis|observation|note|therefore|so)\s*[:.)\-–,]\s*",
    re.IGNORECASE,
)
_HEDGE_LEAD = re.compile(
    r"^(?:i\s+(?:think|believe|guess|suspect|assume)|we\s+(?:think|believe|know)|it\s+(?:seems|appears)|"
    r"probably|perhaps|maybe|presumably|apparently|clearly|of\s+course)(?:\s+that)?\s*,?\s+",
    re.IGNORECASE,
)
_PLAN = re.compile(
    r"^(?:let'?s|let\s+us|we\s+(?:should|need\s+to|must|will|can|could)|i\s+(?:will|'ll|should|need\s+to|can)|"
    r"now\s+(?:let|we)|next\s+we|try\b|consider\b|check\b|look\b)",
    re.IGNORECASE,
)
_CODE_LIKE = re.compile(r"[={}<>]|\w\(")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|`)")


def _clean(sentence: str) -> str:
    """One line of plain text: markdown markers, links, emphasis, labels and hedges removed."""
    text = " ".join(sentence.split())
    text = _MARKER.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub("", text)
    for pattern in (_LABEL, _HEDGE_LEAD, _LABEL):
        text = pattern.sub("", text)
    return text.strip()


def is_claim(sentence: str) -> bool:
    """True when a cleaned sentence is a checkable statement (see the module docstring)."""
    text = sentence.strip()
    if not text or text.endswith(("?", ":")) or text.startswith("|"):
        return False
    if _PLAN.match(text) or _CODE_LIKE.search(text):
        return False
    tokens = tokenize(text)
    words = [t for t in tokens if parse_number(t) is None]
    if len(tokens) < MIN_CLAIM_TOKENS or 2 * len(words) < len(tokens):
        return False
    return sum(1 for t in tokens if is_content_word(t)) >= MIN_CONTENT_WORDS


def extract_claims(text: str) -> list[str]:
    """The checkable declarative sentences of a thought, cleaned of markdown and hedges, each once."""
    prose = _CODE_FENCE.sub("\n\n", text.replace("\r\n", "\n"))
    claims: dict[str, str] = {}
    for raw in sentences(prose):
        claim = _clean(raw)
        if is_claim(claim):
            claims.setdefault(claim.lower(), claim)
    return list(claims.values())
