"""Few-shot prompts for the sampling lanes (io, cot, cot_sc, best_of_n, react), per data set family,
in both forms a backend may use, and the reading of the answer out of either form's reply.

Base models (the embedded Gemma, `#completions` endpoints) continue text patterns: they get
few-shot completion text ending in the cue the examples use ("Answer:" / "Steps:"), and stop
strings end the pattern. Instruct models (Qwen2.5-Coder, chat endpoints) get messages: a system
instruction saying what to do and exactly how to write the final answer, the same worked examples
as user/assistant turns, then the problem; their reply ends at the end of turn, stop strings are
ignored. Both forms are rendered from one tuple of examples per family, so they cannot drift apart.
Game of 24's io and cot completion prompts are the Tree-of-Thoughts paper's standard and CoT
prompts (its five examples); the other families' examples are written for this project, not taken
from the data sets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..grounding.arith import ExpressionError, evaluate
from ..llm.types import Message, Prompt
from ..tasks import blocksworld, prontoqa
from .scoring import after_marker, hotpot_span, parse_counts, parse_int_list, plain


@dataclass(frozen=True, slots=True)
class Example:
    """One worked example: the problem as shown, and each lane's reply to it after the lane's cue."""

    shown: str
    io: str
    cot: str
    #: A Thought / Calculate / Result transcript; None: not one of the react examples.
    react: str | None = None


@dataclass(frozen=True, slots=True)
class Shots:
    """One lane's prompt layout; `text` and `messages` render the same examples in the two forms."""

    reply: str  # which reply of an Example this lane shows: "io", "cot" or "react"
    header: str  # completion text before the examples: the task statement ("" for none)
    ask: str  # how a problem is shown, e.g. "Input: {input}"
    cue: str  # what follows the problem and precedes the reply, e.g. "\nAnswer:"
    sep: str  # what follows each example's reply ("\n" or "\n\n")
    instruction: str  # chat only: what to do and exactly how to write the final answer
    #: Chat examples start the assistant turn with the cue ("Answer: 16"); False where the cue only
    #: opens a reasoning paragraph (GSM8K cot) and would read as a final answer line.
    cue_in_chat: bool = True

    def _shown(self, examples: tuple[Example, ...]) -> list[tuple[Example, str]]:
        return [(ex, r) for ex in examples if (r := getattr(ex, self.reply)) is not None]

    def text(self, examples: tuple[Example, ...], problem: str) -> str:
        """The few-shot completion prompt, ending at the cue where the model continues."""
        shots = "".join(self.ask.format(input=ex.shown) + self.cue + r + self.sep for ex, r in self._shown(examples))
        return self.header + shots + self.ask.format(input=problem) + self.cue

    def messages(self, examples: tuple[Example, ...], problem: str) -> tuple[Message, ...]:
        """System instruction, each example as a user turn and the assistant's reply, then the problem."""
        system = " ".join(part for part in (self.header.strip(), self.instruction) if part)
        out = [Message("system", system)]
        for ex, r in self._shown(examples):
            out.append(Message("user", self.ask.format(input=ex.shown)))
            out.extend(_turns((self.cue + r) if self.cue_in_chat else r))
        out.append(Message("user", self.ask.format(input=problem)))
        return tuple(out)

    def prompt(self, examples: tuple[Example, ...], problem: str) -> Prompt:
        """Both forms in one Prompt: the backend uses the one its model takes."""
        return Prompt(text=self.text(examples, problem), messages=self.messages(examples, problem))


def _turns(reply: str) -> list[Message]:
    """An example reply as chat turns: a react transcript's 'Result:' lines are the calculator's (user) turns."""
    out: list[Message] = []
    mine: list[str] = []
    for line in reply.strip().splitlines():
        if line.startswith("Result:"):
            out += [Message("assistant", "\n".join(mine)), Message("user", line)]
            mine = []
        else:
            mine.append(line)
    return [*out, Message("assistant", "\n".join(mine))]


