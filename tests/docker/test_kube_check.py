"""The parts of docker/kube_check.py that run without podman: the rendered Deployment and the Service stand-in."""

from __future__ import annotations

import copy
import http.server
import importlib.util
import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.service.apptools import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "kube_check.py"


@pytest.fixture(scope="module")
def kube_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kube_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_render_changes_only_name_replicas_and_host_port(kube_check: ModuleType) -> None:
    deployment = yaml.safe_load(kube_check.DEPLOYMENT.read_text())
    rendered = kube_check.render(deployment, "bertserve-next", 18081)

    assert rendered["metadata"]["name"] == "bertserve-next" and rendered["spec"]["replicas"] == 1
    http_port, grpc_port = rendered["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert (http_port["hostPort"], http_port["hostIP"], http_port["containerPort"]) == (18081, "127.0.0.1", 8000)
    assert (grpc_port["hostPort"], grpc_port["hostIP"], grpc_port["containerPort"]) == (19081, "127.0.0.1", 8001)
    expected = copy.deepcopy(deployment)
    expected["metadata"]["name"], expected["spec"]["replicas"] = "bertserve-next", 1
    ports = expected["spec"]["template"]["spec"]["containers"][0]["ports"]
    ports[0].update(hostPort=18081, hostIP="127.0.0.1")
    ports[1].update(hostPort=19081, hostIP="127.0.0.1")
    assert rendered == expected
    assert deployment["spec"]["replicas"] == 2, "the manifest itself is left as written"


def test_the_deploy_check_runs_only_the_cpu_image_and_deployment(kube_check: ModuleType) -> None:
    """No GPU here: Dockerfile.gpu and docker/k8s/gpu are only linted (test_dockerfiles.py, test_manifests.py)."""
    docker = SCRIPT.parent
    assert kube_check.DEPLOYMENT.resolve() == (docker / "k8s" / "deployment.yaml").resolve()
    container_check = (docker / "container_check.sh").read_text()
    assert re.findall(r"-f (docker/\S+)", container_check) == ["docker/Dockerfile"]
    for script in ("container_check.sh", "deploy_check.sh", "kube_check.py"):
        assert "gpu" not in (docker / script).read_text().lower(), script


@contextmanager
def named_server(name: str) -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = name.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


@pytest.fixture
def two_pods() -> Iterator[tuple[int, int]]:
    with named_server("old") as old, named_server("new") as new:
        yield old, new


def test_service_proxy_sends_connections_only_to_its_current_endpoints(
    kube_check: ModuleType, two_pods: tuple[int, int]
) -> None:
    old, new = two_pods
    proxy = kube_check.ServiceProxy(free_port())
    url = f"http://127.0.0.1:{proxy.server.getsockname()[1]}/"
    try:
        proxy.endpoints = [old]
        assert {urllib.request.urlopen(url, timeout=5).read() for _ in range(4)} == {b"old"}
        proxy.endpoints = [old, new]
        assert {urllib.request.urlopen(url, timeout=5).read() for _ in range(4)} == {b"old", b"new"}
        proxy.endpoints = [new]
        assert {urllib.request.urlopen(url, timeout=5).read() for _ in range(4)} == {b"new"}
    finally:
        proxy.close()
