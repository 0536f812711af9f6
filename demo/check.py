"""Score built demo bundles on held-out inputs, in process, through the service's own engines.

    python -m demo.check --models models                 # one line per model; exit 1 below a threshold
    python -m demo.check --models models --only ner --json

``demo/heldout.py`` and ``demo/heldout_probes.py`` make the inputs from names, cities, organisations, templates
and seeds that training never sees. Each request goes through what ``/v1/<task>`` runs (the request schema's
defaults, then ``run_inference``, the path every transport takes: the input limit, request defaults, token cap, the
handler's windowing, batching, ONNX Runtime, decoding), without HTTP:

- ner (token-classification): a ~2,800-word text of everyday filler (music, the city, the river, days, months)
  with ~60 planted entities, as one input with the bundle's default aggregation ("first"). A predicted entity is right
  when its character span and type are a planted one's. Thresholds: precision >= 0.9, recall >= 0.5.
- qa (question-answering): eight everyday paragraphs written by hand for the check (a club, a firm, a village, a
  festival, a person...) and 33 who / what / when / where / how-many questions; an answer is right when it equals
  one a SQuAD annotator would accept, after SQuAD's normalisation. Threshold: exact >= 0.7. Reported beside it,
  not a threshold: a ~5,000-word context (filler, facts about a dozen other people) with three people's birth and
  work facts at its start, middle and end, where the demo picks other people's facts (it was trained on paragraphs).
- sentiment (text-classification): 40 reviews, accuracy >= 0.8. fill-mask: 14 probes, top-1 >= 0.5; reported beside
  it, not a threshold: 25 everyday sentences written for a trial, a sensible word in the top 5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from demo import heldout, heldout_probes

Figures = dict[str, Any]

# (figure, lowest passing value) per task; failures() names every figure below its threshold.
THRESHOLDS: dict[str, tuple[tuple[str, float], ...]] = {
    "token-classification": (("precision", 0.9), ("recall", 0.5)),
    "question-answering": (("exact", 0.7),),
    "text-classification": (("accuracy", 0.8),),
    "fill-mask": (("top1", 0.5),),
}


def _settings() -> Any:
    from service.settings import Settings

    # A 5,000-word context is ~105 windows per question (~2 s on 2 idle cores): within the default 30 s deadline,
    # but a build may share the machine.
    return Settings(timeout_s=900.0)


async def _infer(engine: Any, request_type: Any, body: dict[str, Any]) -> list[Any]:
    """One request through the path every transport takes (its input limit, request defaults, token cap)."""
    from service.core import InferenceRequest, ModelRegistry, run_inference

    inputs, params = request_type.model_validate(body).to_task()
    request = InferenceRequest(engine.task, inputs, params, engine.name)
    result = await run_inference(request, ModelRegistry({engine.name: engine}), engine.settings, engine=engine)
    return result.results


async def _check_ner(engine: Any) -> Figures:
    from service.tasks.token_classification import TokenClassificationRequest

    planted = heldout.heldout_ner_text()
    (entities,) = await _infer(engine, TokenClassificationRequest, {"model": engine.name, "inputs": planted.text})
    gold = set(planted.entities)
    predicted = [(int(e["start"]), int(e["end"]), str(e["entity_group"])) for e in entities]
    correct = sum(entity in gold for entity in predicted)
    invented = [
        (start, end, kind)
        for start, end, kind in predicted
        if not any(start < gold_end and end > gold_start for gold_start, gold_end, _ in gold)
    ]
    wrong = [entity for entity in predicted if entity not in gold and entity not in invented]
    return {
        "precision": correct / len(predicted) if predicted else 0.0,
        "recall": correct / len(gold),
        "planted": len(gold),
        "predicted": len(predicted),
        "correct": correct,
        "invented": len(invented),
        "wrong_span_or_type": len(wrong),
        "words": planted.words,
        "examples_invented": [f"{planted.text[s:e]!r} {kind}" for s, e, kind in invented[:5]],
        "examples_wrong": [f"{planted.text[s:e]!r} {kind}" for s, e, kind in wrong[:5]],
    }


async def _check_qa(engine: Any) -> Figures:
    from service.tasks.question_answering import QuestionAnsweringRequest
    from training.metrics import normalize_answer

    right, answers = 0, []
    for context, questions in heldout.CHECK_QA_PARAGRAPHS:
        for question, accepted in questions:
            body = {"model": engine.name, "inputs": {"question": question, "context": context}}
            (found,) = await _infer(engine, QuestionAnsweringRequest, body)
            answer = str(found[0]["answer"]) if found else ""
            if normalize_answer(answer) in {normalize_answer(text) for text in accepted}:
                right += 1
            else:
                answers.append(f"{question} -> {answer!r} (want {accepted[0]!r})")
    questions_asked = sum(len(questions) for _, questions in heldout.CHECK_QA_PARAGRAPHS)
    figures: Figures = {"exact": right / questions_asked, "right": right, "questions": questions_asked}
    figures.update(answers=answers, **await _check_qa_long_context(engine))
    return figures


async def _check_qa_long_context(engine: Any) -> Figures:
    from service.tasks.question_answering import QuestionAnsweringRequest

    planted = heldout.heldout_qa_context()
    figures: Figures = {placement: 0 for placement in heldout.PLACEMENTS}
    for probe in planted.probes:  # one question per request, as a client would ask (~110 windows each)
        body = {"model": engine.name, "inputs": {"question": probe.question, "context": planted.context}}
        (found,) = await _infer(engine, QuestionAnsweringRequest, body)
        best: dict[str, Any] = found[0] if found else {"start": -1, "end": -1}
        figures[probe.placement] += best["start"] == probe.start and best["end"] == probe.start + len(probe.answer)
    return {
        "long_right": sum(figures[placement] for placement in heldout.PLACEMENTS),
        "long_questions": len(planted.probes),
        "long_words": planted.words,
        "long_by_placement": figures,
    }


async def _check_sentiment(engine: Any) -> Figures:
    from service.tasks.text_classification import TextClassificationRequest

    rows = heldout_probes.heldout_sentiment()
    results = await _infer(engine, TextClassificationRequest, {"model": engine.name, "inputs": [t for t, _ in rows]})
    right = sum(labels[0]["label"] == label for (_, label), labels in zip(rows, results, strict=True))
    misses = [text for (text, label), labels in zip(rows, results, strict=True) if labels[0]["label"] != label]
    return {"accuracy": right / len(rows), "right": right, "total": len(rows), "examples_wrong": misses[:5]}


def _words(predictions: list[Any]) -> list[str]:
    """One input's predicted words, best first (of its first [MASK] when the answer is a list per mask)."""
    first_mask = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
    return [str(found["token_str"]).strip().lower() for found in first_mask]


