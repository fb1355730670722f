"""How many cores this process may use, for every default that divides them up.

The model's concurrent runs (:mod:`vstream.inference.plan`) and FFmpeg's
decoding threads (:mod:`vstream.decoders.cpu`) share the same cores, so both
count them the same way. The rule for automatic decoding threads lives here
too, because three places need it: the decoder that opens, ``vstream
validate`` and the engines that count a source against
``limits.max_decoder_threads``; all three must mean the same by
``decoder_threads: 0``. So does the rule for ``processes: auto``, how many
processes share a GPU, which the cores bound.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup CPU quota.

    A container limited with ``--cpus=2`` on a 64-core host sees 64 CPUs in
    its affinity mask but gets the time of two; planning for 64 would
    oversubscribe it 32 times.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


MAX_AUTO_DECODER_THREADS = 4
"""Most FFmpeg threads ``decoder_threads: 0`` gives one stream: past a few, frame threads add
only delay."""


def auto_decoder_threads(streams: int, cores: int | None = None) -> int:
    """FFmpeg threads for one of ``streams`` streams decoded at once: half the cores, shared.

    Decoding gets at most half the cores (the model runs need the rest),
    shared among the streams: ``cores // (2 * streams)``, at least 1 and at
    most :data:`MAX_AUTO_DECODER_THREADS`. One stream on 2 cores decodes on
    its reader thread alone (frame threads would cost 5 % more CPU per
    picture, and one thread decodes 720p H.264 several times faster than the
    model runs); one stream on 16 cores gets 4 threads; 32 streams on 64
    cores get 1 each.
    """
    cores = cores or available_cores()
    return max(1, min(MAX_AUTO_DECODER_THREADS, cores // (2 * max(1, streams))))


def counted_decoder_threads(threads: int) -> int:
    """What a source's ``decoder_threads`` counts against ``limits.max_decoder_threads``.

    0 (automatic) counts as the most :func:`auto_decoder_threads` gives a
    stream, its share when decoded alone: the threads it may really take,
    not 0 (which let ``validate`` pass what the engine then refused) nor
    every core (which refused the fifth automatic stream on 64 cores).
    """
    return threads or auto_decoder_threads(1)


PROCESS_FRAMES_PER_SECOND = 360.0
"""Frames per second ``processes: auto`` gives one process: 80 % of the most one process
reached on an H100 host (444 frames/s end to end, 1080p H.264, the demo model at 320; BENCHMARKS.md
"On an H100"; 450-505 with tracking on an H200, "Where one process stops"), where the process,
not the GPU, was the limit: its Python under the one GIL, and NVDEC decoding that waits for the
process's GPU work. The rest is headroom, so that a process's streams stay live rather than
queue. Measure again when the pipeline's host cost per frame changes."""

CORES_PER_PROCESS = 2
"""Cores ``processes: auto`` counts for each process: one at its budget takes 1.1 (at the
3.04 ms of CPU per frame measured on the H100 host), and the driver and Ray's own processes need
some too."""

LIVE_FRAMES_PER_SECOND = 30.0
"""The rate ``processes: auto`` assumes for a camera or a file replayed in real time: it
decides before any stream is opened, and opening cameras to ask would delay the start."""


def auto_processes(rates: Sequence[float | None], cores: int | None = None) -> int:
    """How many processes share the GPU for streams of these frame rates: ``processes: auto``.

    Each stream's rate is its frames per second, or None for a file read as
    fast as it decodes (which alone fills a process). The streams need
    ``sum(rates) / PROCESS_FRAMES_PER_SECOND`` processes, rounded up, a file
    read at full speed counting as a whole process; never more than one per
    stream (a stream runs in one process), nor than the cores allow
    (:data:`CORES_PER_PROCESS` each), nor fewer than 1. For 1080p30 cameras:
    1 to 12 cameras share one process, 64 need 6 (on 12 cores or more), and
    four files read at full speed get 4 processes on 8 cores, 2 on 4.
    """
    cores = cores or available_cores()
    budget = PROCESS_FRAMES_PER_SECOND
    needed = sum(budget if rate is None else min(rate, budget) for rate in rates)
    wanted = math.ceil(round(needed / budget, 6))
    return max(1, min(wanted, len(rates), cores // CORES_PER_PROCESS))
