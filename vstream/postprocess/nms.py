"""Exact NMS on the device, from torchvision's compiled kernels, without torchvision's import.

``import torchvision.ops`` costs about a second (it pulls in ``torch._dynamo``
and every transform), paid by every ``vstream run`` just to reach one kernel.
The kernel itself lives in torchvision's extension library, which registers
``torch.ops.torchvision.nms`` (CPU and CUDA) when loaded: loading it directly
takes about a millisecond and runs the very same code. Per-group suppression
(a group: one class of one frame) moves the boxes of different groups apart so
that they can never overlap, then suppresses them all in one call
(:func:`batched_nms`).
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
    boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, iou: float, count: int
) -> torch.Tensor:
    """Indices of the boxes kept, by decreasing score; boxes only suppress boxes of their group.

    ``boxes`` are ``(N, 4)`` xyxy, ``groups`` their group ids, each below ``count``. The
    result is torchvision's NMS run on each group alone (``torchvision.ops.batched_nms``'
    per-group loop), with the overlaps computed in float64 (:func:`_apart`).
    """
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    # On CUDA the kernel selects the kept boxes with a boolean mask: the host learns how many.
    transfers.implicit_sync("nms")
    return torchvision_op("nms")(_apart(boxes, groups, count), scores.double(), iou)


def _apart(boxes: torch.Tensor, groups: torch.Tensor, count: int) -> torch.Tensor:
    """``boxes`` in float64, each group's moved by a whole number of pixels onto a stretch of
    both axes that no other group's boxes reach.

    torchvision's coordinate trick (every box moved by ``group * (max + 1)``) keeps groups
    apart only where no coordinate is negative: a box reaching past the input's top-left
    lands on the previous group (another class, or the last class of the previous frame).
    And in float32 its offsets lose bits as they grow (a quarter pixel at frame 31, class 79
    of a 1280 input), so a frame's boxes depended on its place in the batch. Here each group
    starts where the one before it ends (its lowest coordinate moved to the start, its
    stretch as long as its boxes reach, plus one), and a float32 box moved by a whole number
    in float64 keeps its bits (to within 1e-9 px at the offsets of a batch of 32 at 1280 px):
    widths and intersections, so the overlaps, are those of the box where it was, whatever
    its frame and class. The shortest stretches come first: a box far off (an overflowing
    head's 1e30) makes its own group's stretch long and puts it after every ordinary group,
    whose offsets stay small.
    """
    wide = boxes.double()
    low = wide.new_full((count,), torch.inf).scatter_reduce(0, groups, wide.amin(1), "amin")
    high = wide.new_full((count,), -torch.inf).scatter_reduce(0, groups, wide.amax(1), "amax")
    low = low.floor()
    length = (high.ceil() - low + 1).clamp(min=0)  # a group without boxes: none
    order = length.argsort()
    ends = length[order].cumsum(0)
    start = torch.empty_like(length).scatter_(0, order, ends - length[order])
    return wide + (start - low)[groups, None]


def cxcywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    """``(cx, cy, w, h)`` rows as ``(x1, y1, x2, y2)``."""
    centre, size = boxes[..., :2], boxes[..., 2:4]
    return torch.cat([centre - size / 2, centre + size / 2], dim=-1)


ROTATED_BLOCK = 1024
"""Rows of the probabilistic-IoU matrix :func:`rotated_nms` holds at once (of N columns)."""


def _gaussians(rotated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Covariance ``[[a, c], [c, b]]`` of the uniform distribution over each rotated box: the
    axis variances ``w^2 / 12`` and ``h^2 / 12`` turned by the box's angle."""
    var_w, var_h = rotated[:, 2] ** 2 / 12, rotated[:, 3] ** 2 / 12
    cos, sin = rotated[:, 4].cos(), rotated[:, 4].sin()
    return (
        var_w * cos**2 + var_h * sin**2,
        var_w * sin**2 + var_h * cos**2,
        (var_w - var_h) * cos * sin,
    )


def probabilistic_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(N, M)`` probabilistic IoU of ``(N, 5)`` and ``(M, 5)`` ``cx, cy, w, h, angle`` boxes.

    Llerena et al., "Gaussian Bounding Boxes and Probabilistic Intersection-over-Union for
    Object Detection" (arXiv:2106.06072): each box is the Gaussian of its uniform
    distribution, ``B`` the Bhattacharyya distance of two Gaussians,
    ``B = 1/8 d^T S^-1 d + 1/2 ln(det S / sqrt(det S1 det S2))`` with ``S = (S1 + S2) / 2``
    and ``d`` the centres' difference, and the similarity is one minus the Hellinger
    distance, ``1 - sqrt(1 - exp(-B))``. ``B`` is kept within ``[1e-7, 100]`` (boxes far
    apart have similarity 0; a degenerate box does not divide by zero), the bounds the
    reference's rotated NMS uses.
    """
    eps = 1e-7
    a1, b1, c1 = (v[:, None] for v in _gaussians(a))
    a2, b2, c2 = (v[None, :] for v in _gaussians(b))
    dx = a[:, None, 0] - b[None, :, 0]
    dy = a[:, None, 1] - b[None, :, 1]
    # S = (S1 + S2) / 2, written with the sums: sa, sb, sc are 2 S's entries.
    sa, sb, sc = a1 + a2, b1 + b2, c1 + c2
    det2 = sa * sb - sc**2  # det(2 S) = 4 det S
    # 1/8 d^T S^-1 d = 1/4 d^T (2 S)^-1 d, with (2 S)^-1 = [[sb, -sc], [-sc, sa]] / det(2 S)
    mahalanobis = (sb * dx**2 + sa * dy**2 - 2 * sc * dx * dy) / (4 * (det2 + eps))
    det1 = (a1 * b1 - c1**2).clamp(min=0)
    det2_ = (a2 * b2 - c2**2).clamp(min=0)
    spread = 0.5 * torch.log(det2 / (4 * torch.sqrt(det1 * det2_) + eps) + eps)
    distance = (mahalanobis + spread).clamp(eps, 100.0)
    return 1 - torch.sqrt(1 - torch.exp(-distance) + eps)


def rotated_nms(
    rotated: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, iou: float
) -> torch.Tensor:
    """Indices of the rotated boxes kept, by decreasing score, as the reference suppresses
    oriented boxes: Fast NMS (Bolya et al., YOLACT, arXiv:1904.02689) on the probabilistic
    IoU. A box is dropped when any better box of its group overlaps it by more than ``iou``,
    whether or not that box is kept itself (greedy NMS would let a dropped box suppress
    nothing). ``rotated`` is ``(N, 5)`` ``cx, cy, w, h, angle``.
    """
    order = torch.argsort(scores, descending=True)
    rotated, groups = rotated[order], groups[order]
    count = len(order)
    dropped = torch.zeros(count, dtype=torch.bool, device=rotated.device)
    for start in range(0, count, ROTATED_BLOCK):
        stop = min(start + ROTATED_BLOCK, count)
        overlap = probabilistic_iou(rotated[start:stop], rotated)
        better = torch.arange(start, stop, device=rotated.device)[:, None] < torch.arange(
            count, device=rotated.device
        )
        same = groups[start:stop, None] == groups[None, :]
        dropped |= ((overlap > iou) & better & same).any(dim=0)
    # The kept boxes are a data-dependent number: on CUDA the host learns it here.
    transfers.implicit_sync("nms")
    return order[~dropped]
