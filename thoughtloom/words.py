"""Counts in words, as the output says them: "1 hypothesis", "2 hypotheses", "1,200 tokens"."""

from __future__ import annotations

#: Plurals that do not just add an s.
_IRREGULAR = {"hypothesis": "hypotheses", "child": "children", "is": "are", "was": "were"}


def plural(word: str, n: int) -> str:
    """`word` for n of them: as given for 1, else its plural."""
    if n == 1:
        return word
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def counted(n: int, word: str) -> str:
    """`n word`, the word in the number it takes and the count with thousands separators."""
    return f"{n:,} {plural(word, n)}"
