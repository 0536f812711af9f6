"""The request walk: which project files one request runs through, and how often it crosses between them.

A profile hook on every thread (set before the app starts, so the event loop, the prepare threads and the model
workers all carry it) records, while one request is in flight, every Python call whose callee is a file under
``service/`` or ``contract/``: the files it touched, the file-to-file edges (caller file -> callee file, both
project files, distinct pairs) and the crossings (every such call, counted each time). One warm-up request runs
first, so imports and first-call set-up are not counted.

Run it in a source tree to measure that tree (``--tree``: cwd and import path), on the tiny random models the tests
build (needs the dev extra's transformers):

    python -m benchmarks.request_walk --out benchmarks/results/request_walk
    python -m benchmarks.request_walk --tree /tmp/before --out benchmarks/results/request_walk-before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks.datasets import REPO_ROOT

PROJECT_DIRS = ("service", "contract")
REQUESTS: dict[str, dict[str, Any]] = {
    "text-classification": {"inputs": ["a great film", "dull and far too long"]},
    "token-classification": {"inputs": ["John lives in Paris and works for Google."]},
    "question-answering": {"inputs": {"question": "Where does John live?", "context": "John lives in Paris."}},
    "fill-mask": {"inputs": ["the film was [MASK]."]},
    "zero-shot-classification": {"inputs": ["the film was great"], "candidate_labels": ["movie", "music"]},
}


class Walk:
    """The profile hook: counts calls into project files while ``recording``."""

    def __init__(self, root: Path) -> None:
        self.prefixes = tuple(str(root / name) + os.sep for name in PROJECT_DIRS)
        self.root = str(root) + os.sep
        self.recording = False
        self.files: set[str] = set()
        self.edges: Counter[tuple[str, str]] = Counter()
        self.functions: Counter[str] = Counter()

    def _project(self, filename: str) -> str | None:
        return filename[len(self.root) :] if filename.startswith(self.prefixes) else None

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.recording or event != "call":
            return
        callee = self._project(frame.f_code.co_filename)
        if callee is None:
            return
        self.files.add(callee)
        self.functions[f"{callee}:{frame.f_code.co_name}"] += 1
        caller = frame.f_back
        while caller is not None and self._project(caller.f_code.co_filename) is None:
            caller = caller.f_back  # through library frames (FastAPI, asyncio) to the project file that led here
        if caller is not None:
            source = self._project(caller.f_code.co_filename)
            if source is not None and source != callee:
                self.edges[(source, callee)] += 1

    def figures(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "edges": len(self.edges),
            "crossings": sum(self.edges.values()),
            "file_list": sorted(self.files),
            "edge_list": {f"{source} -> {callee}": count for (source, callee), count in sorted(self.edges.items())},
            "functions": dict(sorted(self.functions.items())),
        }


def measure(models_dir: Path, root: Path) -> dict[str, Any]:
    """Each v1 task's request through the app built from the tree at ``root`` (already on sys.path)."""
    walk = Walk(root)
    threading.setprofile(walk)
    sys.setprofile(walk)
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    models = [f"{task}={models_dir / task / 'bundle'}" for task in REQUESTS]
    settings = Settings(models=models, intra_op_threads=1, tune=False)
    walks: dict[str, Any] = {}
    with TestClient(create_app(settings)) as client:
        while client.get("/health/ready").status_code != 200:
            pass
        for task, body in REQUESTS.items():
            route = f"/v1/{task}"
            assert client.post(route, json={"model": task, **body}).status_code == 200
            walk.files, walk.edges, walk.functions, walk.recording = set(), Counter(), Counter(), True
            response = client.post(route, json={"model": task, **body})
            walk.recording = False
            assert response.status_code == 200, response.text
            walks[task] = walk.figures()
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    return walks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.request_walk", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=REPO_ROOT, help="the source tree to measure (default: this one)")
    parser.add_argument("--models", type=Path, default=Path("/tmp/bertserve-walk-models"), help="tiny models here")
    parser.add_argument("--out", type=Path, required=True, help="report prefix (.json / .md)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tree = args.tree.resolve()
    if not args.child:
        from tests.service.tiny_models import build_tiny_models

        build_tiny_models(args.models)
        # this file by path: a tree from before it existed is measured too
        command = [sys.executable, str(Path(__file__).resolve()), "--tree", str(tree), "--models", str(args.models),
                   "--out", str(args.out.resolve()), "--child"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        return subprocess.run(command, cwd=tree, env=env, check=False).returncode
    walks = measure(args.models, tree)
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    report = {"tree_commit": commit, "walks": walks}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Request walk (benchmarks.request_walk), tree at {commit}", "",
             "| v1 request | project files | file-to-file edges | crossings |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {task} | {w['files']} | {w['edges']} | {w['crossings']} |" for task, w in walks.items()]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
