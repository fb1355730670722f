"""Procedural scenes: textured backgrounds plus solid-colour shapes with exact boxes.

Everything here is plain numpy so the same code renders both the training data
and the sample video, which keeps their statistics aligned. Shapes are
rasterised with a hard in/out test at pixel centres; the ground-truth box is the
bounding box of that binary mask, so it is exact by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NAMES: tuple[str, ...] = ("disc", "square", "triangle", "cross")


@dataclass
class Shape:
    """One object: class id, centre and circumradius in pixels, rotation, RGB colour."""

    cls: int
    cx: float
    cy: float
    radius: float
    angle: float
    color: tuple[int, int, int]
    arm: float = 0.3  # cross arm half-thickness relative to its half-length


def shape_mask(shape: Shape, height: int, width: int) -> tuple[np.ndarray, int, int]:
    """Rasterise ``shape`` inside its local window.

    Returns ``(mask, y0, x0)`` where ``mask`` is a bool array whose top-left
    pixel sits at row ``y0``, column ``x0`` of the image. Working in a small
    window keeps rendering cheap enough to generate training data on the fly.
    """
    r = shape.radius
    x0 = max(math.floor(shape.cx - r) - 1, 0)
    y0 = max(math.floor(shape.cy - r) - 1, 0)
    x1 = min(math.ceil(shape.cx + r) + 2, width)
    y1 = min(math.ceil(shape.cy + r) + 2, height)
    if x1 <= x0 or y1 <= y0:
        return np.zeros((0, 0), bool), y0, x0
    xs = np.arange(x0, x1, dtype=np.float32) + 0.5 - shape.cx
    ys = np.arange(y0, y1, dtype=np.float32) + 0.5 - shape.cy
    dx, dy = np.meshgrid(xs, ys)
    cos_a, sin_a = math.cos(shape.angle), math.sin(shape.angle)
    u = cos_a * dx + sin_a * dy
    v = -sin_a * dx + cos_a * dy
    if shape.cls == 0:
        mask = u * u + v * v <= r * r
    elif shape.cls == 1:
        half = r / math.sqrt(2.0)
        mask = (np.abs(u) <= half) & (np.abs(v) <= half)
    elif shape.cls == 2:
        # Equilateral triangle: intersection of three half-planes at inradius r / 2.
        mask = np.ones_like(u, dtype=bool)
        for phi in (math.pi / 2, math.pi / 2 + 2 * math.pi / 3, math.pi / 2 + 4 * math.pi / 3):
            mask &= u * math.cos(phi) + v * math.sin(phi) <= r / 2
    elif shape.cls == 3:
        length = r / math.sqrt(1.0 + shape.arm * shape.arm)
        thick = shape.arm * length
        au, av_ = np.abs(u), np.abs(v)
        mask = ((au <= length) & (av_ <= thick)) | ((au <= thick) & (av_ <= length))
    else:
        raise ValueError(f"unknown class {shape.cls}")
    return mask, y0, x0


def draw_shape(
    image: np.ndarray, shape: Shape, shading: np.ndarray | None = None
) -> list[int] | None:
    """Paint ``shape`` into ``image`` in place and return its exact box ``[x1, y1, x2, y2]``.

    ``shading`` is an optional per-window multiplier (training only) so the model
    does not rely on perfectly flat colour. Returns None if nothing was drawn.
    """
    height, width = image.shape[:2]
    mask, y0, x0 = shape_mask(shape, height, width)
    if not mask.any():
        return None
    color = np.asarray(shape.color, np.float32)
    region = image[y0 : y0 + mask.shape[0], x0 : x0 + mask.shape[1]]
    if shading is None:
        region[mask] = color.astype(np.uint8)
    else:
        shaded = np.clip(
            color[None, None, :] * shading[: mask.shape[0], : mask.shape[1], None], 0, 255
        )
        region[mask] = shaded[mask].astype(np.uint8)
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    return [x0 + int(cols[0]), y0 + int(rows[0]), x0 + int(cols[-1]) + 1, y0 + int(rows[-1]) + 1]


def _random_color(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0, 255, 3).astype(np.float32)


def _smooth_noise(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """Bilinearly upsampled coarse noise in [0, 1]: soft blotches without a blur kernel."""
    gh = max(2, round(cells * height / max(height, width)) + 1)
    gw = max(2, round(cells * width / max(height, width)) + 1)
    grid = rng.random((gh, gw)).astype(np.float32)
    ys = np.linspace(0, gh - 1, height, dtype=np.float32)
    xs = np.linspace(0, gw - 1, width, dtype=np.float32)
    yi = np.minimum(ys.astype(int), gh - 2)
    xi = np.minimum(xs.astype(int), gw - 2)
    fy = (ys - yi)[:, None]
    fx = (xs - xi)[None, :]
    # Smoothstep weights hide the grid structure of plain bilinear interpolation.
    fy = fy * fy * (3 - 2 * fy)
    fx = fx * fx * (3 - 2 * fx)
    top = grid[yi][:, xi] * (1 - fx) + grid[yi][:, xi + 1] * fx
    bottom = grid[yi + 1][:, xi] * (1 - fx) + grid[yi + 1][:, xi + 1] * fx
    return top * (1 - fy) + bottom * fy


def random_background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A layered texture: gradient base, then optional stripes, checker, blotches, noise."""
    xs = np.arange(width, dtype=np.float32)[None, :]
    ys = np.arange(height, dtype=np.float32)[:, None]
    if rng.random() < 0.7:
        theta = rng.uniform(0, 2 * math.pi)
        t = xs * math.cos(theta) + ys * math.sin(theta)
    else:
        t = np.sqrt((xs - rng.uniform(0, width)) ** 2 + (ys - rng.uniform(0, height)) ** 2)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    c0, c1 = _random_color(rng), _random_color(rng)
    img = c0 + (c1 - c0) * t[..., None]

    if rng.random() < 0.4:
        phi = rng.uniform(0, math.pi)
        period = rng.uniform(6, 60)
        wave = np.sin((2 * math.pi / period) * (xs * math.cos(phi) + ys * math.sin(phi)))
        pattern = (wave > 0).astype(np.float32) if rng.random() < 0.5 else 0.5 + 0.5 * wave
        img = _blend(img, _random_color(rng), pattern * rng.uniform(0.2, 0.8))
    if rng.random() < 0.25:
        phi = rng.uniform(0, math.pi / 2)
        size = rng.uniform(8, 60)
        u = np.floor((xs * math.cos(phi) + ys * math.sin(phi)) / size)
        v = np.floor((ys * math.cos(phi) - xs * math.sin(phi)) / size)
        checker = ((u + v) % 2).astype(np.float32)
        img = _blend(img, _random_color(rng), checker * rng.uniform(0.2, 0.7))
    for _ in range(int(rng.integers(0, 3))):
        blot = _smooth_noise(rng, height, width, int(rng.integers(3, 14)))
        lo = rng.uniform(0.4, 0.7)
        blot = np.clip((blot - lo) / rng.uniform(0.05, 0.3), 0, 1) * rng.uniform(0.3, 0.9)
        img = _blend(img, _random_color(rng), blot)
    if rng.random() < 0.5:
        img += rng.standard_normal((height, width, 1), dtype=np.float32) * rng.uniform(2, 18)
    if rng.random() < 0.3:
        img += rng.standard_normal((height, width, 3), dtype=np.float32) * rng.uniform(2, 10)
    return np.clip(img, 0, 255).astype(np.uint8)


