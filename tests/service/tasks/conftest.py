"""Tiny random BERTs, a trained WordPiece tokenizer and the transformers pipelines as oracles.

The handlers are run the way the engine runs them: ``prepare`` -> the torch model on every
``ModelRow`` on its own (unpadded) -> ``postprocess``. transformers is the test-only oracle.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402

from contract.tasks import task_spec  # noqa: E402
from model_export.family_checkpoints import wordpiece_vocab  # noqa: E402
from service.tasks.base import ModelContext  # noqa: E402

MAX_LENGTH = 64
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CORPUS = """
John Smith lives in Paris and works for the United Nations in Geneva.
Mary Johnson visited London, Berlin and Rome last summer with her family.
The movie was wonderful, the actors were brilliant and the music was beautiful.
The film was terrible: a boring plot, awful acting and a dull ending.
Google, Apple and Microsoft are large technology companies in America.
Where does Peter Miller work? He works at the university hospital in Boston.
The river flows through the old city towards the mountains in the north.
Anna Maria moved from Madrid to Tokyo in January to study economics.
Questions and answers: what is the capital of France? Paris is the capital.
It's a small café near the station; they serve coffee, tea and cakes.
The president of the bank said the company's profits grew by ten percent.
Children played football in the park while their parents were talking.
""".strip().splitlines()
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
SEED = 0


def train_tokenizer() -> Tokenizer:
    """The same vocabulary every run (tokenizers' WordPiece trainer breaks ties in hash order)."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    vocab = wordpiece_vocab(tokenizer, CORPUS, 300, SPECIAL_TOKENS)
    tokenizer.model = models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models: more threads only add overhead on a small shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    hf_tokenizer = transformers.BertTokenizerFast(
        tokenizer_object=train_tokenizer(),
        model_max_length=MAX_LENGTH,
        clean_up_tokenization_spaces=True,  # as BERT checkpoints set it (the fill-mask handler's default)
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )
    hf_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def hf_tokenizer(tokenizer_dir: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(tokenizer_dir)


def model_context(tokenizer_dir: Path, config: Any, max_length: int = MAX_LENGTH) -> ModelContext:
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return ModelContext(
        tokenizer=tokenizer,
        max_length=max_length,
        id2label={int(k): v for k, v in config.id2label.items()},
        problem_type=config.problem_type,
        mask_token="[MASK]",
        mask_token_id=tokenizer.token_to_id("[MASK]"),
        cls_token_id=tokenizer.token_to_id("[CLS]"),
        sep_token_id=tokenizer.token_to_id("[SEP]"),
        pad_token_id=tokenizer.token_to_id("[PAD]"),
        unk_token_id=tokenizer.token_to_id("[UNK]"),
    )


def tiny_model(architecture: str, vocab_size: int, **config_fields: Any) -> Any:
    torch.manual_seed(SEED)
    fields = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": MAX_LENGTH,
        "initializer_range": 0.8,  # large weights: decisive rankings instead of near-uniform scores
        **config_fields,
    }
    config = transformers.BertConfig(vocab_size=vocab_size, **fields)
    return getattr(transformers, architecture)(config).eval()


class TaskFixture:
    """One task's model, its ModelContext, the transformers pipeline, and a runner for a handler."""

    def __init__(self, task: str, model: Any, ctx: ModelContext, hf_tokenizer: Any) -> None:
        self.task = task
        self.model = model
        self.ctx = ctx
        self.pipeline = transformers.pipeline(task, model=model, tokenizer=hf_tokenizer, device="cpu")

    def run(self, handler: Any, inputs: list[Any], params: Any) -> list[Any]:
        results = []
        for prepared in handler.prepare(self.ctx, inputs, params):
            outputs = [self.forward(task_spec(self.task).outputs, sequence) for sequence in prepared.sequences]
            results.append(handler.postprocess(self.ctx, prepared, outputs, params))
        return results

    def forward(self, output_names: tuple[str, ...], sequence: Any) -> dict[str, np.ndarray]:
        input_ids = torch.from_numpy(sequence.input_ids)[None]
        with torch.no_grad():
            output = self.model(
                input_ids=input_ids,
                token_type_ids=torch.from_numpy(sequence.token_type_ids)[None],
                attention_mask=torch.ones_like(input_ids),
            )
        return {name: output[name][0].numpy() for name in output_names}


@pytest.fixture(scope="session")
def make_task(tokenizer_dir: Path, hf_tokenizer: Any) -> Callable[..., TaskFixture]:
    def make(task: str, architecture: str, **config_fields: Any) -> TaskFixture:
        model = tiny_model(architecture, len(hf_tokenizer), **config_fields)
        return TaskFixture(task, model, model_context(tokenizer_dir, model.config), hf_tokenizer)

    return make


def assert_same(ours: Any, theirs: Any, path: str = "result", tolerance: float = 1e-4) -> None:
    """Equal structure, keys, strings and ints; floats within ``tolerance``."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{path}: {ours!r} is not a dict"
        assert set(ours) == set(theirs), f"{path}: keys {sorted(ours)} != {sorted(theirs)}"
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{path}.{key}", tolerance)
    elif isinstance(theirs, (list, tuple)):
        assert isinstance(ours, (list, tuple)), f"{path}: {ours!r} is not a list"
        assert len(ours) == len(theirs), f"{path}: {len(ours)} items != {len(theirs)}\n{ours}\n{theirs}"
        for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(mine, other, f"{path}[{index}]", tolerance)
    elif isinstance(theirs, (float, np.floating)):
        assert isinstance(ours, float), f"{path}: {ours!r} is not a float"
        assert abs(ours - float(theirs)) <= tolerance, f"{path}: {ours} != {float(theirs)}"
    elif isinstance(theirs, (int, np.integer)) and not isinstance(theirs, bool):
        assert isinstance(ours, int) and ours == int(theirs), f"{path}: {ours!r} != {theirs!r}"
    else:
        assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"
