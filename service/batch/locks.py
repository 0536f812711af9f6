"""Who does what in a data folder shared by processes (several serving processes, or a replacement starting beside
one that still runs): kernel ``flock`` locks, released when their holder closes them or dies.

- ``RunnerLead``: ``runner.lock`` is held by the one process whose batch runner runs batch jobs; the file holds its
  pid. Another process's runner takes it over when that process ends, and resumes where its last commit left off.
- ``writing`` / ``remove_orphans``: a ``.part`` file (an upload or an output being made) is locked while its writer
  lives, so a process starting beside it removes only those a killed process left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

RUNNER_LOCK = "runner.lock"


class RunnerLead:
    def __init__(self, folder: Path) -> None:
        self.path = folder / RUNNER_LOCK
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def take(self) -> bool:
        """Hold the lead unless another process does (non-blocking); whether this process holds it now."""
        if self._descriptor is not None:
            return True
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return False
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        self._descriptor = descriptor
        return True

    def holder(self) -> int | None:
        """The pid the lock file names (the process that holds the lead, or held it last)."""
        try:
            return int(self.path.read_text().strip() or 0) or None
        except (FileNotFoundError, ValueError):
            return None

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


@contextlib.contextmanager
def writing(partial: Path) -> Iterator[None]:
    """``partial`` created empty and locked while the block writes and renames it; removed at the end unless
    renamed (the block failed)."""
    descriptor = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        partial.unlink(missing_ok=True)
        os.close(descriptor)


def remove_orphans(folder: Path) -> list[Path]:
    """Remove the ``.part`` files in ``folder`` that no living writer holds; those removed."""
    removed = []
    for partial in folder.glob("*.part"):
        try:
            descriptor = os.open(partial, os.O_RDONLY)
        except FileNotFoundError:  # its writer finished meanwhile
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            continue
        try:
            partial.unlink(missing_ok=True)
            removed.append(partial)
        finally:
            os.close(descriptor)
    return removed
