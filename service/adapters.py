"""LoRA adapters served over their base model's session: each adapter of a LoRA base bundle
(``adapters/NAME.onnx_adapter``, written by ``model_export.lora``) is a model of its own, ``BASE:NAME``.

An adapter's engine has its own queue, labels, admission and metrics, so a batch never mixes adapters, and shares
everything else with the base: the ONNX Runtime session (the weights are held once; the adapter file's values replace
the graph's zero LoRA factors and the head for its runs: ``OrtRunner.with_adapter``, on both of a split runner's
sessions) and the worker threads, which take the base's and its adapters' batches in turn (``service.runtime.Lanes``).
An extra adapter costs its file and its queue, not threads of its own (each thread that runs the session keeps ~0.1
MB) or a session.
"""

from __future__ import annotations

import dataclasses

from contract.bundle import AdapterFile, Bundle, BundleError, read_adapters
from service.engine import Engine
from service.sessions import ModelRunner, OrtRunner, SplitRunner

SEPARATOR = ":"  # "sst2:acme": adapter acme of model sst2


def adapter_name(base: str, adapter: str) -> str:
    return f"{base}{SEPARATOR}{adapter}"


def adapter_engine(base: Engine, adapter: AdapterFile) -> Engine:
    """The engine serving ``adapter`` of ``base``'s bundle, named ``BASE:ADAPTER``: its own queue on the base's
    workers and session."""
    if not isinstance(base.pool.runner, OrtRunner | SplitRunner):
        raise BundleError(adapter.path, "adapters need an ONNX Runtime session")
    spec = dataclasses.replace(base.bundle.spec, id2label=adapter.id2label)
    context = dataclasses.replace(base.context, id2label=dict(adapter.id2label))

    def rebind(session: ModelRunner) -> ModelRunner:
        assert isinstance(session, OrtRunner | SplitRunner)
        return session.with_adapter(adapter.path)

    try:
        served = rebind(base.pool.runner)
    except Exception as exc:
        raise BundleError(adapter.path, f"the adapter cannot be loaded: {exc}") from exc
    engine = Engine(
        adapter_name(base.name, adapter.name), Bundle(base.bundle.path, spec), base.handler, context, served,
        base.settings, base.executor, None, base.batching, len(base.workers), None, base.device, (base.pool, rebind),
    )  # fmt: skip
    engine.rate_of = base
    return engine


def adapter_engines(base: Engine) -> dict[str, Engine]:
    """An engine for every adapter beside ``base``'s bundle (none unless it is a LoRA base bundle), by name."""
    engines = {}
    for adapter in read_adapters(base.bundle).values():
        engine = adapter_engine(base, adapter)
        engines[engine.name] = engine
    return engines
