"""KServe manifests (docker/k8s/kserve): schema-valid offline, and consistent with the service and the Deployment.

KServe's own objects (InferenceService, ServingRuntime) are checked field by field against the kserve SDK's model
classes (``kserve_schema.json``, written by ``kserve_schema_from_sdk.py`` from the SDK's wheel: the kserve package
itself is too heavy a dev dependency): no unknown field, the right JSON type, required fields present. The
Kubernetes core objects inside them (containers, volumes, metadata, resources) go through kubernetes-validate.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from service.settings import Settings
from tests.docker.test_manifests import K8S, KUBERNETES_VERSION, load_yaml, manifests, service_drain_seconds

KSERVE = K8S / "kserve"
SCHEMA = json.loads((Path(__file__).parent / "kserve_schema.json").read_text())
API_VERSIONS = {"InferenceService": "serving.kserve.io/v1beta1", "ServingRuntime": "serving.kserve.io/v1alpha1"}
ROOT_CLASSES = {"InferenceService": "V1beta1InferenceService", "ServingRuntime": "V1alpha1ServingRuntime"}
SCALARS = {
    "str": str,
    "int": int,
    "bool": bool,
    "float": (int, float),
    "object": object,
    "ResourceQuantity": (str, int),
}
# Where a core type sits in a Pod, so that kubernetes-validate can check it in place.
CORE_IN_POD = {
    "V1Container": ("containers",),
    "V1Volume": ("volumes",),
    "V1ResourceRequirements": ("containers", "resources"),
    "V1PodSecurityContext": ("securityContext",),
    "V1SecurityContext": ("containers", "securityContext"),
    "V1Probe": ("containers", "readinessProbe"),
    "V1EnvVar": ("containers", "env"),
    "V1VolumeMount": ("containers", "volumeMounts"),
    "V1ContainerPort": ("containers", "ports"),
    "V1Lifecycle": ("containers", "lifecycle"),
}
MODEL_MOUNT = "/mnt/models"  # where KServe puts the storageUri's files


def kserve_resources() -> dict[str, dict[str, Any]]:
    return {
        data["kind"]: data
        for path in sorted(KSERVE.glob("*.yaml"))
        if (data := load_yaml(path))["kind"] in API_VERSIONS
    }


def schema_problems(value: Any, kind: str, where: str, core: list[tuple[str, Any, str]]) -> list[str]:
    """What in ``value`` the SDK type ``kind`` does not allow; core-typed parts are appended to ``core``."""
    if kind.startswith("list[") and kind.endswith("]"):
        if not isinstance(value, list):
            return [f"{where}: a list, not {type(value).__name__}"]
        return [
            problem
            for i, item in enumerate(value)
            for problem in schema_problems(item, kind[5:-1], f"{where}[{i}]", core)
        ]
    mapping = re.fullmatch(r"dict\(str, (.+)\)", kind)
    if mapping:
        if not isinstance(value, dict):
            return [f"{where}: a mapping, not {type(value).__name__}"]
        return [
            p for key, item in value.items() for p in schema_problems(item, mapping.group(1), f"{where}.{key}", core)
        ]
    if kind in SCALARS:
        expected = SCALARS[kind]
        wrong = isinstance(value, bool) and kind != "bool" and kind != "object"
        return [f"{where}: a {kind}, not {value!r}"] if wrong or not isinstance(value, expected) else []
    if kind not in SCHEMA["classes"]:
        core.append((kind, value, where))
        return []
    if not isinstance(value, dict):
        return [f"{where}: an object ({kind}), not {type(value).__name__}"]
    fields, required = SCHEMA["classes"][kind]["fields"], SCHEMA["classes"][kind]["required"]
    problems = [f"{where}: {name} is required in {kind}" for name in required if name not in value]
    for name, item in value.items():
        if name not in fields:
            problems.append(f"{where}.{name}: no such field in {kind}")
        else:
            problems += schema_problems(item, fields[name], f"{where}.{name}", core)
    return problems


def core_object(kind: str, value: Any) -> dict[str, Any]:
    """A minimal core object holding ``value`` where a ``kind`` belongs, for kubernetes-validate."""
    if kind == "V1ObjectMeta":
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": value}
    path = CORE_IN_POD.get(kind)
    if path is None:
        raise AssertionError(f"no core object to check a {kind} in: add it to CORE_IN_POD")
    pod: dict[str, Any] = {"containers": [{"name": "check", "image": "check"}]}
    if path == ("containers",):
        pod["containers"] = [value]
    elif path[0] == "containers":
        pod["containers"][0][path[1]] = value
    else:
        pod[path[0]] = [value] if kind == "V1Volume" else value
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": pod}


def check(resource: dict[str, Any]) -> None:
    """Raise on anything KServe's schema or the Kubernetes core schema refuses."""
    validator = pytest.importorskip("kubernetes_validate")
    core: list[tuple[str, Any, str]] = []
    problems = schema_problems(resource, ROOT_CLASSES[resource["kind"]], resource["kind"], core)
    assert not problems, problems
    for kind, value, _ in core:
        validator.validate(core_object(kind, value), KUBERNETES_VERSION, strict=True)