@dataclass(frozen=True, slots=True)
class PromptFamily:
    """A family's examples, its io / cot / react layouts, their stops and token limits."""

    name: str
    examples: tuple[Example, ...]
    io: Shots
    cot: Shots
    react: Shots | None
    io_stop: tuple[str, ...]
    cot_stop: tuple[str, ...]
    # One limit serves both forms: chat replies are longer (an instruct model writes its reasoning
    # out), while a base model stops much earlier at the stop strings, so for it this only raises
    # the reservation.
    io_tokens: int
    cot_tokens: int
    #: The line that carries the answer in a cot reply ("Answer:", "Output:"); None: the whole reply.
    answer_marker: str | None

    def prompt(self, shots: Shots, problem: str) -> Prompt:
        """One lane's prompt for a problem (shown as the examples show theirs), in both forms."""
        return shots.prompt(self.examples, problem)


# --- the families --------------------------------------------------------------------------

_GAME24_TASK = "Use numbers and basic arithmetic operations (+ - * /) to obtain 24."
_GAME24 = (
    Example("4 4 6 8", " (4 + 8) * (6 - 4) = 24",
            "4 + 8 = 12 (left: 4 6 12)\n6 - 4 = 2 (left: 2 12)\n2 * 12 = 24 (left: 24)\n"
            "Answer: (6 - 4) * (4 + 8) = 24",
            " 4 + 8 is 12 and 6 - 4 is 2, and 12 * 2 may be 24.\nCalculate: (4 + 8) * (6 - 4)\nResult: 24\n"
            "Answer: (4 + 8) * (6 - 4) = 24"),
    Example("2 9 10 12", " 2 * 12 * (10 - 9) = 24",
            "12 * 2 = 24 (left: 9 10 24)\n10 - 9 = 1 (left: 1 24)\n24 * 1 = 24 (left: 24)\n"
            "Answer: (12 * 2) * (10 - 9) = 24"),
    Example("4 9 10 13", " (13 - 9) * (10 - 4) = 24",
            "13 - 10 = 3 (left: 3 4 9)\n9 - 3 = 6 (left: 4 6)\n4 * 6 = 24 (left: 24)\n"
            "Answer: 4 * (9 - (13 - 10)) = 24"),
    Example("1 4 8 8", " (8 / 4 + 1) * 8 = 24",
            "8 / 4 = 2 (left: 1 2 8)\n1 + 2 = 3 (left: 3 8)\n3 * 8 = 24 (left: 24)\nAnswer: (1 + 8 / 4) * 8 = 24",
            " adding all of them may work.\nCalculate: 1 + 4 + 8 + 8\nResult: 21\n"
            "Thought: 21 is not 24. 8 / 4 is 2, plus 1 is 3, and 3 * 8 may be 24.\nCalculate: (8 / 4 + 1) * 8\n"
            "Result: 24\nAnswer: (8 / 4 + 1) * 8 = 24"),
    Example("5 5 5 9", " 5 + 5 + 5 + 9 = 24",
            "5 + 5 = 10 (left: 5 9 10)\n10 + 5 = 15 (left: 9 15)\n15 + 9 = 24 (left: 24)\n"
            "Answer: ((5 + 5) + 5) + 9 = 24",
            " 5 + 5 + 5 is 15, and 15 + 9 may be 24.\nCalculate: 5 + 5 + 5 + 9\nResult: 24\n"
            "Answer: 5 + 5 + 5 + 9 = 24"),
)

_GSM8K = (
    Example("A baker makes 3 trays of 12 cookies and sells 20 of them. How many cookies are left?", " 16",
            " The baker makes 3 * 12 = 36 cookies. After selling 20, 36 - 20 = 16 are left. The answer is 16.",
            " first count the cookies made.\nCalculate: 3 * 12\nResult: 36\nThought: then subtract the ones sold.\n"
            "Calculate: 36 - 20\nResult: 16\nAnswer: 16"),
    Example("Tom reads 15 pages a day for 4 days, then 10 pages on the fifth day. How many pages did he read?", " 70",
            " In 4 days he reads 15 * 4 = 60 pages. With the fifth day, 60 + 10 = 70 pages. The answer is 70."),
)

