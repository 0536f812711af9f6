"""Run docker/k8s's Deployment with `podman kube play` and check what a cluster would do with it.

    python docker/kube_check.py MODELS_DIR [--image localhost/bertserve:check]   (make deploy-check runs it)

The image must exist (docker/container_check.sh with KEEP_IMAGE=1 builds it). One line per check, then a summary;
exit 1 on any FAIL. Everything it makes (pods, the models volume, the image's `bertserve:latest` tag) is removed
at the end, whether the checks pass or not.

The Deployment is played as written (image, env, probes, resources, security context, the models PVC as a podman
volume of the same name, filled with MODELS_DIR) with two changes, since `kube play` has no Service and no
controller: the `http` port gets a hostPort on 127.0.0.1, so each played Deployment has one replica (kube play
starts `replicas` pods, and a host port binds once), and the rolling replacement's new pod is the same Deployment
under another name. The Service is stood in for by a TCP proxy that sends each connection to a
pod that is ready, as kube-proxy does with the Service's endpoints; the replacement follows the Deployment's
strategy (maxSurge 1, maxUnavailable 0): start the new pod, wait for ready, take the old one out of the endpoints,
pause as its preStop hook does, then stop it with the grace period. Not run here, and checked offline instead
(tests/docker/test_manifests.py, test_kserve_manifests.py): the HPA, the Service's own load balancing, two replicas
at once, the startup, readiness and liveness probes' scheduling (podman runs probes with systemd timers, absent
here; this script polls the readiness path within the startup probe's budget instead) and the KServe CRDs.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENT = ROOT / "docker" / "k8s" / "deployment.yaml"
PODMAN = ["podman", "--runtime", "runc"]
LIMITS_CONF = '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'  # runc needs them here
IN_FLIGHT = 20  # at least this many requests in flight at SIGTERM, all answered
SENT_AT_SIGTERM = 25
CALIBRATION_REQUESTS = 8  # each runs a batch of 256+ tokens, which moves the speed estimate a fifth of the way
OLD_PORT, NEW_PORT, SERVICE_PORT = 18080, 18081, 18090


class Checks:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = False

    def record(self, passed: bool, what: str) -> bool:
        line = f"{'PASS' if passed else 'FAIL'} {what}"
        self.lines.append(line)
        self.failed |= not passed
        sys.stdout.write(f"[kube_check] {line}\n")
        sys.stdout.flush()
        return passed

    def summary(self) -> str:
        body = "\n".join(f"  {line}" for line in self.lines)
        result = "PASS" if self.lines and not self.failed else "FAIL"
        return f"\n{'=' * 20} kube check summary {'=' * 20}\n{body}\n  RESULT: {result}\n{'=' * 60}\n"


def podman(*args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([*PODMAN, *args], capture_output=True, text=True, env=env, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


GRPC_PORT_OFFSET = 1000  # a played Deployment's grpc port is published on its http host port + this


def render(deployment: dict[str, Any], name: str, host_port: int) -> dict[str, Any]:
    """The Deployment under ``name``, one replica, with its http port published on 127.0.0.1:``host_port`` and its
    grpc port (kube play publishes every container port) on 127.0.0.1:``host_port`` + GRPC_PORT_OFFSET, so an old
    and a new Deployment played side by side take different host ports."""
    rendered = copy.deepcopy(deployment)
    rendered["metadata"]["name"] = name
    rendered["spec"]["replicas"] = 1
    container = rendered["spec"]["template"]["spec"]["containers"][0]
    for port in container["ports"]:
        published = {"http": host_port, "grpc": host_port + GRPC_PORT_OFFSET}.get(port["name"])
        if published is not None:
            port["hostPort"] = published
            port["hostIP"] = "127.0.0.1"
    return rendered


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")[:300]


def probe_budget_s(container: dict[str, Any], name: str) -> float:
    probe = container[name]
    return float(probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3))


def wait_ready(port: int, budget_s: float) -> float | None:
    """Seconds until /health/ready answered 200 on ``port``, or None when the budget ran out."""
    start = time.monotonic()
    while time.monotonic() - start < budget_s:
        try:
            if http(f"http://127.0.0.1:{port}/health/ready", timeout=2)[0] == 200:
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(1)
    return None


class ServiceProxy:
    """The Service's stand-in: each TCP connection goes to the next ready endpoint (round robin), as kube-proxy."""

    def __init__(self, port: int) -> None:
        self.endpoints: list[int] = []
        self.turn = 0
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            endpoints = list(self.endpoints)
            self.turn += 1
            target = endpoints[self.turn % len(endpoints)]
            threading.Thread(target=self._pipe_both, args=(client, target), daemon=True).start()

    def _pipe_both(self, client: socket.socket, port: int) -> None:
        with client, socket.create_connection(("127.0.0.1", port)) as upstream:
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
            self._pipe(client, upstream)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            return

    def close(self) -> None:
        self.server.close()


