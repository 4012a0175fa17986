"""Ranking passages for a query, the same way everywhere: one tokenizer, one stemmer, bm25.

`index_terms` is what a passage is indexed as (every token, stemmed by `grounding.stemming`) and
`query_stems` what a query looks up (its content words and numbers, stemmed, each once). The
knowledge index stores the former in its FTS5 table and matches the latter, so its bm25 sees the
same words as `rank`, which ranks an in-memory list of passages with bm25s (Lucene's bm25, the
same k1 and b as FTS5). `fuse` merges rankings by reciprocal rank, for hybrid retrieval.
"""

from __future__ import annotations

from collections.abc import Sequence

from .claims import query_terms, tokenize
from .stemming import stem

#: bm25's term-frequency saturation and length normalisation: FTS5's fixed values, so both rank alike.
BM25_K1 = 1.2
BM25_B = 0.75
#: Reciprocal-rank fusion's damping constant (Cormack et al. 2009): a passage at rank r adds 1 / (RRF_K + r).
RRF_K = 60


def index_terms(text: str) -> list[str]:
    """The stemmed tokens a passage is indexed as, in order (stopwords kept: they count in its length)."""
    return [stem(t) for t in tokenize(text)]


def query_stems(text: str) -> list[str]:
    """The stems a query looks up: its content words' and numbers', each once, in order."""
    return list(dict.fromkeys(stem(t) for t in query_terms(text)))


def rank(query: str, passages: Sequence[str], limit: int | None = None) -> list[tuple[int, float]]:
    """(index, bm25 score) of the passages that share a stem with `query`, best first (ties by index)."""
    terms = query_stems(query)
    if not terms or not passages:
        return []
    import bm25s  # numpy and bm25s load only when a ranking is asked for, not with every command

    retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B)
    retriever.index([index_terms(p) for p in passages], show_progress=False)
    # bm25s ignores a query word no passage has; the scores are one per passage, in order.
    scores = retriever.get_scores(terms)
    found = sorted((i for i in range(len(passages)) if scores[i] > 0), key=lambda i: (-float(scores[i]), i))
    return [(i, float(scores[i])) for i in found[:limit]]


def fuse(rankings: Sequence[Sequence[int]], limit: int | None = None) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion: (item, fused score) over several best-first rankings, best first (ties by item)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for position, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (RRF_K + position)
    ordered = sorted(scores, key=lambda item: (-scores[item], item))
    return [(item, scores[item]) for item in ordered[:limit]]
