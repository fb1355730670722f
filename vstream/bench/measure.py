"""What every benchmark run measures: frames, wall and CPU time, latencies, memory.

CPU time is the whole process's (every thread: ONNX Runtime's, FFmpeg's,
the stages'), so the CPU a stage costs per frame is comparable across runs
on the same machine. Resident memory is read from ``/proc`` (Linux); where
that is missing it is reported as unknown rather than guessed.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_STATM = Path("/proc/self/statm")
_STAT = Path("/proc/stat")

MIN_SECONDS_FOR_OTHERS = 0.5
"""Shortest run whose neighbours' CPU is reported: ``/proc/stat`` counts in ticks of 10 ms,
so over a few milliseconds one tick more or less reads as whole cores."""


def rss_bytes() -> int | None:
    """Resident memory of this process now, or None where ``/proc`` is not available."""
    try:
        resident_pages = int(_STATM.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def machine_busy_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot (``/proc/stat``).

    Compared with this process's own CPU time over a run, it shows how much
    other processes took meanwhile: figures measured beside a busy
    neighbour are flagged instead of silently published.
    """
    try:
        fields = _STAT.read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user and system, every thread) process ``pid`` has used so far, from
    ``/proc/PID/stat``; None when it is gone or ``/proc`` is not available."""
    try:
        # The fields after the command, whose name may hold spaces and parentheses.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


def peak_rss_bytes() -> int:
    """The most resident memory this process has had so far (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class Measurement:
    """One run: how many frames, in how long, at what CPU cost and per-frame latency."""

    frames: int
    seconds: float
    cpu_seconds: float
    latencies: Sequence[float] = field(default_factory=tuple, repr=False)
    """Seconds per frame from the end of its decoding to its result (or per frame of a stage)."""
    others_cpu_seconds: float | None = None
    """CPU time other processes used during the run; None where the machine does not say."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_frame(self) -> float:
        return 1000 * self.cpu_seconds / self.frames if self.frames else 0.0

    def latency_ms(self) -> dict[str, float] | None:
        """p50, p95 and p99 of the per-frame latency in milliseconds."""
        if not len(self.latencies):
            return None
        values = np.percentile(np.asarray(self.latencies) * 1000, [50, 95, 99])
        return {"p50": float(values[0]), "p95": float(values[1]), "p99": float(values[2])}

    @property
    def others_cores(self) -> float | None:
        """How many cores other processes kept busy on average during the run (at most the
        machine's); None for a run too short to tell (:data:`MIN_SECONDS_FOR_OTHERS`)."""
        if self.others_cpu_seconds is None or self.seconds < MIN_SECONDS_FOR_OTHERS:
            return None
        return min(max(0.0, self.others_cpu_seconds / self.seconds), os.cpu_count() or 1)

    def to_dict(self) -> dict[str, Any]:
        others = self.others_cores
        return {
            "frames": self.frames,
            "seconds": round(self.seconds, 4),
            "fps": round(self.fps, 2),
            "cpu_ms_per_frame": round(self.cpu_ms_per_frame, 3),
            "latency_ms": _rounded(self.latency_ms()),
            "other_processes_cores": round(others, 3) if others is not None else None,
            **self.extra,
        }


def _rounded(values: dict[str, float] | None) -> dict[str, float] | None:
    return {k: round(v, 3) for k, v in values.items()} if values is not None else None


class Stopwatch:
    """Wall-clock and process CPU time from :meth:`start` to :meth:`stop`."""

    def __init__(self) -> None:
        self.started_at = 0.0
        """``time.perf_counter()`` at the start."""
        self._cpu = 0.0
        self._busy: float | None = None
        self.seconds = self.cpu_seconds = 0.0
        self.others_cpu_seconds: float | None = None

    def start(self) -> Stopwatch:
        self._busy = machine_busy_seconds()
        self.started_at, self._cpu = time.perf_counter(), time.process_time()
        return self

    def stop(self, at: float | None = None) -> Stopwatch:
        """Stop the clocks; the wall clock ``at`` a ``time.perf_counter()`` instant if given
        (the run's last result, just before this call), the CPU clock now."""
        self.seconds = (time.perf_counter() if at is None else at) - self.started_at
        self.cpu_seconds = time.process_time() - self._cpu
        busy = machine_busy_seconds()
        if busy is not None and self._busy is not None:
            self.others_cpu_seconds = busy - self._busy - self.cpu_seconds
        return self

    def measurement(
        self, frames: int, latencies: Sequence[float] = (), **extra: Any
    ) -> Measurement:
        return Measurement(
            frames, self.seconds, self.cpu_seconds, latencies, self.others_cpu_seconds, dict(extra)
        )
