"""Answers as a reader wants them: without the label a prompt's cue or the model put before them.

`span_answer` holds the answer rules of a question answered by a short span (HotpotQA): one
function, so that every lane of a benchmark and the research flow's synthesis answer by the same
rules and the comparison between them stays fair. The readers below (`plain`, `after_marker`,
`final_number`, `marked_span`, `normalize_answer`, `token_f1`) are shared by the benchmark scorers
(eval/scoring.py) and the answer checkers a task file names (tasks/checkers.py).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction

from .answer_types import AnswerType, answer_type, fits, is_yes_no, offers_choice, typed_span

_LABEL = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:)\s*", re.IGNORECASE)
# A label as a chat model decorates it too ("**Answer**:", "**Final answer:**", "ANSWER =", "A:").
_SPAN_LABEL = re.compile(r"^\s*[*_`#>\s]*(?:(?:the\s+)?(?:(?:final|short|correct)\s+)?answer\s*[*_`]*\s*"
                         r"(?:is\s*[*_`]*\s*:?|[:=])|a\s*:)\s*[*_`]*\s*", re.IGNORECASE)
# A leading yes or no: the word alone, or before punctuation ("No, they were not"; "No one" is no "no").
_YES_NO_WORD = re.compile(r"^(yes|no|true|false)(?:\s*[,.;:!\u2013\u2014-]+\s*|\s*$)", re.IGNORECASE)
#: A reference to a file: what the agent or a search result names a document by, never an answer.
_FILE_NAME = re.compile(r"(?:^|[\s:(\[])[\w./\\-]*\w\.(?:txt|md|markdown|rst|pdf|html?|json|jsonl|csv|tsv|docx?|xml|"
                        r"ya?ml|log)(?::\d+(?:-\d+)?)?(?=$|[\s,;:)\].])", re.IGNORECASE)
# Citations the synthesis puts after its answer: "[docs:01-Loire.md:1]", "[1]".
_CITATION = re.compile(r"\s*\[[^\[\]]*\]")
# Where an explanation starts after the span ("Paris, which is ...", "Paris because ...", "Paris - the capital").
_CLAUSE = re.compile(r"\s*(?:;|\s-\s|\s\u2013\s|\s\u2014\s|\(|,\s*(?:which|who|whose|where|when|as|since|because|"
                     r"and\s+(?:it|he|she|they)|but)\b|\s+because\b|\s+since\b)", re.IGNORECASE)
# A sentence ends at . ! ? before a capital, unless the period closes an initial ("J.") or a short abbreviation.
_SENTENCE_END = re.compile(r"(?<!\b[A-Z])(?<!\b(?:Mr|Ms|Dr|St|Jr|Sr|Mt|vs|No|Co))(?<!\bMrs|\bInc|\bLtd)[.!?]+"
                           r"[\"'\u201d\u2019]*(?=\s+[\"'\u201c(]?[A-Z0-9])")
_QUOTES = "\"'\u201c\u201d\u2018\u2019`*_"
_NUM = r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_NUMBER = re.compile(_NUM)
# GSM8K's own answer line ("#### 72"): a number right after the marks, not a "#### Step 1" heading.
_HASHES = re.compile(r"####[ \t]*\$?[ \t]*(" + _NUM + ")")
_ANSWER_PHRASE = re.compile(r"answer[ \t]*(?:is\b[ \t]*:?|:)", re.IGNORECASE)
# \boxed{...} with one level of nested braces inside (\boxed{\frac{1}{2}}, \boxed{\text{72}}).
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_LATEX = {"\\times": "*", "\\cdot": "*", "\\div": "/", "\\left": "", "\\right": "", "\\$": "$", "\\%": "%",
          "\\[": "", "\\]": "", "\\(": "", "\\)": "", "\u00d7": "*", "\u00f7": "/", "\u2212": "-"}
_EMPHASIS = re.compile(r"\*\*|__|`")
# Headings, bullets and list numbers ("2. 4 * 6 = 24"; a decimal has no space after its point).
_LINE_MARKS = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|[-*\u2022][ \t]+|\d{1,2}[.)][ \t]+)", re.MULTILINE)
# A line opening with the answer's marker: "Answer:", "Final answer:", "The answer is", "Output:".
_MARKER = r"^[ \t]*(?:the[ \t]+)?(?:final[ \t]+)?(?:{words})[ \t]*(?:is[ \t]*:?|:)[ \t]*"
#: Words a span keeps at most (HotpotQA answers are a few words; its longest dev answers are about ten).
SPAN_WORDS = 12
_PUNCTUATION = frozenset(string.punctuation)
#: A span fitting a year, date, period or number question longer than this many words is cut to the span of the type.
TYPED_WORDS = 4


def unlabelled(answer: str | None) -> str | None:
    """An answer without its leading labels ("Answer: 16" and "Final answer: Final answer: 16" are "16");
    as given when nothing would be left."""
    if answer is None:
        return None
    rest = answer
    while (stripped := _LABEL.sub("", rest, count=1)) != rest:
        rest = stripped
    return rest if rest.strip() else answer


def _key(text: str) -> str:
    """Lowercase words without punctuation or articles (how HotpotQA compares answers)."""
    text = "".join(" " if ch in _PUNCTUATION else ch for ch in text.lower())
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def _unlabel_span(text: str) -> str:
    """A line without its labels, however decorated ("**Answer**: X", "Final answer: Answer: X")."""
    while (stripped := _SPAN_LABEL.sub("", text, count=1)) != text:
        text = stripped
    return text


def _trimmed(text: str) -> str:
    """The span without its citations, surrounding quotes and emphasis, and a closing period."""
    text = " ".join(_CITATION.sub("", text).split())
    text = text.strip(_QUOTES + " ").rstrip(",;:!? ").strip(_QUOTES + " ")
    last = text.split()[-1] if text.split() else ""
    # "U.S." and "J." keep their period (an abbreviation); "Paris." loses it.
    if text.endswith(".") and last.count(".") == 1 and len(last) > 2:
        text = text[:-1]
    return text.strip(_QUOTES + " ")


def _short(text: str) -> str:
    """The span a line gives: its first sentence, up to where an explanation starts, at most SPAN_WORDS words."""
    end = _SENTENCE_END.search(text)
    text = text[:end.start()] if end else text
    cut = _CLAUSE.search(text)
    if cut is not None and cut.start() > 0:
        text = text[:cut.start()]
    words = text.split()
    if len(words) > SPAN_WORDS and "," in text:
        text = text.split(",")[0]  # a long answer: its first part names the entity, the rest describes it
        words = text.split()
    return _trimmed(" ".join(words[:SPAN_WORDS]))


def _lines(answer: str) -> Iterator[str]:
    """The answer's lines without labels, a labelled line first (the model marked its answer there)."""
    lines = [line for line in answer.splitlines() if line.strip()]
    marked = [line for line in lines if _SPAN_LABEL.match(line)]
    for line in [*reversed(marked), *(line for line in lines if line not in marked)]:
        yield _unlabel_span(line).strip()


