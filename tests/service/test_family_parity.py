"""Every encoder family export accepts, served over HTTP, answers what transformers' pipelines answer.

Per family: tiny random checkpoints with the family's own kind of tokenizer (model_export.family_checkpoints),
exported by ``export_bundle`` (fused where onnxruntime fuses the family), served together by one app, and asked
for text classification (single texts and pairs), token classification (every aggregation strategy), question
answering (windows included) and fill-mask (the family's own mask token, targets included).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from fastapi.testclient import TestClient  # noqa: E402

from model_export.export import export_bundle  # noqa: E402
from model_export.family_checkpoints import KITS, build_family_checkpoint, corpus  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.service.apptools import ready_app_client  # noqa: E402
from tests.service.test_http_parity import SENTENCES, TOLERANCE, assert_item, assert_ranked_same  # noqa: E402
from tests.service.test_http_parity import TEXTS as HTTP_TEXTS  # noqa: E402

TASKS = ("text-classification", "token-classification", "question-answering", "fill-mask")
FAMILIES = [model_type for model_type in KITS if model_type != "bert"]
# A long text that does not repeat itself: repeated sentences give the same answer text in many windows, whose
# scores the QA pipeline sums over its per-window top-k cut, where near-equal small candidates swap under rounding.
LONG_TEXT = " ".join([*SENTENCES, *islice(corpus(seed=7), 24)])
TEXTS = [*HTTP_TEXTS[:4], LONG_TEXT]  # the BERT parity test's texts, its long one (repeated sentences) replaced


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One family's checkpoints, the app serving their bundles, and the pipelines on the checkpoints."""
    model_type = request.param
    root = tmp_path_factory.mktemp(model_type)
    checkpoints = {task: build_family_checkpoint(model_type, task, root / task) for task in TASKS}
    bundles = {task: export_bundle(checkpoints[task], root / f"{task}-bundle", task=task) for task in TASKS}
    pipelines = {task: transformers.pipeline(task, model=str(checkpoints[task]), device="cpu") for task in TASKS}
    settings = Settings(models=[f"{task}={bundle.path}" for task, bundle in bundles.items()], max_wait_ms=1.0)  # type: ignore[call-arg]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with ready_app_client(settings, timeout=60) as client:
        yield {"type": model_type, "client": client, "pipelines": pipelines, "bundles": bundles}
    torch.set_num_threads(threads)


def post(client: TestClient, task: str, body: dict[str, Any]) -> list[Any]:
    response = client.post(f"/v1/{task}", json={"model": task, **body})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def test_graph_inputs_follow_the_family(family: dict[str, Any]) -> None:
    config = transformers.AutoConfig.from_pretrained(family["bundles"]["fill-mask"].path.parent / "fill-mask")
    takes_segments = (getattr(config, "type_vocab_size", 0) or 0) > 1
    for bundle in family["bundles"].values():
        assert ("token_type_ids" in bundle.spec.inputs) == takes_segments
        assert bundle.spec.parity["fp32"]["max_abs_diff"]


def test_text_classification(family: dict[str, Any]) -> None:
    task = "text-classification"
    inputs: list[Any] = [*TEXTS, {"text": SENTENCES[0], "text_pair": SENTENCES[1]}]
    for params in ({}, {"top_k": None, "function_to_apply": "sigmoid"}):
        results = post(family["client"], task, {"inputs": inputs, "truncation": True, **params})
        for index, (item, result) in enumerate(zip(inputs, results, strict=True)):
            theirs = family["pipelines"][task](
                item, top_k=params.get("top_k", 1), truncation=True,
                **{key: value for key, value in params.items() if key == "function_to_apply"},
            )  # fmt: skip
            assert_ranked_same(result, theirs, f"{family['type']}{params}[{index}]")


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_token_classification(family: dict[str, Any], strategy: str) -> None:
    task = "token-classification"
    texts = [*TEXTS[:4], SENTENCES[0]] + ([LONG_TEXT] if strategy != "none" else [])
    body = {"inputs": texts, "aggregation_strategy": strategy, "ignore_labels": []}
    for index, (text, result) in enumerate(zip(texts, post(family["client"], task, body), strict=True)):
        stride = {} if strategy == "none" else {"stride": 32}
        theirs = family["pipelines"][task](text, aggregation_strategy=strategy, ignore_labels=[], **stride)
        assert len(result) == len(theirs), f"{family['type']} {strategy}[{index}]: {result} != {theirs}"
        for position, (mine, other) in enumerate(zip(result, theirs, strict=True)):
            assert_item(mine, other, f"{family['type']} {strategy}[{index}][{position}]")


