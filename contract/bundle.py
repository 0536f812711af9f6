"""The bundle folder: the only contract between export and serving.

A bundle is a folder with ``model.onnx`` (one file, no external data), ``tokenizer.json`` (a fast
tokenizer with no padding or truncation baked in) and ``bundle.json`` (this schema). This module
must stay torch-free: the service imports it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contract.tasks import GRAPH_INPUTS, INPUT_NAMES, TASK_NAMES, TASKS

SCHEMA_VERSION = 1
BUNDLE_FILE = "bundle.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"

ADAPTERS_DIR = "adapters"  # a LoRA base bundle's adapters: NAME.onnx_adapter (ONNX Runtime's format) + NAME.json
ADAPTER_FILE_SUFFIX = ".onnx_adapter"
LORA_KEYS = frozenset({"rank", "slots", "head", "shapes"})

QUANTIZATIONS: tuple[str, ...] = ("none", "int8")
PRECISIONS: tuple[str, ...] = ("fp32", "fp16")
# How a feature-extraction graph pools token states into its sentence_embedding: the attention-masked mean, or [CLS].
POOLINGS: tuple[str, ...] = ("mean", "cls")


class BundleError(ValueError):
    """A bundle folder that cannot be served; the message names the folder and the problem."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


@dataclass
class SpecialTokens:
    cls_token: str = "[CLS]"
    sep_token: str = "[SEP]"
    pad_token: str = "[PAD]"
    mask_token: str = "[MASK]"
    unk_token: str = "[UNK]"


@dataclass
class BundleSpec:
    """What ``bundle.json`` holds. Field names are the JSON keys."""

    task: str
    architecture: str
    max_length: int
    id2label: dict[int, str] = field(default_factory=dict)
    problem_type: str | None = None
    do_lower_case: bool = True
    # tokenizer_config.json's flag (tokenizer.json lacks it): fill-mask's decoded strings depend on it.
    clean_up_tokenization_spaces: bool = True
    special_tokens: SpecialTokens = field(default_factory=SpecialTokens)
    inputs: list[str] = field(default_factory=lambda: list(INPUT_NAMES))
    outputs: list[str] = field(default_factory=list)
    precision: str = "fp32"
    quantization: str = "none"
    optimized: bool = False
    opset: int = 17
    onnxruntime_version: str = ""
    source_weights_sha256: str = ""
    fused_operators: dict[str, int] = field(default_factory=dict)
    parity: dict[str, Any] = field(default_factory=dict)
    # --eval-data: fp32 and int8 scored with the task's metric on labelled rows, and whether int8 was written.
    quantization_eval: dict[str, Any] = field(default_factory=dict)
    files_sha256: dict[str, str] = field(default_factory=dict)
    # feature-extraction only: the pooling inside the graph, and whether the graph L2-normalises sentence_embedding.
    pooling: str | None = None
    normalize: bool = False
    # feature-extraction only: sentence-transformers' named prompts (config_sentence_transformers.json) and the one
    # it prepends when none is named.
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    # feature-extraction only (--embedding-calibration): each dimension's min and max over the sentence embeddings
    # of calibration texts, [[min...], [max...]]: the int8 / uint8 quantization ranges of sentence-transformers'
    # quantize_embeddings, so a text's int8 vector does not depend on the texts sent with it. Empty: none.
    embedding_ranges: list[list[float]] = field(default_factory=list)
    # Request parameters this model answers with when a request leaves them out (a NER model's whole-word
    # aggregation_strategy "first"): keys of the task's pipeline defaults, JSON scalar values.
    request_defaults: dict[str, Any] = field(default_factory=dict)
    # A LoRA base bundle (model_export/lora.py): the rank, each adapted module's and the head's overridable graph
    # names and their shapes; empty for any other bundle.
    lora: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["id2label"] = {str(k): v for k, v in self.id2label.items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path | str = BUNDLE_FILE) -> BundleSpec:
        if not isinstance(data, dict):
            raise BundleError(path, "bundle.json is not a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise BundleError(path, f"unknown bundle schema version {version!r} (expected {SCHEMA_VERSION})")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise BundleError(path, f"unknown bundle.json fields: {', '.join(unknown)}")
        for name in ("task", "architecture", "max_length"):
            if name not in data:
                raise BundleError(path, f"bundle.json lacks the required field {name!r}")
        fields = dict(data)
        try:
            fields["id2label"] = {int(k): str(v) for k, v in (data.get("id2label") or {}).items()}
            fields["special_tokens"] = SpecialTokens(**(data.get("special_tokens") or {}))
            spec = cls(**fields)
        except (TypeError, ValueError) as exc:
            raise BundleError(path, f"bundle.json is malformed: {exc}") from exc
        spec.check(path)
        return spec

    def check(self, path: Path | str = BUNDLE_FILE) -> None:
        """Reject a spec whose task, outputs, inputs or settings do not fit together."""
        if self.task not in TASKS:
            raise BundleError(path, f"unknown task {self.task!r} (known: {', '.join(TASK_NAMES)})")
        task = TASKS[self.task]
        outputs_problem = task.outputs_problem(self.outputs)
        if outputs_problem is not None:
            raise BundleError(path, outputs_problem)
        if tuple(self.inputs) not in GRAPH_INPUTS:
            allowed = " or ".join(str(list(inputs)) for inputs in GRAPH_INPUTS)
            raise BundleError(path, f"inputs must be {allowed}, bundle declares {self.inputs}")
        if self.quantization not in QUANTIZATIONS:
            raise BundleError(path, f"unknown quantization {self.quantization!r}")
        if self.precision not in PRECISIONS:
            raise BundleError(path, f"unknown precision {self.precision!r}")
        if not 2 <= self.max_length <= 512:
            raise BundleError(path, f"max_length {self.max_length} is outside 2..512")
        if task.needs_labels and not self.id2label:
            raise BundleError(path, f"task {self.task} needs id2label")
        labels_problem = task.labels_problem(self.id2label) if task.needs_labels else None
        if labels_problem is not None:
            raise BundleError(path, labels_problem)
        if self.task == "feature-extraction" and self.pooling not in POOLINGS:
            raise BundleError(path, f"task feature-extraction needs pooling in {list(POOLINGS)}, got {self.pooling!r}")
        if self.task != "feature-extraction" and (self.pooling is not None or self.normalize):
            raise BundleError(path, f"pooling and normalize apply to feature-extraction only, not {self.task}")
        if self.task != "feature-extraction" and (self.prompts or self.default_prompt_name is not None):
            raise BundleError(path, f"prompts apply to feature-extraction only, not {self.task}")
        defaults_problem = task.request_defaults_problem(self.request_defaults)
        if defaults_problem is not None:
            raise BundleError(path, defaults_problem)
        ranges_problem = _ranges_problem(self.embedding_ranges)
        if self.embedding_ranges and self.task != "feature-extraction":
            raise BundleError(path, f"embedding_ranges apply to feature-extraction only, not {self.task}")
        if ranges_problem is not None:
            raise BundleError(path, f"embedding_ranges {ranges_problem}")
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise BundleError(path, f"default_prompt_name {self.default_prompt_name!r} is not one of the prompts")
        if self.lora and (set(self.lora) != LORA_KEYS or self.quantization != "none"):
            raise BundleError(path, f"lora needs exactly {sorted(LORA_KEYS)} and an unquantized graph")


def _ranges_problem(ranges: list[list[float]]) -> str | None:
    if not ranges:
        return None
    if len(ranges) != 2 or not ranges[0] or len(ranges[0]) != len(ranges[1]):
        return "must be two lists of one number per dimension, [[min...], [max...]]"
    numbers = [value for row in ranges for value in row]
    if not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in numbers):
        return "must hold numbers only"
    if any(low > high for low, high in zip(ranges[0], ranges[1], strict=True)):
        return "has a dimension whose min is above its max"
    return None


