"""Drawing primitives on an RGB ``uint8`` ``(H, W, 3)`` tensor, on whatever device it is.

Rectangles are slice assignments (one kernel each). Static geometry (counting
lines, zone outlines and fills) is rasterised once on the host into flat pixel
indices, uploaded once, and painted per frame with one indexed store. Nothing
reads the picture back to the host.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

Point = tuple[float, float]


def fill_rect(
    image: torch.Tensor, x1: int, y1: int, x2: int, y2: int, colour: torch.Tensor
) -> None:
    """Fill pixels ``x1 <= x < x2``, ``y1 <= y < y2`` (clipped to the picture) with ``colour``."""
    height, width = image.shape[0], image.shape[1]
    x1, x2 = max(0, x1), min(width, x2)
    y1, y2 = max(0, y1), min(height, y2)
    if x2 > x1 and y2 > y1:
        image[y1:y2, x1:x2] = colour


def box_outline(
    image: torch.Tensor, x1: int, y1: int, x2: int, y2: int, thickness: int, colour: torch.Tensor
) -> None:
    """The outline of the box ``[x1, x2) x [y1, y2)``, ``thickness`` pixels wide, inside the box."""
    t = thickness
    fill_rect(image, x1, y1, x2, y1 + t, colour)
    fill_rect(image, x1, y2 - t, x2, y2, colour)
    fill_rect(image, x1, y1 + t, x1 + t, y2 - t, colour)
    fill_rect(image, x2 - t, y1 + t, x2, y2 - t, colour)


def segment_pixels(p0: Point, p1: Point, thickness: int, width: int, height: int) -> np.ndarray:
    """Flat indices (``y * width + x``) of a segment drawn with a square brush, clipped."""
    (x0, y0), (x1, y1) = p0, p1
    steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    t = np.linspace(0.0, 1.0, steps + 1)
    xs = np.rint(x0 + (x1 - x0) * t).astype(np.int64)
    ys = np.rint(y0 + (y1 - y0) * t).astype(np.int64)
    offsets = np.arange(thickness) - (thickness - 1) // 2
    xs = (xs[:, None, None] + offsets[None, :, None]).repeat(thickness, axis=2).ravel()
    ys = (ys[:, None, None] + offsets[None, None, :]).repeat(thickness, axis=1).ravel()
    inside = (xs >= 0) & (xs < width) & (ys >= 0) & (ys < height)
    return np.unique(ys[inside] * width + xs[inside])


def polyline_pixels(
    points: list[Point] | tuple[Point, ...],
    thickness: int,
    width: int,
    height: int,
    *,
    closed: bool,
) -> np.ndarray:
    """Flat indices of the segments joining ``points`` (and the last to the first if ``closed``)."""
    pairs = list(itertools.pairwise(points))
    if closed and len(points) > 2:
        pairs.append((points[-1], points[0]))
    if not pairs:
        return np.zeros(0, np.int64)
    parts = [segment_pixels(a, b, thickness, width, height) for a, b in pairs]
    return np.unique(np.concatenate(parts))


def polygon_pixels(points: list[Point] | tuple[Point, ...], width: int, height: int) -> np.ndarray:
    """Flat indices of the pixels whose centres lie inside the polygon (even-odd rule)."""
    if len(points) < 3:
        return np.zeros(0, np.int64)
    poly = np.asarray(points, np.float64)
    x_lo = max(0, int(np.floor(poly[:, 0].min())))
    x_hi = min(width, int(np.ceil(poly[:, 0].max())) + 1)
    y_lo = max(0, int(np.floor(poly[:, 1].min())))
    y_hi = min(height, int(np.ceil(poly[:, 1].max())) + 1)
    if x_hi <= x_lo or y_hi <= y_lo:
        return np.zeros(0, np.int64)
    ys, xs = np.mgrid[y_lo:y_hi, x_lo:x_hi]
    px, py = xs.ravel() + 0.5, ys.ravel() + 0.5
    inside = np.zeros(px.shape, bool)
    for (ax, ay), (bx, by) in zip(poly, np.roll(poly, -1, axis=0), strict=True):
        if ay == by:
            continue
        crosses = (ay > py) != (by > py)
        x_at = ax + (py - ay) * (bx - ax) / (by - ay)
        inside ^= crosses & (px < x_at)
    return (ys.ravel()[inside] * width + xs.ravel()[inside]).astype(np.int64)


def paint(image: torch.Tensor, index: torch.Tensor, colour: torch.Tensor) -> None:
    """Set the pixels at flat ``index`` (no duplicates) of a contiguous picture to ``colour``."""
    if index.numel():
        image.view(-1, 3)[index] = colour


def blend(image: torch.Tensor, index: torch.Tensor, colour: torch.Tensor, alpha: int) -> None:
    """Blend ``colour`` over the pixels at flat ``index`` with opacity ``alpha`` / 256."""
    if index.numel():
        flat = image.view(-1, 3)
        under = flat[index].to(torch.int32)
        over = colour.to(torch.int32) * alpha
        flat[index] = ((under * (256 - alpha) + over) >> 8).to(torch.uint8)
