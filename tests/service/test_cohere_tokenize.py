"""Cohere's tokenize and detokenize through Cohere's own client (``cohere.Client.tokenize`` / ``.detokenize``,
``POST /v1/tokenize`` / ``/v1/detokenize``) against a real server: the ids and text the checkpoint's own transformers
tokenizer gives, no special tokens; the request token cap and the model's name apply as on TEI's routes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.service.apptools import real_server_for
from tests.service.tiny_models import TinyModel

cohere = pytest.importorskip("cohere")
transformers = pytest.importorskip("transformers")

TEXTS = ["Tokenize me! :D", "John Smith lives in Paris, and works for the United Nations."]


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    bundles = {"sst": tiny_models["text-classification"].bundle, "ner": tiny_models["token-classification"].bundle}
    with real_server_for(bundles, tune=False, max_request_tokens=40) as url:
        yield url


def test_tokenize_and_detokenize_as_the_checkpoints_tokenizer(server_url: str, tiny_models) -> None:  # type: ignore[no-untyped-def]
    oracle = transformers.AutoTokenizer.from_pretrained(str(tiny_models["text-classification"].checkpoint))
    client = cohere.Client(base_url=server_url, api_key="unused")
    for text in TEXTS:
        answer = client.tokenize(text=text, model="sst")
        expected = oracle(text, add_special_tokens=False, return_offsets_mapping=True)
        assert answer.tokens == expected["input_ids"]
        assert oracle.cls_token_id not in answer.tokens and oracle.sep_token_id not in answer.tokens
        assert answer.token_strings == [text[start:stop] for start, stop in expected["offset_mapping"]]
        back = client.detokenize(tokens=answer.tokens, model="sst").text
        assert back == oracle.decode(answer.tokens, skip_special_tokens=True)
    ids = client.tokenize(text=TEXTS[0], model="sst").tokens
    wrapped = client.detokenize(tokens=[oracle.cls_token_id, *ids, oracle.sep_token_id], model="sst").text
    assert wrapped == client.detokenize(tokens=ids, model="sst").text  # special tokens left out


def test_limits_and_errors(server_url: str) -> None:
    client = cohere.Client(base_url=server_url, api_key="unused")
    with pytest.raises(cohere.core.api_error.ApiError) as too_long:
        client.tokenize(text="word " * 60, model="sst")
    assert too_long.value.status_code == 413
    with pytest.raises(cohere.core.api_error.ApiError) as unnamed:
        client.tokenize(text=TEXTS[0], model=None)  # type: ignore[arg-type]
    assert unnamed.value.status_code == 400 and "name one with model" in str(unnamed.value.body)
    with pytest.raises(cohere.errors.UnprocessableEntityError):
        client.detokenize(tokens=[-1], model="sst")
    empty = httpx.post(f"{server_url}/v1/tokenize", json={"text": "", "model": "sst"})
    assert empty.status_code == 422 and "text" in empty.text
    for not_ids in ([True], [1.5], ["7"]):  # JSON integers only: true is not token 1 (schemathesis found it)
        answer = httpx.post(f"{server_url}/v1/detokenize", json={"tokens": not_ids, "model": "sst"})
        assert answer.status_code == 422 and "tokens" in answer.text, not_ids
