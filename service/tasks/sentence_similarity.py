"""Sentence similarity on an embeddings (feature-extraction) model: the cosine of a source sentence with each of a
list of sentences, as sentence-transformers' ``model.similarity`` (cosine) gives it.

One unit for the three shapes that ask for it: ``POST /v1/sentence-similarity`` (one input or a list, flat
parameters), text-embeddings-inference's ``POST /similarity`` and the Hugging Face Inference API's
sentence-similarity task (``{"inputs": {"source_sentence", "sentences"}, "parameters"}``). Each input's texts are
embedded (L2-normalised) in one request, as rows of the model's batches; the answer is computed from their vectors.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from service.schemas.common import TaskRequest, examples
from service.tasks.base import HfMapping, TaskUnit, V1Route
from service.tasks.feature_extraction import Embedding, EmbeddingParams

SOURCE = {"source_sentence": "A man is eating food.", "sentences": ["A man eats.", "A dog runs in the park."]}


class SimilarityInput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    source_sentence: str = Field(description="The sentence the others are compared with.")
    sentences: Annotated[list[str], Field(min_length=1)] = Field(description="The sentences to compare with it.")


class SimilarityOptions(BaseModel):
    """The embedding options similarity takes (text-embeddings-inference's ``parameters``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt_name: str | None = Field(
        None, description="A key of the model's sentence-transformers prompts, prepended to every sentence."
    )
    truncate: bool | None = Field(
        False, description="Cut sentences longer than the model's max length; false: such a sentence is a 400."
    )
    truncation_direction: Literal["Right", "Left"] = Field("Right", description="Which end of a long text is cut.")


class SimilarityRequest(TaskRequest):
    """What every similarity shape becomes: its inputs and options, embedded together; ``similarities`` answers."""

    task: ClassVar[str] = "feature-extraction"

    def inputs_and_options(self) -> tuple[list[SimilarityInput], SimilarityOptions]:
        raise NotImplementedError

    def input_list(self) -> list[Any]:
        return list(self.inputs_and_options()[0])

    def to_task(self) -> tuple[list[Any], EmbeddingParams]:
        inputs, options = self.inputs_and_options()
        texts = [text for item in inputs for text in (item.source_sentence, *item.sentences)]
        params = EmbeddingParams(
            normalize=True,
            truncate=bool(options.truncate),
            truncation_direction=options.truncation_direction.lower(),
            prompt_name=options.prompt_name,
        )
        return texts, params

    def similarities(self, embeddings: list[Embedding]) -> list[list[float]]:
        """Per input, the cosine of its source sentence's vector with each of its sentences' vectors."""
        answers: list[list[float]] = []
        offset = 0
        for item in self.inputs_and_options()[0]:
            count = 1 + len(item.sentences)
            vectors = np.asarray([embeddings[offset + k].vector for k in range(count)], dtype=np.float64)
            offset += count
            norms = np.linalg.norm(vectors, axis=1)
            norms[norms == 0] = 1.0
            unit = vectors / norms[:, None]
            answers.append((unit[1:] @ unit[0]).tolist())
        return answers


class SentenceSimilarityRequest(SimilarityRequest, SimilarityOptions):
    """``POST /v1/sentence-similarity``."""

    model_config = examples({"model": "minilm", "inputs": SOURCE}, {"inputs": [SOURCE, SOURCE], "truncate": True})

    inputs: SimilarityInput | Annotated[list[SimilarityInput], Field(min_length=1)] = Field(
        description="A {source_sentence, sentences} object or a list of them."
    )

    def inputs_and_options(self) -> tuple[list[SimilarityInput], SimilarityOptions]:
        inputs = self.inputs if isinstance(self.inputs, list) else [self.inputs]
        options = SimilarityOptions(
            prompt_name=self.prompt_name, truncate=self.truncate, truncation_direction=self.truncation_direction
        )
        return inputs, options


class ParameterizedSimilarityRequest(SimilarityRequest):
    """text-embeddings-inference's ``/similarity`` body and the HF Inference API's sentence-similarity body."""

    model_config = examples({"inputs": SOURCE}, {"inputs": SOURCE, "parameters": {"truncate": True}})

    inputs: SimilarityInput
    parameters: SimilarityOptions | None = Field(None, description="Embedding options (none: the defaults).")

    def inputs_and_options(self) -> tuple[list[SimilarityInput], SimilarityOptions]:
        return [self.inputs], self.parameters or SimilarityOptions.model_validate({})


class SentenceSimilarityResponse(BaseModel):
    model_config = examples({"model": "minilm", "results": [[0.83, 0.12]]})

    model: str
    results: list[list[float]] = Field(description="Per input, the cosine of the source with each sentence, in order.")


def is_similarity(body: dict[str, Any]) -> bool:
    """An HF Inference API body to an embeddings model that asks for sentence similarity."""
    inputs = body.get("inputs")
    return isinstance(inputs, dict) and "source_sentence" in inputs


def hf_read(body: dict[str, Any]) -> tuple[type, dict[str, Any], bool]:
    extra = {key: value for key, value in body.items() if key not in ("inputs", "parameters", "options")}
    fields = {"inputs": body["inputs"], "parameters": body.get("parameters"), **extra}
    return ParameterizedSimilarityRequest, fields, True


UNIT = TaskUnit(
    "sentence-similarity",
    v1=V1Route(
        SentenceSimilarityRequest,
        SentenceSimilarityResponse,
        "The cosine of a source sentence with each of a list, with an embeddings model (sentence-transformers'\n"
        "`similarity`).",
        results=lambda request, results: request.similarities(results),
    ),
    # HF's sentence-similarity task, posted to an embeddings model: the source's cosines
    hf=HfMapping(
        ParameterizedSimilarityRequest,
        answer=lambda request, results, single: request.similarities(results)[0],
        read=hf_read,
        serves="feature-extraction",
        accepts=is_similarity,
    ),
)
