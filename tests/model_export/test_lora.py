"""A LoRA base bundle and adapter files: the base answers as the base model, each adapter as the merged-weights
export of the same peft fine-tune (1e-4), and the service serves adapters as models of their own (``BASE:NAME``),
listed, batched apart and loaded at run time through the model repository."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from contract.bundle import read_adapters, read_bundle
from model_export.export import export_bundle
from model_export.lora import write_adapter
from model_export.validate import ExportError
from tests.model_export.conftest import make_transformers_checkpoint

peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["the movie was wonderful.", "john lives in paris.", "a dull one"]


def peft_fine_tune(base: Path, folder: Path, seed: int, rank: int = 4) -> tuple[Path, Path]:
    """A peft LoRA fine-tune of ``base`` with random (non-zero) factors and head, saved as an adapter folder, and
    the same fine-tune merged into a full checkpoint (the reference)."""
    torch.manual_seed(seed)
    model = transformers.BertForSequenceClassification.from_pretrained(str(base))
    config = peft.LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=["query", "value"], modules_to_save=["classifier"]
    )
    tuned = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in tuned.named_parameters():
            if "lora_" in name or "modules_to_save" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    adapter_dir, merged_dir = folder / f"adapter-{seed}", folder / f"merged-{seed}"
    tuned.save_pretrained(str(adapter_dir))
    merged = tuned.merge_and_unload()
    merged.save_pretrained(str(merged_dir))
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (base / name).exists():
            shutil.copy(base / name, merged_dir / name)
    return adapter_dir, merged_dir


@pytest.fixture(scope="module")
def lora_setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lora")
    base = make_transformers_checkpoint("text-classification", root / "base")
    base_bundle = export_bundle(base, root / "base-bundle", task="text-classification", lora_rank=8).path
    plain_bundle = export_bundle(base, root / "plain-bundle", task="text-classification", optimize=False).path
    tunes = {}
    for seed, rank in ((1, 4), (2, 8)):
        adapter_dir, merged_dir = peft_fine_tune(base, root, seed, rank)
        merged_bundle = export_bundle(merged_dir, root / f"merged-bundle-{seed}", task="text-classification").path
        write_adapter(adapter_dir, base_bundle, f"tune{seed}")
        tunes[f"tune{seed}"] = merged_bundle
    return {"base": base_bundle, "plain": plain_bundle, "tunes": tunes, "root": root}


def feeds(bundle: Path) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tokenizer.enable_padding()
    encoded = tokenizer.encode_batch(TEXTS)
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def logits(bundle: Path, adapter: Path | None = None) -> np.ndarray:
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    options = None
    if adapter is not None:
        loaded = ort.LoraAdapter()
        loaded.Load(str(adapter))
        options = ort.RunOptions()
        options.add_active_adapter(loaded)
    names = [node.name for node in session.get_inputs()]
    return session.run(["logits"], {name: feeds(bundle)[name] for name in names}, options)[0]


def test_the_base_answers_as_the_base_model_and_each_adapter_as_its_merged_export(lora_setup: dict[str, Any]) -> None:
    base = lora_setup["base"]
    spec = read_bundle(base).spec
    assert spec.lora["rank"] == 8 and len(spec.lora["slots"]) == 2 * 2  # query and value of 2 layers
    np.testing.assert_allclose(logits(base), logits(lora_setup["plain"]), atol=1e-5)
    adapters = read_adapters(read_bundle(base))
    assert set(adapters) == {"tune1", "tune2"}
    for name, merged in lora_setup["tunes"].items():
        adapted = logits(base, adapters[name].path)
        np.testing.assert_allclose(adapted, logits(merged), atol=1e-4)
        assert np.abs(adapted - logits(base)).max() > 1e-2  # the adapter changes the answers


def test_an_adapter_that_does_not_fit_is_refused(lora_setup: dict[str, Any], tmp_path: Path) -> None:
    base_checkpoint = lora_setup["root"] / "base"
    adapter_dir, _ = peft_fine_tune(base_checkpoint, tmp_path, seed=3, rank=16)
    with pytest.raises(ExportError, match="rank 16 is more than the bundle's LoRA rank 8"):
        write_adapter(adapter_dir, lora_setup["base"], "too-big")
    with pytest.raises(ExportError, match="not a LoRA base bundle"):
        write_adapter(adapter_dir, lora_setup["plain"], "x")
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    (adapter_dir / "adapter_config.json").write_text(json.dumps({**config, "r": 8}))
    with pytest.raises(ExportError, match="letters, digits"):
        write_adapter(adapter_dir, lora_setup["base"], "a/b")


def test_the_service_serves_each_adapter_as_a_model_equal_to_its_merged_export(lora_setup: dict[str, Any]) -> None:
    from service.settings import Settings
    from tests.service.apptools import serving

    models = [f"base={lora_setup['base']}", *(f"merged-{n}={b}" for n, b in lora_setup["tunes"].items())]
    settings = Settings(models=models, intra_op_threads=1, tune=False)  # type: ignore[call-arg]

    async def main() -> None:
        async with serving(settings) as (app, client):
            listed = {model["id"] for model in (await client.get("/v1/models")).json()["data"]}
            assert {"base", "base:tune1", "base:tune2"} <= listed
            engines = app.state.registry.engines
            assert engines["base:tune1"].batcher is not engines["base:tune2"].batcher  # batches never mix
            idle = (await client.get("/metrics")).text  # warm-up batches are no traffic: no series until a batch
            assert 'bertserve_batch_size_count{model="base' not in idle
            assert 'bertserve_queue_depth{model="base:tune1"' in idle
            # and no threads of their own: the base's workers take the adapters' batches too
            workers = {t.name for t in threading.enumerate() if t.name.startswith("bertserve-worker-base")}
            assert workers == {f"bertserve-worker-base-{n}" for n in range(len(engines["base"].workers))}
            for name in lora_setup["tunes"]:
                body = {"inputs": TEXTS, "top_k": None}
                adapted = await client.post("/v1/text-classification", json={**body, "model": f"base:{name}"})
                merged = await client.post("/v1/text-classification", json={**body, "model": f"merged-{name}"})
                assert adapted.status_code == 200 and merged.status_code == 200
                for ours, theirs in zip(adapted.json()["results"], merged.json()["results"], strict=True):
                    assert [item["label"] for item in ours] == [item["label"] for item in theirs]
                    np.testing.assert_allclose([i["score"] for i in ours], [i["score"] for i in theirs], atol=1e-4)
            mixed = [
                client.post("/v1/text-classification", json={"inputs": text, "model": f"base:tune{1 + i % 2}"})
                for i, text in enumerate(TEXTS * 6)
            ]
            assert [answer.status_code for answer in await asyncio.gather(*mixed)] == [200] * len(mixed)
            metrics = (await client.get("/metrics")).text
            rows = len(TEXTS) + len(TEXTS) * 3  # the comparison's, then half the mixed traffic's: no warm-up row
            assert f'bertserve_batch_size_sum{{model="base:tune1",task="text-classification"}} {rows:.1f}' in metrics

    asyncio.run(main())


def test_an_adapter_added_while_serving_is_loaded_through_the_model_repository(
    lora_setup: dict[str, Any], tmp_path: Path
) -> None:
    from service.settings import Settings
    from tests.service.apptools import serving

    base = tmp_path / "base"
    shutil.copytree(lora_setup["base"], base)
    shutil.rmtree(base / "adapters")
    settings = Settings(models=[f"base={base}"], intra_op_threads=1, tune=False)  # type: ignore[call-arg]
    root = lora_setup["root"]

    async def main() -> None:
        async with serving(settings) as (app, client):
            assert "base:tune1" not in app.state.registry.engines
            write_adapter(root / "adapter-1", base, "tune1")
            index = (await client.post("/v2/repository/index")).json()
            assert {"name": "base:tune1", "version": "", "state": "UNAVAILABLE", "reason": "not loaded"} in index
            assert (await client.post("/v2/repository/models/base:tune1/load")).status_code == 200
            answer = await client.post("/v1/text-classification", json={"inputs": TEXTS, "model": "base:tune1"})
            assert answer.status_code == 200
            assert (await client.post("/v2/repository/models/base:tune1/unload")).status_code == 200
            gone = await client.post("/v1/text-classification", json={"inputs": TEXTS, "model": "base:tune1"})
            assert gone.status_code == 404

    asyncio.run(main())
