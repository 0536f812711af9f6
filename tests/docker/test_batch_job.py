"""docker/k8s/batch: the Indexed Job that shards one batch file over pods, and the Job that joins their outputs.

Schema-valid, and consistent with the batch command they run and with the Deployment whose image and models they
share. docker/kube_check.py runs both with `podman kube play` on two shards.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.batch.shards import INDEX_VARIABLE
from service.settings import Settings
from tests.docker.test_manifests import K8S, KUBERNETES_VERSION, container, load_yaml, manifests

BATCH = K8S / "batch"


def batch_objects() -> dict[str, dict[str, Any]]:
    """File name -> object, kustomization excluded."""
    return {path.name: load_yaml(path) for path in sorted(BATCH.glob("*.yaml")) if path.name != "kustomization.yaml"}


def pod_spec(name: str) -> dict[str, Any]:
    return dict(batch_objects()[name]["spec"]["template"]["spec"])


def main_container(name: str) -> dict[str, Any]:
    (only,) = pod_spec(name)["containers"]
    return dict(only)


def test_every_object_passes_the_strict_kubernetes_schema() -> None:
    validator = pytest.importorskip("kubernetes_validate")
    objects = batch_objects()
    assert sorted(obj["kind"] for obj in objects.values()) == ["Job", "Job", "PersistentVolumeClaim"]
    for obj in objects.values():
        validator.validate(obj, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_the_claim_and_the_sharded_job_and_the_join_comes_after() -> None:
    assert load_yaml(BATCH / "kustomization.yaml")["resources"] == ["data-pvc.yaml", "job.yaml"]
    assert not any("batch" in entry for entry in load_yaml(K8S / "kustomization.yaml")["resources"])
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    built = subprocess.run([kubectl, "kustomize", str(BATCH)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    kinds = sorted(obj["kind"] for obj in yaml.safe_load_all(built.stdout))
    assert kinds == ["Job", "PersistentVolumeClaim"]


def test_the_job_is_indexed_and_its_shard_count_is_its_completions() -> None:
    from service.batch_cli import build_batch_parser

    job = batch_objects()["job.yaml"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] <= job["spec"]["completions"]
    command = main_container("job.yaml")["command"]
    assert command[:4] == ["python", "-m", "service", "batch"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(INDEX_VARIABLE, "1")
        args = build_batch_parser().parse_args(command[4:])
    assert args.shard.count == job["spec"]["completions"] and args.shard.index == 1
    assert "{index}" in str(args.out)
    assert pod_spec("job.yaml")["restartPolicy"] == "OnFailure"  # a restarted shard resumes from its own files


def test_the_join_reads_the_shards_input_and_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.batch_cli import build_batch_parser, build_join_parser

    monkeypatch.setenv(INDEX_VARIABLE, "0")
    shard = build_batch_parser().parse_args(main_container("job.yaml")["command"][4:])
    command = main_container("join-job.yaml")["command"]
    assert command[:4] == ["python", "-m", "service", "batch-join"]
    join = build_join_parser().parse_args(command[4:])
    assert join.input == shard.input
    assert join.parts == [shard.out.parent]
    assert join.out.parent != shard.out.parent  # the joined file is not one of the parts


def test_pods_share_the_deployments_image_models_and_hardening() -> None:
    deployment = container(manifests())
    claim = batch_objects()["data-pvc.yaml"]["metadata"]["name"]
    for name in ("job.yaml", "join-job.yaml"):
        spec, pod = main_container(name), pod_spec(name)
        assert spec["image"] == deployment["image"]
        assert spec["securityContext"] == deployment["securityContext"]
        assert pod["securityContext"]["runAsUser"] == 10001
        volumes = {volume["name"]: volume["persistentVolumeClaim"]["claimName"] for volume in pod["volumes"]
                   if "persistentVolumeClaim" in volume}  # fmt: skip
        mounts = {mount["mountPath"]: mount for mount in spec["volumeMounts"]}
        assert volumes[mounts["/data"]["name"]] == claim
        for kind in ("requests", "limits"):
            assert set(spec["resources"][kind]) == {"cpu", "memory"}
    shard = main_container("job.yaml")
    mounts = {mount["mountPath"]: mount for mount in shard["volumeMounts"]}
    shard_volumes = {volume["name"]: volume for volume in pod_spec("job.yaml")["volumes"]}
    assert mounts["/models"]["readOnly"] is True
    models_claim = manifests()["PersistentVolumeClaim"]["metadata"]["name"]
    assert shard_volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"] == models_claim
    assert shard["resources"] == deployment["resources"]


def test_environment_names_real_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTSERVE_TUNE", raising=False)  # the test suite's own: tests do not tune
    env = {item["name"]: item["value"] for item in main_container("job.yaml")["env"]}
    fields = set(Settings.model_fields)
    assert all(name.removeprefix("BERTSERVE_").lower() in fields for name in env), env
    parsed = Settings(**{name.removeprefix("BERTSERVE_").lower(): value for name, value in env.items()})
    assert parsed.models_dir == Path("/models")
    assert parsed.tunes()  # threads and batch limits for the pod's CPU limit, read from its cgroup


def test_the_check_plays_each_index_as_the_job_controller_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker/kube_batch_check.py's stand-in for the Job controller: the template, named per index, with the index
    in JOB_COMPLETION_INDEX and the shard count its own; nothing else changed."""
    import importlib.util

    monkeypatch.syspath_prepend(str(K8S.parent))
    spec = importlib.util.spec_from_file_location("kube_batch_check", K8S.parent / "kube_batch_check.py")
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    job = batch_objects()["job.yaml"]
    pod = check.shard_pod(job, 1, 2)
    assert pod["kind"] == "Pod" and pod["metadata"]["name"] == "bertserve-batch-1"
    played = pod["spec"]["containers"][0]
    written = job["spec"]["template"]["spec"]["containers"][0]
    assert played["env"] == [*written["env"], {"name": INDEX_VARIABLE, "value": "1"}]
    shard_at = written["command"].index("--shard") + 1
    assert played["command"][shard_at] == "2"
    assert played["command"][:shard_at] == written["command"][:shard_at]
    rest = {key: value for key, value in played.items() if key not in ("env", "command")}
    assert rest == {key: value for key, value in written.items() if key not in ("env", "command")}
    assert pod["spec"]["restartPolicy"] == "Never"
    join = check.join_pod(batch_objects()["join-job.yaml"])
    assert join["spec"] == batch_objects()["join-job.yaml"]["spec"]["template"]["spec"]
