"""Paths shared by the deployment tests; docker/ is not a package, so its helpers are imported by path."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"

if str(DOCKER) not in sys.path:
    sys.path.insert(0, str(DOCKER))