_SORTING = (
    Example("[5, 1, 9, 1, 3, 0, 7, 3]", " [0, 1, 1, 3, 3, 5, 7, 9]",
            " 0:1 1:2 3:2 5:1 7:1 9:1\nOutput: [0, 1, 1, 3, 3, 5, 7, 9]"),
    Example("[8, 2, 6, 2, 4, 9, 0, 5]", " [0, 2, 2, 4, 5, 6, 8, 9]",
            " 0:1 2:2 4:1 5:1 6:1 8:1 9:1\nOutput: [0, 2, 2, 4, 5, 6, 8, 9]"),
)

_SET = (
    Example("Set 1: [3, 14, 7, 22, 9]\nSet 2: [9, 1, 22, 5, 30]", " [9, 22]", " 22, 9\nOutput: [9, 22]"),
    Example("Set 1: [11, 2, 40, 8]\nSet 2: [8, 33, 11, 6]", " [8, 11]", " 11, 8\nOutput: [8, 11]"),
)

_KEYWORD = (
    Example("Anna flew from France to Japan, and then back to France for a conference about Brazil.",
            ' {"France": 2, "Japan": 1, "Brazil": 1}',
            ' France, Japan, France, Brazil\nOutput: {"France": 2, "Japan": 1, "Brazil": 1}'),
)

# Invented (no data set question is like it): HotpotQA contexts are long, so one short example.
_HOTPOT = (
    Example("Harbor Light: Harbor Light is a lighthouse in Port Ellis. It was designed by Mara Quill.\n"
            "Mara Quill: Mara Quill was a Scottish engineer born in 1841.\n"
            "Question: In which year was the designer of Harbor Light born?", " 1841",
            " Harbor Light was designed by Mara Quill, who was born in 1841.\nAnswer: 1841"),
)

# Any free-text question (compare_strategies on a question given as text, the general task): one invented example.
_GENERAL = (
    Example("Which weighs more, a kilogram of iron or a kilogram of feathers?", " They weigh the same.",
            " Both are one kilogram, and a kilogram weighs the same whatever it is made of.\n"
            "Answer: They weigh the same."),
)

# The tasks' own worked examples (written for this project): io gives the bare plan / answer, cot the plan with
# each action's effect noted, and PrOntoQA's chain in RAP's CoT layout.
_BLOCKSWORLD = tuple(
    Example(statement, f"\n{plan}\n[PLAN END]", "\n" + "\n".join(
        f"{line} ({blocksworld.effect_note(line)})" for line in plan.splitlines()) + "\n[PLAN END]")
    for statement, plan in blocksworld.SOLVED)
_PRONTOQA = tuple(Example(q, f" The answer is {tf}.", f" {chain} The answer is {tf}.")
                  for q, chain, tf in prontoqa.SOLVED)

def _crossword(clues: str, rows: str, columns: str) -> Example:
    """One of the ToT paper's five crossword examples: its clues (" / " between clues, " | " between the
    across and the down ones), its rows and columns; io replies with the rows, cot first names the word
    of each clue."""
    across, down = clues.split(" | ")
    named = [*across.split(" / "), *down.split(" / ")]
    slots = [f"h{i}" for i in range(1, 6)] + [f"v{i}" for i in range(1, 6)]
    shown = "\n".join(f"{slot}. {clue}" for slot, clue in zip(slots, named, strict=True))
    board = "\n".join(" ".join(row) for row in rows.split())
    thoughts = "\n".join(f"{slot}. {clue}: {word}"
                         for slot, clue, word in zip(slots, named, [*rows.split(), *columns.split()], strict=True))
    return Example(shown, board, f"{thoughts}\n\nOutput:\n{board}")


