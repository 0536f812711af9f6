"""The task table: what each task *is*, written once. Torch-free: training, export and the service read it.

A row says which outputs the task's graph gives (and which of them are per token), the transformers
architecture the task maps to, which checkpoint architectures carry its trained weights, the transformers
pipeline's defaults for its parameters (the service's request schemas and task handlers read them from here),
and the metric a fine-tuning run is judged by. Adding a task is one
row here, one handler in ``service/tasks`` and one schema module in ``service/schemas``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

INPUT_NAMES: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
# A graph takes all three, or the first two when its family has one segment (RoBERTa, DistilBERT, ModernBERT...).
GRAPH_INPUTS: tuple[tuple[str, ...], ...] = (INPUT_NAMES, INPUT_NAMES[:2])
INPUT_AXES: dict[int, str] = {0: "batch", 1: "sequence"}


@dataclass(frozen=True)
class TaskSpec:
    name: str
    outputs: tuple[str, ...]
    token_level: frozenset[str]  # outputs shaped (B, T, ...); the others are (B, ...)
    architecture: str  # the BertFor* class (ours and transformers') that computes the outputs
    sources: frozenset[str]  # checkpoint architectures whose weights cover everything the graph computes
    detect_from: frozenset[str]  # checkpoint architectures that mean this task under --task auto
    primary_metric: str | None  # what fine-tuning keeps the best epoch by (None: not fine-tuned here)
    needs_labels: bool = False  # bundle.json must carry id2label
    pipeline_defaults: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # What the head's id2label must satisfy to serve this task: a function giving the problem (None: fine).
    labels_rule: Callable[[Mapping[int, str]], str | None] | None = None
    # Outputs a graph may add after ``outputs``, in this order, when its export asked for them.
    optional_outputs: tuple[str, ...] = ()

    @property
    def head(self) -> str:
        """The head's class without its family (``ForSequenceClassification``, ``Model``: the bare encoder)."""
        return self.architecture.removeprefix("Bert")

    @property
    def auto_class(self) -> str:
        """transformers' Auto class of the head (feature-extraction's ``AutoModel`` pools the encoder's states)."""
        return "AutoModel" + (self.head if self.head != "Model" else "")

    def is_token_level(self, output: str) -> bool:
        return output in self.token_level

    def labels_problem(self, id2label: Mapping[int, str]) -> str | None:
        """Why a head with ``id2label`` cannot serve this task (None: it can). Export and the bundle reader ask."""
        return None if self.labels_rule is None else self.labels_rule(id2label)

    def request_defaults_problem(self, defaults: Mapping[str, Any]) -> str | None:
        """Why ``defaults`` cannot be a bundle's request defaults for this task (None: they can): each key one of the
        pipeline's parameters, each value a JSON scalar."""
        unknown = sorted(set(defaults) - set(self.pipeline_defaults))
        if unknown:
            known = ", ".join(self.pipeline_defaults) or "none"
            return f"request defaults {unknown} are not parameters of {self.name} (its parameters: {known})"
        for key, value in defaults.items():
            if value is not None and not isinstance(value, str | int | float | bool):
                return f"request default {key} must be a string, number, boolean or null, got {type(value).__name__}"
        return None

    def outputs_problem(self, outputs: Sequence[str]) -> str | None:
        """Why a graph with ``outputs`` cannot serve this task (None: it can): the task's outputs, then any of its
        optional ones in order."""
        required, extra = list(outputs[: len(self.outputs)]), list(outputs[len(self.outputs) :])
        allowed = [name for name in self.optional_outputs if name in extra]
        if required != list(self.outputs) or extra != allowed:
            optional = f" (then optionally {list(self.optional_outputs)})" if self.optional_outputs else ""
            return f"task {self.name} needs outputs {list(self.outputs)}{optional}, bundle declares {list(outputs)}"
        return None

    def dynamic_axes(
        self, inputs: tuple[str, ...] = INPUT_NAMES, outputs: Sequence[str] | None = None
    ) -> dict[str, dict[int, str]]:
        """torch.onnx.export's dynamic_axes: batch and sequence on the inputs and per-token outputs."""
        axes = {name: dict(INPUT_AXES) for name in inputs}
        for name in self.outputs if outputs is None else outputs:
            axes[name] = dict(INPUT_AXES) if self.is_token_level(name) else {0: "batch"}
        return axes


def _frozen(**values: Any) -> MappingProxyType[str, Any]:
    return MappingProxyType(values)


def entailment_id(id2label: Mapping[int, str]) -> int | None:
    """The NLI head's entailment label, found as transformers' zero-shot pipeline finds it (starts with "entail")."""
    return next((index for index, label in sorted(id2label.items()) if label.lower().startswith("entail")), None)


def _nli_head(id2label: Mapping[int, str]) -> str | None:
    if entailment_id(id2label) is None:
        labels = ", ".join(label for _, label in sorted(id2label.items())) or "none"
        return f"zero-shot-classification needs an NLI head with an entailment label; its labels are: {labels}"
    return None


