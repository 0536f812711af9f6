"""The device setting on a machine without a GPU: its errors, the provider choice, and where it shows."""

from __future__ import annotations

import logging

import onnxruntime as ort
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service import device as device_module
from service.__main__ import main
from service.device import CPU, Device, DeviceUnavailable, check_session_device, parse_device, resolve_device
from service.sessions import OrtRunner
from service.settings import Settings
from service.tuning import GPU_SIZE_CANDIDATES, SIZE_CANDIDATES, candidate_sets
from service.tuning_probes import GpuMemory
from tests.service.apptools import ready_app_client
from tests.service.tiny_models import TinyModel

NO_CUDA = "CUDAExecutionProvider" not in ort.get_available_providers()
needs_cpu_only_ort = pytest.mark.skipif(not NO_CUDA, reason="this onnxruntime has the CUDA provider")


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "cuda0", "CPU:0", ""])
def test_the_setting_takes_only_cpu_cuda_cuda_n_and_auto(spec: str) -> None:
    with pytest.raises(ValidationError, match="device"):
        Settings(device=spec)
    with pytest.raises(ValueError):
        parse_device(spec)


def test_parse_device_gives_the_kind_and_the_gpu_index() -> None:
    assert parse_device("cpu") == ("cpu", 0)
    assert parse_device("cuda") == ("cuda", 0)
    assert parse_device("cuda:3") == ("cuda", 3)
    assert parse_device("auto") == ("auto", 0)
    assert Settings(device="cuda:1").device == "cuda:1"


def test_a_cuda_device_puts_the_cuda_provider_first_on_its_gpu() -> None:
    (cuda, options), fallback = Device("cuda", 2).providers()
    assert (cuda, options["device_id"], fallback) == ("CUDAExecutionProvider", "2", "CPUExecutionProvider")
    assert CPU.providers() == ["CPUExecutionProvider"] and Device("cuda", 2).name == "cuda:2"


@needs_cpu_only_ort
@pytest.mark.parametrize("spec", ["cuda", "cuda:1"])
def test_cuda_without_onnxruntime_gpu_is_one_line_naming_the_missing_provider(spec: str) -> None:
    with pytest.raises(DeviceUnavailable) as raised:
        resolve_device(spec)
    message = str(raised.value)
    assert message.startswith(f"--device {spec}: ") and "\n" not in message
    assert "no CUDA execution provider" in message and "onnxruntime-gpu" in message


@needs_cpu_only_ort
def test_auto_falls_back_to_the_cpu_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="service.device"):
        assert resolve_device("auto") == CPU
    assert "serving on the CPU" in caplog.text and "no CUDA execution provider" in caplog.text


def test_a_provider_without_its_cuda_runtime_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime-gpu installed without the nvidia wheels: the CUDA runtime library is named, not a CPU fallback."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(device_module, "CUDART_NAMES", ("libcudart-missing-for-this-test.so.13",))
    device_module._cudart.cache_clear()  # found once per process: look again under the names above
    monkeypatch.setattr(device_module, "_cudart", device_module._cudart.__wrapped__)
    with pytest.raises(DeviceUnavailable, match=r"CUDA runtime library .* is not installed"):
        resolve_device("cuda")
    assert resolve_device("auto") == CPU


def test_a_session_that_fell_back_to_the_cpu_is_refused(text_classification_model: TinyModel) -> None:
    """What onnxruntime does when the CUDA provider cannot start (it logs, and runs on the CPU) is caught."""
    session = ort.InferenceSession(str(text_classification_model.bundle / "model.onnx"), providers=CPU.providers())
    check_session_device(session, CPU)
    with pytest.raises(DeviceUnavailable, match=r"did not start on cuda:0 .*fell back to CPUExecutionProvider"):
        check_session_device(session, Device("cuda", 0))


@needs_cpu_only_ort
def test_a_runner_for_cuda_on_a_cpu_build_refuses_to_run_on_the_cpu(text_classification_model: TinyModel) -> None:
    with pytest.raises(DeviceUnavailable, match="did not start on cuda:0"):
        OrtRunner(text_classification_model.bundle / "model.onnx", ("logits",), 1, device=Device("cuda", 0))


@needs_cpu_only_ort
def test_the_cli_stops_with_one_line_before_loading_any_model(
    text_classification_model: TinyModel, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--model", f"m={text_classification_model.bundle}", "--device", "cuda", "--port", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [next(line for line in err if line.startswith("bertserve: error: --device cuda: "))]
    assert "Traceback" not in "\n".join(err)


def test_gpu_tuning_fixes_the_cpu_threads_and_tries_larger_batches() -> None:
    settings = Settings(model_workers=2)
    cpu, gpu = candidate_sets(settings, 512), candidate_sets(settings, 512, device=Device("cuda", 0))
    assert gpu["intra_op_threads"] == [1] and max(gpu["max_batch_size"]) == max(GPU_SIZE_CANDIDATES)
    assert max(cpu["max_batch_size"]) == max(SIZE_CANDIDATES) < max(GPU_SIZE_CANDIDATES)
    assert max(gpu["max_batch_tokens"]) > max(cpu["max_batch_tokens"])
    given = candidate_sets(Settings(intra_op_threads=3), 512, device=Device("cuda", 0))
    assert given["intra_op_threads"] == [3]


def test_gpu_memory_stops_a_sweep_before_a_batch_that_would_not_fit() -> None:
    """Free memory falls as the arena grows: 1 GiB free, a 0.5 GiB budget; 1 MiB fixed + 1 KiB per token."""
    free = [1 << 30]
    memory = GpuMemory(lambda: free[0], share=0.5)
    assert memory.budget == 1 << 29 and memory.fits(10**9)  # nothing measured yet: nothing refused
    for tokens in (1024, 4096):
        free[0] = (1 << 30) - (1 << 20) - 1024 * tokens
        memory.observe(tokens)
    assert memory.fits(400_000) and not memory.fits(600_000)  # (512 MiB - 1 MiB) / 1 KiB = 523,264 tokens
    assert GpuMemory(lambda: None).fits(10**12)  # unknown free memory: the sweep's other limits decide


def test_models_and_metrics_say_where_each_model_runs(text_classification_model: TinyModel) -> None:
    settings = Settings(models=[f"sentiment={text_classification_model.bundle}"], intra_op_threads=1)
    with ready_app_client(settings) as client:
        assert isinstance(client, TestClient)
        (card,) = client.get("/v1/models").json()["models"]
        assert card["device"] == "cpu"
        metrics = client.get("/metrics").text
    assert 'bertserve_model_device{device="cpu",model="sentiment",task="text-classification"} 1.0' in metrics
