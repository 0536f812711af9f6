"""The tokenizing stage's admission: a long request is weighed before any of it is tokenized.

Requests with more than ``prepare_inline_chars`` characters are tokenized on the prepare threads, which every model
of the process shares; tokenizing long inputs is itself the bottleneck under a flood. So before such a request goes
there, its characters (a cheap bound on its work) are weighed against the characters already waiting there and the
model work already queued, at measured rates, with the batcher's rule: what would not end within ``ADMIT_WITHIN`` of
the deadline is refused at once, 429 with ``Retry-After`` (413 when it alone could not), instead of waiting out its
deadline behind others' tokenizing (504).

The rate, seconds per character of one prepare thread, is an average of what the stage measured, seeded at start-up
from one timed tokenization with the model's own tokenizer (``seed``).

What a request brings is the characters of its inputs' text (``input_texts``, ``input_chars``).

The per-request token cap (``check_token_cap``): the per-request token cap: a request's text is tokenized only as
far as the cap, so a huge one is refused (413) after tokenizing about ``limit`` tokens of it, not all of it.

The text is tokenized in chunks cut at spaces: for tokenizers that split words at whitespace (BERT's
WordPiece) the chunks' counts add up to the whole text's count. No tokenizer makes more than one token
per UTF-8 byte, so a text of at most ``limit / 4`` characters is not counted at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tokenizers import Tokenizer

from service.batcher import ADMIT_WITHIN
from service.errors import Overloaded, PayloadTooLarge
from service.model_rate import RATE_SMOOTHING

T = TypeVar("T")


SEED_MARGIN = 2.0
# Until the stage has timed its own work, the seeded rate counts this many times more beside other waiting work: a
# task's long requests took 0.9-11x the seed's timed tokenization on the prepare threads (medians and p90s; 20-70 KB
# QA contexts the most; a cold first request up to 28x: benchmarks.studies.prepare_seed), so 8x the doubled seed
# covers them and a first burst of ordinary requests gets in (before: one at a time, the rest 429 until two ended).
CALIBRATION_MARGIN = 8.0


class PrepareLedger:
    """Characters waiting for or being tokenized on one pool of prepare threads, and the measured rate."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._lock = threading.Lock()
        self.pending_chars = 0
        self.seconds_per_char: float | None = None
        self.measured = 0  # tokenizations timed by the stage itself
        self.refused = 0

    def seed(self, chars: int, seconds: float) -> None:
        """A first measurement (one tokenization at start-up), doubled, since tasks' tokenizing does more (windows,
        offsets, decoding): the start of the average the stage's own timings then move, ``RATE_SMOOTHING`` each (a
        first request's own timing alone, often cold, ran 1.4-28x the seed: ``benchmarks.studies.prepare_seed``)."""
        with self._lock:
            if self.seconds_per_char is None and chars > 0:
                self.seconds_per_char = SEED_MARGIN * seconds / chars

    def admit(self, chars: int, model_seconds_ahead: float, timeout_s: float, own_model_s: float = 0.0) -> None:
        """Count ``chars`` in, or raise Overloaded (429) / PayloadTooLarge (413) without counting them.
        ``own_model_s``: the request's own model work, estimated from its characters (``TokenYield``); it counts
        towards a 429, so that a request the batcher would refuse once tokenized is refused before, but never makes a
        413 or a 429 on its own: the batcher weighs the exact tokens once they exist."""
        with self._lock:
            per_char = self.seconds_per_char
            if per_char is not None:
                own, budget = chars * per_char, ADMIT_WITHIN * timeout_s
                if own > budget:
                    self.refused += 1
                    raise PayloadTooLarge(
                        f"the request's {chars} characters need about {own:.1f} s to tokenize, more than the "
                        f"{budget:.3g} s it may take of its {timeout_s:.3g} s deadline: send shorter inputs"
                    )
                # until the stage has timed its own work, a first burst is decided before any of it ends on a seeded
                # rate that can be off several times for a task's inputs: beside other work it counts CALIBRATION_MARGIN
                # times (into an empty stage at 1x, so a lone request always gets in and the stage learns its rate)
                weight = CALIBRATION_MARGIN if self.measured < self.threads and self.pending_chars > 0 else 1.0
                # one thread's rate, not the pool's: tokenizing holds the GIL for part of its time, so the threads
                # do not add up (measured: two threads drained a flood no faster than one)
                ahead = weight * self.pending_chars * per_char + model_seconds_ahead
                own *= weight
                # an estimate alone never refuses: past the budget on its own the request is the batcher's to weigh
                # on exact tokens (413 or not), so its model work is only counted when it could fit
                own += own_model_s if own + own_model_s <= budget else 0.0
                if ahead + own > budget:
                    self.refused += 1
                    seeded = f" (at {weight:g}x the start-up estimate until measured)" if weight > 1 else ""
                    raise Overloaded(
                        f"about {ahead:.1f} s of tokenizing and model work is waiting{seeded}; this request would not "
                        f"end within its {timeout_s:.3g} s deadline",
                        retry_after_s=max(1, math.ceil(ahead + own - budget)),
                    )
            self.pending_chars += chars

    def done(self, chars: int, seconds: float | None) -> None:
        """``chars`` left the stage after ``seconds`` of tokenizing (None: it never ran)."""
        with self._lock:
            self.pending_chars = max(0, self.pending_chars - chars)
            if seconds is not None and chars > 0:
                self.measured += 1
                measured, known = seconds / chars, self.seconds_per_char
                self.seconds_per_char = (
                    measured if known is None else ((1 - RATE_SMOOTHING) * known + RATE_SMOOTHING * measured)
                )


