"""5x5 mini crosswords (the Tree-of-Thoughts paper's third task): fill a 5x5 board from 10 clues.

A problem is the 10 clues, written as the paper's code renders them ("h1. A lunar valley" ...
"v5. To come in"). A step places one five-letter word in one slot ("h1. RILLE"); the board is
what the steps placed, in order. The validator rejects a word that would change a letter already
on the board: the paper's DFS skips exactly those candidates (a word whose status would become
"changed"). The model proposes words with the paper's propose prompt, and a state is valued with
the paper's value prompt (sure / maybe / impossible) on its most constrained crossing word.

The answer is the board as the paper's Output lines write it (five rows of five letters
separated by spaces, "_" for an empty cell); eval/scoring.py scores it against the gold board
with the paper's letter / word / game rule.

Given the data file (TaskOptions.data; `loom bench` gives it to the random control lane only),
the task also lists the valid steps (Query.choices): the words of its vocabulary that fit the most
constrained open slot, and a board where no open slot fits any of them is a dead end. The
vocabulary is every answer (row and column) of the file's OTHER puzzles, so a puzzle's own
answers are in it only where another puzzle uses them too. Without the file the model proposes
words freely, as in the paper.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..graph import NodeKind
from ..llm.types import Prompt
from .base import ProblemError, Query, Task, Verdict, read_input_file

SIZE = 5
SLOTS = tuple(f"h{i}" for i in range(1, SIZE + 1)) + tuple(f"v{i}" for i in range(1, SIZE + 1))
EMPTY = "_"
#: At most this many vocabulary words are listed as one state's choices (the most common first), so
#: that a model scoring them pays for a few dozen short words, not for the whole vocabulary.
CHOICE_CAP = 40

# The paper's propose prompt (src/tot/prompts/crosswords.py), word for word.
PROPOSE_PROMPT = """Let's play a 5 x 5 mini crossword, where each word should have exactly 5 letters.

{input}

Given the current status, list all possible answers for unfilled or changed words, and your confidence levels \
(certain/high/medium/low), using the format "h1. apple (medium)". Use "certain" cautiously and only when you are \
100% sure this is the correct word. You can list more then one possible answer for each word.
"""

# The paper's value prompt, word for word.
VALUE_PROMPT = """Evaluate if there exists a five letter word of some meaning that fit some letter constraints \
(sure/maybe/impossible).

Incorrect; to injure: w _ o _ g
The letter constraint is: 5 letters, letter 1 is w, letter 3 is o, letter 5 is g.
Some possible words that mean "Incorrect; to injure":
wrong (w r o n g): 5 letters, letter 1 is w, letter 3 is o, letter 5 is g. fit!
sure

A person with an all-consuming enthusiasm, such as for computers or anime: _ _ _ _ u
The letter constraint is: 5 letters, letter 5 is u.
Some possible words that mean "A person with an all-consuming enthusiasm, such as for computers or anime":
geek (g e e k): 4 letters, not 5
otaku (o t a k u): 5 letters, letter 5 is u
sure

Dewy; roscid: r _ _ _ l
The letter constraint is: 5 letters, letter 1 is r, letter 5 is l.
Some possible words that mean "Dewy; roscid":
moist (m o i s t): 5 letters, letter 1 is m, not r
humid (h u m i d): 5 letters, letter 1 is h, not r
I cannot think of any words now. Only 2 letters are constrained, it is still likely
maybe

A woodland: _ l _ d e
The letter constraint is: 5 letters, letter 2 is l, letter 4 is d, letter 5 is e.
Some possible words that mean "A woodland":
forest (f o r e s t): 6 letters, not 5
woods (w o o d s): 5 letters, letter 2 is o, not l
grove (g r o v e): 5 letters, letter 2 is r, not l
I cannot think of any words now. 3 letters are constrained, and _ l _ d e seems a common pattern
maybe

An inn: _ d _ w f
The letter constraint is: 5 letters, letter 2 is d, letter 4 is w, letter 5 is f.
Some possible words that mean "An inn":
hotel (h o t e l): 5 letters, letter 2 is o, not d
lodge (l o d g e): 5 letters, letter 2 is o, not d
I cannot think of any words now. 3 letters are constrained, and it is extremely unlikely to have a word with \
pattern _ d _ w f to mean "An inn"
impossible

Chance; a parasitic worm; a fish: w r a k _
The letter constraint is: 5 letters, letter 1 is w, letter 2 is r, letter 3 is a, letter 4 is k.
Some possible words that mean "Chance; a parasitic worm; a fish":
fluke (f l u k e): 5 letters, letter 1 is f, not w
I cannot think of any words now. 4 letters are constrained, and it is extremely unlikely to have a word with \
pattern w r a k _ to mean "Chance; a parasitic worm; a fish"
impossible