def _pieces(line: str) -> Iterator[str]:
    """A line, then its parts between colons and commas (where a file name or a label may sit beside the span)."""
    yield line
    yield from (part for part in re.split(r"[:,]\s+", line) if part.strip() and part != line)


def _refused(span: str) -> bool:
    """A span that never answers a factoid question: empty, a bare yes or no, or a file name."""
    key = _key(span)
    return not key or key in ("yes", "no", "true", "false") or _FILE_NAME.search(f" {span}") is not None


def _subject(span: str, question: str) -> bool:
    """True when the span is the question's own words (e.g. its subject, "Kiss and Tell")."""
    return f" {_key(span)} " in f" {_key(question)} "


def span_answer(question: str, answer: str | None, alternatives: Iterable[str | None] = (),
                passages: Sequence[tuple[str, str]] = ()) -> str | None:
    """The answer by the span rules: labels, quotes, citations and a closing period taken off; a yes/no
    question answered "yes" or "no"; any other question never by a bare yes or no or a file name, but by
    the short span (first sentence, before any explanation) of the first line or part of a line that is
    neither, else of an alternative (e.g. other hypotheses), passing over the question's own words
    (unless it asks to choose between two it names) while a better candidate follows. The first such
    span that fits the type the question asks for (answer_types: a year for "In what year ...?") wins;
    when none fits, a span of that type read from the (title, text) passages given, the entities the
    candidates named first (answer_types.typed_span); else the first span as the rules above read it;
    None when nothing is left. A fitting span of many words is cut to the span of the type it holds."""
    texts = [t for t in (answer, *alternatives) if t is not None and t.strip()]
    if is_yes_no(question):
        for text in texts:
            for line in _lines(text):
                found = _YES_NO_WORD.match(line.strip(_QUOTES + " "))
                if found:
                    return "yes" if found.group(1).lower() in ("yes", "true") else "no"
        # No yes or no said: the answer as given, shortened (scored as the wrong answer it is).
        given = next((_short(line) for line in _lines(texts[0])), "") if texts else ""
        return given or None
    choice = offers_choice(question)
    kind = answer_type(question)
    first: str | None = None
    subject: str | None = None
    unfit: list[str] = []
    for text in texts:
        for line in _lines(text):
            # "Yes, Chief of Protocol": what follows the yes is the answer the question asked for.
            line = _YES_NO_WORD.sub("", line, count=1) if _YES_NO_WORD.match(line) else line
            for piece in _pieces(line):
                span = _short(_unlabel_span(piece))
                if _refused(span):
                    continue
                if not choice and _subject(span, question):
                    subject = subject or span
                elif fits(span, kind, question):
                    return _typed_part(question, kind, span)
                else:
                    first = first or span
                    unfit.append(span)
    typed = typed_span(question, passages, unfit, kind) if passages else None
    return typed or first or subject