class MeasuredRatio:
    """One quantity per unit of another, measured request by request (weighted ``RATE_SMOOTHING`` to the newest)."""

    def __init__(self) -> None:
        self.ratio: float | None = None

    def observe(self, per: float, amount: float) -> None:
        """One request's ``amount`` for its ``per`` (ignored when ``per`` is 0)."""
        if per > 0:
            measured, known = amount / per, self.ratio
            self.ratio = measured if known is None else (1 - RATE_SMOOTHING) * known + RATE_SMOOTHING * measured


class TokenYield(MeasuredRatio):
    """Model tokens (the rows' tokens, windows' overlaps included) per character of one model's long requests, as
    measured on the requests it prepared: ``observe(chars, tokens)``."""

    def tokens(self, chars: int) -> int | None:
        """The tokens ``chars`` characters are expected to make (None until measured)."""
        return None if self.ratio is None else round(chars * self.ratio)


class DecodeShare(MeasuredRatio):
    """Seconds of decoding per second of tokenizing, as measured on one model's long requests: how much of a request's
    deadline its decoding will want once its rows come back (a long QA context's spans: about as long again):
    ``observe(tokenize_s, decode_s)``."""

    def seconds(self, tokenize_s: float) -> float:
        """The decoding expected of a request that took ``tokenize_s`` to tokenize (0 until measured)."""
        return 0.0 if self.ratio is None else self.ratio * tokenize_s


_LEDGERS: weakref.WeakKeyDictionary[ThreadPoolExecutor, PrepareLedger] = weakref.WeakKeyDictionary()
_LEDGERS_LOCK = threading.Lock()


def ledger_of(executor: ThreadPoolExecutor, threads: int) -> PrepareLedger:
    """The ledger of a pool of prepare threads: one per pool, however many models share it."""
    with _LEDGERS_LOCK:
        ledger = _LEDGERS.get(executor)
        if ledger is None:
            ledger = _LEDGERS[executor] = PrepareLedger(threads)
        return ledger


class Stage:
    """An admitted request's CPU work on the prepare threads (its tokenizing, then its decoding), timed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.timed = False

    async def run(self, executor: ThreadPoolExecutor, work: Callable[[], T]) -> T:
        def measured() -> T:
            started = time.perf_counter()
            try:
                return work()
            finally:
                self.seconds += time.perf_counter() - started
                self.timed = True

        return await asyncio.wrap_future(executor.submit(measured))


@contextlib.asynccontextmanager
async def holding(ledger: PrepareLedger, chars: int) -> AsyncIterator[Stage]:
    """An admitted request's ``chars``, counted until the request ends; its measured CPU work (tokenizing and
    decoding) updates the rate."""
    stage = Stage()
    try:
        yield stage
    finally:
        ledger.done(chars, stage.seconds if stage.timed else None)


@contextlib.asynccontextmanager
async def admitted(
    ledger: PrepareLedger, chars: int, model_seconds_ahead: float, timeout_s: float
) -> AsyncIterator[Stage]:
    """Admit a long request's ``chars`` (429 / 413 before any work), then hold them (``holding``)."""
    ledger.admit(chars, model_seconds_ahead, timeout_s)
    async with holding(ledger, chars) as stage:
        yield stage


