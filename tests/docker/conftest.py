"""Paths shared by the deployment tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