{input}
"""

#: The paper's verdicts; its DFS prunes a state with any "impossible" (prune_threshold 0.25 below).
VALUE_WORDS = {"sure": 1.0, "maybe": 0.5, "impossible": 0.0}
#: The paper's confidence weights for proposals, summed over repeats to rank them.
CONFIDENCE = {"certain": 1.0, "high": 0.5, "medium": 0.2, "low": 0.1}

_STEP = re.compile(r"^\s*([hvHV][1-5])\s*[.:)]?\s+([A-Za-z]{5})(?![A-Za-z])(?:\s*\((certain|high|medium|low)\))?",
                   re.IGNORECASE)
_CLUE = re.compile(r"^\s*([hvHV][1-5])\.\s*(.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Crossword:
    """A puzzle: its ten clues in slot order h1-h5, v1-v5."""

    clues: tuple[str, ...]


def slot_cells(slot: str) -> tuple[int, ...]:
    """The board cells (row-major, 0-24) of a slot: h1 is the top row, v1 the left column."""
    i = int(slot[1]) - 1
    return tuple(range(i * SIZE, (i + 1) * SIZE)) if slot[0] == "h" else tuple(range(i, SIZE * SIZE, SIZE))


def board_words(board: Sequence[str]) -> list[str]:
    """The ten words of a 25-cell board, h1-h5 then v1-v5 (the paper's get_ans)."""
    return ["".join(board[c] for c in slot_cells(slot)) for slot in SLOTS]


def render_clues(clues: Sequence[str]) -> str:
    """The clues as the paper's render_clues writes them, one "h1. clue" line each."""
    return "".join(f"{slot}. {clue}\n" for slot, clue in zip(SLOTS, clues, strict=False)).rstrip("\n")


def read_puzzles(text: str) -> list[tuple[tuple[str, ...], str]]:
    """The puzzles of a mini0505.json file: (ten clues, the 25 gold letters as one string), in file order.

    ValueError (one line) when the file is not a JSON list of [10 clues, 25 letters] pairs."""
    rows = json.loads(text)
    if not isinstance(rows, list) or not rows:
        raise ValueError("expected a JSON list of [10 clues, 25 letters] puzzles")
    out = []
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], list) and isinstance(row[1], list)
                and len(row[0]) == 2 * SIZE and len(row[1]) == SIZE * SIZE
                and all(isinstance(c, str) and c.strip() for c in row[0])
                and all(isinstance(x, str) and len(x) == 1 and x.isalpha() for x in row[1])):
            raise ValueError(f"puzzle {i} is not [10 clues, 25 letters]")
        out.append((tuple(c.strip() for c in row[0]), "".join(row[1]).upper()))
    return out


