"""CUDA MPS: whether the GPU work of several processes on this machine runs side by side.

Without MPS, the processes sharing a GPU (``processes: N``) each have a
context of their own, and the GPU runs one context's kernels at a time, in
time slices. With NVIDIA's Multi-Process Service their kernels run at once.
It matters when the model fills the GPU's time: measured on an H100, 50 live
1080p cameras through YOLOv8n at 640 over 6 processes kept a frame age p95 of
458 ms and dropped 13 frames without MPS, 70 ms and none with it; the demo
detector's 64 cameras over 6 processes needed no MPS (BENCHMARKS.md,
"Processes and CUDA MPS on one H100"). A process uses MPS when the control daemon
(``nvidia-cuda-mps-control -d``) runs at CUDA's start: the CUDA driver looks
for the daemon's ``control`` pipe in ``$CUDA_MPS_PIPE_DIRECTORY``, by
default ``/tmp/nvidia-mps``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

DEFAULT_PIPE_DIRECTORY = Path("/tmp/nvidia-mps")
"""Where the MPS control daemon and its clients meet unless ``CUDA_MPS_PIPE_DIRECTORY`` says."""


def control_pipe(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The running MPS control daemon's pipe this process would connect to; None: no daemon."""
    directory = Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIRECTORY)
    pipe = directory / "control"
    try:
        mode = pipe.stat().st_mode
    except OSError:
        return None
    return pipe if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None
