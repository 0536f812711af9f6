"""The tokenizing stage is admitted by cost: a flood of long inputs past a tiny model's tokenizing capacity, with a
short deadline, is answered 200, 429 (with Retry-After) or 413, never 504 after waiting out the deadline."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from service.errors import Overloaded, PayloadTooLarge
from service.prepare_stage import SEED_MARGIN, PrepareLedger, TokenYield, ledger_of, run_admitted, seed_rate
from service.settings import Settings
from tests.service.apptools import free_port, real_server
from tests.service.tiny_models import TinyModel

CONTEXT = "john smith lives in paris with his family and works for the bank by the river. " * 500  # ~40 KB


def test_a_flood_of_long_contexts_gets_no_504(tiny_models: dict[str, TinyModel]) -> None:
    port = free_port()
    settings = Settings(
        models=[f"qa={tiny_models['question-answering'].bundle}"], port=port, intra_op_threads=1, tune=False,
        timeout_s=1.0, max_concurrent_requests=512,
    )  # fmt: skip
    body = {"inputs": {"question": "where does john live?", "context": CONTEXT}}

    async def flood(url: str) -> tuple[Counter[int], list[str]]:
        limits = httpx.Limits(max_connections=120, max_keepalive_connections=120)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
            answers = await asyncio.gather(*(client.post("/v1/question-answering", json=body) for _ in range(120)))
        retry_after = [answer.headers.get("retry-after", "") for answer in answers if answer.status_code == 429]
        return Counter(answer.status_code for answer in answers), retry_after

    with real_server(settings) as url:
        statuses, retry_after = asyncio.run(flood(url))
        metrics = httpx.get(f"{url}/metrics").text
    assert set(statuses) <= {200, 429, 413}, statuses
    before = [line for line in metrics.splitlines() if 'reason="before_tokenizing"' in line and "_total" in line]
    assert before and float(before[0].split()[-1]) > 0, before  # refused at the door, not after a tokenization
    assert statuses[429] > 0 and statuses[200] > 0, statuses  # the stage was full, and it kept serving
    assert all(value.isdigit() and int(value) >= 1 for value in retry_after)


def test_a_fresh_servers_first_burst_of_ordinary_long_requests_is_all_answered(
    text_classification_model: TinyModel,
) -> None:
    """Before: until the prepare stage had timed two requests of its own, it let one long request in at a time, so a
    first burst of 32 sixteen-sentence requests to a server just started got 31 429s ("about 0.0 s ... is waiting")."""
    port = free_port()
    settings = Settings(models=[f"m={text_classification_model.bundle}"], port=port, intra_op_threads=1, tune=False)
    sentences = [f"the film number {k} was great and the music was good, said the critic" for k in range(16)]
    body = {"inputs": sentences}
    assert sum(map(len, sentences)) > settings.prepare_inline_chars  # tokenized on the prepare stage

    async def burst(url: str) -> Counter[int]:
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
            answers = await asyncio.gather(*(client.post("/v1/text-classification", json=body) for _ in range(32)))
        return Counter(answer.status_code for answer in answers)

    with real_server(settings) as url:
        statuses = asyncio.run(burst(url))
    assert statuses == Counter({200: 32}), statuses


def test_the_ledger_refuses_what_would_wait_past_the_deadline_and_what_alone_cannot_fit() -> None:
    ledger = PrepareLedger(threads=2)
    ledger.admit(10**9, 0.0, 1.0)  # no rate measured yet: nothing is refused
    ledger.done(10**9, None)
    ledger.seed(2_000_000, 1.0)  # 0.5 us per character, doubled for the first burst: 1 us
    ledger.admit(300_000, 0.0, 1.0)  # into an empty stage at the seeded rate: 0.3 s of the 0.4 s it may take
    ledger.done(300_000, None)
    ledger.admit(30_000, 0.0, 1.0)
    ledger.admit(10_000, 0.0, 1.0)  # beside others, until the stage has timed its own work, 8x: 0.24 s + 0.08 s
    with pytest.raises(Overloaded) as calibrating:
        ledger.admit(20_000, 0.0, 1.0)  # 0.32 s + 0.16 s (at the seeded rate alone 0.06 s: it would get in)
    assert calibrating.value.retry_after_s == 1 and "8x the start-up estimate" in str(calibrating.value)
    ledger.done(30_000, 0.03)
    ledger.done(10_000, 0.01)
    assert ledger.measured == 2 and ledger.seconds_per_char == pytest.approx(1e-6) and ledger.pending_chars == 0
    ledger.admit(300_000, 0.0, 1.0)  # 0.3 s of its own, within 40 % of 1 s
    ledger.admit(50_000, 0.0, 1.0)  # 0.3 s waiting (one thread's rate, not two) + 0.05 s: 0.35 s
    with pytest.raises(Overloaded) as waited:
        ledger.admit(100_000, 0.0, 1.0)  # 0.35 s waiting + 0.1 s
    assert waited.value.retry_after_s == 1 and ledger.pending_chars == 350_000
    ledger.done(50_000, None)
    with pytest.raises(Overloaded):
        ledger.admit(1_000, 0.4, 1.0)  # the model's queue alone fills the budget
    with pytest.raises(PayloadTooLarge):
        ledger.admit(500_000, 0.0, 1.0)  # 0.5 s alone
    ledger.done(300_000, 0.6)  # measured 2 us per character: the rate moves toward it
    assert ledger.pending_chars == 0 and 1e-6 < (ledger.seconds_per_char or 0) < 2e-6


def test_a_requests_own_model_work_refuses_it_before_tokenizing_but_never_on_its_own() -> None:
    ledger = PrepareLedger(threads=1)
    ledger.seed(1_000_000, 0.5)  # 1 us per character (the seed is doubled)
    ledger.done(0, None)
    ledger.measured = 1  # past calibration
    ledger.admit(100_000, 0.1, 1.0, own_model_s=0.15)  # 0.1 s tokenizing + 0.1 s queued + 0.15 s: within 0.4 s
    ledger.done(100_000, None)
    with pytest.raises(Overloaded) as refused:
        ledger.admit(100_000, 0.1, 1.0, own_model_s=0.25)  # 0.45 s: the batcher would refuse it once tokenized
    assert refused.value.retry_after_s == 1 and ledger.pending_chars == 0
    ledger.admit(100_000, 0.1, 1.0, own_model_s=5.0)  # too big by the estimate alone: the batcher decides on tokens
    assert ledger.pending_chars == 100_000


def test_the_token_yield_is_measured_from_prepared_requests() -> None:
    tokens = TokenYield()
    assert tokens.tokens(1000) is None
    tokens.observe(4000, 1000)
    assert tokens.tokens(1000) == 250
    tokens.observe(1000, 500)  # a text that made more tokens: the estimate moves toward it
    assert 250 < (tokens.tokens(1000) or 0) < 500


def test_work_cancelled_before_it_starts_leaves_the_ledger() -> None:
    executor = ThreadPoolExecutor(1)
    ledger = ledger_of(executor, 1)
    assert ledger_of(executor, 1) is ledger

    async def main() -> None:
        gate = asyncio.Event()
        loop = asyncio.get_running_loop()
        blocker = asyncio.ensure_future(run_admitted(executor, ledger, 10, lambda: asyncio.run_coroutine_threadsafe(
            gate.wait(), loop).result(), 0.0, 30.0))  # fmt: skip
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(run_admitted(executor, ledger, 5, lambda: "done", 0.0, 30.0))
        await asyncio.sleep(0.05)
        assert ledger.pending_chars == 15
        waiting.cancel()
        await asyncio.sleep(0.05)
        assert ledger.pending_chars == 10
        gate.set()
        await blocker
        assert ledger.pending_chars == 0

    asyncio.run(main())
    executor.shutdown()


class FirstLongEncodingStalls:
    """A model's own tokenizer whose first long encoding stalls (a start-up's thread descheduled on busy cores)."""

    def __init__(self, tokenizer: Tokenizer, stall_s: float) -> None:
        self.tokenizer, self.stall_s, self.stalled = tokenizer, stall_s, False

    def get_vocab(self) -> dict[str, int]:
        return self.tokenizer.get_vocab()

    def encode(self, text: str, add_special_tokens: bool = True) -> Any:
        if len(text) > 1000 and not self.stalled:
            self.stalled = True
            time.sleep(self.stall_s)
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)


def test_the_seeded_rate_is_the_fastest_of_its_timings(tiny_models: dict[str, TinyModel]) -> None:
    """One stalled timing does not become the start-up rate: a 0.3 s stall on ~10 KB alone would make it at least
    30 us a character (a megabyte read as 60 s of tokenizing)."""
    tokenizer = Tokenizer.from_file(str(tiny_models["question-answering"].bundle / "tokenizer.json"))
    steady, stalled = PrepareLedger(threads=1), PrepareLedger(threads=1)
    seed_rate(steady, tokenizer)
    stalling = FirstLongEncodingStalls(tokenizer, stall_s=0.3)
    seed_rate(stalled, stalling)  # type: ignore[arg-type]
    assert stalling.stalled
    assert steady.seconds_per_char is not None and stalled.seconds_per_char is not None
    assert stalled.seconds_per_char < SEED_MARGIN * 0.3 / 20_000
    assert stalled.seconds_per_char < 10 * steady.seconds_per_char
