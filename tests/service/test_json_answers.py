"""JSON answers: float arrays written by orjson are the bytes ``json.dumps`` writes for their ``tolist()``; a batch
output entry holding an answer's bytes as written is the entry written from the answer's objects."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from service.api.bodies import encode_json, float_array_json
from service.batch.lines import EncodedJson, answered


def as_json_writes_it(payload: Any) -> bytes:
    """The reference: every array as ``tolist()``, written by ``json.dumps`` as Starlette's JSONResponse writes."""

    def builtin(value: Any) -> Any:
        return value.tolist() if isinstance(value, np.ndarray) else value.item()

    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=builtin).encode()


def floats_of_every_size(count: int, seed: int) -> np.ndarray:
    """Finite float32 values from the smallest subnormal to the largest, both signs, zeros among them."""
    rng = np.random.default_rng(seed)
    values = rng.choice([-1.0, 1.0], count) * 10.0 ** rng.uniform(-45, 38.5, count)
    values[:: max(1, count // 7)] = 0.0
    values[1 :: max(1, count // 5)] = -0.0
    return values.astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_a_float_array_of_any_magnitude_is_written_as_json_writes_its_list(dtype: type) -> None:
    for seed in range(40):
        with np.errstate(over="ignore"):
            values = floats_of_every_size(2_000, seed).astype(dtype)
        values = values[np.isfinite(values)]
        assert float_array_json(values) == as_json_writes_it(values)


def test_the_forms_where_repr_and_orjson_part_are_written_as_repr() -> None:
    # Python: 1e-05, 1.5e-07, 1e+16; orjson on its own: 0.00001, 1.5e-7, 1e16
    values = np.array([1e-05, -1.5e-07, 1e16, 9.999e-05, 1e-4, 9999999999999998.0, 0.0, -0.0, 1.0], dtype=np.float64)
    assert float_array_json(values) == b"[1e-05,-1.5e-07,1e+16,9.999e-05,0.0001,9999999999999998.0,0.0,-0.0,1.0]"


def test_arrays_of_more_dimensions_and_empty_ones_keep_their_nesting() -> None:
    cube = floats_of_every_size(2 * 3 * 4, 1).reshape(2, 3, 4)
    for array in (cube, cube[0], np.zeros((0,), np.float32), np.zeros((2, 0), np.float32), cube[:, :1, :]):
        assert float_array_json(array) == as_json_writes_it(array)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_views_of_an_array_that_are_not_contiguous_are_written_too(dtype: type) -> None:
    matrix = floats_of_every_size(6 * 8, 2).astype(dtype).reshape(6, 8)
    for view in (matrix[:, 3], matrix.T, matrix[::2], matrix[1:5:2, ::3]):
        assert not view.flags.c_contiguous
        assert encode_json({"values": view}) == as_json_writes_it({"values": view})


def test_an_array_holding_nan_or_infinity_is_left_to_json() -> None:
    array = np.array([0.5, np.nan, np.inf, -np.inf], dtype=np.float32)
    assert float_array_json(array) is None
    assert encode_json({"logits": array}) == b'{"logits":[0.5,NaN,Infinity,-Infinity]}'


def test_an_answer_with_arrays_among_text_and_numbers_is_written_byte_for_byte_as_before() -> None:
    vectors = [floats_of_every_size(384, seed) for seed in range(5)]
    payload = {
        "object": "list",
        "data": [{"object": "embedding", "index": k, "embedding": vector} for k, vector in enumerate(vectors)],
        "model": 'mini"lm \u00e9\u4e2d \x00 \\u0000',
        "usage": {"prompt_tokens": np.int64(7), "score": np.float32(1e-06), "ids": np.array([3, 1, 4])},
        "texts": ["\x00", "[1.5]", "\u2028 \U0001f600"],
        "empty": np.zeros((0,), np.float32),
        "flags": np.array([True, False]),
    }
    assert encode_json(payload) == as_json_writes_it(payload)
    assert json.loads(encode_json(payload))["data"][3]["embedding"] == vectors[3].tolist()


def test_a_string_shaped_like_an_array_mark_stays_a_string() -> None:
    # the mark is the process's secret between two NULs; a client's string with NULs and hex digits is only text
    lookalike = "\x00" + "0123456789abcdef" + "\x00"
    payload = {"text": lookalike, "vector": np.array([0.25, 1e-07], dtype=np.float32)}
    assert encode_json(payload) == as_json_writes_it(payload)
    assert json.loads(encode_json(payload))["text"] == lookalike


@pytest.mark.parametrize("custom_id", ["line-1", 'a "quoted" \u00e9 id \x00', ""])
def test_a_batch_entry_holding_the_answer_as_written_is_the_entry_written_from_its_objects(custom_id: str) -> None:
    vectors = [floats_of_every_size(384, seed) for seed in range(3)]
    answers = [
        {"object": "list", "data": [{"index": k, "embedding": vector} for k, vector in enumerate(vectors)]},
        {"model": "sst2 \u4e2d", "results": [[{"label": "POSITIVE", "score": 0.9998}]], "none": None},
        [],
        {},
    ]
    for number, answer in enumerate(answers):
        content = encode_json(answer)
        entry = answered("batch_abc", number, custom_id, 200, EncodedJson(content))
        assert entry == answered("batch_abc", number, custom_id, 200, json.loads(content))
        assert entry.endswith(b"}\n") and entry.count(b"\n") == 1
        read = json.loads(entry)
        assert (read["custom_id"], read["response"]["status_code"], read["error"]) == (custom_id, 200, None)
        assert read["response"]["body"] == json.loads(content)
