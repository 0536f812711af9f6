"""Kubernetes manifests and compose file: schema-valid, and consistent with the service they run.

docker/k8s holds the CPU Deployment; docker/k8s/gpu the GPU one (only checked here: no GPU runs it in the deploy
check), which must be the CPU Deployment with a GPU, the GPU image and BERTSERVE_DEVICE=cuda.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.settings import TUNED_SETTINGS, Settings
from tests.docker.conftest import DOCKER

K8S = DOCKER / "k8s"
GPU = K8S / "gpu"
DEPLOYMENT_FOLDERS = (K8S, GPU)
KUBERNETES_VERSION = "1.30"


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not one YAML mapping"
    return data


def manifests(folder: Path = K8S) -> dict[str, dict[str, Any]]:
    """kind -> resource for every Kubernetes object in ``folder`` (kustomization excluded; not its subfolders)."""
    resources = {}
    for path in sorted(folder.glob("*.yaml")):
        data = load_yaml(path)
        if data["kind"] != "Kustomization":
            resources[data["kind"]] = data
    return resources


def service_drain_seconds(environment: dict[str, str] | None = None) -> float:
    """uvicorn's graceful-shutdown timeout as ``python -m service`` sets it for the deployment's environment."""
    from service.serving import drain_seconds

    fields = {name.removeprefix("BERTSERVE_").lower(): value for name, value in (environment or {}).items()}
    return drain_seconds(Settings(**{key: value for key, value in fields.items() if key == "timeout_s"}))


def container(resources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers = resources["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def folder_id(folder: Path) -> str:
    return folder.relative_to(DOCKER).as_posix()


per_deployment = pytest.mark.parametrize("folder", DEPLOYMENT_FOLDERS, ids=folder_id)


@per_deployment
def test_kustomization_lists_every_manifest(folder: Path) -> None:
    listed = set(load_yaml(folder / "kustomization.yaml")["resources"])
    present = {path.name for path in folder.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize(
    ("folder", "kinds"),
    [
        (K8S, {"Deployment", "Service", "HorizontalPodAutoscaler", "PersistentVolumeClaim"}),
        (GPU, {"Deployment", "Service"}),
    ],
    ids=["k8s", "k8s/gpu"],
)
def test_every_manifest_passes_the_strict_kubernetes_schema(folder: Path, kinds: set[str]) -> None:
    validator = pytest.importorskip("kubernetes_validate")
    resources = manifests(folder)
    assert set(resources) == kinds
    for resource in resources.values():
        validator.validate(resource, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("folder", (K8S, K8S / "kserve", GPU), ids=folder_id)
def test_kustomize_builds_exactly_the_listed_objects(folder: Path) -> None:
    """What ``kubectl apply -k`` would send: the folder's objects, unchanged (kubectl's built-in kustomize)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    built = sorted((yaml.safe_load_all(result.stdout)), key=lambda item: (item["kind"], item["metadata"]["name"]))
    listed = [load_yaml(folder / name) for name in load_yaml(folder / "kustomization.yaml")["resources"]]
    assert built == sorted(listed, key=lambda item: (item["kind"], item["metadata"]["name"]))


def test_schema_validation_rejects_a_misspelled_field() -> None:
    """The validator must really check: a typo in a probe is an error, not a silent pass."""
    validator = pytest.importorskip("kubernetes_validate")
    broken = copy.deepcopy(manifests()["Deployment"])
    probe = broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["httpGett"] = probe.pop("httpGet")
    with pytest.raises(validator.ValidationError):
        validator.validate(broken, KUBERNETES_VERSION, strict=True)


