"""TEI's ``/embed_all``: every token's state from a feature-extraction bundle exported with ``--token-embeddings``,
equal to the encoder's last hidden state in torch and to sentence-transformers' token embeddings; a bundle
exported without them says how to get them; ``/embed`` on the same bundle is unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.settings import Settings
from tests.service.apptools import ready_app_client
from tests.service.test_tei_routes import assert_tei_shape

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")

from model_export.export import export_bundle  # noqa: E402
from model_export.family_checkpoints import build_family_checkpoint  # noqa: E402

TEXTS = ["Who lives in Paris?", "John Smith lives in Paris and works for the bank."]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("embed-all")
    checkpoint = build_family_checkpoint("roberta", "feature-extraction", root / "checkpoint")
    with_tokens = export_bundle(checkpoint, root / "tokens", task="feature-extraction", token_embeddings=True)
    assert with_tokens.spec.outputs == ["sentence_embedding", "token_embeddings"]
    assert with_tokens.spec.parity["fp32"]["min_cosine"]["token_embeddings"] > 0.9999
    plain = export_bundle(checkpoint, root / "plain", task="feature-extraction")
    assert plain.spec.outputs == ["sentence_embedding"]
    return checkpoint, with_tokens.path, plain.path


def test_token_states_equal_torch_and_sentence_transformers(models: tuple[Path, Path, Path]) -> None:
    checkpoint, with_tokens, plain = models
    settings = Settings(models=[f"tokens={with_tokens}", f"plain={plain}"], intra_op_threads=1, tune=False)  # type: ignore[call-arg]
    oracle = st.SentenceTransformer(str(checkpoint), device="cpu")
    expected = oracle.encode(TEXTS, output_value="token_embeddings")
    with ready_app_client(settings) as client:
        response = client.post("/embed_all", json={"model": "tokens", "inputs": TEXTS})
        assert response.status_code == 200, response.text
        answer = response.json()
        assert_tei_shape(answer, "EmbedAllResponse")
        tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
        for got, want, text in zip(answer, expected, TEXTS, strict=True):
            assert len(got) == len(tokenizer(text)["input_ids"])
            np.testing.assert_allclose(np.array(got), want.numpy(), atol=1e-5)
        names = ("tokens", "plain")
        sentences = [client.post("/embed", json={"model": name, "inputs": TEXTS}).json() for name in names]
        np.testing.assert_allclose(np.array(sentences[0]), np.array(sentences[1]), atol=1e-6)
        refused = client.post("/embed_all", json={"model": "plain", "inputs": TEXTS})
        assert refused.status_code == 400
        assert "exported without token embeddings (export it with --token-embeddings)" in refused.text


def test_token_embeddings_are_for_feature_extraction_only(models: tuple[Path, Path, Path], tmp_path: Path) -> None:
    from model_export.export import ExportError

    checkpoint = build_family_checkpoint("roberta", "fill-mask", tmp_path / "mlm")
    with pytest.raises(ExportError, match="token_embeddings apply to feature-extraction only, not fill-mask"):
        export_bundle(checkpoint, tmp_path / "bundle", task="fill-mask", token_embeddings=True)