# The ToT paper's standard and CoT prompts' five examples (src/tot/prompts/crosswords.py), clue for clue.
_CROSSWORDS = (
    _crossword("A lunar valley / A fatty oil / To entice / To lower; to reduce / A solitary person | "
               "According to the roster / Another name for Port-Francqui / An illicit lover; a European lake / "
               "To lisp / To come in", "RILLE OLEIN TEMPT ABASE LONER", "ROTAL ILEBO LEMAN LIPSE ENTER"),
    _crossword("One who saws / A fungus genus / An assessor / Pasture land / Receiving by the ear | "
               "To swell; to increase / The Brazilian macaw; an Australian bird / A Timorese island / "
               "Excessive fluid accumulation / Dewy; roscid", "SAWER UREDO RATER GRAMA EARAL",
               "SURGE ARARA WETAR EDEMA RORAL"),
    _crossword("Dandruff; scum; the bull-trout / One who greets; to vacillate; a British river / "
               "A Turkish written decree / Mignon; petty; little / "
               "A bishop's permission for a priest to leave a diocese | To steal; to brush across / "
               "A sedge (a primitive three-sided grass) / Grape jam / A flatworm larva / "
               "Ore refuse; to prepare material for glass by heat", "SCURF WAVER IRADE PETIT EXEAT",
               "SWIPE CAREX UVATE REDIA FRETT"),
    _crossword("Presented; revealed / An interjection expressing sorrow / Benefit; result / A cigarette / "
               "Chased up a tree | Swarthy; tawny / An apiarist or bee keeper / To speak formally / "
               "To indite; to scribble / An insecticide", "SHOWN WIRRA AVAIL RETTE TREED",
               "SWART HIVER ORATE WRITE NALED"),
    _crossword("Scald; an ancient Scandinavian bard / H2O; to irrigate / "
               'The companion to an "intro", a postscript or exit piece / An artificial fabric / '
               "Deep religious feeling | To rush; to stoop; a descent / A New Zealand fir tree / Mine refuse / "
               "The garden dormouse / Like a drone; humming", "SKALD WATER OUTRO ORLON PIETY",
               "SWOOP KAURI ATTLE LEROT DRONY"),
)
_CROSSWORDS_TASK = "Solve 5x5 mini crosswords. Given an input of 5 horizontal clues and 5 vertical clues, generate "
_CROSSWORDS_ROWS = "an output of 5 rows, where each row is 5 letter separated by space."

_REACT_TURNS = ("Work in turns: write one `Thought:` line and one `Calculate: EXPRESSION` line, then stop; "
                "the calculator replies `Result: N`.")