class SteadyClient:
    """One request after another through the Service until stopped; counts the answers that were not 200."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        self.url, self.body = url, body
        self.sent = 0
        self.failures: list[str] = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            self.sent += 1
            try:
                status, _ = http(self.url, self.body, timeout=30)
                if status != 200:
                    self.failures.append(f"status {status}")
            except OSError as error:
                self.failures.append(repr(error))

    def stop(self) -> None:
        self.running = False
        self.thread.join(timeout=60)


@contextmanager
def models_volume(name: str, models_dir: Path) -> Iterator[None]:
    """The PVC ``name`` as a podman volume holding a world-readable copy of ``models_dir``."""
    podman("volume", "rm", "-f", name, check=False)
    podman("volume", "create", "--label", "bertserve-check=1", name)
    try:
        mountpoint = Path(podman("volume", "inspect", "--format", "{{.Mountpoint}}", name))
        shutil.copytree(models_dir, mountpoint, dirs_exist_ok=True)
        subprocess.run(["chmod", "-R", "a+rX", str(mountpoint)], check=True)
        yield
    finally:
        podman("volume", "rm", "-f", name, check=False)


@contextmanager
def played(deployment: dict[str, Any], workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """``kube play`` of one rendered Deployment; yields its pod's name; ``kube down`` at the end."""
    path = workdir / f"{deployment['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(deployment))
    try:
        podman("kube", "play", str(path), env=env)
        pods = json.loads(podman("pod", "ps", "--format", "json", "--filter", f"name={deployment['metadata']['name']}"))
        yield str(pods[0]["Name"])
    finally:
        podman("kube", "down", str(path), check=False, env=env)


def container_of(pod: str) -> str:
    names = json.loads(podman("ps", "-a", "--format", "json", "--filter", f"pod={pod}"))
    return next(str(c["Names"][0]) for c in names if not c.get("IsInfra") and "infra" not in c["Names"][0])


def stop_pod(pod: str, grace_s: int) -> tuple[float, str]:
    """What the kubelet does: SIGTERM (the image's STOPSIGNAL) to the app container, at most ``grace_s`` before
    SIGKILL, and only then the pod's sandbox (``podman pod stop`` would stop the infra container, and with it the
    network the answers leave through, at the same time). Seconds taken and the container's exit code."""
    container = container_of(pod)
    start = time.monotonic()
    podman("stop", "--time", str(grace_s), container)
    took = time.monotonic() - start
    exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", container)
    podman("pod", "stop", pod)
    return took, exit_code


def question(filler_sentences: int) -> dict[str, Any]:
    """A QA request whose context holds the answer between two runs of filler (about 15 tokens a sentence)."""
    filler = "The committee met again on Tuesday to discuss the budget for the coming season. " * filler_sentences
    context = f"{filler}Marie Curie was born in Warsaw in 1867. {filler}"
    return {"model": "qa", "inputs": {"question": "Where was Marie Curie born?", "context": context}}


