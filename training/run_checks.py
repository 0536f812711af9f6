"""What a fine-tuning run checks around its training: an --out folder that already holds a run, a run with too few
optimiser steps to train a new head, and a result no better than always answering the eval set's most common label.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.train import TrainingArguments, step_plan

logger = logging.getLogger(__name__)

MIN_STEPS = 50  # below this a new head rarely learns more than the label counts (42 rows, batch 32, 2 epochs: 4)


class OutFolderError(ValueError):
    """An --out that already holds files, given without --overwrite; the message names the folder and the flag."""


@dataclass(frozen=True)
class Baseline:
    """Always answering ``label``, the eval set's most common one, scores ``share`` accuracy."""

    label: str
    share: float


def check_out_folder(out: Path, overwrite: bool) -> None:
    """Refuse an --out that is a file, or a folder with files in it unless ``overwrite``."""
    if out.exists() and not out.is_dir():
        raise OutFolderError(f"--out {out} is a file, not a folder")
    held = sorted(path.name for path in out.iterdir()) if out.is_dir() else []
    if not held:
        return
    shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
    if overwrite:
        logger.info("--overwrite: this run replaces what %s holds (%s)", out, shown)
        return
    raise OutFolderError(
        f"--out {out} already holds {shown}, an earlier run's files: pass --overwrite to replace them, "
        "or choose another --out"
    )


def _steps(examples: int, batch_size: int, args: TrainingArguments, world_size: int) -> tuple[int, int]:
    return step_plan(math.ceil(math.ceil(examples / world_size) / batch_size), args)


def warn_if_few_steps(examples: int, args: TrainingArguments, world_size: int = 1) -> None:
    """A warning when --epochs and --batch-size give fewer than MIN_STEPS optimiser steps (not with --max-steps)."""
    if args.max_steps is not None or examples <= 0:
        return
    steps_per_epoch, steps = _steps(examples, args.batch_size, args, world_size)
    if steps >= MIN_STEPS:
        return
    remedies = [f"--epochs {math.ceil(MIN_STEPS / steps_per_epoch)}"]
    sizes = range(args.batch_size - 1, 0, -1)
    smaller = next((size for size in sizes if _steps(examples, size, args, world_size)[1] >= MIN_STEPS), None)
    if smaller is not None:
        remedies.append(f"--batch-size {smaller}")
    accumulated = f" x {args.grad_accum} accumulated" if args.grad_accum > 1 else ""
    processes = f" on each of {world_size} processes" if world_size > 1 else ""
    logger.warning(
        "only %d optimiser steps: %d training examples in batches of %d%s%s for %g epochs. Fewer than %d steps rarely "
        "trains a new head (expect a metric near the majority class); for at least %d steps use %s, or more data",
        steps, examples, args.batch_size, accumulated, processes, args.epochs, MIN_STEPS, MIN_STEPS,
        " or ".join(remedies),
    )  # fmt: skip


def majority_baseline(labels: Iterable[str]) -> Baseline | None:
    counts = Counter(labels)
    if not counts:
        return None
    label, count = counts.most_common(1)[0]
    return Baseline(label, count / sum(counts.values()))


def warn_if_not_above_baseline(best: dict[str, Any] | None, metric: str | None, baseline: Baseline | None) -> None:
    """A warning when the kept checkpoint's ``metric`` (an accuracy) is at or below the majority-class accuracy."""
    if best is None or metric is None or baseline is None or metric not in best:
        return
    value = float(best[metric])
    if value > baseline.share + 1e-9:
        return
    logger.warning(
        "the best %s on --eval, %.4f, is not above the majority-class baseline %.4f (always answering %r, the eval "
        "set's most common label): the model learnt nothing the label counts do not give. Train for more steps "
        "(--epochs, a smaller --batch-size), on more rows, or check --text-column / --label-column",
        metric, value, baseline.share, baseline.label,
    )  # fmt: skip
