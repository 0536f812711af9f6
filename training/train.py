"""The training loop shared by pre-training and fine-tuning.

AdamW (no weight decay on biases and LayerNorm weights), linear warmup then linear decay to 0, gradient
clipping, gradient accumulation, bf16/fp16 autocast on GPU, and DistributedDataParallel when started by
`torchrun` (gloo on CPU, nccl on GPU; only rank 0 evaluates, prints and saves). After each epoch (and every
`eval_every_steps`, if set) the model is evaluated; the best checkpoint by `primary_metric` is saved with
`metrics.json` beside it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler
from tqdm import tqdm

logger = logging.getLogger(__name__)

TensorBatch = dict[str, torch.Tensor]
LossFunction = Callable[[nn.Module, TensorBatch], tuple[torch.Tensor, dict[str, float]]]
Evaluator = Callable[[nn.Module], dict[str, float]]
Saver = Callable[[nn.Module, Path], None]


@dataclass
class TrainingArguments:
    epochs: float = 3.0
    max_steps: int | None = None
    batch_size: int = 32
    eval_batch_size: int = 64
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    seed: int = 42
    precision: str = "auto"  # auto: bf16 (or fp16) autocast on CUDA, fp32 elsewhere
    eval_every_steps: int | None = None
    group_by_length: bool = False
    layer_decay: float = 1.0  # layer-wise lr decay: layer k of L trains at lr * layer_decay ** (L + 1 - k)


@dataclass
class Runtime:
    """Where this process runs: its rank in a torchrun group (0 of 1 when run alone) and its device."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(local_rank: int = 0) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def setup_runtime() -> Runtime:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU, nccl on CUDA)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Runtime(rank, local_rank, world_size, device)


def teardown_runtime(runtime: Runtime) -> None:
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


LAYER_INDEX = re.compile(r"\.layer\.(\d+)\.")


def layer_depth(name: str, layers: int) -> int:
    """0 for the embeddings, k + 1 for encoder layer k, layers + 1 for the pooler and the task heads."""
    if ".embeddings." in f".{name}":
        return 0
    match = LAYER_INDEX.search(f".{name}")
    return int(match.group(1)) + 1 if match else layers + 1


def parameter_groups(
    model: nn.Module, weight_decay: float, learning_rate: float | None = None, layer_decay: float = 1.0
) -> list[dict[str, Any]]:
    """AdamW groups: biases + LayerNorm weights get weight_decay 0 (as BERT did); with layer_decay < 1 each depth
    also gets its own learning rate, lower towards the embeddings (layer-wise decay, as ELECTRA and BEiT tune)."""
    named = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    indices = [int(m.group(1)) for name, _ in named if (m := LAYER_INDEX.search(f".{name}"))]
    layers = max(indices, default=-1) + 1
    groups: dict[tuple[int, bool], list[nn.Parameter]] = {}
    for name, parameter in named:
        depth = layer_depth(name, layers) if layer_decay != 1.0 else 0
        decayed = not (name.endswith("bias") or "LayerNorm" in name)
        groups.setdefault((depth, decayed), []).append(parameter)
    result: list[dict[str, Any]] = []
    for (depth, decayed), parameters in sorted(groups.items(), key=lambda item: (item[0][0], not item[0][1])):
        group: dict[str, Any] = {"params": parameters, "weight_decay": weight_decay if decayed else 0.0}
        if learning_rate is not None and layer_decay != 1.0:
            group["lr"] = learning_rate * layer_decay ** (layers + 1 - depth)
        result.append(group)
    return result


def linear_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning rate factor 0 -> 1 over warmup_steps, then 1 -> 0 linearly at total_steps."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    if precision == "fp16":
        return torch.float16
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


