"""TEI's ``/embed`` options on a sentence-transformers model with named prompts: ``prompt_name``, the model's default
prompt, ``--default-prompt`` / ``--default-prompt-name`` and ``dimensions``, each equal to sentence-transformers'
own encode with the same choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.settings import Settings
from tests.service.apptools import ready_app_client

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from model_export.export import export_bundle  # noqa: E402
from model_export.family_checkpoints import build_family_checkpoint  # noqa: E402

PROMPTS = {"query": "query: ", "passage": "passage: "}
TEXTS = ["Who lives in Paris?", "John Smith lives in Paris and works for the bank."]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("prompts")
    encoder = build_family_checkpoint("roberta", "feature-extraction", root / "encoder")
    checkpoint = root / "checkpoint"  # as sentence-transformers saves a model: modules.json, its config with prompts
    oracle = st.SentenceTransformer(str(encoder), device="cpu", prompts=PROMPTS, default_prompt_name="query")
    oracle.save(str(checkpoint))
    saved = json.loads((checkpoint / "config_sentence_transformers.json").read_text())["prompts"]
    assert PROMPTS.items() <= saved.items()
    bundle = export_bundle(checkpoint, root / "bundle", task="feature-extraction")
    assert bundle.spec.prompts == saved and bundle.spec.default_prompt_name == "query"
    return checkpoint, bundle.path


def embed(settings: Settings, body: dict) -> tuple[int, object]:
    with ready_app_client(settings) as client:
        response = client.post("/embed", json=body)
        return response.status_code, response.json()


def test_prompt_names_and_the_default_prompt(model: tuple[Path, Path]) -> None:
    checkpoint, bundle = model
    oracle = st.SentenceTransformer(str(checkpoint), device="cpu")
    assert oracle.default_prompt_name == "query"
    with ready_app_client(Settings(models=[f"embed={bundle}"], intra_op_threads=1, tune=False)) as client:  # type: ignore[call-arg]
        listed = client.get("/v1/models").json()["models"][0]
        assert PROMPTS.items() <= listed["prompts"].items()
        for name in ("passage", "query", None):
            body = {"inputs": TEXTS, **({"prompt_name": name} if name else {})}
            got = np.array(client.post("/embed", json=body).json())
            expected = oracle.encode(TEXTS, prompt_name=name, normalize_embeddings=True)
            np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=str(name))
        cut = np.array(client.post("/embed", json={"inputs": TEXTS, "dimensions": 8, "prompt_name": "passage"}).json())
        expected = oracle.encode(TEXTS, prompt_name="passage", truncate_dim=8, normalize_embeddings=True)
        np.testing.assert_allclose(cut, expected, atol=1e-5)
        unknown = client.post("/embed", json={"inputs": TEXTS, "prompt_name": "summary"})
        assert unknown.status_code == 400
        assert "prompt_name 'summary' is not one of this model's prompts (" in unknown.text
        assert "passage, query)" in unknown.text


def test_server_default_prompts(model: tuple[Path, Path]) -> None:
    checkpoint, bundle = model
    oracle = st.SentenceTransformer(str(checkpoint), device="cpu")
    base = {"models": [f"embed={bundle}"], "intra_op_threads": 1, "tune": False}
    status, got = embed(Settings(**base, default_prompt="search: "), {"inputs": TEXTS})  # type: ignore[arg-type]
    assert status == 200
    np.testing.assert_allclose(np.array(got), oracle.encode(TEXTS, prompt="search: ", normalize_embeddings=True),
                               atol=1e-5)  # fmt: skip
    status, got = embed(Settings(**base, default_prompt_name="passage"), {"inputs": TEXTS})  # type: ignore[arg-type]
    np.testing.assert_allclose(np.array(got), oracle.encode(TEXTS, prompt_name="passage", normalize_embeddings=True),
                               atol=1e-5)  # fmt: skip
    with pytest.raises(ValueError, match="cannot both be set"):
        Settings(**base, default_prompt="a", default_prompt_name="query")  # type: ignore[arg-type]
