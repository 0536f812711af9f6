"""The int8 / uint8 quantization ranges of a feature-extraction graph's embeddings (``--embedding-calibration``).

sentence-transformers' ``quantize_embeddings(..., precision="int8", calibration_embeddings=E)`` cuts each dimension's
range, [min, max] over E, into 256 buckets. Taken from a request's own texts, a text's int8 vector would depend on
what it was sent with; taken here, once, from the texts the user calibrates with, it is the bundle's fixed property
(bundle.json ``embedding_ranges``), as Cohere's int8 embeddings are their model's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from contract.onnx_io import ort_session, pad_rows, run_session
from model_export.validate import ExportError

BATCH = 32


def read_texts(path: Path | str) -> list[str]:
    """The calibration texts: one a line, blank lines skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ExportError(f"embedding calibration file {path}: {error}") from error
    texts = [line for line in lines if line.strip()]
    if len(texts) < 2:
        raise ExportError(f"embedding calibration file {path}: {len(texts)} texts; give at least two (hundreds help)")
    return texts


def embedding_ranges(
    model_path: Path, tokenizer: Tokenizer, max_length: int, pad_id: int, use_token_types: bool, texts: list[str]
) -> list[list[float]]:
    """[[min...], [max...]] of the graph's ``sentence_embedding`` over ``texts``, each embedded as it is (no prompt),
    cut to ``max_length`` tokens as the service cuts it."""
    cutting = Tokenizer.from_str(tokenizer.to_str())
    cutting.no_padding()
    cutting.enable_truncation(max_length)
    session = ort_session(model_path)
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    for start in range(0, len(texts), BATCH):
        encodings = cutting.encode_batch(texts[start : start + BATCH])
        feeds = pad_rows([(item.ids, item.type_ids) for item in encodings], pad_id, use_token_types).feeds
        vectors = run_session(session, feeds)["sentence_embedding"].astype(np.float32)
        low = vectors.min(axis=0) if low is None else np.minimum(low, vectors.min(axis=0))
        high = vectors.max(axis=0) if high is None else np.maximum(high, vectors.max(axis=0))
    assert low is not None and high is not None
    return [low.tolist(), high.tolist()]
