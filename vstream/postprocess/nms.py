"""Exact NMS on the device, from torchvision's compiled kernels, without torchvision's import.

``import torchvision.ops`` costs about a second (it pulls in ``torch._dynamo``
and every transform), paid by every ``vstream run`` just to reach one kernel.
The kernel itself lives in torchvision's extension library, which registers
``torch.ops.torchvision.nms`` (CPU and CUDA) when loaded: loading it directly
takes about a millisecond and runs the very same code. Per-class suppression
uses the usual coordinate offset: boxes of different groups are moved apart
so that they can never overlap, then suppressed in one call.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import torch

from vstream.transfer import transfers


@functools.cache
def torchvision_op(name: str) -> Any:
    """``torch.ops.torchvision.<name>`` (``nms``, ``roi_align``), loading torchvision's extension
    library if needed: the compiled kernel without the second that ``import torchvision`` costs."""
    if not hasattr(torch.ops.torchvision, name):
        spec = importlib.util.find_spec("torchvision")
        folder = Path(next(iter(spec.submodule_search_locations))) if spec else None
        library = next(iter(sorted(folder.glob("_C*.so"))), None) if folder else None
        if library is not None:
            torch.ops.load_library(str(library))
        else:  # an unusual install: let torchvision find its own library
            import torchvision.ops  # noqa: F401
    return getattr(torch.ops.torchvision, name)


def batched_nms(
    boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, iou: float
) -> torch.Tensor:
    """Indices of the boxes kept, by decreasing score; boxes only suppress boxes of their group.

    ``boxes`` are ``(N, 4)`` xyxy; the result equals ``torchvision.ops.batched_nms``.
    """
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    offsets = groups.to(boxes) * (boxes.max() + 1)
    # On CUDA the kernel selects the kept boxes with a boolean mask: the host learns how many.
    transfers.implicit_sync("nms")
    return torchvision_op("nms")(boxes + offsets[:, None], scores, iou)


def cxcywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    """``(cx, cy, w, h)`` rows as ``(x1, y1, x2, y2)``."""
    centre, size = boxes[..., :2], boxes[..., 2:4]
    return torch.cat([centre - size / 2, centre + size / 2], dim=-1)
