"""``--processes N`` (service/processes.py): real supervisors with real serving processes on one port.

What could fail: a process that never takes connections, answers that differ between processes, a scrape that shows
one process's series, a dead process left dead, a model loaded into one process only, a stop that leaves processes
behind (SIGTERM, or the supervisor killed), start-up settings that need one process, a bad bundle restarted forever.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from service.metrics import ServiceMetrics, labelled_by_process
from service.processes import cpu_share
from service.settings import Settings
from tests.docker.servers import free_port
from tests.service.tiny_models import TinyModel

REPO = Path(__file__).resolve().parents[2]
ROUTE = "/v1/text-classification"


def call(port: int, path: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, dict | str]:
    """One request on a connection of its own (so the processes share them out)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="GET" if data is None else
                                     "POST", headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        text, status = error.read().decode(), error.code
    return status, (json.loads(text) if text.startswith("{") else text)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as sample (name, sorted labels) -> value."""
    status, text = call(port, "/metrics")
    assert status == 200
    samples = {}
    for family in text_string_to_metric_families(str(text)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def processes_in(samples: dict) -> set[str]:
    """The processes that are ready (warm, taking connections on the port)."""
    return {dict(labels)["process"] for (name, labels), value in samples.items()
            if name == "bertserve_ready" and value == 1}  # fmt: skip


def serving_children(supervisor: int) -> list[int]:
    """The supervisor's serving processes (spawned interpreters), by pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if ppid == supervisor and b"multiprocessing.spawn" in command:
            found.append(int(entry.name))
    return sorted(found)


def wait_for(condition, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if found := condition():
                return found
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s:.0f} s")


