"""Every test: start-up auto-tuning is off (it would spend seconds per loaded model); tests of tuning ask for it."""

from __future__ import annotations

import os

os.environ.setdefault("BERTSERVE_TUNE", "false")
