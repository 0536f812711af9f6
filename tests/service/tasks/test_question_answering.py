from __future__ import annotations

from typing import Any

import pytest

from service.tasks import HANDLERS, InputError, QAInput, QAParams
from tests.service.tasks.conftest import MAX_LENGTH, TaskFixture, assert_same

LONG_CONTEXT = (
    "John Smith lives in Paris and works for the United Nations in Geneva. "
    "Mary Johnson visited London, Berlin and Rome last summer with her family. "
    "Anna Maria moved from Madrid to Tokyo in January to study economics; "
    "the river flows through the old city towards the mountains in the north. "
    "It's a small café near the station: they serve coffee, tea and cakes!"
)
INPUTS = [
    QAInput("Where does John Smith live?", "John Smith lives in Paris and works for the United Nations."),
    QAInput("Who visited London?", LONG_CONTEXT),
    QAInput("What do they serve?", "  It's a   small café;  they serve coffee,\ttea and cakes.  "),
    QAInput("東京?", "Anna Maria moved from Madrid to 東京 in January 🙂 to study économics."),
]
PARAMS = [
    QAParams(),
    QAParams(top_k=3),
    QAParams(top_k=5, max_answer_len=4),
    QAParams(handle_impossible_answer=True),
    QAParams(top_k=4, handle_impossible_answer=True),
    QAParams(max_seq_len=32, doc_stride=8),
    QAParams(top_k=3, max_seq_len=40, doc_stride=16, handle_impossible_answer=True),
    QAParams(top_k=20, max_seq_len=24, doc_stride=4, max_answer_len=3),
]


@pytest.fixture(scope="module")
def qa(make_task: Any) -> TaskFixture:
    return make_task("question-answering", "BertForQuestionAnswering")


def pipeline_kwargs(params: QAParams) -> dict[str, Any]:
    kwargs = {
        "top_k": params.top_k,
        "max_answer_len": params.max_answer_len,
        "handle_impossible_answer": params.handle_impossible_answer,
        "max_question_len": params.max_question_len,
    }
    if params.max_seq_len is not None:
        kwargs["max_seq_len"] = params.max_seq_len
    if params.doc_stride is not None:
        kwargs["doc_stride"] = params.doc_stride
    return kwargs


@pytest.mark.parametrize("params", PARAMS, ids=repr)
def test_matches_pipeline(qa: TaskFixture, params: QAParams) -> None:
    ours = qa.run(HANDLERS["question-answering"], INPUTS, params)
    for item, result in zip(INPUTS, ours, strict=True):
        theirs = qa.pipeline(question=item.question, context=item.context, **pipeline_kwargs(params))
        assert_same(result, theirs if isinstance(theirs, list) else [theirs])
        for answer in result:
            assert item.context[answer["start"] : answer["end"]] == answer["answer"]


def test_long_context_is_windowed(qa: TaskFixture) -> None:
    params = QAParams(max_seq_len=32, doc_stride=8)
    (prepared,) = HANDLERS["question-answering"].prepare(qa.ctx, [INPUTS[1]], params)
    assert len(prepared.sequences) > 3
    assert all(len(sequence) <= 32 for sequence in prepared.sequences)


def test_defaults_window_at_model_max_length(qa: TaskFixture) -> None:
    (prepared,) = HANDLERS["question-answering"].prepare(qa.ctx, [INPUTS[1]], QAParams())
    assert len(prepared.sequences) > 1
    assert max(len(sequence) for sequence in prepared.sequences) == MAX_LENGTH


def test_a_long_question_still_fits_when_the_stride_can_advance(qa: TaskFixture) -> None:
    item = QAInput("the " * 20 + "?", LONG_CONTEXT)
    params = QAParams(max_seq_len=32, doc_stride=7)
    (ours,) = qa.run(HANDLERS["question-answering"], [item], params)
    theirs = qa.pipeline(question=item.question, context=item.context, **pipeline_kwargs(params))
    assert_same(ours, [theirs])


@pytest.mark.parametrize(
    ("inputs", "params"),
    [
        ([QAInput("", "context")], QAParams()),
        ([QAInput("question?", " ")], QAParams()),
        (["not a QAInput"], QAParams()),
        ([INPUTS[0]], QAParams(top_k=0)),
        ([INPUTS[0]], QAParams(max_answer_len=0)),
        ([INPUTS[0]], QAParams(max_seq_len=MAX_LENGTH + 1)),
        ([INPUTS[0]], QAParams(max_seq_len=16, doc_stride=20)),
        ([QAInput("who " * 40 + "?", LONG_CONTEXT)], QAParams()),
        # 21 question tokens leave 8 context tokens per 32-token window: a stride of 8 cannot advance
        ([QAInput("the " * 20 + "?", LONG_CONTEXT)], QAParams(max_seq_len=32, doc_stride=8)),
    ],
)
def test_bad_inputs_are_input_errors(qa: TaskFixture, inputs: list[Any], params: QAParams) -> None:
    with pytest.raises(InputError):
        HANDLERS["question-answering"].prepare(qa.ctx, inputs, params)