PROMPTS: dict[str, PromptFamily] = {
    "game24": PromptFamily(
        "game24", _GAME24,
        Shots("io", _GAME24_TASK + "\n", "Input: {input}", "\nAnswer:", "\n",
              "Use each input number exactly once. Reply with one line: `Answer: EXPRESSION = 24`."),
        Shots("cot", _GAME24_TASK + " Each step, you are only allowed to choose two of the remaining numbers to "
              "obtain a new number.\n", "Input: {input}", "\nSteps:\n", "\n",
              "Write the steps, then end with a final line `Answer: EXPRESSION = 24` that uses each input number "
              "exactly once."),
        Shots("react", _GAME24_TASK + ' Check ideas with the calculator: write "Calculate: EXPRESSION" and read '
              "the result.\n", "Input: {input}", "\nThought:", "\n",
              _REACT_TURNS + " When an expression makes 24, reply `Answer: EXPRESSION = 24`."),
        ("\nInput:", "\n\n"), ("\nInput:", "\n\n"), 96, 384, "Answer:"),
    "gsm8k": PromptFamily(
        "gsm8k", _GSM8K,
        Shots("io", "", "Question: {input}", "\nAnswer:", "\n\n",
              "Solve the math word problem. Reply with the final number only: `Answer: N`."),
        Shots("cot", "", "Question: {input}", "\nAnswer:", "\n\n",
              "Solve the math word problem. Reason step by step, then end with the sentence `The answer is N.` "
              "where N is a plain number.", cue_in_chat=False),
        Shots("react", "", "Question: {input}", "\nThought:", "\n\n",
              "Solve the math word problem with the calculator. " + _REACT_TURNS
              + " When you know the answer, reply `Answer: N`."),
        ("\nQuestion:", "\n\n"), ("\nQuestion:", "\n\n"), 64, 512, None),
    "sorting": PromptFamily(
        "sorting", _SORTING,
        Shots("io", "Sort the list of numbers in ascending order.\n", "Input: {input}", "\nOutput:", "\n",
              "Keep every number, repeats included. Reply with one line: `Output: [the sorted list]`."),
        Shots("cot", "Sort the list of numbers in ascending order. First count each digit, then write the sorted "
              "list.\n", "Input: {input}", "\nCounts:", "\n",
              "Keep every number, repeats included. End with a final line `Output: [the sorted list]`."),
        None, ("\nInput:", "\n\n"), ("\nInput:", "\n\n"), 400, 640, "Output:"),
    "set_intersection": PromptFamily(
        "set_intersection", _SET,
        Shots("io", "Find the intersection of the two sets of numbers.\n", "{input}", "\nOutput:", "\n",
              "Reply with one line: `Output: [the numbers in both sets]`."),
        Shots("cot", "Find the intersection of the two sets of numbers. Check each number of Set 1 against Set 2.\n",
              "{input}", "\nIn both:", "\n", "End with a final line `Output: [the numbers in both sets]`."),
        None, ("\nSet 1:", "\n\n"), ("\nSet 1:", "\n\n"), 300, 512, "Output:"),
    "keyword_counting": PromptFamily(
        "keyword_counting", _KEYWORD,
        Shots("io", "Count how many times each country is named in the text. Output JSON.\n", "Text: {input}",
              "\nOutput:", "\n", 'Reply with one line: `Output: {"Country": count, ...}`.'),
        Shots("cot", "Count how many times each country is named in the text. List the countries in order, then "
              "output JSON.\n", "Text: {input}", "\nCountries:", "\n",
              'End with a final line `Output: {"Country": count, ...}`.'),
        None, ("\nText:", "\n\n"), ("\nText:", "\n\n"), 256, 512, "Output:"),
    "hotpotqa": PromptFamily(
        "hotpotqa", _HOTPOT,
        Shots("io", "Answer the question from the paragraphs with a short span.\n", "{input}", "\nAnswer:", "\n\n",
              "Reply with one line: `Answer: SPAN`, where SPAN is a few words copied from the paragraphs, or yes "
              "or no."),
        Shots("cot", "Answer the question from the paragraphs. Reason briefly, then give a short span.\n", "{input}",
              "\nReasoning:", "\n\n",
              "Reason briefly about which paragraphs answer it, then end with a final line `Answer: SPAN`, where "
              "SPAN is a few words copied from the paragraphs, or yes or no."),
        # io: the span is one line, and a base model would go on to write the next paragraph.
        None, ("\n",), ("\n\n", "\nQuestion:"), 48, 320, "Answer:"),
    "crosswords": PromptFamily(
        "crosswords", _CROSSWORDS,
        Shots("io", _CROSSWORDS_TASK + _CROSSWORDS_ROWS + "\n\n", "Input:\n{input}", "\n\nOutput:\n", "\n\n",
              "Reply with the 5 rows only, each 5 capital letters separated by spaces."),
        Shots("cot", _CROSSWORDS_TASK + "thoughts about which 5-letter word fits each clue, then "
              + _CROSSWORDS_ROWS + "\n\n", "Input:\n{input}", "\n\nThoughts:\n", "\n\n",
              "Name the 5-letter word of each clue, then write a line `Output:` and under it the 5 rows, each 5 "
              "capital letters separated by spaces."),
        None, ("\n\nInput:", "\n\n"), ("\nInput:",), 64, 384, None),
    "general": PromptFamily(
        "general", _GENERAL,
        Shots("io", "Answer the question.\n", "Question: {input}", "\nAnswer:", "\n\n",
              "Reply with one line: `Answer: ANSWER`."),
        Shots("cot", "Answer the question. Reason step by step, then give the answer.\n", "Question: {input}",
              "\nReasoning:", "\n\n", "Reason step by step, then end with a final line `Answer: ANSWER`."),
        None, ("\nQuestion:", "\n\n"), ("\nQuestion:", "\n\n"), 128, 512, "Answer:"),
    "blocksworld": PromptFamily(
        "blocksworld", _BLOCKSWORLD,
        Shots("io", blocksworld.DOMAIN_INTRO + "\n\n", "[STATEMENT]\n{input}\n\nMy plan is as follows:\n\n",
              "[PLAN]", "\n\n", "Reply with the plan only: one action per line in the words above, then [PLAN END]."),
        Shots("cot", blocksworld.DOMAIN_INTRO + " After each action, note what holds then.\n\n",
              "[STATEMENT]\n{input}\n\nMy plan is as follows:\n\n", "[PLAN]", "\n\n",
              "Write one action per line in the words above, each followed by what holds after it in parentheses, "
              "then [PLAN END]."),
        None, ("[PLAN END]", "[STATEMENT]"), ("[PLAN END]", "[STATEMENT]"), 200, 400, None),
    "prontoqa": PromptFamily(
        "prontoqa", _PRONTOQA,
        Shots("io", "", "Q: {input}", "\nA:", "\n\n", "Reply with one sentence: `The answer is true.` or "
              "`The answer is false.`"),
        Shots("cot", "", "Q: {input}", "\nA:", "\n\n", prontoqa.INSTRUCTION),
        None, ("\nQ:", "\n\n"), ("\nQ:", "\n\n"), 16, 256, None),
}