@dataclass(frozen=True)
class Bundle:
    """A validated bundle folder, ready for the service to load."""

    path: Path
    spec: BundleSpec

    @property
    def model_path(self) -> Path:
        return self.path / MODEL_FILE

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER_FILE


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_spec(folder: Path, spec: BundleSpec) -> None:
    """Record the files' hashes into the spec, then write bundle.json (the export side)."""
    spec.files_sha256 = {name: file_sha256(folder / name) for name in (MODEL_FILE, TOKENIZER_FILE)}
    spec.check(folder)
    (folder / BUNDLE_FILE).write_text(json.dumps(spec.to_json(), indent=2, sort_keys=True) + "\n")


def read_bundle(folder: Path | str, verify_hashes: bool = True) -> Bundle:
    """Load and validate a bundle folder; every problem is one BundleError naming the folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BundleError(folder, "not a folder")
    for name in (BUNDLE_FILE, MODEL_FILE, TOKENIZER_FILE):
        if not (folder / name).is_file():
            raise BundleError(folder, f"missing {name}")
    try:
        data = json.loads((folder / BUNDLE_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(folder, f"bundle.json is not valid JSON: {exc}") from exc
    spec = BundleSpec.from_json(data, folder)
    try:
        json.loads((folder / TOKENIZER_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(folder, f"tokenizer.json is not valid JSON: {exc}") from exc
    if verify_hashes:
        for name, expected in spec.files_sha256.items():
            if file_sha256(folder / name) != expected:
                raise BundleError(folder, f"{name} does not match the hash in bundle.json (corrupt or replaced)")
    return Bundle(path=folder, spec=spec)


@dataclass(frozen=True)
class AdapterFile:
    """One LoRA fine-tune of a base bundle: its adapter file and its labels."""

    name: str
    path: Path
    id2label: dict[int, str]


def read_adapters(bundle: Bundle) -> dict[str, AdapterFile]:
    """The adapters beside a LoRA base bundle (``adapters/NAME.onnx_adapter`` and ``NAME.json``), by name; none for
    any other bundle. A file without its labels, or labels the task cannot use, is a BundleError naming it."""
    folder = bundle.path / ADAPTERS_DIR
    if not bundle.spec.lora or not folder.is_dir():
        return {}
    task = TASKS[bundle.spec.task]
    adapters = {}
    for path in sorted(folder.glob(f"*{ADAPTER_FILE_SUFFIX}")):
        name = path.name.removesuffix(ADAPTER_FILE_SUFFIX)
        try:
            labels = json.loads(path.with_name(f"{name}.json").read_text()).get("id2label", {})
            id2label = {int(k): str(v) for k, v in labels.items()} or dict(bundle.spec.id2label)
        except (OSError, ValueError, AttributeError) as exc:
            raise BundleError(path, f"adapter {name} has no readable {name}.json: {exc}") from exc
        problem = task.labels_problem(id2label) if task.needs_labels else None
        if problem is None and task.needs_labels and len(id2label) != len(bundle.spec.id2label):
            problem = f"{len(id2label)} labels where the base bundle's head has {len(bundle.spec.id2label)}"
        if problem is not None:
            raise BundleError(path, problem)
        adapters[name] = AdapterFile(name, path, id2label)
    return adapters
