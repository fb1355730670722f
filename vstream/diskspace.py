"""Keeping a disk's last space, and putting bytes on it before a file is named whole.

Event clips and annotated video grow without bound and can fill a disk
before the records do (which then fail). Such an output asks
:class:`FreeSpace` before each write and, below its floor, skips the write
and counts it instead; the first skip of an episode is logged as a warning
and the return of space as a line of its own, the skips between are only
counted.

Clips, their index and the annotated video are written under a temporary
name and renamed once whole; :func:`sync` puts their bytes on the disk first,
so that a crash leaves either the old state or the whole file.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path


def sync(path: Path) -> None:
    """Put ``path``'s bytes on the disk (a directory's: its entries, a rename among them)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class FreeSpace:
    """Whether one output's disk is above its floor now, logging each episode once."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        """How log lines name the output (``clips: /data/clips``, ``annotated video x.mp4``)."""
        self._log = logger
        self.low = False
        """Whether the last check found the disk below the floor (an episode is going on)."""

    def allows(self, directory: Path, min_free_bytes: int, skipped: int, noun: str) -> bool:
        """Whether ``directory``'s disk has ``min_free_bytes`` free (0: no floor).

        ``skipped`` is the output's count of skips so far, for the line that says
        space is back; ``noun`` names what is skipped meanwhile (clips, frames).
        """
        if not min_free_bytes:
            return True
        try:
            free = shutil.disk_usage(directory).free
        except OSError:
            return True  # the write itself will say what is wrong, once
        if free >= min_free_bytes:
            if self.low:
                self.low = False
                self._log.info(
                    "%s: %d bytes free again; writing %s (%d skipped so far)",
                    self.what, free, noun, skipped,
                )  # fmt: skip
            return True
        if not self.low:
            self.low = True
            self._log.warning(
                "%s: %d bytes free, below min_free_bytes %d; %s are not written until space "
                "is freed (counted)",
                self.what, free, min_free_bytes, noun,
            )  # fmt: skip
        return False
