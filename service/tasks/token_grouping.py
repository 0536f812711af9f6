"""The token-classification pipeline's entity grouping (transformers 4.57.6 ``TokenClassificationPipeline``):
pre-entities from one window's scores, their aggregation by strategy (none, simple, first, average, max), the
grouping of B-/I- tags into entities, and the merging of entities that overlapping windows both found."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tokenizers import Encoding

from service.tasks import base
from service.tasks.base import ModelContext


def public_entity(entity: dict[str, Any]) -> dict[str, Any]:
    return {key: float(value) if key == "score" else value for key, value in entity.items()}


def gather_pre_entities(ctx: ModelContext, text: str, window: Encoding, scores: np.ndarray) -> list[dict[str, Any]]:
    unk_id = ctx.unk_token_id
    word_aware = bool(getattr(ctx.tokenizer.model, "continuing_subword_prefix", None))
    best = scores.argmax(axis=-1)  # (T,): each token's label, worked out for the whole window at once
    best_scores = scores[np.arange(len(best)), best]
    pre_entities = []
    for index, (token_id, special, (start, end)) in enumerate(
        zip(window.ids, window.special_tokens_mask, window.offsets, strict=True)
    ):
        if special:
            continue
        word = ctx.tokenizer.id_to_token(token_id)
        word_ref = text[start:end]
        # WordPiece-like models mark subwords by a prefix: the token is longer or shorter than its text
        is_subword = len(word) != len(word_ref) if word_aware else start > 0 and " " not in text[start - 1 : start + 1]
        if token_id == unk_id:
            word = word_ref
            is_subword = False
        pre_entities.append(
            {
                "word": word,
                "scores": scores[index],
                "best": best[index],
                "best_score": best_scores[index],
                "start": start,
                "end": end,
                "index": index,
                "is_subword": is_subword,
            }
        )
    return pre_entities


def _label(ctx: ModelContext, index: int) -> str:
    return ctx.id2label.get(int(index), f"LABEL_{int(index)}")


def _decode_tokens(ctx: ModelContext, tokens: list[str]) -> str:
    """transformers' ``convert_tokens_to_string`` for fast tokenizers; a lone token's string is kept per model."""
    if len(tokens) == 1:
        decoded = ctx.token_strings.get(tokens[0])
        if decoded is None:
            decoded = ctx.token_strings[tokens[0]] = _decode(ctx, tokens)
        return decoded
    return _decode(ctx, tokens)


def _decode(ctx: ModelContext, tokens: list[str]) -> str:
    decoder = ctx.tokenizer.decoder
    return decoder.decode(tokens) if decoder is not None else " ".join(tokens)


def _nanmean(values: list[Any]) -> Any:
    """``np.nanmean(values)``, without its per-call cost when no value is NaN (the same sum and division)."""
    array = np.asarray(values)
    if np.isnan(array).any():
        return np.nanmean(array)
    total = np.sum(array)
    return total.dtype.type(total / np.intp(len(values)))


def aggregate(ctx: ModelContext, pre_entities: list[dict[str, Any]], strategy: str) -> list[dict[str, Any]]:
    if strategy in ("none", "simple"):
        entities = []
        for pre_entity in pre_entities:
            entities.append(
                {
                    "entity": _label(ctx, pre_entity["best"]),
                    "score": pre_entity["best_score"],
                    "index": pre_entity["index"],
                    "word": pre_entity["word"],
                    "start": pre_entity["start"],
                    "end": pre_entity["end"],
                }
            )
    else:
        entities = _aggregate_words(ctx, pre_entities, strategy)
    if strategy == "none":
        return entities
    return _group_entities(ctx, entities)


def _aggregate_word(ctx: ModelContext, entities: list[dict[str, Any]], strategy: str) -> dict[str, Any]:
    word = _decode_tokens(ctx, [entity["word"] for entity in entities])
    if strategy == "first":
        scores = entities[0]["scores"]
    elif strategy == "max":
        scores = max(entities, key=lambda entity: entity["scores"].max())["scores"]
    elif len(entities) == 1:
        scores = entities[0]["scores"]  # the mean of one row, without nanmean's per-call cost
    else:
        scores = np.nanmean(np.stack([entity["scores"] for entity in entities]), axis=0)
    idx = scores.argmax()
    return {
        "entity": _label(ctx, idx),
        "score": scores[idx],
        "word": word,
        "start": entities[0]["start"],
        "end": entities[-1]["end"],
    }


def _aggregate_words(ctx: ModelContext, entities: list[dict[str, Any]], strategy: str) -> list[dict[str, Any]]:
    """Force agreement on word boundaries: a word's subword tokens take one label."""
    word_entities = []
    word_group: list[dict[str, Any]] | None = None
    for entity in entities:
        if word_group is None:
            word_group = [entity]
        elif entity["is_subword"]:
            word_group.append(entity)
        else:
            word_entities.append(_aggregate_word(ctx, word_group, strategy))
            word_group = [entity]
    if word_group is not None:
        word_entities.append(_aggregate_word(ctx, word_group, strategy))
    return word_entities