def _blend(img: np.ndarray, color: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Alpha-blend a flat colour over ``img`` with a per-pixel ``alpha`` map."""
    return img + (color - img) * alpha[..., None]


def contrasting_color(
    rng: np.random.Generator, reference: np.ndarray, min_distance: float, tries: int = 20
) -> tuple[int, int, int]:
    """Pick a random colour at least ``min_distance`` (RGB euclidean) from ``reference``.

    Falls back to the best candidate seen, so it always returns something.
    """
    best, best_d = None, -1.0
    for _ in range(tries):
        color = rng.uniform(0, 255, 3)
        d = float(np.linalg.norm(color - reference))
        if d >= min_distance:
            return (int(color[0]), int(color[1]), int(color[2]))
        if d > best_d:
            best, best_d = color, d
    assert best is not None
    return (int(best[0]), int(best[1]), int(best[2]))


def random_scene(
    rng: np.random.Generator,
    background: np.ndarray,
    radius_range: tuple[float, float],
    max_objects: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw random shapes onto a copy of ``background`` (H, W, 3 uint8).

    Objects are placed by rejection sampling so their circumcircles never overlap
    and stay fully inside the image (the sample video has the same property).
    Returns the uint8 RGB image and an ``(n, 5)`` float32 array of
    ``[x1, y1, x2, y2, cls]`` boxes.
    """
    img = background.copy()
    height, width = img.shape[:2]
    placed: list[tuple[float, float, float]] = []
    boxes: list[list[float]] = []
    target = int(rng.integers(max_objects // 3, max_objects + 1))
    log_lo, log_hi = math.log(radius_range[0]), math.log(radius_range[1])
    for _ in range(target * 6):
        if len(placed) >= target:
            break
        r = math.exp(rng.uniform(log_lo, log_hi))
        if 2 * r + 2 > min(height, width):
            continue
        cx = rng.uniform(r + 1, width - r - 1)
        cy = rng.uniform(r + 1, height - r - 1)
        gap = rng.uniform(0, 6)
        if any((cx - px) ** 2 + (cy - py) ** 2 < (r + pr + gap) ** 2 for px, py, pr in placed):
            continue
        cls = int(rng.integers(0, len(NAMES)))
        x0, y0 = int(max(cx - r, 0)), int(max(cy - r, 0))
        patch = img[y0 : int(cy + r) + 1, x0 : int(cx + r) + 1].reshape(-1, 3)
        color = contrasting_color(rng, patch.mean(axis=0), min_distance=rng.uniform(40, 120))
        shape = Shape(cls, cx, cy, r, rng.uniform(0, 2 * math.pi), color, rng.uniform(0.22, 0.36))
        shading = None
        if rng.random() < 0.3:
            side = int(2 * r) + 6  # covers the largest possible mask window
            amp = rng.uniform(0.05, 0.15)
            shading = 1 + amp * (2 * _smooth_noise(rng, side, side, 2) - 1)
        box = draw_shape(img, shape, shading)
        if box is not None:
            placed.append((cx, cy, r))
            boxes.append([*box, cls])
    return img, np.asarray(boxes, np.float32).reshape(-1, 5)


def background_variant(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """A cheap new-looking background: random flips and RGB channel permutation.

    Rendering textures dominates data generation time, so training reuses each
    one a few times in this disguised form.
    """
    out = background
    if rng.random() < 0.5:
        out = out[:, ::-1]
    if rng.random() < 0.5:
        out = out[::-1]
    return np.ascontiguousarray(out[:, :, rng.permutation(3)])
