"""The one rule for JSON bodies (service.api.entry.parse_json): UTF-8, nesting depth, item count, numbers and
duplicate keys, each at its edge; every route applies it (tests/service/test_inference_entry.py)."""

from __future__ import annotations

import json
import time

import pytest

from service.api.bodies import MAX_DEPTH, MAX_ITEMS, MAX_NUMBER_CHARS, parse_json
from service.errors import BadRequest


def nested(levels: int, inner: str = "1") -> bytes:
    return ("[" * levels + inner + "]" * levels).encode()


def refusal(body: bytes) -> str:
    with pytest.raises(BadRequest) as caught:
        parse_json(body)
    return caught.value.message


def test_nesting_up_to_the_limit_parses_and_one_level_more_is_refused_before_parsing() -> None:
    assert parse_json(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))
    assert parse_json(b'{"a": ' * (MAX_DEPTH - 1) + b"[]" + b"}" * (MAX_DEPTH - 1)) is not None
    for levels in (MAX_DEPTH + 1, 1000, 100_000):
        assert refusal(nested(levels)) == "the body nests JSON more than 16 levels deep (arrays and objects)"
    assert "16 levels" in refusal(b'{"a": ' * 17 + b"1" + b"}" * 17)
    started = time.perf_counter()
    refusal(nested(500_000))  # 1 MB of brackets
    assert time.perf_counter() - started < 0.5


def test_brackets_commas_and_escaped_quotes_inside_strings_do_not_count() -> None:
    text = '[[[[{"x": ", ,", "\\"[[[[": "]]]]\\\\"}]]]]' + " " * 3
    body = json.dumps({"inputs": ["[" * 100 + "," * (MAX_ITEMS + 1), text]}).encode()
    assert parse_json(body) == json.loads(body)


def test_items_up_to_the_limit_parse_and_more_are_refused() -> None:
    assert len(parse_json(json.dumps(["a"] * MAX_ITEMS).encode())) == MAX_ITEMS
    assert len(parse_json(json.dumps({str(key): 1 for key in range(MAX_ITEMS)}).encode())) == MAX_ITEMS
    assert parse_json(json.dumps([[]] * (MAX_ITEMS // 2)).encode()) == [[]] * (MAX_ITEMS // 2)
    message = refusal(json.dumps([1] * (MAX_ITEMS + 1)).encode())
    assert message == f"the body holds {MAX_ITEMS + 1} JSON items (array elements, object members); at most {MAX_ITEMS}"
    assert "JSON items" in refusal(json.dumps([[1, 2]] * (MAX_ITEMS // 3 + 1)).encode())  # every level counted


def test_numbers_are_finite_doubles_of_at_most_32_characters() -> None:
    assert parse_json(b"[" + b"9" * MAX_NUMBER_CHARS + b"]") == [int("9" * MAX_NUMBER_CHARS)]
    assert parse_json(b"[-1.7976931348623157e308, 5e-324, 0.1]") == [-1.7976931348623157e308, 5e-324, 0.1]
    for number in (b"1" * (MAX_NUMBER_CHARS + 1), b"1" * 100_000, b"0." + b"0" * 40 + b"1"):
        assert refusal(b'{"top_k": ' + number + b"}") == "a number in the body is longer than 32 characters"
    assert refusal(b"[1e999999]") == "the number 1e999999 is out of range (beyond a double)"
    assert refusal(b"[-1e309]") == "the number -1e309 is out of range (beyond a double)"
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        assert refusal(b"[" + constant + b"]") == f"{constant.decode()} is not a JSON number"


def test_a_key_named_twice_in_one_object_is_refused_at_any_level() -> None:
    assert refusal(b'{"inputs": "a", "inputs": "b"}') == "the key 'inputs' appears twice in one JSON object"
    assert "'text'" in refusal(b'{"inputs": [{"text": "a", "text": "b"}]}')
    assert parse_json(b'[{"text": "a"}, {"text": "b"}]') == [{"text": "a"}, {"text": "b"}]


def test_only_utf8_is_read() -> None:
    assert parse_json('{"inputs": "café ☕"}'.encode()) == {"inputs": "café ☕"}
    assert refusal(b'{"inputs": "\xff"}') == "the body is not UTF-8: byte 12 (0xff) cannot start a character"
    assert "not UTF-8" in refusal('{"inputs": "x"}'.encode("utf-16"))  # json.loads alone would guess UTF-16
    assert "not UTF-8" in refusal('{"inputs": "é"}'.encode("latin-1"))


def test_half_a_surrogate_pair_is_refused_and_a_whole_one_read() -> None:
    assert parse_json(b'{"inputs": "\\ud83d\\ude00"}') == {"inputs": "\U0001f600"}
    assert refusal(b'{"inputs": ["ok", "x\\ud800"]}') == (
        "a string in the body holds half a surrogate pair (\\ud800 at character 1 of the string): not Unicode text"
    )
    assert "\\udc00" in refusal(b'{"\\udc00": "key"}')


def test_invalid_json_names_where_it_breaks() -> None:
    assert refusal(b'{"inputs": "x",') == (
        "the body is not valid JSON at character 15: Expecting property name enclosed in double quotes"
    )
    assert (
        refusal(b'{"inputs": "unterminated')
        == "the body is not valid JSON at character 11: Unterminated string starting at"
    )
    assert refusal(b"") == "the body is not valid JSON at character 0: Expecting value"