async def run_admitted(
    executor: ThreadPoolExecutor,
    ledger: PrepareLedger,
    chars: int,
    work: Callable[[], T],
    model_seconds_ahead: float,
    timeout_s: float,
) -> T:
    """One piece of ``work()`` on the prepare threads, admitted as ``admitted`` admits a request."""
    async with admitted(ledger, chars, model_seconds_ahead, timeout_s) as stage:
        return await stage.run(executor, work)


SEED_WORDS = 1500
# The seed is the fastest of a few timings: one alone, taken while a start-up's other threads held the 2 cores, once
# came out ~30x slow (1 MB then read as 119 s of tokenizing, a 413 for time where the token cap's 413 was due).
SEED_RUNS = 3


def seed_rate(ledger: PrepareLedger, tokenizer: Tokenizer) -> None:
    """Seed the ledger's rate with the fastest of ``SEED_RUNS`` timed tokenizations of ~10 KB of the vocabulary's own
    words, each done as a long request is (the token cap's count, then the encoding); nothing once the ledger has a
    rate (the models sharing the prepare threads seed it once: listing a vocabulary leaves ~0.3 MB of Python heap
    behind)."""
    if ledger.seconds_per_char is not None:
        return
    vocabulary = sorted(word for word in tokenizer.get_vocab() if word.isalpha() and word.islower())
    if not vocabulary:
        return
    text = " ".join(vocabulary[(k * 7919) % len(vocabulary)] for k in range(SEED_WORDS))
    tokenizer.encode("warm up")
    timings = []
    for _ in range(SEED_RUNS):
        started = time.perf_counter()
        count_tokens_up_to(tokenizer, [text], 2**31)
        tokenizer.encode(text)
        timings.append(time.perf_counter() - started)
    ledger.seed(len(text), min(timings))


CHUNK_CHARS = 16384
MAX_TOKENS_PER_CHAR = 4


def text_chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """``text`` in pieces of at most ``size`` characters, cut at a space where one is in the piece's second half."""
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = start + size
        if end < len(text):
            cut = text.rfind(" ", start + size // 2, end)
            end = cut if cut > start else end
        chunks.append(text[start:end])
        start = end
    return chunks


def count_tokens_up_to(tokenizer: Tokenizer, texts: Sequence[str], limit: int) -> tuple[int, int]:
    """``(tokens, characters)`` counted over ``texts`` (no special tokens), stopping once tokens exceed ``limit``."""
    tokens = chars = 0
    for text in texts:
        for chunk in text_chunks(text):
            tokens += len(tokenizer.encode(chunk, add_special_tokens=False).ids)
            chars += len(chunk)
            if tokens > limit:
                return tokens, chars
    return tokens, chars


def check_token_cap(tokenizer: Tokenizer, texts: Sequence[str], limit: int, setting: str) -> None:
    """PayloadTooLarge when ``texts`` hold more than ``limit`` tokens (``setting`` names the limit)."""
    total_chars = sum(len(text) for text in texts)
    if total_chars * MAX_TOKENS_PER_CHAR <= limit:
        return
    tokens, chars = count_tokens_up_to(tokenizer, texts, limit)
    if tokens <= limit:
        return
    estimate = round(tokens * total_chars / max(chars, 1))
    raise PayloadTooLarge(
        f"the request's text is about {estimate} tokens ({total_chars} characters); one request may bring at most "
        f"{limit} tokens ({setting}): send shorter texts or split them over several requests"
    )


def input_texts(inputs: list[Any]) -> list[str]:
    """The text of a request's inputs (str, tuples of str, or dataclasses of str fields)."""
    texts: list[str] = []
    for item in inputs:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, tuple):
            texts.extend(part for part in item if isinstance(part, str))
        else:
            texts.extend(value for value in getattr(item, "__dict__", {}).values() if isinstance(value, str))
            fields = (getattr(item, name) for name in getattr(item, "__slots__", ()))
            texts.extend(value for value in fields if isinstance(value, str))
    return texts


def input_chars(inputs: list[Any]) -> int:
    """Characters of text in a request's inputs."""
    return sum(len(text) for text in input_texts(inputs))
