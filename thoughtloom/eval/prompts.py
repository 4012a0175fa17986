"""Few-shot completion prompts for the plain lanes (io, cot, react), per data set family.

The embedded model is a base model: it continues patterns, it does not follow instructions. So
every prompt here is few-shot completion text. Game of 24's io and cot prompts are the
Tree-of-Thoughts paper's standard and CoT prompts (its five examples), ending in the cue the
examples use ("Answer:" / "Steps:") so a base model writes in the same form. The other
families' examples are written for this project, not taken from the data sets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GAME24_IO = """Use numbers and basic arithmetic operations (+ - * /) to obtain 24.
Input: 4 4 6 8
Answer: (4 + 8) * (6 - 4) = 24
Input: 2 9 10 12
Answer: 2 * 12 * (10 - 9) = 24
Input: 4 9 10 13
Answer: (13 - 9) * (10 - 4) = 24
Input: 1 4 8 8
Answer: (8 / 4 + 1) * 8 = 24
Input: 5 5 5 9
Answer: 5 + 5 + 5 + 9 = 24
Input: {input}
Answer:"""

GAME24_COT = """Use numbers and basic arithmetic operations (+ - * /) to obtain 24. Each step, you are only allowed to choose two of the remaining numbers to obtain a new number.
Input: 4 4 6 8
Steps:
4 + 8 = 12 (left: 4 6 12)
6 - 4 = 2 (left: 2 12)
2 * 12 = 24 (left: 24)
Answer: (6 - 4) * (4 + 8) = 24
Input: 2 9 10 12
Steps:
12 * 2 = 24 (left: 9 10 24)
10 - 9 = 1 (left: 1 24)
24 * 1 = 24 (left: 24)
Answer: (12 * 2) * (10 - 9) = 24
Input: 4 9 10 13
Steps:
13 - 10 = 3 (left: 3 4 9)
9 - 3 = 6 (left: 4 6)
4 * 6 = 24 (left: 24)
Answer: 4 * (9 - (13 - 10)) = 24
Input: 1 4 8 8
Steps:
8 / 4 = 2 (left: 1 2 8)
1 + 2 = 3 (left: 3 8)
3 * 8 = 24 (left: 24)
Answer: (1 + 8 / 4) * 8 = 24
Input: 5 5 5 9
Steps:
5 + 5 = 10 (left: 5 9 10)
10 + 5 = 15 (left: 9 15)
15 + 9 = 24 (left: 24)
Answer: ((5 + 5) + 5) + 9 = 24
Input: {input}
Steps:
"""

# ReAct: the same examples, acting through an exact calculator ("Calculate:" -> "Result:").
GAME24_REACT = """Use numbers and basic arithmetic operations (+ - * /) to obtain 24. Check ideas with the calculator: write "Calculate: EXPRESSION" and read the result.
Input: 4 4 6 8
Thought: 4 + 8 is 12 and 6 - 4 is 2, and 12 * 2 may be 24.
Calculate: (4 + 8) * (6 - 4)
Result: 24
Answer: (4 + 8) * (6 - 4) = 24
Input: 1 4 8 8
Thought: adding all of them may work.
Calculate: 1 + 4 + 8 + 8
Result: 21
Thought: 21 is not 24. 8 / 4 is 2, plus 1 is 3, and 3 * 8 may be 24.
Calculate: (8 / 4 + 1) * 8
Result: 24
Answer: (8 / 4 + 1) * 8 = 24
Input: 5 5 5 9
Thought: 5 + 5 + 5 is 15, and 15 + 9 may be 24.
Calculate: 5 + 5 + 5 + 9
Result: 24
Answer: 5 + 5 + 5 + 9 = 24
Input: {input}
Thought:"""

GSM8K_IO = """Question: A baker makes 3 trays of 12 cookies and sells 20 of them. How many cookies are left?
Answer: 16

Question: Tom reads 15 pages a day for 4 days, then 10 pages on the fifth day. How many pages did he read?
Answer: 70

Question: {input}
Answer:"""

GSM8K_COT = """Question: A baker makes 3 trays of 12 cookies and sells 20 of them. How many cookies are left?
Answer: The baker makes 3 * 12 = 36 cookies. After selling 20, 36 - 20 = 16 are left. The answer is 16.

Question: Tom reads 15 pages a day for 4 days, then 10 pages on the fifth day. How many pages did he read?
Answer: In 4 days he reads 15 * 4 = 60 pages. With the fifth day, 60 + 10 = 70 pages. The answer is 70.

Question: {input}
Answer:"""

GSM8K_REACT = """Question: A baker makes 3 trays of 12 cookies and sells 20 of them. How many cookies are left?
Thought: first count the cookies made.
Calculate: 3 * 12
Result: 36
Thought: then subtract the ones sold.
Calculate: 36 - 20
Result: 16
Answer: 16