def _typed_part(question: str, kind: AnswerType, span: str) -> str:
    """The span of the type inside a span of more than TYPED_WORDS words that fits it ("released in 2000": 2000)."""
    if len(span.split()) <= TYPED_WORDS:
        return span
    return typed_span(question, [("", span)], (), kind) or span


# --- reading answers (shared with the benchmark scorers) ------------------------------------


def plain(reply: str) -> str:
    """A reply without the decoration instruct models add (LaTeX boxes, fractions and delimiters,
    markdown emphasis, code ticks, heading, bullet and list-number marks, dollar signs); few-shot
    base-model replies have none, so they pass unchanged."""
    text = _BOXED.sub(r"\1", reply)
    text = _FRAC.sub(r"(\1)/(\2)", text)
    text = _LATEX_TEXT.sub(r"\1", text)
    for latex, same in _LATEX.items():
        text = text.replace(latex, same)
    text = _LINE_MARKS.sub("", _EMPHASIS.sub("", text))
    return text.replace("$", "")


def after_marker(text: str | None, words: str = "answer") -> str | None:
    """What follows the last line opening with a marker (`Answer:`, `The final answer is`): the rest
    of that line and the lines below it (a chat model may put the answer under a bare marker)."""
    if not text:
        return None
    found = list(re.finditer(_MARKER.format(words=words), text, re.IGNORECASE | re.MULTILINE))
    rest = text[found[-1].end():].strip() if found else ""
    return rest or None


def final_number(text: str | None) -> Fraction | None:
    """The answer's number: after the last '#### ', else in the last \\boxed{}, else after the last
    'answer is' / 'Answer:', else the last number; '$', '%', units, commas and a final period ignored."""
    if not text:
        return None
    hashes = _HASHES.findall(text)
    if hashes:
        return _to_fraction(hashes[-1])
    boxes = [m.group(1) for m in _BOXED.finditer(text)]
    phrases = [text[m.end():] for m in _ANSWER_PHRASE.finditer(text)]
    # Boxes first (an instruct model boxes its final result), then phrases; the last one of each first.
    for segment in [*reversed(boxes), *reversed(phrases)]:
        value = _stated_number(segment)
        if value is not None:
            return value
    found = _NUMBER.findall(text)
    return _to_fraction(found[-1]) if found else None


def _stated_number(segment: str) -> Fraction | None:
    """The number a marked answer states: on the first line that has one, after its last '='
    ("The answer is 48 + 24 = 72 clips" states 72), the first number there."""
    for line in segment.splitlines():
        found = _NUMBER.findall(line.split("=")[-1]) or _NUMBER.findall(line)
        if found:
            return _to_fraction(found[0])
    return None


def _to_fraction(token: str) -> Fraction | None:
    try:
        return Fraction(token.replace(",", "").rstrip("."))
    except (ValueError, ZeroDivisionError):
        return None


def normalize_answer(text: str) -> str:
    """The official HotpotQA normalization: lowercase, drop punctuation, drop a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """F1 over the normalized whitespace tokens of two answers (SQuAD's and HotpotQA's rule); 0 when either is empty."""
    pred_tokens, want_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((Counter(pred_tokens) & Counter(want_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(want_tokens)
    return 2 * precision * recall / (precision + recall)


def marked_span(answer: str | None) -> str:
    """The span an answer gives: the rest of its last 'Answer:' line, else the whole text (a search
    lane's free-text synthesis), on one line."""
    if not answer:
        return ""
    text = plain(answer)
    marked = after_marker(text)
    span = marked.splitlines()[0] if marked else text
    return " ".join(span.split())
