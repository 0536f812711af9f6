"""What the MLM head at masked positions only saves: one pre-training step (forward, backward, AdamW) of the
benchmarks.pretraining shape (4 x 256, vocabulary 8,000, 32 pairs of 128 tokens, 15 % masked), with the
vocabulary projection at every position and at the masked positions only, interleaved rounds on one model.
Prints one JSON object; run it with nothing else on the machine.

    python -m benchmarks.studies.pretraining_step --rounds 3 --steps 10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

from training.losses import masked_lm_loss
from training.model import BertConfig, BertForPreTraining
from training.pretrain import pretraining_loss

SHAPE = {"vocab_size": 8000, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
         "intermediate_size": 1024, "max_position_embeddings": 128}  # fmt: skip
BATCH, LENGTH, MASKED = 32, 128, 0.15


def full_head_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The loss as pre-training computed it before: logits at every position (B, T, V)."""
    outputs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    nsp = F.cross_entropy(outputs["seq_relationship_logits"], batch["next_sentence_label"])
    return masked_lm_loss(outputs["prediction_logits"], batch["labels"]) + nsp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.pretraining_step", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of both heads")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per head and round")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**SHAPE)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    input_ids = torch.randint(5, SHAPE["vocab_size"], (BATCH, LENGTH))
    masked = torch.rand(BATCH, LENGTH) < MASKED
    batch = {
        "input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
        "token_type_ids": torch.zeros_like(input_ids), "labels": input_ids.masked_fill(~masked, -100),
        "next_sentence_label": torch.randint(0, 2, (BATCH,)),
    }  # fmt: skip
    losses = {
        "full head": lambda: full_head_loss(model, batch),
        "masked positions": lambda: pretraining_loss(model, batch)[0],
    }
    seconds: dict[str, list[float]] = {name: [] for name in losses}
    load_start = os.getloadavg()
    for _ in range(args.rounds):
        for name, loss in losses.items():
            for timed in (False, True):  # one untimed step first: allocator and caches
                started = time.perf_counter()
                for _ in range(args.steps if timed else 1):
                    loss().backward()
                    optimizer.step()
                    optimizer.zero_grad()
                if timed:
                    seconds[name].append(round((time.perf_counter() - started) / args.steps, 3))
    best = {name: min(values) for name, values in seconds.items()}
    result = {
        "seconds_per_step_by_round": seconds, "best": best,
        "masked_over_full": round(best["masked positions"] / best["full head"], 2),
        "torch_threads": torch.get_num_threads(), "load_avg": {"start": load_start, "end": os.getloadavg()},
    }  # fmt: skip
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