class LengthGroupedSampler(Sampler[int]):
    """Random order in which neighbouring samples have similar lengths, so padded batches waste little compute.

    As Hugging Face's group_by_length: shuffle, cut into mega-batches of 50 batches, sort each by length
    (longest first), so every batch is drawn from one mega-batch and batch order stays random.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, generator: torch.Generator):
        self.lengths = list(lengths)
        self.mega_batch = 50 * batch_size
        self.generator = generator

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(len(self.lengths), generator=self.generator).tolist()
        for start in range(0, len(order), self.mega_batch):
            chunk = order[start : start + self.mega_batch]
            yield from sorted(chunk, key=lambda i: -self.lengths[i])


def step_plan(batches_per_epoch: int, args: TrainingArguments) -> tuple[int, int]:
    """(optimiser steps per epoch, steps in the run) for a process that sees ``batches_per_epoch`` batches."""
    steps_per_epoch = max(1, math.ceil(batches_per_epoch / args.grad_accum))
    return steps_per_epoch, args.max_steps or max(1, math.ceil(args.epochs * steps_per_epoch))


def default_loss(model: nn.Module, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, float]]:
    loss = model(**batch)["loss"]
    return loss, {}


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _batches_forever(
    loader: DataLoader[Any], sampler: DistributedSampler[Any] | None
) -> Iterator[tuple[int, TensorBatch]]:
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for batch in loader:
            yield epoch, batch
        epoch += 1


def train(
    model: nn.Module,
    train_features: Sequence[Any],
    collate_fn: Callable[[Sequence[Any]], TensorBatch],
    args: TrainingArguments,
    out_dir: Path,
    save: Saver,
    runtime: Runtime,
    evaluate: Evaluator | None = None,
    primary_metric: str | None = None,
    loss_fn: LossFunction = default_loss,
    report_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train; returns the metrics.json content (best metrics, history, settings, and ``report_extra``, written from
    the first evaluation on). Only rank 0 writes files."""
    set_seed(args.seed)
    model.to(runtime.device).train()
    dataset: Dataset[Any] = train_features  # type: ignore[assignment]  # a list is a map-style dataset
    sampler: DistributedSampler[Any] | None = None
    if runtime.distributed:
        sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    local_sampler: Sampler[int] = RandomSampler(train_features, generator=generator)
    if args.group_by_length and not runtime.distributed:
        lengths = [len(feature["input_ids"]) for feature in train_features]
        local_sampler = LengthGroupedSampler(lengths, args.batch_size, generator)
    elif args.group_by_length:
        logger.warning("group_by_length is ignored under torchrun (DistributedSampler decides the order)")
    loader: DataLoader[Any] = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler or local_sampler,
        collate_fn=collate_fn,
        drop_last=False,
    )
    steps_per_epoch, total_steps = step_plan(len(loader), args)
    warmup_steps = int(args.warmup_ratio * total_steps)
    wrapped: nn.Module = model
    if runtime.distributed:
        device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.AdamW(
        parameter_groups(model, args.weight_decay, args.learning_rate, args.layer_decay), lr=args.learning_rate
    )
    scheduler = linear_schedule(optimizer, warmup_steps, total_steps)
    dtype = autocast_dtype(args.precision, runtime.device)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)

    history: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    report: dict[str, Any] = {
        "settings": {**asdict(args), "total_steps": total_steps, "world_size": runtime.world_size},
        **(report_extra or {}),
    }

    def checkpoint(step: int, epoch: float, train_losses: dict[str, float]) -> None:
        nonlocal best
        if runtime.is_main:
            metrics = dict(evaluate(_unwrap(wrapped)) if evaluate else {})
            metrics.update(step=step, epoch=round(epoch, 3), **train_losses)
            history.append(metrics)
            logger.info("step %d: %s", step, json.dumps(metrics))
            better = (
                best is None
                or primary_metric is None
                or metrics.get(primary_metric, -math.inf) > best.get(primary_metric, -math.inf)
            )
            if better:
                best = metrics
                save(_unwrap(wrapped), out_dir)
            report.update(best=best, history=history)
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "metrics.json").write_text(json.dumps(report, indent=2) + "\n")
            _unwrap(wrapped).train()
        if runtime.distributed:
            dist.barrier()

    progress = tqdm(total=total_steps, disable=not runtime.is_main, desc="train", unit="step", dynamic_ncols=True)
    step, micro_step, samples, seen_epoch = 0, 0, 0, 0
    micro_losses: list[float] = []
    micro_parts: list[dict[str, float]] = []
    step_losses: list[float] = []  # since the last evaluation: reported as that evaluation's train_loss
    part_sums: dict[str, float] = {}  # named loss parts (pre-training: mlm_loss, nsp_loss), same window

    def mean_train_loss() -> dict[str, float]:
        count = max(1, len(step_losses))
        value = {"train_loss": sum(step_losses) / count if step_losses else math.nan}
        value.update({f"train_{name}": total / count for name, total in part_sums.items()})
        step_losses.clear()
        part_sums.clear()
        return value

    started = time.perf_counter()
    for epoch, batch in _batches_forever(loader, sampler):
        if epoch != seen_epoch:
            seen_epoch = epoch
            if args.eval_every_steps is None:
                checkpoint(step, float(epoch), mean_train_loss())
        batch = {key: value.to(runtime.device) for key, value in batch.items()}
        micro_step += 1
        # The last batch of an epoch always completes a step, so accumulation never spans epochs.
        sync_now = micro_step % args.grad_accum == 0 or micro_step % len(loader) == 0
        sync_context: AbstractContextManager[Any] = nullcontext()
        if runtime.distributed and not sync_now:
            sync_context = wrapped.no_sync()  # type: ignore[operator]
        with sync_context:
            with torch.autocast(runtime.device.type, dtype=dtype, enabled=dtype is not None):
                loss, parts = loss_fn(wrapped, batch)
            scaler.scale(loss / args.grad_accum).backward()
        samples += int(batch["input_ids"].shape[0]) * runtime.world_size
        micro_losses.append(float(loss.detach()))
        micro_parts.append(parts)
        if not sync_now:
            continue
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        step += 1
        step_losses.append(sum(micro_losses) / len(micro_losses))
        for name in parts:
            part_sums[name] = part_sums.get(name, 0.0) + sum(p[name] for p in micro_parts) / len(micro_parts)
        micro_losses.clear()
        micro_parts.clear()
        elapsed = time.perf_counter() - started
        postfix = {"loss": f"{step_losses[-1]:.4f}", **{k: f"{v:.4f}" for k, v in parts.items()}}
        postfix.update(lr=f"{max(scheduler.get_last_lr()):.2e}", samples_s=f"{samples / elapsed:.1f}")
        progress.set_postfix(postfix, refresh=False)
        progress.update(1)
        if step >= total_steps:
            break
        if args.eval_every_steps and step % args.eval_every_steps == 0:
            checkpoint(step, step / steps_per_epoch, mean_train_loss())
    progress.close()
    checkpoint(step, step / steps_per_epoch, mean_train_loss())
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    if runtime.is_main:
        (out_dir / "metrics.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