def labelled_family(instructions: str, examples: Sequence[tuple[str, str, str]]) -> PromptFamily:
    """The io/cot prompts of a user's labelled data set: the general family's layout with the task's
    instructions and its (problem, answer, reasoning) examples, read as free text like the general family."""
    general = PROMPTS["general"]
    shown = tuple(Example(problem, f" {answer}", f" {reasoning or 'The answer follows.'}\nAnswer: {answer}")
                  for problem, answer, reasoning in examples) or general.examples
    header = f"{instructions}\n" if instructions else general.io.header
    cot_header = f"{instructions} Reason step by step, then give the answer.\n" if instructions else general.cot.header
    return replace(general, examples=shown, io=replace(general.io, header=header),
                   cot=replace(general.cot, header=cot_header))


# --- reading the answer --------------------------------------------------------------------

_CALC = re.compile(r"^\s*Calculate:\s*(.+?)\s*$", re.MULTILINE)
# A reply that goes on past its action: the calculator's line, which only the tool may write.
_INVENTED_RESULT = re.compile(r"\n[ \t]*(?:\*\*)?Result:")
# An arithmetic expression claimed to make 24, inside a line of prose ("So (1 + 1) * 12 = 24.").
_EXPRESSION_24 = re.compile(r"([\d(][\d\s()+\-*/.]*?)\s*=\s*24(?![\d.])")
# A line that is nothing but a number: what a base model writes after GSM8K's "Answer:" cue.
_BARE_NUMBER = re.compile(r"^\$?-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)\s*%?\.?$")
# Where a GSM8K reply states its answer (final_number reads the number there).
_NUMBER_MARKER = re.compile(r"####|\\boxed|answer[ \t]*(?:is\b|:)", re.IGNORECASE)
_JSON_OBJECT = re.compile(r"\{[^{}]*\}")


