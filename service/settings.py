"""Service settings: one pydantic-settings object, built once in ``main()`` / ``create_app()``.

Nothing here reads the environment at import time; ``Settings()`` reads ``BERTSERVE_*`` variables
when it is constructed. ``BERTSERVE_MODELS`` takes ``NAME=PATH`` pairs separated by commas.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
# What start-up tuning picks per model (service/tuning.py); one of them given explicitly turns auto-tuning off.
TUNED_SETTINGS = frozenset({"max_batch_tokens", "max_batch_size", "intra_op_threads", "parallel_runs"})


CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _quota_cpus(quota: str, period: str) -> float | None:
    """CPUs one cgroup's quota allows (None: unlimited); v2 writes ``max``, v1 ``-1``."""
    if quota in ("max", "-1"):
        return None
    return int(quota) / int(period)


def _cgroup_quota_cpus(root: Path, proc_cgroup: Path) -> float | None:
    """The tightest CPU quota on this process's cgroup and its parents, as CPUs (None: no quota).

    cgroup v2 keeps ``cpu.max`` ("<quota> <period>") in each folder of the unified tree; v1 keeps
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` under the cpu controller's tree. In a container ``root``
    is the container's own cgroup: its path is ``/`` there, or the host's path (v1 without a cgroup namespace), a
    folder that does not exist under ``root``, whose walk up reaches ``root`` itself."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        files: tuple[str, ...]
        if controllers == "":
            base, files = root, ("cpu.max",)
        elif "cpu" in controllers.split(","):
            v1 = [root / name for name in (controllers, "cpu,cpuacct", "cpu") if (root / name).is_dir()]
            if not v1:
                continue
            base, files = v1[0], ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        folder = base / path.lstrip("/")
        for level in (folder, *folder.parents):
            try:
                values = " ".join((level / name).read_text().strip() for name in files).split()
                cpus = _quota_cpus(values[0], values[1])
            except (OSError, IndexError, ValueError):
                cpus = None
            if cpus is not None:
                found.append(cpus)
            if level == base:
                break
    return min(found) if found else None


def available_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """CPUs this process may use: those it may be scheduled on, capped by its cgroup's CPU quota rounded up (a
    container's CPU limit, which ``os.cpu_count()`` does not see: it counts the node's)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_quota_cpus(root, proc_cgroup)
    return count if quota is None else max(1, min(count, math.ceil(quota)))


def default_model_workers() -> int:
    return min(2, available_cpus())


