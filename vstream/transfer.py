"""The device boundary: the one place where data leaves the device for the host.

Frames, model inputs and raw model outputs stay on the device. Only the
compact detections tensor of a batch (seven floats per box) crosses here, so
the cost of the boundary is counted in bytes per box, not per pixel.
"""

from __future__ import annotations

import numpy as np
import torch


def to_host(detections: torch.Tensor) -> np.ndarray:
    """Copy the detections tensor of a batch to host memory as a numpy array."""
    return detections.detach().to("cpu").numpy()
