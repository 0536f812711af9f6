"""LitServe in its own venv: the peer of ``benchmarks.peers``, served by ``litserve_app.py``.

Its own venv keeps LitServe's FastAPI/uvicorn/pydantic pins out of the project's; onnxruntime and tokenizers are
pinned to the project venv's versions, so both servers run the same kernels and the same tokenizer.

    python -m benchmarks.litserve_setup   # create it now (otherwise benchmarks.peers does on first use)
"""

from __future__ import annotations

import importlib.metadata
import logging
import subprocess
import sys
from pathlib import Path

from benchmarks.datasets import REPO_ROOT

log = logging.getLogger(__name__)
LITSERVE_VENV = REPO_ROOT / "benchmarks" / ".venvs" / "litserve"
LITSERVE_REQUIREMENT = "litserve==0.2.19"
SHARED_PACKAGES = ("onnxruntime", "tokenizers")  # at this interpreter's versions


def requirements() -> list[str]:
    """LitServe, plus onnxruntime and tokenizers pinned to what the project venv has."""
    return [LITSERVE_REQUIREMENT, *(f"{name}=={importlib.metadata.version(name)}" for name in SHARED_PACKAGES)]


def venv_python(venv: Path = LITSERVE_VENV) -> Path:
    return venv / "bin" / "python"


def litserve_ready(venv: Path = LITSERVE_VENV) -> bool:
    """The venv imports litserve, and has the pinned versions of every package."""
    python = venv_python(venv)
    if not python.exists():
        return False
    check = (
        "import sys, importlib.metadata as m, litserve, onnxruntime, tokenizers, numpy\n"
        "wanted = dict(pin.split('==') for pin in sys.argv[1:])\n"
        "sys.exit(any(m.version(name) != version for name, version in wanted.items()))"
    )
    probe = subprocess.run([str(python), "-c", check, *requirements()], capture_output=True, check=False)
    return probe.returncode == 0


def ensure_litserve_venv(venv: Path = LITSERVE_VENV) -> Path:
    """Create the venv when it is missing, broken or pinned to other versions (a minute, from the package index)."""
    if litserve_ready(venv):
        return venv
    log.info("creating the LitServe venv at %s with %s", venv, ", ".join(requirements()))
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv_python(venv)), "-m", "pip"]
    subprocess.run([*pip, "install", "-q", *requirements()], check=True)
    if not litserve_ready(venv):
        raise RuntimeError(f"LitServe venv at {venv} does not import litserve, onnxruntime and tokenizers")
    return venv


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    log.info("LitServe venv ready: %s", ensure_litserve_venv())
