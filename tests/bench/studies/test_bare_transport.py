"""benchmarks.studies.bare_transport: its app reads a body sent in parts before it answers, with a correct length."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks.studies.bare_transport import ANSWER, fixed_answer


def test_the_app_reads_the_whole_body_then_answers_the_fixed_body() -> None:
    parts = [{"type": "http.request", "body": b'{"inputs":', "more_body": True},
             {"type": "http.request", "body": b'"hi"}', "more_body": False}]  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return parts.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(fixed_answer({"type": "http"}, receive, send))
    assert not parts
    assert sent[0]["status"] == 200 and (b"content-length", str(len(ANSWER)).encode()) in sent[0]["headers"]
    assert sent[1] == {"type": "http.response.body", "body": ANSWER}