class CrosswordsTask(Task[Crossword]):
    """5x5 mini crosswords: steps place words, the validator keeps every placed letter."""

    name = "crosswords"
    description = 'ToT 5x5 mini crossword: ten lines "h1. clue" ... "v5. clue"; fill the board'
    programmatic_answer = True
    # The paper's DFS: up to 3 children per state, prune a state valued impossible, at most 10 words.
    search_defaults = {"breadth": 3, "beam": 3, "max_depth": 10, "prune_threshold": 0.25, "value_samples": 1,
                       "evaluation": "value", "generation": "propose"}
    free_text_steps = False
    lists_choices = True  # with a data file: the vocabulary words that fit the most constrained slot

    def __init__(self, data: str | Path | None = None) -> None:
        self.data = Path(data) if data is not None else None
        self._puzzles: list[tuple[tuple[str, ...], str]] | None = None
        self._vocabularies: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._legal: dict[tuple[tuple[str, ...], str], tuple[str, ...]] = {}

    # --- problem ------------------------------------------------------------------------

    def parse_problem(self, text: str) -> Crossword:
        """Ten lines "h1. clue" ... "v5. clue", each slot once (any order)."""
        found: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            m = _CLUE.match(line)
            if m is None or not m.group(2):
                raise ProblemError(f'crosswords needs lines like "h1. A lunar valley"; got {line.strip()[:60]!r}')
            slot = m.group(1).lower()
            if slot in found:
                raise ProblemError(f"crosswords: slot {slot} is given twice; give each of h1-h5, v1-v5 once")
            found[slot] = m.group(2)
        missing = [s for s in SLOTS if s not in found]
        if missing:
            raise ProblemError(f"crosswords needs a clue for each of h1-h5 and v1-v5; {', '.join(missing)} missing")
        return Crossword(tuple(found[s] for s in SLOTS))

    def root_content(self, problem: Crossword) -> str:
        """The clues."""
        return render_clues(problem.clues)

    # --- state --------------------------------------------------------------------------

    def board(self, problem: Crossword, steps: Sequence[str]) -> list[str]:
        """The 25 cells after the (validated) steps, "_" where nothing is placed."""
        board = [EMPTY] * (SIZE * SIZE)
        for step in steps:
            m = _STEP.match(step)
            assert m, f"validated step is not 'h1. WORD': {step!r}"
            for cell, letter in zip(slot_cells(m.group(1).lower()), m.group(2).upper(), strict=False):
                board[cell] = letter
        return board

    def state_key(self, problem: Crossword, steps: Sequence[str]) -> Hashable:
        """The board: placing the same words in another order is the same state."""
        return "".join(self.board(problem, steps))

    def is_terminal(self, problem: Crossword, steps: Sequence[str]) -> bool:
        """Every cell filled, or (with a vocabulary) no word of it fits any open slot."""
        if EMPTY not in self.board(problem, steps):
            return True
        return bool(self.vocabulary(problem)) and not self.legal_steps(problem, steps)

    def quality(self, problem: Crossword, steps: Sequence[str], score: float) -> float:
        """The value, in proportion to how much of the board is filled."""
        return score * sum(c != EMPTY for c in self.board(problem, steps)) / (SIZE * SIZE)

    def thought_kind(self, problem: Crossword, steps: Sequence[str]) -> NodeKind:
        """A full board is a candidate solution; a partial one a hypothesis."""
        return NodeKind.SOLUTION if self.is_terminal(problem, steps) else NodeKind.HYPOTHESIS

    def render(self, problem: Crossword, steps: Sequence[str]) -> str:
        """The state as the paper's env.render() shows it: the board, then unfilled, filled and changed words."""
        board = self.board(problem, steps)
        placed = {m.group(1).lower() for s in steps if (m := _STEP.match(s))}
        rows = "".join("".join(board[r * SIZE:(r + 1) * SIZE]) + "\n" for r in range(SIZE))
        words = board_words(board)

        def listed(filled: bool) -> str:
            return "".join(
                f"{slot}. {clue}: {word}\n"
                for slot, clue, word in zip(SLOTS, problem.clues, words, strict=False)
                if (slot in placed) == filled
            )

        # No word is ever "changed" here: the validator refuses a step that would change one.
        return f"Current Board:\n{rows}\nUnfilled:\n{listed(False)}\nFilled:\n{listed(True)}\nChanged:\n"

    # --- generate -----------------------------------------------------------------------

    def propose(self, problem: Crossword, steps: Sequence[str], k: int) -> Query:
        """The paper's propose prompt on the rendered state; with a data file, the fitting words as choices."""
        text = PROPOSE_PROMPT.format(input=self.render(problem, steps))
        return Query(Prompt(text=text), max_tokens=200, stop=("\n\n",), choices=self.legal_steps(problem, steps))

    def sample(self, problem: Crossword, steps: Sequence[str]) -> Query:
        """The propose prompt cut to one line: one word per sample."""
        q = self.propose(problem, steps, 1)
        return Query(q.prompt, max_tokens=24, stop=("\n",), choices=q.choices)

    def parse_proposals(self, problem: Crossword, steps: Sequence[str], text: str) -> list[str]:
        """The "h1. apple (medium)" lines, as "h1. APPLE", ranked by summed confidence as the paper does
        (a line without a confidence counts as low)."""
        scores: dict[str, float] = {}
        for line in text.splitlines():
            m = _STEP.match(line)
            if m:
                step = f"{m.group(1).lower()}. {m.group(2).upper()}"
                scores[step] = scores.get(step, 0.0) + CONFIDENCE[(m.group(3) or "low").lower()]
        return sorted(scores, key=lambda s: -scores[s])

    def parse_sample(self, problem: Crossword, steps: Sequence[str], text: str) -> str | None:
        """The first proposal line."""
        found = self.parse_proposals(problem, steps, text.strip().splitlines()[0] if text.strip() else "")
        return found[0] if found else None

    # --- check --------------------------------------------------------------------------

    def validate(self, problem: Crossword, steps: Sequence[str], thought: str) -> Verdict:
        """A five-letter word in a slot, keeping every letter already on the board and adding one."""
        m = _STEP.match(thought)
        if not m:
            return Verdict(False, thought, 'not a step of the form "h1. apple"')
        slot, word = m.group(1).lower(), m.group(2).upper()
        board = self.board(problem, steps)
        cells = slot_cells(slot)
        clash = [(i + 1, board[c]) for i, c in enumerate(cells) if board[c] != EMPTY and board[c] != word[i]]
        if clash:
            where = ", ".join(f"letter {i} is {letter}" for i, letter in clash)
            return Verdict(False, thought, f"{word} does not fit {slot}: {where}")
        if all(board[c] != EMPTY for c in cells):
            return Verdict(False, thought, f"{slot} is already filled")
        return Verdict(True, f"{slot}. {word}")

    # --- the vocabulary (LM-free steps) -------------------------------------------------

    def vocabulary(self, problem: Crossword) -> tuple[str, ...]:
        """The answers of the data file's other puzzles, most common first; none without a data file."""
        if self.data is None:
            return ()
        if problem.clues not in self._vocabularies:
            if self._puzzles is None:
                try:
                    self._puzzles = read_puzzles(read_input_file(self.data, "crosswords data file"))
                except ValueError as exc:
                    raise ProblemError(f"{self.data}: {exc}") from None
            counts = Counter(w for clues, gold in self._puzzles if clues != problem.clues for w in board_words(gold))
            self._vocabularies[problem.clues] = tuple(sorted(counts, key=lambda w: (-counts[w], w)))
        return self._vocabularies[problem.clues]

    def legal_steps(self, problem: Crossword, steps: Sequence[str]) -> tuple[str, ...]:
        """The vocabulary words that fit the open slot with the fewest of them (most common first, at most
        CHOICE_CAP): every board must fill that slot, so branching on it alone loses no solution."""
        vocabulary = self.vocabulary(problem)
        board = self.board(problem, steps)
        key = (problem.clues, "".join(board))
        if key in self._legal:
            return self._legal[key]
        best: list[str] | None = None
        for slot in SLOTS:
            pattern = [board[c] for c in slot_cells(slot)]
            if EMPTY not in pattern:
                continue
            fits = [f"{slot}. {w}" for w in vocabulary
                    if all(p in (EMPTY, ch) for p, ch in zip(pattern, w, strict=False))]
            if best is None or len(fits) < len(best):
                best = fits
        self._legal[key] = tuple((best or [])[:CHOICE_CAP])
        return self._legal[key]

    # --- evaluate -----------------------------------------------------------------------

    def _judged(self, problem: Crossword, steps: Sequence[str]) -> tuple[str, str] | None:
        """(clue, word) of the crossing word to value: not placed by a step, with the most letters (at least 2)."""
        board = self.board(problem, steps)
        placed = {m.group(1).lower() for s in steps if (m := _STEP.match(s))}
        best: tuple[int, str, str] | None = None
        for slot, clue, word in zip(SLOTS, problem.clues, board_words(board), strict=False):
            filled = SIZE - word.count(EMPTY)
            if slot not in placed and filled >= 2 and (best is None or filled > best[0]):
                best = (filled, clue, word)
        return None if best is None else (best[1], best[2])

    def exact_value(self, problem: Crossword, steps: Sequence[str]) -> float | None:
        """"maybe" when no crossing word has two letters yet (the paper judges none then); else the model values it."""
        return VALUE_WORDS["maybe"] if self._judged(problem, steps) is None else None

    def value(self, problem: Crossword, steps: Sequence[str]) -> Query:
        """The paper's value prompt on the most constrained crossing word ("clue: w _ o _ g")."""
        judged = self._judged(problem, steps)
        assert judged is not None, "exact_value values a state with no constrained crossing word"
        clue, word = judged
        line = f"{clue}: {' '.join(word.lower())}"
        return Query(Prompt(text=VALUE_PROMPT.format(input=line)), max_tokens=160, stop=("\n\n",),
                     choices=tuple(VALUE_WORDS))

    def parse_value(self, problem: Crossword, steps: Sequence[str], texts: Sequence[str]) -> float:
        """Mean verdict of the samples, each read from its last line as the paper does (none: 0)."""
        total = 0.0
        for text in texts:
            lines = text.strip().splitlines()
            total += VALUE_WORDS.get(lines[-1].strip().lower(), 0.0) if lines else 0.0
        return total / max(1, len(texts))

    # --- answer -------------------------------------------------------------------------

    def compose_answer(self, problem: Crossword, steps: Sequence[str], reply: str | None) -> str | None:
        """The board as five Output rows of space-separated letters ("_" for an empty cell); None with no step."""
        if not steps:
            return None
        board = self.board(problem, steps)
        return "\n".join(" ".join(board[r * SIZE:(r + 1) * SIZE]) for r in range(SIZE))