def check_answers(checks: Checks, port: int) -> None:
    said = subprocess.run(
        [sys.executable, "-m", "demo.examples", "--url", f"http://127.0.0.1:{port}"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    for line in said.stdout.splitlines():
        if line.startswith(("PASS", "FAIL")):
            checks.record(line.startswith("PASS"), f"README answer through the pod's port: {line[5:][:160]}")


def server_in_flight(port: int) -> float:
    """The pod's own count of HTTP requests being handled (its /metrics gauge bertserve_requests_in_flight)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    return next(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith("bertserve_requests_in_flight ")
    )


def check_sigterm_in_flight(checks: Checks, pod: str, port: int, grace_s: int) -> None:
    """A long request (about 3,700 tokens, half a second) takes the model first and the short ones queue behind it;
    SIGTERM comes once the pod itself counts them all in flight (its /metrics), so the count does not rest on timing.
    Each request stays far below what admission refuses on a busy machine's estimate (a few seconds of 30).

    The pod warmed beside the old one serving a steady client, so its QA model's measured seconds per token can be
    several times too slow (a 2-core machine without VNNI refused 21 of the 25 at "11.8 s of work queued"); as live
    traffic would, a few long requests one at a time first let its batches correct the estimate."""
    url = f"http://127.0.0.1:{port}/v1/question-answering"
    answered = [http(url, question(80), 60)[0] for _ in range(CALIBRATION_REQUESTS)]
    sys.stdout.write(f"[kube_check] before SIGTERM, long QA requests one at a time: {answered}\n")
    with ThreadPoolExecutor(SENT_AT_SIGTERM) as pool:
        answers = [pool.submit(http, url, question(80), 60)]
        time.sleep(0.05)
        answers += [pool.submit(http, url, question(3), 60) for _ in range(SENT_AT_SIGTERM - 1)]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and server_in_flight(port) < SENT_AT_SIGTERM:
            time.sleep(0.01)
        in_flight = sum(not answer.done() for answer in answers)
        took, exit_code = stop_pod(pod, grace_s)
        outcomes = [repr(a.exception()) if a.exception() is not None else a.result() for a in answers]
    ok = sum(outcome[0] == 200 for outcome in outcomes if isinstance(outcome, tuple))
    others = sorted({str(outcome)[:200] for outcome in outcomes if not isinstance(outcome, tuple) or outcome[0] != 200})
    checks.record(
        ok == SENT_AT_SIGTERM and in_flight >= IN_FLIGHT and exit_code == "0",
        f"SIGTERM with {in_flight} requests in flight (of {SENT_AT_SIGTERM} sent): {ok} answered "
        f"200{f' (others: {others[:2]})' if others else ''}, exit code {exit_code} after {took:.1f} s "
        f"(grace {grace_s} s)",
    )


def run_checks(checks: Checks, models_dir: Path, image: str, workdir: Path) -> None:
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    grace_s = int(spec["terminationGracePeriodSeconds"])
    pre_stop_s = float(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    startup_budget = probe_budget_s(container, "startupProbe")
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v)
    env = {**os.environ, "CONTAINERS_CONF": str(workdir / "containers.conf")}
    (workdir / "containers.conf").write_text(LIMITS_CONF)
    podman("tag", image, container["image"])
    try:
        with models_volume(claim, models_dir), played(render(deployment, "bertserve", OLD_PORT), workdir, env) as old:
            ready = wait_ready(OLD_PORT, startup_budget)
            if not checks.record(
                ready is not None, f"pod {old} ready: {ready or 0:.0f} s (startup probe budget {startup_budget:.0f} s)"
            ):
                sys.stdout.write(podman("logs", container_of(old), check=False)[-3000:] + "\n")
                return
            check_pod_settings(checks, container_of(old), container)
            ready_mb = rss_mb(container_of(old))
            check_answers(checks, OLD_PORT)
            proxy = ServiceProxy(SERVICE_PORT)
            proxy.endpoints = [OLD_PORT]
            body = {"model": "sentiment", "inputs": "I absolutely loved this movie, the acting was wonderful!"}
            client = SteadyClient(f"http://127.0.0.1:{SERVICE_PORT}/v1/text-classification", body)
            try:
                with played(render(deployment, "bertserve-next", NEW_PORT), workdir, env) as new:
                    new_ready = wait_ready(NEW_PORT, startup_budget)
                    checks.record(new_ready is not None, f"rolling: new pod {new} ready in {new_ready or 0:.0f} s")
                    check_memory(checks, ready_mb, rss_mb(container_of(old)), container)
                    proxy.endpoints = [OLD_PORT, NEW_PORT]
                    time.sleep(2)
                    proxy.endpoints = [NEW_PORT]
                    time.sleep(pre_stop_s)
                    took, exit_code = stop_pod(old, grace_s)
                    time.sleep(3)
                    client.stop()
                    checks.record(
                        not client.failures and exit_code == "0",
                        f"rolling replacement: {client.sent} requests of a steady client through the Service, "
                        f"{len(client.failures)} lost {client.failures[:3]}; "
                        f"old pod exit {exit_code} after {took:.1f} s",
                    )
                    check_sigterm_in_flight(checks, new, NEW_PORT, grace_s)
            finally:
                client.stop()
                proxy.close()
    finally:
        podman("rmi", container["image"], check=False)


def rss_mb(container: str) -> float:
    """Resident memory of the container's main process (the service), MiB."""
    pid = podman("inspect", "--format", "{{.State.Pid}}", container)
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]] if quantity[-2:] in units else float(quantity) / 2**20


