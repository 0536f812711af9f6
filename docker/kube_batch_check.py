"""Run docker/k8s/batch's Indexed Job on two shards and its join with `podman kube play`; check the joined output.

    python docker/kube_batch_check.py MODELS_DIR [--image localhost/bertserve:check]   (docker/deploy_check.sh runs it)

kube play has no Job controller, so this script is one: each index of the Indexed Job is played as the Job's pod
template under its own name, with JOB_COMPLETION_INDEX set as the controller sets it and the shard count (--shard and
completions) turned to 2; both shards run at once; once both exited 0 the join Job's pod runs. The claims are podman
volumes of the same names: the models (MODELS_DIR) and the batch data, holding an input of LINES requests to the
demo's sentiment model and one line that is not JSON. Checks: each pod exits 0, each shard answered only its own
lines, and the joined output holds every custom_id exactly once, in input order, the bad line in the errors file.
Everything it makes (pods, volumes, the image's `bertserve:latest` tag) is removed at the end.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml
from kube_check import LIMITS_CONF, Checks, check_main, container_of, models_volume, played, podman

ROOT = Path(__file__).resolve().parents[1]
BATCH = ROOT / "docker" / "k8s" / "batch"
SHARDS = 2
LINES = 40
POD_BUDGET_S = 180.0


def shard_pod(job: dict[str, Any], index: int, count: int) -> dict[str, Any]:
    """What the Job controller makes for ``index``: the pod template, JOB_COMPLETION_INDEX set, ``count`` shards."""
    template = copy.deepcopy(job["spec"]["template"])
    spec = template["spec"]
    spec["restartPolicy"] = "Never"  # a failed shard shows as its exit code here, not as a restart
    container = spec["containers"][0]
    container["env"] = [*container.get("env", []), {"name": "JOB_COMPLETION_INDEX", "value": str(index)}]
    command = container["command"]
    command[command.index("--shard") + 1] = str(count)
    metadata = {"name": f"{job['metadata']['name']}-{index}", **template["metadata"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def join_pod(job: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(job["spec"]["template"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": job["metadata"]["name"], **template["metadata"]},
            "spec": template["spec"]}  # fmt: skip


def input_lines() -> list[dict[str, Any]]:
    moods = ("I loved every minute of it.", "A dull, tiresome film.", "The cast was wonderful.", "Never again.")
    return [
        {"custom_id": f"review-{n}", "method": "POST", "url": "/v1/text-classification",
         "body": {"model": "sentiment", "inputs": f"{moods[n % len(moods)]} (review {n})"}}
        for n in range(LINES)
    ]  # fmt: skip


@contextmanager
def data_volume(name: str) -> Iterator[Path]:
    """The batch claim as a podman volume holding input.jsonl (LINES requests, then a line that is not JSON)."""
    podman("volume", "rm", "-f", name, check=False)
    podman("volume", "create", "--label", "bertserve-check=1", name)
    try:
        mountpoint = Path(podman("volume", "inspect", "--format", "{{.Mountpoint}}", name))
        text = "".join(json.dumps(line) + "\n" for line in input_lines()) + "not json\n"
        (mountpoint / "input.jsonl").write_text(text)
        subprocess.run(["chown", "-R", "10001:10001", str(mountpoint)], check=True)
        yield mountpoint
    finally:
        podman("volume", "rm", "-f", name, check=False)


def wait_exit(pod: str, budget_s: float) -> tuple[str, float]:
    """The pod's app container's exit code ("" if it still runs after ``budget_s``) and the seconds it took."""
    container, start = container_of(pod), time.monotonic()
    while time.monotonic() - start < budget_s:
        state = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container)
        status, _, code = state.partition(" ")
        if status in ("exited", "stopped"):
            return code, time.monotonic() - start
        time.sleep(0.5)
    return "", time.monotonic() - start


def custom_ids(path: Path) -> list[str]:
    return [json.loads(line)["custom_id"] for line in path.read_text().splitlines()] if path.exists() else []


def run_pods(checks: Checks, pods: list[dict[str, Any]], workdir: Path, env: dict[str, str], what: str) -> bool:
    with ExitStack() as stack:
        names = [stack.enter_context(played(pod, workdir, env)) for pod in pods]
        ok = True
        for name in names:
            code, took = wait_exit(name, POD_BUDGET_S)
            if not checks.record(code == "0", f"{what} pod {name} exited {code or 'not'} after {took:.0f} s"):
                sys.stdout.write(podman("logs", container_of(name), check=False)[-3000:] + "\n")
                ok = False
    return ok


def run_checks(checks: Checks, models_dir: Path, image: str, workdir: Path) -> None:
    job = yaml.safe_load((BATCH / "job.yaml").read_text())
    join = yaml.safe_load((BATCH / "join-job.yaml").read_text())
    claims = {v["persistentVolumeClaim"]["claimName"] for v in job["spec"]["template"]["spec"]["volumes"]
              if "persistentVolumeClaim" in v}  # fmt: skip
    data_claim = yaml.safe_load((BATCH / "data-pvc.yaml").read_text())["metadata"]["name"]
    (models_claim,) = claims - {data_claim}
    env = {**os.environ, "CONTAINERS_CONF": str(workdir / "containers.conf")}
    (workdir / "containers.conf").write_text(LIMITS_CONF)
    image_name = job["spec"]["template"]["spec"]["containers"][0]["image"]
    podman("tag", image, image_name)
    try:
        with models_volume(models_claim, models_dir), data_volume(data_claim) as data:
            started = time.monotonic()
            shards = [shard_pod(job, index, SHARDS) for index in range(SHARDS)]
            if not run_pods(checks, shards, workdir, env, "shard"):
                return
            wanted = [line["custom_id"] for line in input_lines()]
            for index in range(SHARDS):
                got = custom_ids(data / "parts" / f"part-{index}.jsonl")
                checks.record(
                    sorted(got) == sorted(wanted[index::SHARDS]),
                    f"shard {index}/{SHARDS} answered {len(got)} lines, its own (lines {index}, {index + SHARDS}, ...)",
                )
            if not run_pods(checks, [join_pod(join)], workdir, env, "join"):
                return
            joined, failed = custom_ids(data / "output.jsonl"), (data / "output.errors.jsonl").read_text()
            checks.record(
                joined == wanted and len(failed.splitlines()) == 1 and "invalid_json_line" in failed,
                f"joined output: {len(joined)} entries, {len(set(joined))} custom_ids of {len(wanted)} (each once, "
                f"in input order: {joined == wanted}); errors file: {len(failed.splitlines())} entry (the bad line); "
                f"shards and join {time.monotonic() - started:.0f} s",
            )
    finally:
        podman("rmi", image_name, check=False)


def main(argv: list[str] | None = None) -> int:
    return check_main(__doc__ or "", run_checks, "kube batch check", argv)


if __name__ == "__main__":
    raise SystemExit(main())
