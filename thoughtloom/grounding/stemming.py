"""The project's one stemmer: Snowball English (PyStemmer), so that every part ranks and compares words alike.

The knowledge index stems its tokens when it indexes a passage and when it is queried, the in-memory
ranking (`grounding.ranking`) stems both sides the same way, and the claim judge and the thought
similarity reduce words with the same function: "boils", "boiled" and "boiling" are "boil"
everywhere, where two hand-written stemmers used to disagree.

PyStemmer's stemmer objects are not safe to share between threads (the knowledge base is searched
from `asyncio.to_thread`), so each thread gets its own; the word -> stem results are cached.
"""

from __future__ import annotations

import threading
from functools import lru_cache

import Stemmer

#: The Snowball algorithm every part of the project stems with.
ALGORITHM = "english"

_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer(ALGORITHM)
    return stemmer


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball English stem of `word`, lower-cased: "boils", "boiled", "boiling" -> "boil"."""
    w = word.lower()
    # Numbers and words with an apostrophe ("1,000", "isn't") are kept whole: Snowball is for words.
    if not w.isalpha():
        return w
    return str(_stemmer().stemWord(w))