def check_memory(checks: Checks, ready_mb: float, loaded_mb: float, container: dict[str, Any]) -> None:
    """The pod's memory at ready and after the README's answers and a steady client's load, against its request."""
    request = container["resources"]["requests"]["memory"]
    limit = container["resources"]["limits"]["memory"]
    checks.record(
        max(ready_mb, loaded_mb) < mebibytes(request),
        f"memory: the service's RSS {ready_mb:.0f} MiB at ready, {loaded_mb:.0f} MiB under load "
        f"(the manifest requests {request}, limit {limit})",
    )


def check_pod_settings(checks: Checks, name: str, container: dict[str, Any]) -> None:
    """What the pod really runs with: the manifest's user, read-only root, dropped capabilities and env."""
    inspected = json.loads(podman("inspect", name))[0]
    config, host = inspected["Config"], inspected["HostConfig"]
    env = dict(item.split("=", 1) for item in config["Env"])
    wanted = {item["name"]: item["value"] for item in container["env"]}
    security = container["securityContext"]
    checks.record(
        config["User"].split(":")[0] == "10001"
        and host["ReadonlyRootfs"] == security["readOnlyRootFilesystem"]
        and not inspected.get("EffectiveCaps")
        and all(env.get(key) == value for key, value in wanted.items()),
        f"pod runs as the manifest says: user {config['User']}, read-only root {host['ReadonlyRootfs']}, "
        f"capabilities {inspected.get('EffectiveCaps') or 'none'}, {len(wanted)} BERTSERVE_* env values",
    )


def check_main(
    doc: str, run: Callable[[Checks, Path, str, Path], None], name: str, argv: list[str] | None = None
) -> int:
    """A check's command line (MODELS [--image]): ``run`` records its checks, a failure that stops it is one more;
    the summary is printed and the exit code says whether every check passed."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("models", type=Path, help="folder of bundles (make demo)")
    parser.add_argument("--image", default="localhost/bertserve:check", help="the serving image to run")
    args = parser.parse_args(argv)
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix=f"bertserve-{name.replace(' ', '-')}-") as workdir:
        try:
            run(checks, args.models.resolve(), args.image, Path(workdir))
        except (RuntimeError, OSError, KeyError, ValueError, StopIteration) as error:
            checks.record(False, f"{name} stopped: {error}")
    sys.stdout.write(checks.summary().replace("kube check summary", f"{name} summary"))
    return 1 if checks.failed else 0


def main(argv: list[str] | None = None) -> int:
    return check_main(__doc__ or "", run_checks, "kube check", argv)


if __name__ == "__main__":
    raise SystemExit(main())