def _first_line(text: str | None) -> str | None:
    return text.strip().splitlines()[0].strip() if text and text.strip() else None


def _is_expression(answer: str) -> bool:
    """The answer line's expression (before '=') is arithmetic the Game of 24 rule can evaluate."""
    line = re.sub(r"^\s*answer\s*:", "", answer, flags=re.IGNORECASE).split("=")[0].strip()
    try:
        evaluate(line)
    except (ExpressionError, ValueError, ZeroDivisionError, RecursionError):
        return False
    return True


def _find_game24(reply: str) -> str | None:
    """The marked answer, else the last 'EXPRESSION = 24' the reply claims (a step line claims its own)."""
    text = plain(reply)
    marked = _first_line(after_marker(text))
    if marked and _is_expression(marked):
        return f"Answer: {marked}"
    for line in [*([marked] if marked else []), *reversed(text.splitlines())]:
        m = _EXPRESSION_24.search(line)
        if m and _is_expression(m.group(1)):
            return f"Answer: {m.group(1).strip()} = 24"
    return None


def _find_gsm8k(reply: str) -> str | None:
    """The whole reply when it marks its answer (final_number reads the number there)."""
    return reply if _NUMBER_MARKER.search(reply) else None


def _find_list(reply: str) -> str | None:
    """The list after the last 'Output:' marker, else the last list of integers in the reply."""
    text = plain(reply)
    found = parse_int_list(after_marker(text, "output|answer"))
    if found is None:
        for m in reversed(list(re.finditer(r"\[[^\[\]]*\]", text))):
            found = parse_int_list(m.group(0))
            if found is not None:
                break
    return None if found is None else f"Output: {found}"


def _find_counts(reply: str) -> str | None:
    """The JSON object after the last 'Output:' marker, else the last JSON object of counts in the reply."""
    text = plain(reply)
    counts = parse_counts(after_marker(text, "output|answer"))
    if counts is None:
        for m in reversed(list(_JSON_OBJECT.finditer(text))):
            counts = parse_counts(m.group(0))
            if counts is not None:
                break
    return None if counts is None else "Output: " + json.dumps(counts, ensure_ascii=False)


def _find_free_text(reply: str) -> str:
    """The rest of the last 'Answer:' line, else the whole reply (a free-text answer has no other shape)."""
    marked = _first_line(after_marker(plain(reply)))
    return f"Answer: {marked}" if marked else reply.strip()


def _find_span(reply: str) -> str | None:
    """The span on the last 'Answer:' line (HotpotQA)."""
    span = hotpot_span(reply) if after_marker(plain(reply)) else None
    return f"Answer: {span}" if span else None


def _find_board(reply: str) -> str:
    """The rows after the last 'Output:' line (the whole reply without one): the paper's rule reads the last five.

    Not `plain`: its markdown stripping would drop a row's "__" (two empty cells)."""
    marked = after_marker(reply, "output")
    return (marked if marked is not None else reply).strip()


@dataclass(frozen=True, slots=True)
class _Reading:
    """How a family's answers are read: when the completion form's answer stands, and where else to look."""

    #: (answer read the completion way, cot) -> it is a real answer, so a base reply reads as it always did
    holds: Callable[[str, bool], bool]
    #: the answer wherever a chat reply put it (decoration, a bare marker line, the answer last)
    find: Callable[[str], str | None]


