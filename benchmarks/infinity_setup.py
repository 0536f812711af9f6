"""infinity-emb in its own venv (it pins numpy<2 and transformers 4.47), the way shared/NOTES.md found to work."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from benchmarks.datasets import REPO_ROOT

log = logging.getLogger(__name__)
INFINITY_VENV = REPO_ROOT / "benchmarks" / ".venvs" / "infinity"
INFINITY_REQUIREMENT = "infinity-emb[all]==0.0.78"
# a looser torch lets the resolver pull the multi-GB CUDA build
TORCH_CONSTRAINT = "torch==2.13.0+cpu"


def infinity_ready(venv: Path = INFINITY_VENV) -> bool:
    python = venv / "bin" / "python"
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", "import infinity_emb, torch"], capture_output=True, check=False)
    return probe.returncode == 0


def ensure_infinity_venv(venv: Path = INFINITY_VENV) -> Path:
    """Create the venv when it is missing or broken (a few minutes, from the package registry)."""
    if infinity_ready(venv):
        return venv
    log.info("creating the infinity-emb venv at %s (takes a few minutes)", venv)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    constraints = venv / "constraints.txt"
    constraints.write_text(TORCH_CONSTRAINT + "\n")
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "-q", INFINITY_REQUIREMENT, "-c", str(constraints)], check=True)
    # its torchvision is a CUDA build that breaks the import of the torch engine
    subprocess.run([*pip, "uninstall", "-y", "-q", "torchvision"], check=True)
    if not infinity_ready(venv):
        raise RuntimeError(f"infinity-emb venv at {venv} does not import infinity_emb")
    return venv
