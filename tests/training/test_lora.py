"""LoRA fine-tuning: only the adapters and the head train, the tiny BERT learns the keyword task past the majority
baseline, and its adapter folder becomes an adapter of a LoRA base bundle whose ONNX logits equal the peft model's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.training.test_families import keyword_options, majority_share
from training import finetune as finetune_module
from training.checkpoint import load_model
from training.finetune import finetune
from training.lora import LoraOptions, apply_lora
from training.train import Runtime

peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

TEXTS = ["the movie was wonderful", "a dull story said the actor", "people said the plot was awful", "great day"]


def tuned_with_lora(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What apply_lora made inside finetune, and its weights as training got them."""
    seen: dict[str, Any] = {}

    def spy(model: torch.nn.Module, options: LoraOptions, model_type: str) -> torch.nn.Module:
        tuned = apply_lora(model, options, model_type)
        seen["model"] = tuned
        seen["before"] = {name: p.detach().clone() for name, p in tuned.named_parameters()}
        return tuned

    monkeypatch.setattr(finetune_module, "apply_lora", spy)
    return seen


def ort_logits(bundle: Path, adapter: Path) -> np.ndarray:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"))
    encoded = tokenizer.encode_batch(TEXTS)
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
             "token_type_ids": np.zeros_like(ids)}  # fmt: skip
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    loaded = ort.LoraAdapter()
    loaded.Load(str(adapter))
    options = ort.RunOptions()
    options.add_active_adapter(loaded)
    names = [node.name for node in session.get_inputs() if node.name in feeds]
    return session.run(["logits"], {name: feeds[name] for name in names}, options)[0]


def torch_logits(model: torch.nn.Module, bundle: Path) -> np.ndarray:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"))
    encoded = tokenizer.encode_batch(TEXTS)
    ids = torch.tensor([e.ids for e in encoded])
    mask = torch.tensor([e.attention_mask for e in encoded])
    with torch.no_grad():
        return model.eval()(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))["logits"].numpy()


def test_lora_trains_adapters_and_head_only_and_its_adapter_serves_as_the_peft_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from model_export.export import export_bundle
    from model_export.family_checkpoints import build_family_checkpoint
    from model_export.lora import write_adapter

    base = build_family_checkpoint("bert", "text-classification", tmp_path / "base")
    seen = tuned_with_lora(monkeypatch)
    options = keyword_options(base, tmp_path, "lora", learning_rate=1e-2, epochs=10.0)
    options.lora = LoraOptions(rank=4, alpha=8)
    report = finetune(options, Runtime())
    assert report["best"]["accuracy"] > majority_share(options.eval_file) + 0.2, report["best"]  # type: ignore[arg-type]

    tuned = seen["model"]
    assert type(tuned.get_base_model()).__module__ == "training.model"  # our BERT, not transformers'
    trainable = {name for name, p in tuned.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "modules_to_save" in name for name in trainable), sorted(trainable)
    assert any("modules_to_save" in name for name in trainable) and any("lora_" in name for name in trainable)
    for name, parameter in tuned.named_parameters():
        if name not in trainable:
            torch.testing.assert_close(parameter.detach(), seen["before"][name], rtol=0, atol=0, msg=name)
    assert any(not torch.equal(tuned.get_parameter(name), seen["before"][name]) for name in trainable)

    saved = {path.name for path in options.out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "config.json", "tokenizer.json"} <= saved
    assert json.loads((options.out / "config.json").read_text())["id2label"] == {"0": "negative", "1": "positive"}
    bundle = export_bundle(base, tmp_path / "bundle", task="text-classification", lora_rank=8).path
    adapter = write_adapter(options.out, bundle, "keywords")
    reloaded = peft.PeftModel.from_pretrained(load_model(base, "BertForSequenceClassification"), str(options.out))
    expected = torch_logits(reloaded, bundle)
    np.testing.assert_allclose(ort_logits(bundle, adapter), expected, atol=1e-4)
    np.testing.assert_allclose(torch_logits(tuned, bundle), expected, atol=1e-5)


def test_lora_through_the_cli_on_a_roberta_with_merge_saves_a_full_checkpoint_and_the_adapter(tmp_path: Path) -> None:
    from model_export.export import export_bundle
    from model_export.family_checkpoints import build_family_checkpoint
    from training.cli import main

    base = build_family_checkpoint("roberta", "feature-extraction", tmp_path / "base")
    options = keyword_options(base, tmp_path, "merged")
    code = main([
        "finetune", "--task", "text-classification", "--base", str(base), "--train", str(options.train_file),
        "--eval", str(options.eval_file), "--out", str(options.out), "--epochs", "1", "--max-steps", "4",
        "--lora-rank", "2", "--lora-alpha", "4", "--lora-targets", "query,key,value", "--lora-merge",
    ])  # fmt: skip
    assert code == 0
    adapter_config = json.loads((options.out / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["r"] == 2 and set(adapter_config["target_modules"]) == {"query", "key", "value"}
    assert adapter_config["modules_to_save"] == ["classifier"]
    config = json.loads((options.out / "config.json").read_text())
    assert config["architectures"] == ["RobertaForSequenceClassification"]
    export_bundle(options.out, tmp_path / "bundle", task="text-classification", optimize=False)
