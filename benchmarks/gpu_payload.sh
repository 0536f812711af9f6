#!/usr/bin/env bash
# What benchmarks.gpu needs on a GPU machine that has CUDA 13, torch, transformers, onnx and tokenizers but no
# onnxruntime-gpu, FastAPI, uvicorn or pydantic-settings, and no network: packed here into parts small enough to
# carry one at a time, joined and installed there.
#
#   benchmarks/gpu_payload.sh pack SST2_CHECKPOINT [PART_MIB]  # here: .gpu/parts/part-* (git-ignored), 55 MiB each
#   benchmarks/gpu_payload.sh unpack PARTS_DIR SITE          # there: onnxruntime-gpu + wheels into SITE, the
#                                                            # checkpoint and data into PARTS_DIR/payload
#
# On a lent card (the device tool: 64 MiB carried a call, the tree included; the machine goes back after 30 s idle,
# so the calls follow one another with nothing between them):
#   here:    benchmarks/gpu_payload.sh pack runs/bench/sst2            # .gpu/parts/part-aa .. part-ae: ~238 MB in
#            parts of 55 MiB, each carried beside the ~5 MiB tree (four parts of 59 MiB came to 64.05 MiB a call)
#   call 1:  carry .gpu/parts/part-aa; mkdir -p /tmp/parts && cp .gpu/parts/part-aa /tmp/parts/
#   call 2-5: the same for part-ab, part-ac, part-ad, part-ae
#   call 6:  benchmarks/gpu_payload.sh unpack /tmp/parts /tmp/site && PYTHONPATH=/tmp/site python -m benchmarks.gpu
#            export --sst2-checkpoint /tmp/parts/payload/sst2-checkpoint --work-dir /tmp/gpu --out /tmp/gpu/report/gpu
#   call 7:  cp /tmp/gpu/report/gpu.* "$OUT"/ && rm -r /tmp/gpu/report && ln -s "$OUT" /tmp/gpu/report &&
#            PYTHONPATH=/tmp/site python -m benchmarks.gpu measure --sst2-checkpoint /tmp/parts/payload/sst2-checkpoint
#            --work-dir /tmp/gpu --out /tmp/gpu/report/gpu --torch-from benchmarks/results/gpu.json
#            (each call stays under 600 s; measure rewrites its report after every step, and with the report folder a
#            link to $OUT a call cut short by its limit or the device budget still brings back every step it finished)
#
# onnxruntime-gpu 1.31.1's wheel is 255 MB; repacked with xz, without libonnxruntime.so (the C API library, which the
# Python module does not load) and the TensorRT provider, it is ~187 MB. The SST-2 checkpoint travels with fp16
# weights (benchmarks.gpu widens them back to fp32 before exporting both the CPU and the GPU bundle).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
ORT_WHEEL="onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl"
WHEELS=(fastapi starlette pydantic pydantic-core pydantic-settings python-dotenv annotated-types annotated-doc
        typing-inspection typing_extensions uvicorn fastapi-offline httptools opentelemetry-api importlib_metadata
        orjson pyyaml fastavro)
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

pack() {
    local checkpoint="$1" part_mib="${2:-55}" stage="$here/.gpu/stage" wheels="$here/.gpu/wheels"
    rm -rf "$stage/wheels"  # a wheel of an older version left here would be installed beside the new one
    mkdir -p "$wheels" "$stage/wheels" "$stage/data/sst2" "$stage/data/wikitext2" "$here/.gpu/parts"
    [ -f "$wheels/$ORT_WHEEL" ] || python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$wheels" onnxruntime-gpu==1.31.1
    python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$stage/wheels" "${WHEELS[@]}"
    if [ ! -f "$stage/ort-gpu.tar.xz" ]; then
        local unpacked; unpacked="$(mktemp -d)"
        (cd "$unpacked" && python3 -m zipfile -e "$wheels/$ORT_WHEEL" . \
            && rm onnxruntime/capi/libonnxruntime.so.* onnxruntime/capi/libonnxruntime_providers_tensorrt.so \
            && tar -c onnxruntime onnxruntime_gpu-1.31.1.dist-info | xz -T0 -6 > "$stage/ort-gpu.tar.xz")
        rm -rf "$unpacked"
    fi
    "$here/.venv/bin/python" - "$checkpoint" "$stage/sst2-checkpoint" <<'PY'
import shutil, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import load_file, save_file
source, target = Path(sys.argv[1]), Path(sys.argv[2])
target.mkdir(parents=True, exist_ok=True)
for path in source.iterdir():
    if path.is_file() and path.suffix not in (".safetensors", ".pt", ".bin"):
        shutil.copy2(path, target / path.name)
weights = load_file(str(source / "model.safetensors"))
save_file({k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in weights.items()},
          str(target / "model.safetensors"), metadata={"format": "pt"})
PY
    cp "$here/../shared/data/sst2/dev.tsv" "$stage/data/sst2/"
    cp "$here/../shared/data/wikitext2/valid.txt" "$stage/data/wikitext2/"
    rm -f "$here/.gpu/parts/part-"*
    tar -c -C "$stage" . > "$here/.gpu/payload.tar"
    split -b "${part_mib}M" "$here/.gpu/payload.tar" "$here/.gpu/parts/part-"
    rm "$here/.gpu/payload.tar"
    ls -l "$here/.gpu/parts"
}

unpack() {
    local parts="$1" site="$2"
    mkdir -p "$parts/payload" "$site"
    cat "$parts"/part-* | tar -x -C "$parts/payload"
    tar -xJf "$parts/payload/ort-gpu.tar.xz" -C "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$parts"/payload/wheels/*.whl
}

case "${1:-}" in
    pack) shift; pack "$@" ;;
    unpack) shift; unpack "$@" ;;
    *) echo "usage: $0 pack SST2_CHECKPOINT [PART_MIB] | unpack PARTS_DIR SITE" >&2; exit 2 ;;
esac