async def _check_fill_mask(engine: Any) -> Figures:
    from service.tasks.fill_mask import FillMaskRequest

    probes = heldout_probes.heldout_fill_mask()
    results = await _infer(engine, FillMaskRequest, {"model": engine.name, "inputs": [t for t, _ in probes]})
    tops = [_words(predictions)[0] for predictions in results]
    right = sum(top == want for top, (_, want) in zip(tops, probes, strict=True))
    misses = [f"{text} -> {top!r}" for top, (text, want) in zip(tops, probes, strict=True) if top != want]
    everyday = heldout_probes.CHECK_EVERYDAY_FILL_MASK
    body = {"model": engine.name, "inputs": [text for text, _ in everyday], "top_k": 5}
    candidates = await _infer(engine, FillMaskRequest, body)
    pairs = zip(candidates, everyday, strict=True)
    sensible = sum(any(word in words for word in _words(predictions)) for predictions, (_, words) in pairs)
    return {
        "top1": right / len(probes), "right": right, "total": len(probes), "examples_wrong": misses[:5],
        "everyday_sensible": sensible, "everyday_total": len(everyday),
    }  # fmt: skip


CHECKS: dict[str, Callable[[Any], Any]] = {
    "token-classification": _check_ner,
    "question-answering": _check_qa,
    "text-classification": _check_sentiment,
    "fill-mask": _check_fill_mask,
}