_READINGS: dict[str, _Reading] = {
    "game24": _Reading(lambda a, cot: _is_expression(a), _find_game24),
    # io: a bare number is a base model's answer line; cot: the whole reply, final_number reads it.
    "gsm8k": _Reading(lambda a, cot: cot or bool(_BARE_NUMBER.match(a.strip())), _find_gsm8k),
    "sorting": _Reading(lambda a, cot: parse_int_list(a) is not None, _find_list),
    "set_intersection": _Reading(lambda a, cot: parse_int_list(a) is not None, _find_list),
    "keyword_counting": _Reading(lambda a, cot: parse_counts(a) is not None, _find_counts),
    # A span has no shape to check: the marked one wins, else the completion form's first line.
    "hotpotqa": _Reading(lambda a, cot: False, _find_span),
    # The board: read by the paper's own rule (scoring.crossword_board), from the last 'Output:' on.
    "crosswords": _Reading(lambda a, cot: False, _find_board),
    # Free text: a marked answer line stands (io's first line is one); else the marked line or the whole reply.
    "general": _Reading(lambda a, cot: bool(a.removeprefix("Answer:").strip()), _find_free_text),
    # A plan is every line up to [PLAN END] (io's first line is only its first action), in either form.
    "blocksworld": _Reading(lambda a, cot: False, lambda reply: reply.split("[PLAN END]")[0].strip() or None),
    # The whole reply: the answer sentence and, for the proof, the conclusions after each "So".
    "prontoqa": _Reading(lambda a, cot: prontoqa.stated_answer(a) is not None,
                         lambda reply: reply if prontoqa.stated_answer(reply) is not None else None),
}


def completion_answer(family: PromptFamily, text: str, *, cot: bool) -> str | None:
    """The answer as a few-shot completion gives it: the marked line for cot, the first line for io."""
    if cot and family.answer_marker:
        lines = [ln for ln in text.splitlines() if ln.strip().startswith(family.answer_marker)]
        return lines[-1].strip() if lines else None
    if cot:
        return text
    # io: the prompt ends at the answer cue, so the first line is the answer.
    first = text.splitlines()[0].strip()
    if family.answer_marker and first.startswith(family.answer_marker):
        first = first[len(family.answer_marker):].strip()  # the model repeated the cue
    return f"{family.answer_marker} {first}" if family.answer_marker == "Answer:" else first


def answer_from(family: PromptFamily, reply: str, *, cot: bool) -> str | None:
    """The final answer in a reply of either form: read as a completion when that gives a real answer
    (so base-model replies read exactly as before), else wherever a chat reply put it."""
    text = reply.strip()
    if not text:
        return None
    reading = _READINGS[family.name]
    answer = completion_answer(family, text, cot=cot)
    if answer is not None and reading.holds(answer, cot):
        return answer
    found = reading.find(text)
    return found if found is not None else answer


def stated_answer(family: PromptFamily, reply: str) -> str | None:
    """The answer a reply marks as its answer in its own words ("The answer is 72.", \\boxed{}, an
    'Answer:' line), or None: unlike answer_from, no guess from an unmarked reply."""
    return _READINGS[family.name].find(reply.strip()) if reply.strip() else None


def own_turn(reply: str) -> str:
    """A react reply up to its first action: the first 'Calculate:' line ends the turn, and a 'Result:'
    line the model wrote itself is cut (results are the calculator's). A base model stopped there
    already at the stop string; a chat model ignores stop strings and may go on for several actions."""
    m = _INVENTED_RESULT.search(reply)
    turn = reply if m is None else reply[:m.start()]
    action = _CALC.search(turn)
    return turn if action is None else turn[:action.end()]


def calculator_call(reply: str) -> str | None:
    """The expression of the last 'Calculate:' line in a react reply, if it is the reply's last action,
    as arithmetic: what follows an '=' (the model's own guess at the result), units and other words,
    '$' and thousands commas are left out, and 'x' between numbers is a product."""
    found = _CALC.findall(reply)
    if not found or "Answer:" in reply.split("Calculate:")[-1]:
        return None
    expression = found[-1].split("=")[0].replace("×", "*").replace("÷", "/")
    expression = re.sub(r"(?<=\d)\s*x\s*(?=[\d(])", " * ", expression)
    expression = re.sub(r"(?<=\d),(?=\d{3})|[$]", "", expression)
    return " ".join(re.sub(r"[A-Za-z_%?!:;']+", " ", expression).split()) or None
