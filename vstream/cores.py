"""How many cores this process may use, for every default that divides them up.

The model's concurrent runs (:mod:`vstream.inference.plan`) and FFmpeg's
decoding threads (:mod:`vstream.decoders.cpu`) share the same cores, so both
count them the same way.
"""

from __future__ import annotations

import math
import os
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