def supervisor(args: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1"}
    command = [sys.executable, "-m", "service", "--port", str(port), "--no-tune", "--model-workers", "1", *args]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture
def two_processes(text_classification_model: TinyModel) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A supervisor of two processes serving a tiny classifier over HTTP and gRPC (``process.grpc_port``)."""
    port, grpc_port = free_port(), free_port()
    process = supervisor(["--processes", "2", "--model", f"clf={text_classification_model.bundle}", "--grpc-port",
                          str(grpc_port)], port)  # fmt: skip
    process.grpc_port = grpc_port  # type: ignore[attr-defined]
    try:
        wait_for(lambda: processes_in(scrape(port)) == {"0", "1"}, 90, "both processes did not serve")
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
        if process.stdout is not None and not process.stdout.closed:  # a test may have read it
            process.communicate()


def test_both_processes_answer_alike_and_metrics_count_every_request(
    two_processes: tuple[subprocess.Popen[bytes], int], text_classification_model: TinyModel
) -> None:
    process, port = two_processes
    texts = [f"sentence number {number} is {'good' if number % 2 else 'bad'}" for number in range(10)]
    answers = [call(port, ROUTE, {"inputs": texts}) for _ in range(30)]
    assert all(status == 200 for status, _ in answers)
    assert all(answer == answers[0][1] for _, answer in answers)  # whichever process answered
    one = free_port()
    single = supervisor(["--model", f"clf={text_classification_model.bundle}"], one)
    try:
        wait_for(lambda: call(one, "/health/ready")[0] == 200, 60, "the one-process server did not serve")
        assert call(one, ROUTE, {"inputs": texts})[1] == answers[0][1]
        assert "\nbertserve_ready 1.0\n" in str(call(one, "/metrics")[1])  # one process: no process label
    finally:
        single.kill()
        single.communicate()

    samples = scrape(port)
    served = {dict(labels)["process"]: value for (name, labels), value in samples.items()
              if name == "bertserve_requests_total" and dict(labels)["route"] == ROUTE}  # fmt: skip
    assert sum(served.values()) == 30  # each process counts its own, the scrape shows both
    rows = {dict(labels)["process"]: value for (name, labels), value in samples.items()
            if name == "bertserve_real_tokens_total"}  # fmt: skip
    assert set(rows) <= {"0", "1"} and sum(rows.values()) > 0

    children = serving_children(process.pid)
    assert len(children) == 2
    if len(os.sched_getaffinity(0)) >= 2:  # on a CPU each process runs on its own share
        shares = [os.sched_getaffinity(pid) for pid in children]
        assert not shares[0] & shares[1] and shares[0] | shares[1] <= os.sched_getaffinity(0)


def test_keep_alive_connections_spread_over_the_processes(two_processes: tuple[subprocess.Popen[bytes], int]) -> None:
    _, port = two_processes
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(20)]
    body = json.dumps({"inputs": "kept alive"}).encode()
    for _ in range(3):
        for connection in connections:
            connection.request("POST", ROUTE, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("connection") != "close"
            response.read()
    for connection in connections:
        connection.close()
    served = {dict(labels)["process"]: value for (name, labels), value in scrape(port).items()
              if name == "bertserve_requests_total" and dict(labels)["route"] == ROUTE}  # fmt: skip
    assert sum(served.values()) == 60
    assert set(served) == {"0", "1"} and min(served.values()) >= 3  # by connection: 20 split by their addresses


def test_grpc_calls_are_shared_out_on_one_port(two_processes: tuple[subprocess.Popen[bytes], int]) -> None:
    process, port = two_processes
    texts = ["a fine film", "a dull one"]
    expected = call(port, ROUTE, {"inputs": texts})[1]
    labels = set()
    for _ in range(12):  # a channel each: a connection each, accepted by either process
        with grpcclient.InferenceServerClient(f"127.0.0.1:{process.grpc_port}") as client:  # type: ignore[attr-defined]
            tensor = grpcclient.InferInput("text", [len(texts)], "BYTES")
            tensor.set_data_from_numpy(np.array([text.encode() for text in texts], dtype=object))
            result = client.infer("clf", [tensor])
            labels.add(tuple(value.decode() for value in result.as_numpy("label").ravel()))
    assert labels == {tuple(answer[0]["label"] for answer in expected["results"])}  # type: ignore[index]
    served = {dict(labels)["process"] for (name, labels), value in scrape(port).items()
              if name == "bertserve_requests_total" and dict(labels)["route"].startswith("/inference.")}  # fmt: skip
    assert served and served <= {"0", "1"}


def served_by(port: int, model: str) -> set[str]:
    """The processes that serve ``model`` (its device series in /metrics); every one of them answered the scrape."""
    samples = scrape(port)
    assert samples[("bertserve_processes", (("state", "scraped"),))] == 2
    return {dict(labels)["process"] for name, labels in samples
            if name == "bertserve_model_device" and dict(labels)["model"] == model}  # fmt: skip


def test_a_model_loaded_or_unloaded_in_one_process_is_in_all(
    two_processes: tuple[subprocess.Popen[bytes], int],
) -> None:
    process, port = two_processes
    assert served_by(port, "clf") == {"0", "1"}
    assert call(port, "/v2/repository/models/clf/unload", {})[0] == 200
    assert served_by(port, "clf") == set()  # whichever process the call reached, neither serves it now
    for _ in range(6):  # connections of their own: each process answers for itself
        status, body = call(port, ROUTE, {"model": "clf", "inputs": "gone"})
        assert status == 404
    assert call(port, "/v2/repository/models/clf/unload", {})[0] == 404  # not served here: nothing to do anywhere

    with grpcclient.InferenceServerClient(f"127.0.0.1:{process.grpc_port}") as client:  # type: ignore[attr-defined]
        client.load_model("clf")  # over gRPC too
    assert served_by(port, "clf") == {"0", "1"}
    assert all(call(port, ROUTE, {"model": "clf", "inputs": "back"})[0] == 200 for _ in range(6))
    status, body = call(port, "/v2/repository/models/nothing/load", {})
    assert status == 404 and "nothing" in body["error"]  # type: ignore[index]
    assert served_by(port, "clf") == {"0", "1"}


def test_with_api_keys_the_port_asks_for_a_key_and_the_processes_still_reach_each_other(
    text_classification_model: TinyModel,
) -> None:
    port = free_port()
    process = supervisor(["--processes", "2", "--model", f"clf={text_classification_model.bundle}", "--api-key",
                          "sesame", "--protect-metrics"], port)  # fmt: skip
    keyed = {"Authorization": "Bearer sesame"}

    def keyed_call(path: str, key: bool = True) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"{}" if "models/" in path else None,
                                         headers=keyed if key else {})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    def series(name: str) -> set[str]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=keyed)
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        return {sample.labels["process"] for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name == name and sample.value == 1}  # fmt: skip

    def device_series() -> set[str]:
        return series("bertserve_model_device")

    def ready_series() -> set[str]:
        return series("bertserve_ready")

    try:
        wait_for(lambda: ready_series() == {"0", "1"}, 90, "both processes did not serve")
        assert (
            keyed_call("/metrics", key=False) == 401
            and keyed_call("/v2/repository/models/clf/unload", key=False) == 401
        )
        assert keyed_call("/v2/repository/models/clf/unload") == 200
        assert device_series() == set()
        assert keyed_call("/v2/repository/models/clf/load") == 200
        assert device_series() == {"0", "1"}
    finally:
        process.kill()
        process.communicate()


def test_a_killed_process_is_replaced_and_sigterm_stops_them_all(
    two_processes: tuple[subprocess.Popen[bytes], int],
) -> None:
    process, port = two_processes
    before = serving_children(process.pid)
    os.kill(before[0], signal.SIGKILL)
    after = wait_for(lambda: (found := serving_children(process.pid)) and len(found) == 2 and found != before
                     and found, 30, "no replacement started")  # fmt: skip
    assert before[1] in after
    wait_for(lambda: processes_in(scrape(port)) == {"0", "1"}, 90, "the replacement did not serve")
    assert all(call(port, ROUTE, {"inputs": "after the kill"})[0] == 200 for _ in range(10))

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in after)
    log = process.communicate()[0].decode()  # each line names the process that wrote it
    assert log.count("service.core[0]: serving 1 model(s)") == 2 and "service.core[1]: serving 1 model(s)" in log
    assert "ended with status -9; replacing it" in log and "bertserve.access[" in log
    with pytest.raises(OSError):
        call(port, "/health/live", timeout=2)


def test_killing_the_supervisor_ends_its_processes(two_processes: tuple[subprocess.Popen[bytes], int]) -> None:
    process, _ = two_processes
    children = serving_children(process.pid)
    process.kill()
    process.wait(timeout=10)
    wait_for(lambda: all(not Path(f"/proc/{pid}").exists() for pid in children), 30, "the processes outlived it")


def test_a_bad_bundle_stops_start_up_once(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bundle.json").write_text("{not json")
    started = time.monotonic()
    process = supervisor(["--processes", "2", "--model", f"bad={broken}"], free_port())
    output = process.communicate(timeout=60)[0].decode()
    assert process.returncode == 1
    assert "cannot serve model bad" in output and output.count("cannot serve model bad") == 1  # not restarted
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("setting", [["--allow-client-shm"], ["--port", "0"]])
def test_settings_that_need_one_process_are_refused(tmp_path: Path, setting: list[str]) -> None:
    process = supervisor(["--processes", "2", "--model", f"x={tmp_path}", *setting], free_port())
    output = process.communicate(timeout=30)[0].decode()
    assert process.returncode == 2 and "needs processes=1" in output
    with pytest.raises(ValueError, match="needs processes=1"):
        Settings(processes=2, allow_client_shm=True)
    assert Settings(processes=1, allow_client_shm=True).processes == 1
    assert Settings(processes=2, data_dir=tmp_path).data_dir == tmp_path  # batch jobs run in one process at a time


def test_each_process_gets_its_share_of_the_cpus() -> None:
    assert cpu_share(0, 2, [0, 1]) == {0} and cpu_share(1, 2, [0, 1]) == {1}
    assert cpu_share(1, 2, [0, 1, 2, 3]) == {1, 3}
    assert cpu_share(2, 3, [4, 5]) == {4}  # more processes than CPUs: they share
    assert set().union(*(cpu_share(index, 3, list(range(8))) for index in range(3))) == set(range(8))


def test_expositions_merge_with_a_process_label() -> None:
    first, second = ServiceMetrics(), ServiceMetrics()
    first.requests.labels("/a", "200").inc(3)
    second.requests.labels("/a", "200").inc(4)
    second.requests.labels("/b", "404").inc()
    first.request_seconds.labels("/a").observe(0.002)
    from prometheus_client import generate_latest

    text = labelled_by_process({1: generate_latest(second.registry), 0: generate_latest(first.registry)}, 3).decode()
    assert text.count("# TYPE bertserve_requests_total counter") + text.count("# TYPE bertserve_requests counter") == 1
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(text) for sample in family.samples}  # fmt: skip
    assert samples[("bertserve_requests_total", (("process", "0"), ("route", "/a"), ("status", "200")))] == 3
    assert samples[("bertserve_requests_total", (("process", "1"), ("route", "/a"), ("status", "200")))] == 4
    assert samples[("bertserve_requests_total", (("process", "1"), ("route", "/b"), ("status", "404")))] == 1
    bucket = ("bertserve_request_duration_seconds_bucket", (("le", "0.0025"), ("process", "0"), ("route", "/a")))
    assert samples[bucket] == 1
    assert samples[("bertserve_processes", (("state", "configured"),))] == 3  # one did not answer
    assert samples[("bertserve_processes", (("state", "scraped"),))] == 2