Question: {input}
Thought:"""

SORTING_IO = """Sort the list of numbers in ascending order.
Input: [5, 1, 9, 1, 3, 0, 7, 3]
Output: [0, 1, 1, 3, 3, 5, 7, 9]
Input: [8, 2, 6, 2, 4, 9, 0, 5]
Output: [0, 2, 2, 4, 5, 6, 8, 9]
Input: {input}
Output:"""

SORTING_COT = """Sort the list of numbers in ascending order. First count each digit, then write the sorted list.
Input: [5, 1, 9, 1, 3, 0, 7, 3]
Counts: 0:1 1:2 3:2 5:1 7:1 9:1
Output: [0, 1, 1, 3, 3, 5, 7, 9]
Input: [8, 2, 6, 2, 4, 9, 0, 5]
Counts: 0:1 2:2 4:1 5:1 6:1 8:1 9:1
Output: [0, 2, 2, 4, 5, 6, 8, 9]
Input: {input}
Counts:"""

SET_IO = """Find the intersection of the two sets of numbers.
Set 1: [3, 14, 7, 22, 9]
Set 2: [9, 1, 22, 5, 30]
Output: [9, 22]
Set 1: [11, 2, 40, 8]
Set 2: [8, 33, 11, 6]
Output: [8, 11]
{input}
Output:"""

SET_COT = """Find the intersection of the two sets of numbers. Check each number of Set 1 against Set 2.
Set 1: [3, 14, 7, 22, 9]
Set 2: [9, 1, 22, 5, 30]
In both: 22, 9
Output: [9, 22]
Set 1: [11, 2, 40, 8]
Set 2: [8, 33, 11, 6]
In both: 11, 8
Output: [8, 11]
{input}
In both:"""

KEYWORD_IO = """Count how many times each country is named in the text. Output JSON.
Text: Anna flew from France to Japan, and then back to France for a conference about Brazil.
Output: {{"France": 2, "Japan": 1, "Brazil": 1}}
Text: {input}
Output:"""

KEYWORD_COT = """Count how many times each country is named in the text. List the countries in order, then output JSON.
Text: Anna flew from France to Japan, and then back to France for a conference about Brazil.
Countries: France, Japan, France, Brazil
Output: {{"France": 2, "Japan": 1, "Brazil": 1}}
Text: {input}
Countries:"""


@dataclass(frozen=True, slots=True)
class PromptFamily:
    """A family's io / cot / react prompts, their stops and token limits, and how answers are read."""

    io: str
    cot: str
    react: str | None
    io_stop: tuple[str, ...]
    cot_stop: tuple[str, ...]
    io_tokens: int
    cot_tokens: int
    #: The line that carries the answer in a cot reply ("Answer:", "Output:"); None: the whole reply.
    answer_marker: str | None


PROMPTS: dict[str, PromptFamily] = {
    "game24": PromptFamily(GAME24_IO, GAME24_COT, GAME24_REACT, ("\nInput:", "\n\n"), ("\nInput:", "\n\n"),
                           40, 100, "Answer:"),
    "gsm8k": PromptFamily(GSM8K_IO, GSM8K_COT, GSM8K_REACT, ("\nQuestion:", "\n\n"), ("\nQuestion:", "\n\n"),
                          24, 200, None),
    "sorting": PromptFamily(SORTING_IO, SORTING_COT, None, ("\nInput:", "\n\n"), ("\nInput:", "\n\n"),
                            400, 500, "Output:"),
    "set_intersection": PromptFamily(SET_IO, SET_COT, None, ("\nSet 1:", "\n\n"), ("\nSet 1:", "\n\n"),
                                     300, 400, "Output:"),
    "keyword_counting": PromptFamily(KEYWORD_IO, KEYWORD_COT, None, ("\nText:", "\n\n"), ("\nText:", "\n\n"),
                                     200, 400, "Output:"),
}

_CALC = re.compile(r"^\s*Calculate:\s*(.+?)\s*$", re.MULTILINE)


def answer_from(family: PromptFamily, reply: str, *, cot: bool) -> str | None:
    """The final answer in a reply: the marked line for cot, the first line for io."""
    text = reply.strip()
    if not text:
        return None
    if cot and family.answer_marker:
        lines = [ln for ln in text.splitlines() if ln.strip().startswith(family.answer_marker)]
        if not lines:
            return None
        return lines[-1].strip()
    if cot:
        return text
    # io: the prompt ends at the answer cue, so the first line is the answer.
    first = text.splitlines()[0].strip()
    if family.answer_marker and first.startswith(family.answer_marker):
        first = first[len(family.answer_marker):].strip()  # the model repeated the cue
    return f"{family.answer_marker} {first}" if family.answer_marker == "Answer:" else first


def calculator_call(reply: str) -> str | None:
    """The expression of the last 'Calculate:' line in a react reply, if it is the reply's last action."""
    found = _CALC.findall(reply)
    if not found or "Answer:" in reply.split("Calculate:")[-1]:
        return None
    return found[-1]
