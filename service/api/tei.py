"""text-embeddings-inference-compatible routes: ``/embed``, ``/predict``, ``/tokenize``, ``/decode``, ``/info``.

TEI's semantics: ``normalize`` defaults to true, ``truncate`` to false (a text longer than the model's max length
is a 400 naming its length). ``/predict`` answers every label of a text, a pair or a batch (``raw_scores``: the
logits); ``/tokenize`` gives each token's id, text, whether it is special and its character offsets; ``/decode``
turns ids back into text; ``/info`` describes the model as TEI does. One addition: ``model`` (a field, or ``/info``'s
query parameter) names the model when several are loaded. TEI's ``/rerank`` is in ``service.api.rerank``, beside
the other rerank shape.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from tokenizers import Encoding

from service.api.deps import RegistryDep, SettingsDep
from service.api.entry import Decoded, InferenceRoute, Protocol, Reply, json_reply
from service.api.error_docs import error_responses
from service.core import InferenceResult, ModelRegistry
from service.engine import Engine
from service.errors import BadRequest, InvalidRequest, ModelNotFound, UnsupportedMediaType
from service.schemas.tei import (
    SimpleToken,
    TeiDecodeRequest,
    TeiDecodeResponse,
    TeiInfo,
    TeiPredictRequest,
    TeiPredictResponse,
    TeiTokenizeRequest,
    TeiTokenizeResponse,
)
from service.tasks.feature_extraction import (
    TeiEmbedAllRequest,
    TeiEmbedAllResponse,
    TeiEmbedRequest,
    TeiEmbedResponse,
    TeiEmbedSparseRequest,
    TeiEmbedSparseResponse,
)
from service.tasks.sentence_similarity import ParameterizedSimilarityRequest

router = APIRouter(tags=["tei"])
LOOKUP_ERRORS = error_responses(BadRequest, ModelNotFound, InvalidRequest)
BODY_ERRORS = error_responses(BadRequest, ModelNotFound, UnsupportedMediaType, InvalidRequest)


def embed_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    return json_reply([item.vector for item in result.results])


def embed_all_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    return json_reply([item.vectors for item in result.results])


def embed_sparse_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    return json_reply(
        [[{"index": int(index), "value": float(value)} for index, value in zip(item.indices, item.values, strict=True)]
         for item in result.results]
    )  # fmt: skip


def predict_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, TeiPredictRequest)
    answers = [[{"score": item["score"], "label": item["label"]} for item in labels] for labels in result.results]
    return json_reply(answers if request.batched else answers[0])


def the_model(registry: ModelRegistry, name: str | None) -> Engine:
    """The named model, else the only one served or the default model (TEI serves one; its clients name none)."""
    return registry.select(None, name, unnamed="name one with model")


@router.post("/tokenize", response_model=TeiTokenizeResponse, responses=BODY_ERRORS)
async def tokenize(body: TeiTokenizeRequest, registry: RegistryDep) -> list[list[SimpleToken]]:
    """The model's tokens of each text: id, the text it covers, whether it is special, its character offsets."""
    texts = body.inputs if isinstance(body.inputs, list) else [body.inputs]

    def simple_tokens(encodings: list[Encoding]) -> list[list[SimpleToken]]:
        answers = []
        for text, encoding in zip(texts, encodings, strict=True):
            tokens = []
            for token_id, token, special, (start, stop) in zip(
                encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets, strict=True
            ):
                if special:
                    tokens.append(SimpleToken(id=token_id, text=token, special=True, start=None, stop=None))
                else:
                    tokens.append(
                        SimpleToken(id=token_id, text=text[start:stop], special=False, start=start, stop=stop)
                    )
            answers.append(tokens)
        return answers

    return await the_model(registry, body.model).tokenize(texts, body.add_special_tokens, simple_tokens)


@router.post("/decode", response_model=TeiDecodeResponse, responses=BODY_ERRORS)
async def decode(body: TeiDecodeRequest, registry: RegistryDep) -> list[str]:
    """The text of each list of token ids."""
    lists = body.ids if isinstance(body.ids[0], list) else [body.ids]
    return await the_model(registry, body.model).decode(lists, body.skip_special_tokens)


@router.get("/info", response_model=TeiInfo, responses=LOOKUP_ERRORS)
async def info(request: Request, registry: RegistryDep, settings: SettingsDep, model: str | None = None) -> TeiInfo:
    """The model as TEI describes its own: id, dtype, type (embedding pooling, or classifier / reranker labels) and
    the limits requests meet."""
    engine = the_model(registry, model)
    spec = engine.bundle.spec
    labels = {"id2label": {str(key): value for key, value in sorted(spec.id2label.items())},
              "label2id": {value: key for key, value in sorted(spec.id2label.items())}}  # fmt: skip
    model_type: dict[str, dict[str, object]]
    if engine.bundle.spec.pooling is not None:
        model_type = {"embedding": {"pooling": spec.pooling or "mean"}}
    else:
        model_type = {"reranker" if engine.task == "rerank" else "classifier": labels}
    return TeiInfo(
        model_id=engine.name,
        served_model_name=engine.name,
        model_dtype="int8" if spec.quantization == "int8" else "float32",
        model_type=model_type,
        max_concurrent_requests=settings.max_concurrent_requests,
        max_input_length=spec.max_length,
        max_batch_tokens=engine.batching.max_batch_tokens,
        max_client_batch_size=engine.max_inputs[1],
        auto_truncate=False,
        tokenization_workers=settings.prepare_threads,
        version=request.app.version,
    )


def similarity_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    assert isinstance(decoded.request, ParameterizedSimilarityRequest)
    return json_reply(decoded.request.similarities(result.results)[0])


PROTOCOL = Protocol(
    "tei",
    (
        InferenceRoute(
            "/similarity",
            "similarity",
            "The cosine of a source sentence with each of a list (text-embeddings-inference's `/similarity`), with a\n"
            "feature-extraction model.",
            "tei",
            list[float],
            similarity_answer,
            body=ParameterizedSimilarityRequest,
        ),
        InferenceRoute(
            "/embed",
            "embed",
            "Embed texts with a feature-extraction model (text-embeddings-inference's `/embed`): one vector per text,\n"
            "a list of lists also for a single text.",
            "tei",
            TeiEmbedResponse,
            embed_answer,
            body=TeiEmbedRequest,
        ),
        InferenceRoute(
            "/embed_all",
            "embed_all",
            "Every token's state, special tokens included (text-embeddings-inference's `/embed_all`), with a\n"
            "feature-extraction model exported with `--token-embeddings`.",
            "tei",
            TeiEmbedAllResponse,
            embed_all_answer,
            body=TeiEmbedAllRequest,
        ),
        InferenceRoute(
            "/embed_sparse",
            "embed_sparse",
            "SPLADE sparse vectors with a fill-mask model (text-embeddings-inference's `/embed_sparse`): per text,\n"
            "the non-zero log(1 + ReLU(MLM logit)) weights max-pooled over its tokens, by vocabulary index.",
            "tei",
            TeiEmbedSparseResponse,
            embed_sparse_answer,
            body=TeiEmbedSparseRequest,
        ),
        InferenceRoute(
            "/predict",
            "predict",
            "Every label of a text, a pair of texts or a batch (text-embeddings-inference's `/predict`) with a\n"
            "text-classification model, best first; `raw_scores`: the logits.",
            "tei",
            TeiPredictResponse,
            predict_answer,
            body=TeiPredictRequest,
        ),
    ),
    router,
)