def runtime_container(resources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = resources["ServingRuntime"]["spec"]["containers"]
    return dict(container)


def test_kustomization_lists_both_objects() -> None:
    listed = set(load_yaml(KSERVE / "kustomization.yaml")["resources"])
    assert listed == {path.name for path in KSERVE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kserve_resources()) == set(API_VERSIONS)


@pytest.mark.parametrize("kind", sorted(API_VERSIONS))
def test_objects_pass_the_kserve_sdk_schema_and_the_core_schema(kind: str) -> None:
    resource = kserve_resources()[kind]
    assert resource["apiVersion"] == API_VERSIONS[kind]
    check(resource)


def test_schema_checks_catch_misspelled_fields() -> None:
    validator = pytest.importorskip("kubernetes_validate")
    service = copy.deepcopy(kserve_resources()["InferenceService"])
    service["spec"]["predictor"]["model"]["storageURI"] = service["spec"]["predictor"]["model"].pop("storageUri")
    with pytest.raises(AssertionError, match="storageURI: no such field"):
        check(service)
    runtime = copy.deepcopy(kserve_resources()["ServingRuntime"])
    probe = runtime["spec"]["containers"][0]["readinessProbe"]
    probe["httpGett"] = probe.pop("httpGet")
    with pytest.raises(validator.ValidationError):
        check(runtime)
    runtime["spec"]["protocolVersions"] = "v2"
    with pytest.raises(AssertionError, match="a list"):
        check(runtime)


def test_the_service_picks_the_runtime_and_speaks_its_protocol() -> None:
    from service.app import create_app

    resources = kserve_resources()
    runtime, predictor = resources["ServingRuntime"], resources["InferenceService"]["spec"]["predictor"]
    model = predictor["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {item["name"] for item in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"] == ["v2"]
    routes = set(create_app(Settings()).openapi()["paths"])
    assert {"/v2/health/ready", "/v2/models/{name}", "/v2/models/{name}/infer"} <= routes
    assert runtime_container(resources)["name"] == "kserve-container"


def test_the_runtime_runs_the_deployments_service_with_the_same_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.app import create_app

    monkeypatch.delenv("BERTSERVE_TUNE", raising=False)  # the test suite's own: tests do not tune
    container = runtime_container(kserve_resources())
    deployment = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    settings = Settings(**{name.removeprefix("BERTSERVE_").lower(): value for name, value in env.items()})
    assert str(settings.models_dir) == MODEL_MOUNT and settings.host == "0.0.0.0"
    (port,) = container["ports"]
    assert port["containerPort"] == settings.port == 8080
    routes = set(create_app(Settings()).openapi()["paths"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == deployment[probe]["httpGet"]["path"]
        assert container[probe]["httpGet"]["path"] in routes
        assert container[probe]["httpGet"]["port"] == settings.port
    deployment_env = {item["name"]: item["value"] for item in deployment["env"]}
    same = {"BERTSERVE_MAX_QUEUE", "BERTSERVE_TIMEOUT_S"}
    assert {name: env[name] for name in same} == {name: deployment_env[name] for name in same}
    assert settings.tunes(), "a batching setting given turns start-up tuning off in the pod"
    assert container["resources"] == deployment["resources"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert any(mount["mountPath"] == "/tmp" for mount in container["volumeMounts"])


def test_models_come_from_the_claim_and_shutdown_drains_in_time() -> None:
    resources = kserve_resources()
    predictor = resources["InferenceService"]["spec"]["predictor"]
    claim = re.fullmatch(r"pvc://([^/]+)/?.*", predictor["model"]["storageUri"])
    assert claim and claim.group(1) == manifests()["PersistentVolumeClaim"]["metadata"]["name"]
    container = runtime_container(resources)
    pause = float(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    environment = {item["name"]: item["value"] for item in container["env"]}
    assert predictor["terminationGracePeriodSeconds"] > pause + service_drain_seconds(environment)
    assert 1 <= predictor["minReplicas"] <= predictor["maxReplicas"]
    assert predictor["scaleMetric"] == "cpu" and "cpu" in container["resources"]["requests"]
