"""LoRA adapters served over their base model's session: each adapter of a LoRA base bundle
(``adapters/NAME.onnx_adapter``, written by ``model_export.lora``) is a model of its own, ``BASE:NAME``.

An adapter's engine shares the base engine's ONNX Runtime session (the weights are held once; the adapter file's
values replace the graph's zero LoRA factors and the head for its runs: ``OrtRunner.with_adapter``) and has its own
queue, workers, labels, admission and metrics, so a batch never mixes adapters. (Its workers are gated as any
engine's, not by one gate shared with the base's other adapters: a worker holds its gate while it waits for its own
queue, so a shared gate would let one adapter's idle workers starve the others.)
"""

from __future__ import annotations

import dataclasses

from contract.bundle import AdapterFile, Bundle, BundleError, read_adapters
from service.engine import Engine
from service.runtime import ModelRunner, OrtRunner

SEPARATOR = ":"  # "sst2:acme": adapter acme of model sst2


def adapter_name(base: str, adapter: str) -> str:
    return f"{base}{SEPARATOR}{adapter}"


def adapter_engine(base: Engine, adapter: AdapterFile) -> Engine:
    """The engine serving ``adapter`` of ``base``'s bundle, named ``BASE:ADAPTER``."""
    runner = base.pool.runner
    if not isinstance(runner, OrtRunner):
        raise BundleError(adapter.path, "adapters need an ONNX Runtime session")
    spec = dataclasses.replace(base.bundle.spec, id2label=adapter.id2label)
    context = dataclasses.replace(base.context, id2label=dict(adapter.id2label))
    make_base = base.pool.make_runner

    def fresh() -> ModelRunner:
        assert make_base is not None
        replacement = make_base()
        assert isinstance(replacement, OrtRunner)
        return replacement.with_adapter(adapter.path)

    try:
        served = runner.with_adapter(adapter.path)
    except Exception as exc:
        raise BundleError(adapter.path, f"the adapter cannot be loaded: {exc}") from exc
    engine = Engine(
        adapter_name(base.name, adapter.name), Bundle(base.bundle.path, spec), base.handler, context, served,
        base.settings, base.executor, None, base.batching, base.settings.model_workers,
        fresh if make_base is not None else None, base.device,
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