@per_deployment
def test_probes_use_the_service_health_routes(folder: Path) -> None:
    from service.app import create_app

    routes = set(create_app(Settings()).openapi()["paths"])
    spec = container(manifests(folder))
    ports = {port["name"]: port["containerPort"] for port in spec["ports"]}
    assert spec["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert spec["livenessProbe"]["httpGet"]["path"] == "/health/live"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert spec[probe]["httpGet"]["path"] in routes
        assert ports[spec[probe]["httpGet"]["port"]] == Settings().port


@per_deployment
def test_resources_have_requests_within_limits(folder: Path) -> None:
    resources = container(manifests(folder))["resources"]
    assert set(resources) == {"requests", "limits"}
    for name in ("cpu", "memory"):
        assert name in resources["requests"] and name in resources["limits"]
    assert _memory_bytes(resources["requests"]["memory"]) <= _memory_bytes(resources["limits"]["memory"])
    assert float(resources["requests"]["cpu"]) <= float(resources["limits"]["cpu"])


def _memory_bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


@per_deployment
def test_environment_names_real_settings(folder: Path) -> None:
    """Every BERTSERVE_* variable must be a Settings field: extra="forbid" makes a typo a start-up error."""
    env = {item["name"]: item["value"] for item in container(manifests(folder))["env"]}
    assert env, "the Deployment sets no BERTSERVE_* variables"
    fields = set(Settings.model_fields)
    for name in env:
        assert name.startswith("BERTSERVE_")
        assert name.removeprefix("BERTSERVE_").lower() in fields, name
    parsed = Settings(**{name.removeprefix("BERTSERVE_").lower(): value for name, value in env.items()})
    assert str(parsed.models_dir) == container(manifests(folder))["volumeMounts"][0]["mountPath"]
    assert parsed.host == "0.0.0.0"


@per_deployment
def test_batching_is_left_to_start_up_tuning_for_the_pods_limits(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuned setting given (threads, batch limits, runs at once) turns tuning off: the pod would serve with the
    untuned defaults, and a GPU's with a CPU's batches. The CPU limit is read from the cgroup instead."""
    monkeypatch.delenv("BERTSERVE_TUNE", raising=False)  # the test suite's own: tests do not tune
    env = {item["name"]: item["value"] for item in container(manifests(folder))["env"]}
    parsed = Settings(**{name.removeprefix("BERTSERVE_").lower(): value for name, value in env.items()})
    assert parsed.tunes()
    assert not {name.removeprefix("BERTSERVE_").lower() for name in env} & {"model_workers", *TUNED_SETTINGS}


@per_deployment
def test_models_come_from_a_read_only_volume_claim(folder: Path) -> None:
    resources = manifests(folder)
    pod = resources["Deployment"]["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mount = next(m for m in container(resources)["volumeMounts"] if m["mountPath"] == "/models")
    assert mount["readOnly"] is True
    claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
    assert claim == manifests()["PersistentVolumeClaim"]["metadata"]["name"]


@per_deployment
def test_grace_period_outlasts_prestop_pause_plus_drain(folder: Path) -> None:
    spec = container(manifests(folder))
    pause = float(spec["lifecycle"]["preStop"]["exec"]["command"][-1])
    grace = manifests(folder)["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    environment = {item["name"]: item["value"] for item in spec.get("env", [])}
    assert grace > pause + service_drain_seconds(environment)


def test_service_and_autoscaler_point_at_the_deployment() -> None:
    resources = manifests()
    deployment, service, hpa = resources["Deployment"], resources["Service"], resources["HorizontalPodAutoscaler"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    port_names = {port["name"] for port in container(resources)["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= port_names
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert "cpu" in container(resources)["resources"]["requests"], "CPU utilisation needs a CPU request"


def pod_labels(resources: dict[str, dict[str, Any]]) -> dict[str, str]:
    return dict(resources["Deployment"]["spec"]["template"]["metadata"]["labels"])


def test_gpu_objects_are_their_own_and_the_gpu_service_fronts_the_gpu_pods() -> None:
    """Both Deployments can run in one namespace: other names, and no selector that matches the other's pods (two
    Deployments whose selectors overlap fight over the same pods); each Service fronts its own Deployment."""
    cpu, gpu = manifests(), manifests(GPU)
    for kind in ("Deployment", "Service"):
        assert gpu[kind]["metadata"]["name"] != cpu[kind]["metadata"]["name"], kind
    gpu_selector = gpu["Deployment"]["spec"]["selector"]["matchLabels"].items()
    cpu_selector = cpu["Deployment"]["spec"]["selector"]["matchLabels"].items()
    assert gpu_selector <= pod_labels(gpu).items()
    assert not gpu_selector <= pod_labels(cpu).items()
    assert not cpu_selector <= pod_labels(gpu).items()
    assert gpu["Service"]["spec"]["selector"].items() <= pod_labels(gpu).items()
    assert not gpu["Service"]["spec"]["selector"].items() <= pod_labels(cpu).items()
    assert not cpu["Service"]["spec"]["selector"].items() <= pod_labels(gpu).items()
    port_names = {port["name"] for port in container(gpu)["ports"]}
    assert {port["targetPort"] for port in gpu["Service"]["spec"]["ports"]} <= port_names


def test_gpu_deployment_requests_one_gpu_and_serves_on_cuda() -> None:
    resources = manifests(GPU)
    spec = container(resources)
    limits = spec["resources"]["limits"]
    assert str(limits["nvidia.com/gpu"]) == "1"
    # an extended resource's request, when given, must equal its limit
    assert str(spec["resources"]["requests"].get("nvidia.com/gpu", limits["nvidia.com/gpu"])) == "1"
    env = {item["name"]: item["value"] for item in spec["env"]}
    assert env["BERTSERVE_DEVICE"] == "cuda"
    assert Settings(device=env["BERTSERVE_DEVICE"]).device == "cuda"
    pod = resources["Deployment"]["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert f"-t {spec['image']} " in (DOCKER / "Dockerfile.gpu").read_text(), "the image Dockerfile.gpu's build tags"
    for part in container(manifests())["resources"].values():
        assert "nvidia.com/gpu" not in part, "the CPU Deployment holds no GPU"


def test_gpu_deployment_is_the_cpu_deployment_with_a_gpu() -> None:
    """Probes, ports, drain, hardening, volumes, rollout and settings as in ../deployment.yaml: only the names,
    labels, replicas, image, resources, the GPU toleration and BERTSERVE_DEVICE differ."""
    cpu, gpu = manifests()["Deployment"], manifests(GPU)["Deployment"]
    assert gpu["spec"]["strategy"] == cpu["spec"]["strategy"]
    assert gpu["spec"]["template"]["metadata"]["annotations"] == cpu["spec"]["template"]["metadata"]["annotations"]
    cpu_pod, gpu_pod = copy.deepcopy(cpu["spec"]["template"]["spec"]), copy.deepcopy(gpu["spec"]["template"]["spec"])
    assert gpu_pod.pop("tolerations")
    (cpu_container,), (gpu_container,) = cpu_pod.pop("containers"), gpu_pod.pop("containers")
    assert gpu_pod == cpu_pod
    assert [item for item in gpu_container.pop("env") if item["name"] != "BERTSERVE_DEVICE"] == cpu_container.pop("env")
    cpu_resources, gpu_resources = cpu_container.pop("resources"), gpu_container.pop("resources")
    for bound in ("requests", "limits"):
        assert float(gpu_resources[bound]["cpu"]) >= float(cpu_resources[bound]["cpu"])
        assert _memory_bytes(gpu_resources[bound]["memory"]) >= _memory_bytes(cpu_resources[bound]["memory"])
    assert gpu_container.pop("image") != cpu_container.pop("image")
    assert gpu_container == cpu_container


def test_compose_serves_a_models_volume_with_real_settings() -> None:
    compose = load_yaml(DOCKER / "compose.yaml")
    (service,) = compose["services"].values()
    assert service["build"]["dockerfile"] == "docker/Dockerfile"
    assert (DOCKER / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == (
        DOCKER / "Dockerfile"
    ).resolve()
    mount = next(volume for volume in service["volumes"] if volume["target"] == "/models")
    assert mount["read_only"] is True
    for name in service.get("environment", {}):
        assert name.removeprefix("BERTSERVE_").lower() in Settings.model_fields, name
    grace = re.fullmatch(r"(\d+)s", service["stop_grace_period"])
    assert grace and int(grace.group(1)) > service_drain_seconds(service.get("environment", {}))