def default_intra_op_threads() -> int:
    return available_cpus()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BERTSERVE_", extra="forbid")

    host: str = Field(default="127.0.0.1", description="Address to listen on (0.0.0.0: every interface).")
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port to listen on.")
    grpc_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Also serve the Open Inference Protocol over gRPC on this port (same host; off when unset). "
        "tritonclient.grpc and KServe's grpc_predict_v2 stubs speak it.",
    )
    processes: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Serving processes on the one port, each with its own copy of every model (and of its CUDA "
        "context on a GPU); where one process's Python is the ceiling (a fast device). /metrics answers for all of "
        "them, each series labelled with its process, and a model loaded or unloaded at run time is loaded or "
        "unloaded in each; batch jobs (data_dir) run in one of them at a time, on its spare capacity; not with "
        "allow_client_shm (one process's state).",
    )
    models_dir: Path | None = Field(
        default=None, description="Serve every bundle folder under this folder, by folder name."
    )
    models: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Extra models as NAME=PATH (env: comma-separated)."
    )
    device: str = Field(
        default="cpu",
        pattern=r"^(cpu|auto|cuda(:\d+)?)$",
        description="Where the models run: cpu, cuda (GPU 0), cuda:N, or auto (GPU 0 when onnxruntime-gpu, the CUDA "
        "libraries and a GPU are all there, else the CPU). cuda stops start-up with one line naming what is missing; "
        "only auto falls back to the CPU.",
    )
    intra_op_threads: int = Field(
        default_factory=default_intra_op_threads,
        ge=1,
        description="ONNX Runtime threads of the model's one session: a lone batch runs on all of them. Default: "
        "the CPUs this process may use: those it may run on, capped by its container's CPU limit (the cgroup's quota, "
        "rounded up).",
    )
    # Two workers share the one session (Run is thread-safe: the weights are held once): while one runs a batch the
    # other cuts and answers the last one's outputs and takes the next (benchmarks/results/session_layout.md).
    model_workers: int = Field(
        default_factory=default_model_workers,
        ge=1,
        description="Worker threads per model, all fed from the model's one queue and running batches on its one "
        "ONNX Runtime session. Default: min(2, the CPUs this process may use).",
    )
    parallel_runs: int | None = Field(
        default=None,
        ge=1,
        description="How many of a model's workers may run a batch at once on its session (at most model_workers). "
        "Default: tuned at start-up (one, or every worker where concurrent runs measured faster); without tuning, "
        "every worker when intra_op_threads is 1, else one.",
    )
    split_threads: bool | None = Field(
        default=None,
        description="Small models on a CPU: a batch that runs alone gets every intra-op thread, batches that come "
        "faster than one at a time each run on one thread beside the other workers' (a second session: the weights "
        "are held twice). Default: start-up tuning turns it on where a 128-token row takes under 50 ms; off "
        "without tuning.",
    )
    intra_op_spinning: bool | None = Field(
        default=None,
        description="Let a run's ONNX Runtime threads busy-wait between its operators, and stop when the run ends "
        "(faster calls; the spinning takes CPU from the event loop when runs are short and come side by side). "
        "Default: on for the session a batch runs on alone: a small model's lone batches (split threads), and a "
        "larger model whose batches run one at a time on every thread (start-up tuning decides); off without tuning "
        "unless the threads are split.",
    )
    shape_buckets: bool | None = Field(
        default=None,
        description="Pad each batch up to one of a few shapes (rows and tokens each rounded up to 1, 2, 3, 4, 6, 8, "
        "12, 16, 24, ...; tokens at least 16) and, on a GPU, run every such shape once at start-up (for up to 30 s), "
        "so that served traffic never brings a shape the session has not run. Default: on a GPU, where a new shape "
        "is set up afresh; off on a CPU, where padding is only extra work.",
    )
    max_batch_tokens: int = Field(default=8192, ge=1, description="Padded tokens per batch (batch size x longest row).")
    max_batch_size: int = Field(default=32, ge=1, description="Rows per batch at most.")
    tune: bool | None = Field(
        default=None,
        description="Pick max_batch_tokens, max_batch_size, intra_op_threads and parallel_runs per model at "
        "start-up from a few seconds of synthetic batches (logged, and shown in /v1/models). Default: on when none "
        "of the four is given; with --tune the given ones stay fixed and the others are tuned; --no-tune: never.",
    )
    tune_seconds: float = Field(default=1.5, gt=0, le=60, description="Time budget of start-up tuning per model.")
    batch_overhead_tokens: float = Field(
        default=32.0,
        ge=0,
        description="Cost of one model call in token equivalents: a batch stops growing when the padding an "
        "extra row brings costs more than the call it saves (lower: less padding, more calls).",
    )
    # 0 by default: the worker takes whatever queued while it was busy (continuous batching). Measured on 2 cores
    # (benchmarks/README.md): 2 ms cost a lone request 4 ms of p50 and a third of its throughput, and
    # bought nothing at concurrency 32/128.
    max_wait_ms: float = Field(default=0.0, ge=0, description="How long a lone row waits for others to fill a batch.")
    max_queue: int = Field(default=1024, ge=1, description="Rows waiting per model before requests get 429.")
    timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Per-request deadline. A request is admitted only if the model's queued work and its own should "
        "end within 40 % of it at the model's measured speed (else 429 with Retry-After, or 413 if it alone "
        "cannot); 504 if it still has not ended at the deadline.",
    )
    max_body_bytes: int = Field(default=1 << 20, ge=1, description="Largest request body (413 above it).")
    keep_alive_s: int = Field(
        default=75,
        ge=1,
        description="An idle keep-alive connection is closed after this many seconds. Longer than the idle expiry of "
        "client pools and load balancers (httpx 5 s, aiohttp 15 s, AWS ALB 60 s): a server that closes first races "
        "a client reusing the connection, which then sees it reset without an answer (uvicorn's 5 s did, under load).",
    )
    body_timeout_s: float = Field(
        default=15.0,
        gt=0,
        description="A request's body must arrive in full within this many seconds of its headers, else 408 and the "
        "connection is closed; a body holds no in-flight permit while it arrives. 15 s carries the largest body "
        "(max_body_bytes, 1 MiB) over a 1 Mbit/s uplink (8.4 s) with room to spare, and lets a client that stalls "
        "hold a reading slot for at most that long.",
    )
    max_body_readers: int = Field(
        default=1024,
        ge=1,
        description="Request bodies read in parts at once (a body that comes with its headers needs no slot); "
        "429 (connection closed) for another.",
    )
    max_body_buffer_bytes: int = Field(
        default=64 << 20,
        ge=1,
        description="Bytes held at once for the bodies being read in parts, together (429, connection closed, "
        "for a body whose part would go past it): 64 bodies of max_body_bytes.",
    )
    max_header_bytes: int = Field(
        default=64 << 10,
        ge=1024,
        description="Request line and headers of one request at most (431 and the connection closed above it; "
        "uvicorn's httptools parser takes any size). 64 KiB holds any real client's cookies and tokens: nginx takes "
        "4 x 8 KiB by default.",
    )
    max_inputs_per_request: int = Field(default=64, ge=1, description="Most inputs in one request (413 above it).")
    max_embedding_inputs: int = Field(
        default=2048,
        ge=1,
        description="Most texts in one embeddings request (/v1/embeddings, /embed; 413 above it), as OpenAI allows; "
        "each text is one model row, so an embedding model's queue holds at least this many rows.",
    )
    max_request_tokens: int = Field(
        default=16384,
        ge=1,
        description="Most tokens of text in one request, counted before truncation or windowing (413 above it; "
        "embeddings requests: max_embedding_tokens).",
    )
    max_embedding_tokens: int = Field(
        default=131072, ge=1, description="Most tokens of text in one embeddings request (413 above it)."
    )
    max_concurrent_requests: int = Field(
        default=128,
        ge=1,
        description="Requests in flight at most (GET routes aside), counted once their body has arrived; over it a "
        "request gets 429 before any model work. Bounds waiting: an admitted request waits about this many "
        "requests / throughput.",
    )
    enforce_retry_after: bool = Field(
        default=True,
        description="A request sent on a connection before the Retry-After of that connection's last 429 has passed "
        "waits it out and is answered 429 unread: clients that retry at once cannot spend the model's CPU on "
        "refusals.",
    )
    skip_broken: bool = Field(
        default=False,
        description="Serve the good bundles when some cannot be loaded (listed with their reason in /v1/models); "
        "without it a broken bundle stops start-up.",
    )
    prepare_threads: int = Field(default=2, ge=1, description="Threads that tokenize requests off the event loop.")
    prepare_inline_chars: int = Field(
        default=1024,
        ge=0,
        description="Requests with at most this many characters of text are tokenized on the event loop: "
        "for short texts a thread hop costs more than the tokenization.",
    )
    log_level: LogLevel = Field(default="info", description="Log level of the service and uvicorn.")
    access_log: bool = Field(
        default=True,
        description="One console line per request: method, path, status, model, inputs, rows, tokens, queue and model "
        "ms, total ms (never the request's content).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="text: one readable line per record; json: one JSON object per line."
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        repr=False,
        description="Accepted API keys (env: comma-separated; several keys allow rotation). When set, every route "
        "but health (and metrics, unless protect_metrics) needs 'Authorization: Bearer KEY'.",
    )
    protect_metrics: bool = Field(default=False, description="With api_keys set, /metrics needs a key too.")
    allow_client_shm: bool = Field(
        default=False,
        description="Let clients register system shared memory regions (Triton's shared memory extension, as its "
        "--allow-client-shm): tensors read from and written to /dev/shm objects on this host. Off: a client that may "
        "register one may have the server read and write any shared memory object its user can open.",
    )
    default_model: str | None = Field(
        default=None,
        description="The model a request that names none goes to when several are served and it serves the "
        "request's task (and POST / of the HF Inference API, TEI's /tokenize, /decode, /info).",
    )
    default_prompt_name: str | None = Field(
        default=None,
        description="Embedding models: the prompt (a key of the model's sentence-transformers prompts) prepended to "
        "texts whose request names none; without it, the model's own default_prompt_name, if any (TEI's flag).",
    )
    default_prompt: str | None = Field(
        default=None,
        description="Embedding models: text prepended to texts whose request names no prompt (TEI's flag); not with "
        "default_prompt_name.",
    )
    data_dir: Path | None = Field(
        default=None,
        description="Folder for batch jobs: their SQLite database and their input and output files. The OpenAI Batch "
        "API (/v1/files, /v1/batches) is served only when it is set; jobs survive a restart and resume.",
    )
    batch_max_file_bytes: int = Field(
        default=200 << 20, ge=1, description="Largest file uploaded to /v1/files (413 above it)."
    )
    batch_max_file_lines: int = Field(
        default=50_000, ge=1, description="Most requests (non-blank lines) in one uploaded batch file (413 above it)."
    )
    batch_max_stored_bytes: int = Field(
        default=10 << 30,
        ge=1,
        description="Bytes of files kept in data_dir at most, inputs and outputs together (413 for an upload past it).",
    )
    batch_max_jobs_in_flight: int = Field(
        default=16,
        ge=1,
        description="Batches not yet finished (validating, in progress, finalizing, cancelling) at most; 429 for "
        "another.",
    )
    batch_chunk_lines: int = Field(
        default=256,
        ge=1,
        description="Lines of a batch sent to the models at once and committed together: a restart resumes after the "
        "last committed chunk. The runner sends a chunk only when no online request is queued (or after 1 s), and "
        "its rows run only while no online row waits; the model groups a chunk's rows by length.",
    )
    cors_allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins whose browser pages may call the API (env: comma-separated; '*' for any). Off by "
        "default; API keys still apply to the calls themselves.",
    )

    @field_validator("models", "api_keys", "cors_allow_origins", mode="before")
    @classmethod
    def split_model_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("models")
    @classmethod
    def check_model_pairs(cls, value: list[str]) -> list[str]:
        for pair in value:
            name, sep, path = pair.partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ValueError(f"model {pair!r} is not NAME=PATH")
        return value

    @model_validator(mode="after")
    def one_default_prompt(self) -> Settings:
        if self.default_prompt is not None and self.default_prompt_name is not None:
            raise ValueError("default_prompt and default_prompt_name cannot both be set")
        return self

    @model_validator(mode="after")
    def one_process_state(self) -> Settings:
        if self.processes > 1:
            if self.allow_client_shm:
                raise ValueError("allow_client_shm needs processes=1: its regions live in one process")
            if self.port == 0 or self.grpc_port == 0:
                raise ValueError("port 0 needs processes=1: each process would pick a port of its own")
        return self

    def tunes(self) -> bool:
        """Whether start-up tuning runs: as asked, else when no tuned setting was given (flag or environment)."""
        if self.tune is not None:
            return self.tune
        return not TUNED_SETTINGS & self.model_fields_set

    @staticmethod
    def named(setting: str) -> str:
        """How a limit's error names its setting: the field, its flag and its environment variable."""
        return f"{setting}: --{setting.replace('_', '-')}, env BERTSERVE_{setting.upper()}"

    def model_sources(self) -> dict[str, Path]:
        """Every model to serve, name -> bundle folder: the folders under ``models_dir``, then ``models``."""
        sources: dict[str, Path] = {}
        if self.models_dir is not None:
            sources.update(discover_bundles(self.models_dir))
        for pair in self.models:
            name, _, path = pair.partition("=")
            sources[name.strip()] = Path(path.strip())
        return sources


def discover_bundles(folder: Path) -> dict[str, Path]:
    """Subfolders that look like bundles (hold bundle.json or model.onnx), by folder name."""
    if not folder.is_dir():
        raise FileNotFoundError(f"models folder {folder} does not exist")
    return {
        child.name: child
        for child in sorted(folder.iterdir())
        if child.is_dir()
        and not child.name.startswith(".")
        and ((child / "bundle.json").exists() or (child / "model.onnx").exists())
    }