def _get_tag(entity_name: str) -> tuple[str, str]:
    if entity_name.startswith("B-"):
        return "B", entity_name[2:]
    if entity_name.startswith("I-"):
        return "I", entity_name[2:]
    return "I", entity_name


def _group_sub_entities(ctx: ModelContext, entities: list[dict[str, Any]]) -> dict[str, Any]:
    score = entities[0]["score"] if len(entities) == 1 else _nanmean([entity["score"] for entity in entities])
    return {
        "entity_group": entities[0]["entity"].split("-", 1)[-1],
        "score": score,
        "word": _decode_tokens(ctx, [entity["word"] for entity in entities]),
        "start": entities[0]["start"],
        "end": entities[-1]["end"],
    }


def _group_entities(ctx: ModelContext, entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group adjacent entities with the same tag; a B- tag starts a new group."""
    entity_groups = []
    current: list[dict[str, Any]] = []
    last_tag = ""
    for entity in entities:
        bi, tag = _get_tag(entity["entity"])
        if not current or (tag == last_tag and bi != "B"):
            current.append(entity)
        else:
            entity_groups.append(_group_sub_entities(ctx, current))
            current = [entity]
        last_tag = tag
    if current:
        entity_groups.append(_group_sub_entities(ctx, current))
    return entity_groups


def aggregate_overlapping_entities(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge windows: of entities that overlap, keep the longest (then the higher-scoring) one."""
    if not entities:
        return entities
    entities = sorted(entities, key=lambda entity: entity["start"])
    aggregated = []
    previous = entities[0]
    for entity in entities:
        if previous["start"] <= entity["start"] < previous["end"]:
            current_length = entity["end"] - entity["start"]
            previous_length = previous["end"] - previous["start"]
            if current_length > previous_length or (
                current_length == previous_length and entity["score"] > previous["score"]
            ):
                previous = entity
        else:
            aggregated.append(previous)
            previous = entity
    aggregated.append(previous)
    return aggregated


def text_entities(
    ctx: ModelContext,
    text: str,
    windows: list[Encoding],
    first_token_index: list[int],
    logits: list[np.ndarray],
    strategy: str,
    ignore_labels: Sequence[str],
) -> list[dict[str, Any]]:
    """The pipeline's entities of one text from its windows' (T, num_labels) logits: per window, pre-entities
    aggregated by ``strategy`` (``index`` made the whole text's), ``ignore_labels`` dropped; then the entities two
    overlapping windows both found merged."""
    entities: list[dict[str, Any]] = []
    for window, first_index, window_logits in zip(windows, first_token_index, logits, strict=True):
        scores = base.softmax(np.asarray(window_logits))  # (T, num_labels)
        for entity in aggregate(ctx, gather_pre_entities(ctx, text, window, scores), strategy):
            if entity.get("entity") in ignore_labels or entity.get("entity_group") in ignore_labels:
                continue
            if "index" in entity:
                entity["index"] += first_index
            entities.append(entity)
    if len(windows) > 1:
        entities = aggregate_overlapping_entities(entities)
    return [public_entity(entity) for entity in entities]
