"""The README's four demo requests and what a sensible answer to each looks like.

Standard library only, so the container check can run it with any ``python3``:

    python3 -m demo.examples --url http://127.0.0.1:8000          # PASS/FAIL per task, exit 1 on a FAIL
    python3 -m demo.examples --url http://127.0.0.1:8000 --curl   # curl commands + real outputs (markdown)
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Answer = dict[str, Any]


@dataclass(frozen=True)
class DemoExample:
    model: str
    route: str
    body: dict[str, Any]
    expectation: str
    check: Callable[[Answer], bool]


def _sentiment_ok(answer: Answer) -> bool:
    return answer["results"][0][0]["label"] == "POSITIVE"


def _ner_ok(answer: Answer) -> bool:
    groups = {(entity["entity_group"], entity["word"].lower()) for entity in answer["results"][0]}
    return ("PER", "sarah") in groups and ("LOC", "london") in groups


def _qa_ok(answer: Answer) -> bool:
    return answer["results"][0][0]["answer"] == "Warsaw"


def _fill_mask_ok(answer: Answer) -> bool:
    return answer["results"][0][0][0]["token_str"] == "capital"


EXAMPLES: tuple[DemoExample, ...] = (
    DemoExample(
        "sentiment",
        "/v1/text-classification",
        {"model": "sentiment", "inputs": "I absolutely loved this movie, the acting was wonderful!"},
        "label POSITIVE",
        _sentiment_ok,
    ),
    DemoExample(
        "ner",
        "/v1/token-classification",
        {"model": "ner", "inputs": "My name is Sarah and I live in London."},
        "Sarah is PER, London is LOC",
        _ner_ok,
    ),
    DemoExample(
        "qa",
        "/v1/question-answering",
        {
            "model": "qa",
            "inputs": {
                "question": "Where was Marie Curie born?",
                "context": "Marie Curie was born in Warsaw in 1867. She studied physics and became a chemist. "
                "In 1891, she moved to Paris to work at the Sorbonne.",
            },
        },
        "answer Warsaw",
        _qa_ok,
    ),
    DemoExample(
        "fill-mask",
        "/v1/fill-mask",
        {"model": "fill-mask", "inputs": "Paris is the [MASK] of France."},
        "top prediction capital",
        _fill_mask_ok,
    ),
)


def post_json(base_url: str, route: str, body: dict[str, Any], timeout: float = 30.0) -> Answer:
    request = urllib.request.Request(
        base_url.rstrip("/") + route,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return dict(json.load(response))


def run_example(base_url: str, example: DemoExample) -> tuple[bool, str]:
    """(passed, what came back) for one example; an HTTP or connection error is a failure, not a crash."""
    try:
        answer = post_json(base_url, example.route, example.body)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, f"request failed: {exc}"
    try:
        passed = example.check(answer)
    except (KeyError, IndexError, TypeError) as exc:
        return False, f"unexpected answer shape ({exc!r}): {json.dumps(answer)}"
    return passed, json.dumps(answer["results"][0], ensure_ascii=False)


def curl_markdown(base_url: str) -> str:
    """Each example as a curl command and the real response, for demo/README.md."""
    blocks = []
    for example in EXAMPLES:
        answer = post_json(base_url, example.route, example.body)
        body = json.dumps(example.body, ensure_ascii=False)
        blocks.append(
            f"```console\n$ curl -s localhost:8000{example.route} -H 'Content-Type: application/json' \\\n"
            f"    -d '{body}'\n{json.dumps(answer, ensure_ascii=False)}\n```"
        )
    return "\n\n".join(blocks) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m demo.examples", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--curl", action="store_true", help="print curl commands with the real outputs")
    parser.add_argument("--only", nargs="*", help="check only these models (default: all four)")
    args = parser.parse_args(argv)
    if args.curl:
        print(curl_markdown(args.url), end="")
        return 0
    failures = 0
    for example in EXAMPLES:
        if args.only and example.model not in args.only:
            continue
        passed, detail = run_example(args.url, example)
        failures += not passed
        print(f"{'PASS' if passed else 'FAIL'} {example.model} (expect {example.expectation}): {detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