def check_bundle(name: str, folder: Path) -> Figures:
    """Load one bundle as the service does, run its task's held-out check, return the figures (+ task, seconds)."""
    from service.core import load_engines

    started = time.monotonic()
    engine = load_engines({name: folder}, _settings())[name]

    async def run() -> Figures:
        await engine.start()
        try:
            figures: Figures = await CHECKS[engine.task](engine)
            return figures
        finally:
            await engine.stop(drain=False)

    figures = asyncio.run(run())
    figures.update(task=engine.task, seconds=round(time.monotonic() - started, 1))
    return figures


def failures(name: str, figures: Mapping[str, Any]) -> list[str]:
    """One message per figure below its threshold (THRESHOLDS)."""
    problems = []
    for figure, lowest in THRESHOLDS.get(str(figures.get("task")), ()):
        value = figures.get(figure, 0)
        if value < lowest:
            shown = f"{value:.3f} < {lowest}" if isinstance(lowest, float) else f"{value}/{lowest} right"
            problems.append(f"{name}: held-out {figure} {shown}")
    return problems


def summary(figures: Mapping[str, Any]) -> str:
    """The figures as one short line."""
    task = figures.get("task")
    if task == "token-classification":
        return (
            f"entity precision {figures['precision']:.2f}, recall {figures['recall']:.2f} ({figures['correct']} of "
            f"{figures['planted']} found, {figures['predicted']} predicted, {figures['invented']} on filler; "
            f"{figures['words']:,} words)"
        )
    if task == "question-answering":
        return (
            f"exact answers {figures['exact']:.2f} ({figures['right']}/{figures['questions']} questions on everyday "
            f"paragraphs); in a {figures['long_words']:,}-word context among other people's facts "
            f"{figures['long_right']}/{figures['long_questions']} (not a threshold)"
        )
    if task == "text-classification":
        return f"accuracy {figures['accuracy']:.2f} ({figures['right']}/{figures['total']} reviews)"
    if task == "fill-mask":
        return (
            f"top-1 {figures['top1']:.2f} ({figures['right']}/{figures['total']} probes); a sensible word in the top 5 "
            f"of {figures['everyday_sensible']}/{figures['everyday_total']} everyday sentences (not a threshold)"
        )
    return json.dumps(dict(figures))


def check_models(models: Path, names: list[str] | None = None, echo: bool = True) -> dict[str, Figures]:
    """Check every bundle folder under ``models`` (or those in ``names``); one line per model when ``echo``."""
    from service.settings import discover_bundles

    found = discover_bundles(models)
    results = {}
    for name, folder in found.items():
        if names and name not in names:
            continue
        results[name] = check_bundle(name, folder)
        if echo:
            print(f"{name}: held-out {summary(results[name])} [{results[name]['seconds']:.0f} s]", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.check", description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("models"), help="folder of bundle folders")
    parser.add_argument("--only", nargs="+", help="check only these bundle names")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON after the lines")
    args = parser.parse_args(argv)
    results = check_models(args.models, args.only)
    if args.json:
        print(json.dumps(results, indent=2))
    problems = [problem for name, figures in results.items() for problem in failures(name, figures)]
    for name, figures in results.items():
        if failures(name, figures):
            for detail in figures.get("answers", []) + figures.get("examples_invented", []):
                print(f"  {name}: {detail}", file=sys.stderr)
            for detail in figures.get("examples_wrong", []):
                print(f"  {name}: wrong: {detail}", file=sys.stderr)
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if not results:
        print(f"demo.check: no bundles under {args.models}", file=sys.stderr)
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