QA_INPUTS = [
    {"question": "Where does John Smith live?", "context": SENTENCES[0]},
    {"question": "Who visited London?", "context": LONG_TEXT},
    {"question": "What flows through the city?", "context": "  The river   flows,\tthrough the old city 🙂 café…  "},
]
# Relative score gap under which two spans at a window's candidate cut may swap: ORT and torch logits differ by
# ~4e-6 on these models, so the spans' scores by about that much relatively.
CUT_TIE = 1e-4


def window_cut_slack(pipeline: Any, item: dict[str, str], params: dict[str, Any]) -> float:
    """How far float rounding may move an answer's score: the summed scores of near-tied spans at windows' cuts.

    The QA pipeline keeps each window's best ``2 * top_k + 10`` spans and sums, per answer text, the scores of the
    kept spans that give that text. Where the last kept span ties the first dropped one, ORT and torch may keep
    different ones, moving a summed score by the kept span's score (deberta-v2, where tokens without absolute
    positions tie exactly, moved one by 0.0036)."""
    from transformers.pipelines.question_answering import select_starts_ends

    preprocess, _, postprocess = pipeline._sanitize_parameters(**params)
    kept = 2 * postprocess["top_k"] + 10
    slack = 0.0
    for window in pipeline.preprocess(pipeline.create_sample(item["question"], item["context"]), **preprocess):
        output = pipeline.forward(window)
        mask = output["attention_mask"].numpy() if output.get("attention_mask") is not None else None
        scores = select_starts_ends(output["start"], output["end"], output["p_mask"], mask, 1e6, kept + 1)[2]
        if len(scores) > kept and scores[kept - 1] - scores[kept] <= CUT_TIE * scores[kept - 1]:
            slack += float(scores[kept - 1])
    return slack


@pytest.mark.parametrize("params", [{"top_k": 3}, {"top_k": 2, "max_seq_len": 48, "doc_stride": 16}], ids=str)
def test_question_answering(family: dict[str, Any], params: dict[str, Any]) -> None:
    task = "question-answering"
    results = post(family["client"], task, {"inputs": QA_INPUTS, **params})
    for index, (item, result) in enumerate(zip(QA_INPUTS, results, strict=True)):
        theirs = family["pipelines"][task](**item, **params)
        tolerance = TOLERANCE + window_cut_slack(family["pipelines"][task], item, params)
        ranked = theirs if isinstance(theirs, list) else [theirs]
        assert_ranked_same(result, ranked, f"{family['type']}[{index}]", tolerance)


def test_fill_mask_uses_the_family_mask_token(family: dict[str, Any]) -> None:
    task = "fill-mask"
    mask = family["pipelines"][task].tokenizer.mask_token
    assert family["bundles"][task].spec.special_tokens.mask_token == mask
    listed = family["client"].get("/v1/models").json()["models"]
    assert next(model for model in listed if model["name"] == task)["mask_token"] == mask
    texts = [
        f"John Smith lives in {mask} and works for the bank.",
        f"  The movie was {mask},   the actors were brilliant!!  ",
        f"{mask} visited London, Berlin and {mask} last summer.",
    ]
    for params in ({}, {"targets": ["paris", " london", "the"]}):
        results = post(family["client"], task, {"inputs": texts, **params})
        for index, (text, result) in enumerate(zip(texts, results, strict=True)):
            theirs = family["pipelines"][task](text, **params)
            per_mask = theirs if text.count(mask) > 1 else [theirs]
            assert len(result) == len(per_mask)
            for position, (mine, other) in enumerate(zip(result, per_mask, strict=True)):
                assert_ranked_same(mine, other, f"{family['type']}{params}[{index}][{position}]")
