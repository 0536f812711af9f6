from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from training.data import DataError
from training.squad import SquadExample, parse_article_range, read_squad, window_examples

CONTEXT = (
    "The quick brown fox jumps over the lazy dog. Peter Blackburn visited Brussels on Monday. "
    "The European Commission said so. A great movie with a wonderful cast. Where did the fox go? "
    "It went to the river bank near the old mill. Unbelievable transformations happened internationally."
)


def make_example(answer: str, qas_id: str = "q") -> SquadExample:
    return SquadExample(qas_id, "Where did the fox go?", CONTEXT, [answer], [CONTEXT.index(answer)])


def write_squad(path: Path, articles: int, impossible: bool = False) -> None:
    data = []
    for a in range(articles):
        qa = {"id": f"a{a}", "question": "Who visited?", "answers": [{"text": "Peter Blackburn", "answer_start": 45}]}
        if impossible:
            qa.update(is_impossible=True, answers=[])
        data.append({"title": f"t{a}", "paragraphs": [{"context": CONTEXT, "qas": [qa]}]})
    path.write_text(json.dumps({"version": "2.0" if impossible else "1.1", "data": data}))


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "no such file"), ("{broken", "not valid JSON"), ('[{"data": []}]', "expected a JSON object")],
)
def test_unreadable_squad_files_are_named(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "squad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DataError, match=problem) as raised:
        read_squad(path)
    assert str(path) in str(raised.value)


def test_read_squad_article_range_and_v2(tmp_path: Path) -> None:
    path = tmp_path / "squad.json"
    write_squad(path, 5)
    assert [e.qas_id for e in read_squad(path, parse_article_range("1:3"))] == ["a1", "a2"]
    assert [e.qas_id for e in read_squad(path, parse_article_range("3:"))] == ["a3", "a4"]
    example = read_squad(path)[0]
    assert CONTEXT[example.answer_starts[0] :].startswith(example.answer_texts[0])
    write_squad(path, 1, impossible=True)
    assert read_squad(path)[0].is_impossible
    with pytest.raises(DataError, match="no questions found in articles 9:12"):
        read_squad(path, parse_article_range("9:12"))
    path.write_text(json.dumps({"version": "1.1"}))
    with pytest.raises(DataError, match="not a SQuAD file"):
        read_squad(path)
    with pytest.raises(DataError, match="START:STOP"):
        parse_article_range("a:b")


@pytest.mark.parametrize("answer", ["Peter Blackburn", "river bank near the old mill", "Unbelievable transformations"])
def test_windows_map_answers_back_and_point_outside_answers_at_cls(tiny_wordpiece, answer: str) -> None:
    example = make_example(answer)
    windows = window_examples([example], tiny_wordpiece, max_length=32, doc_stride=8, max_query_length=16)
    assert len(windows) > 2
    inside = 0
    context_encoding = tiny_wordpiece.encode(CONTEXT, add_special_tokens=False)
    context_ids, context_offsets = context_encoding.ids, context_encoding.offsets
    for window in windows:
        feature = window.feature
        start, end = feature["start_positions"][0], feature["end_positions"][0]
        assert len(feature["input_ids"]) <= 32 and len(window.context_offsets) == len(feature["input_ids"])
        assert feature["input_ids"][0] == tiny_wordpiece.token_to_id("[CLS]")
        window_ids = [i for i, o in zip(feature["input_ids"], window.context_offsets, strict=True) if o]
        first = context_offsets.index(next(o for o in window.context_offsets if o))
        assert window_ids == context_ids[first : first + len(window_ids)]
        if start == 0:
            assert end == 0
            covered = [o for o in window.context_offsets if o]
            answer_start = CONTEXT.index(answer)
            assert not (covered[0][0] <= answer_start and covered[-1][1] >= answer_start + len(answer))
        else:
            inside += 1
            text = CONTEXT[window.context_offsets[start][0] : window.context_offsets[end][1]]
            assert text == answer
    assert inside >= 1


def test_neighbouring_windows_share_doc_stride_tokens(tiny_wordpiece) -> None:
    windows = window_examples([make_example("Peter Blackburn")], tiny_wordpiece, 32, doc_stride=8, max_query_length=16)
    spans = [[o for o in w.context_offsets if o] for w in windows]
    for previous, following in itertools.pairwise(spans):
        assert previous[-8:] == following[:8]
    assert spans[0][0][0] == 0 and spans[-1][-1][1] == len(CONTEXT)


def test_too_small_window_is_a_data_error(tiny_wordpiece) -> None:
    with pytest.raises(DataError, match="--doc-stride"):
        window_examples([make_example("Peter Blackburn")], tiny_wordpiece, max_length=24, doc_stride=16)