def _relevance_head(id2label: Mapping[int, str]) -> str | None:
    if len(id2label) not in (1, 2):
        return (
            "rerank needs a cross-encoder head with 1 output (a relevance logit) or 2 labels (not relevant, "
            f"relevant); this head has {len(id2label)}"
        )
    return None


def _pair_classifier(
    name: str,
    pipeline_defaults: MappingProxyType[str, Any],
    labels_rule: Callable[[Mapping[int, str]], str | None],
) -> TaskSpec:
    """A sequence classifier scoring (text, text) pairs: chosen with --task, never detected from a checkpoint, not
    fine-tuned here; its head's labels (``needs_labels``) say how a logit becomes a score."""
    return TaskSpec(
        name=name,
        outputs=("logits",),
        token_level=frozenset(),
        architecture="BertForSequenceClassification",
        sources=frozenset({"BertForSequenceClassification"}),
        detect_from=frozenset(),
        primary_metric=None,
        needs_labels=True,
        pipeline_defaults=pipeline_defaults,
        labels_rule=labels_rule,
    )


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="text-classification",
            outputs=("logits",),
            token_level=frozenset(),
            architecture="BertForSequenceClassification",
            sources=frozenset({"BertForSequenceClassification"}),
            detect_from=frozenset({"BertForSequenceClassification"}),
            primary_metric="accuracy",
            needs_labels=True,
            pipeline_defaults=_frozen(top_k=1, function_to_apply=None),
        ),
        TaskSpec(
            name="token-classification",
            outputs=("logits",),
            token_level=frozenset({"logits"}),
            architecture="BertForTokenClassification",
            sources=frozenset({"BertForTokenClassification"}),
            detect_from=frozenset({"BertForTokenClassification"}),
            primary_metric="f1",
            needs_labels=True,
            # "simple", as the Hugging Face Inference API answers (whole entities); transformers' pipeline defaults
            # to "none" (one entry per sub-word token), which a request still gets by asking for it.
            pipeline_defaults=_frozen(aggregation_strategy="simple", ignore_labels=("O",), stride=None),
        ),
        TaskSpec(
            name="question-answering",
            outputs=("start_logits", "end_logits"),
            token_level=frozenset({"start_logits", "end_logits"}),
            architecture="BertForQuestionAnswering",
            sources=frozenset({"BertForQuestionAnswering"}),
            detect_from=frozenset({"BertForQuestionAnswering"}),
            primary_metric="f1",
            pipeline_defaults=_frozen(
                top_k=1,
                doc_stride=128,
                max_answer_len=15,
                max_seq_len=384,
                max_question_len=64,
                handle_impossible_answer=False,
                align_to_words=True,
            ),
        ),
        TaskSpec(
            name="fill-mask",
            outputs=("logits",),
            token_level=frozenset({"logits"}),
            architecture="BertForMaskedLM",
            sources=frozenset({"BertForMaskedLM", "BertForPreTraining"}),
            detect_from=frozenset({"BertForMaskedLM", "BertForPreTraining"}),
            primary_metric="mlm_top1_accuracy",
            pipeline_defaults=_frozen(top_k=5, targets=None),
        ),
        TaskSpec(
            name="feature-extraction",
            # One (B, H) sentence embedding: pooling (mean / cls) and, when asked, L2 normalisation run in the graph.
            outputs=("sentence_embedding",),
            # token_embeddings (B, T, H): the encoder's token states, for TEI's /embed_all (export --token-embeddings).
            token_level=frozenset({"token_embeddings"}),
            optional_outputs=("token_embeddings",),
            architecture="BertModel",
            sources=frozenset({"BertModel", "BertForPreTraining", "BertForSequenceClassification"}),
            detect_from=frozenset({"BertModel"}),
            primary_metric=None,
        ),
        # A cross-encoder: [CLS] query [SEP] document [SEP] -> one relevance logit (sigmoid) or two labels (softmax,
        # the second is relevant).
        _pair_classifier(
            "rerank", pipeline_defaults=_frozen(top_n=None, return_documents=False), labels_rule=_relevance_head
        ),
        # An NLI classifier scoring (sequence, hypothesis) pairs: transformers' zero-shot-classification pipeline.
        _pair_classifier(
            "zero-shot-classification",
            pipeline_defaults=_frozen(hypothesis_template="This example is {}.", multi_label=False),
            labels_rule=_nli_head,
        ),
    )
}
TASK_NAMES: tuple[str, ...] = tuple(TASKS)
FINETUNE_TASKS: tuple[str, ...] = tuple(name for name, spec in TASKS.items() if spec.primary_metric is not None)


class UnknownTask(ValueError):
    """A task name the table does not hold."""


def task_spec(task: str) -> TaskSpec:
    try:
        return TASKS[task]
    except KeyError:
        raise UnknownTask(f"unknown task {task!r} (known: {', '.join(TASK_NAMES)})") from None


def task_for_architecture(architecture: str) -> str | None:
    """The task a checkpoint of ``architecture`` serves under --task auto (None: cannot tell)."""
    return next((spec.name for spec in TASKS.values() if architecture in spec.detect_from), None)
