"""Kubernetes manifests and compose file: schema-valid, and consistent with the service they run."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.settings import Settings
from tests.docker.conftest import DOCKER

K8S = DOCKER / "k8s"
KUBERNETES_VERSION = "1.30"


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not one YAML mapping"
    return data


def manifests() -> dict[str, dict[str, Any]]:
    """kind -> resource for every Kubernetes object under docker/k8s (kustomization excluded)."""
    resources = {}
    for path in sorted(K8S.glob("*.yaml")):
        data = load_yaml(path)
        if data["kind"] != "Kustomization":
            resources[data["kind"]] = data
    return resources


def service_drain_seconds(environment: dict[str, str] | None = None) -> float:
    """uvicorn's graceful-shutdown timeout as ``python -m service`` sets it for the deployment's environment."""
    from service.__main__ import drain_seconds

    fields = {name.removeprefix("BERTSERVE_").lower(): value for name, value in (environment or {}).items()}
    return drain_seconds(Settings(**{key: value for key, value in fields.items() if key == "timeout_s"}))


def container(resources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers = resources["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def test_kustomization_lists_every_manifest() -> None:
    listed = set(load_yaml(K8S / "kustomization.yaml")["resources"])
    present = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_every_manifest_passes_the_strict_kubernetes_schema() -> None:
    validator = pytest.importorskip("kubernetes_validate")
    resources = manifests()
    assert set(resources) == {"Deployment", "Service", "HorizontalPodAutoscaler", "PersistentVolumeClaim"}
    for resource in resources.values():
        validator.validate(resource, KUBERNETES_VERSION, strict=True)


def test_schema_validation_rejects_a_misspelled_field() -> None:
    """The validator must really check: a typo in a probe is an error, not a silent pass."""
    validator = pytest.importorskip("kubernetes_validate")
    broken = copy.deepcopy(manifests()["Deployment"])
    probe = broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["httpGett"] = probe.pop("httpGet")
    with pytest.raises(validator.ValidationError):
        validator.validate(broken, KUBERNETES_VERSION, strict=True)


def test_probes_use_the_service_health_routes() -> None:
    from service.app import create_app

    routes = set(create_app(Settings()).openapi()["paths"])
    spec = container(manifests())
    ports = {port["name"]: port["containerPort"] for port in spec["ports"]}
    assert spec["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert spec["livenessProbe"]["httpGet"]["path"] == "/health/live"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert spec[probe]["httpGet"]["path"] in routes
        assert ports[spec[probe]["httpGet"]["port"]] == Settings().port


def test_resources_have_requests_within_limits() -> None:
    resources = container(manifests())["resources"]
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


def test_environment_names_real_settings() -> None:
    """Every BERTSERVE_* variable must be a Settings field: extra="forbid" makes a typo a start-up error."""
    env = {item["name"]: item["value"] for item in container(manifests())["env"]}
    assert env, "the Deployment sets no BERTSERVE_* variables"
    fields = set(Settings.model_fields)
    for name in env:
        assert name.startswith("BERTSERVE_")
        assert name.removeprefix("BERTSERVE_").lower() in fields, name
    parsed = Settings(**{name.removeprefix("BERTSERVE_").lower(): value for name, value in env.items()})
    assert str(parsed.models_dir) == container(manifests())["volumeMounts"][0]["mountPath"]
    assert parsed.host == "0.0.0.0"


def test_models_come_from_a_read_only_volume_claim() -> None:
    resources = manifests()
    pod = resources["Deployment"]["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mount = next(m for m in container(resources)["volumeMounts"] if m["mountPath"] == "/models")
    assert mount["readOnly"] is True
    claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
    assert claim == resources["PersistentVolumeClaim"]["metadata"]["name"]


def test_grace_period_outlasts_prestop_pause_plus_drain() -> None:
    spec = container(manifests())
    pause = float(spec["lifecycle"]["preStop"]["exec"]["command"][-1])
    grace = manifests()["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
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
