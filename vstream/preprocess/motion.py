"""A cheap "did the picture change?" test, on a small grey copy, on the frame's own device.

The motion gate (:class:`~vstream.config.cadence.MotionGateConfig`) keeps
the detector off a still scene. Measuring that must cost far less than the
detection it saves, and must not move the frame off its device, so it works
on a copy of the luma about :data:`SIZE` pixels wide: NV12 and I420 frames
already hold the luma as their first ``height`` rows, and a picture the CPU
decoder has not converted yet lends its luma plane as it is (no colour
conversion at all); an RGB frame's samples are taken on a sparse grid first
and only those are weighted into grey. Only a grid a few times denser than
the copy is read, then averaged down to it, which also tames sensor noise.
Everything stays a torch tensor on the frame's device; the only value that
reaches the host is one number per frame, the fraction of changed pixels.
The luma of a video stream is usually limited range (16..235), grey made
from RGB full range, so the same ``threshold`` is a little stricter on the
former; a stream's frames all take the same way, so its gate is consistent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vstream.config.cadence import MotionGateConfig
from vstream.frame import Frame, PixelFormat

if TYPE_CHECKING:
    import torch

SIZE = 64
"""Width of the grey copy, in pixels (its height keeps the frame's aspect ratio)."""


def small_luma(frame: Frame, width: int = SIZE) -> torch.Tensor:
    """``frame``'s brightness, ``(h, width)`` float32 on its device, ``h`` by its aspect ratio."""
    import torch.nn.functional as F

    height = max(1, round(width * frame.height / frame.width))
    step_y = max(1, frame.height // (height * 4))
    step_x = max(1, frame.width // (width * 4))
    plane = getattr(frame.picture, "luma", lambda: None)()
    if plane is not None:
        luma = plane[::step_y, ::step_x].float()
    elif frame.pixel_format is PixelFormat.RGB24:
        rgb = frame.data[::step_y, ::step_x].float()
        luma = rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114
    else:
        luma = frame.data[: frame.height : step_y, ::step_x].float()
    return F.adaptive_avg_pool2d(luma[None, None], (height, width))[0, 0]


def mask_grid(
    polygons: list[list[tuple[float, float]]], frame_size: tuple[int, int], shape: tuple[int, int]
) -> list[list[bool]]:
    """Which cells of a ``shape`` (rows, columns) grid over the frame lie outside every polygon.

    A cell is masked when its centre is inside a polygon (even-odd rule),
    with polygon corners in frame pixels.
    """
    rows, cols = shape
    width, height = frame_size
    keep = [[True] * cols for _ in range(rows)]
    for r in range(rows):
        y = (r + 0.5) * height / rows
        for c in range(cols):
            x = (c + 0.5) * width / cols
            if any(_inside(x, y, polygon) for polygon in polygons):
                keep[r][c] = False
    return keep


def _inside(x: float, y: float, polygon: list[tuple[float, float]]) -> bool:
    inside = False
    for (x1, y1), (x2, y2) in zip(polygon, [*polygon[1:], polygon[0]], strict=True):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            inside = not inside
    return inside


class MotionGate:
    """Compares each frame with the grey copy kept at the stream's last detection."""

    def __init__(self, config: MotionGateConfig) -> None:
        self.config = config
        self._reference: torch.Tensor | None = None
        self._pending: torch.Tensor | None = None
        """The copy of the frame last measured: the reference once it is detected."""
        self._keep: torch.Tensor | None = None
        """Cells outside the masks (bool, the copy's shape); None without masks."""
        self._size: tuple[int, int, int] | None = None
        """``(width, height, pixel format)`` the reference and mask were made for."""

    def changed_fraction(self, frame: Frame) -> float:
        """The fraction of the (unmasked) picture that changed since :meth:`remember` last ran.

        1.0 when there is nothing to compare with: the first frame, or one of
        another size (a reconnected camera) or on another device.
        """
        import torch

        luma = small_luma(frame)
        size = (frame.width, frame.height, frame.pixel_format.value)
        if self._reference is None or self._size != size or luma.device != self._reference.device:
            self._size = size
            self._reference = None
            self._keep = None
            if self.config.masks:
                grid = mask_grid(
                    [list(p) for p in self.config.masks], (frame.width, frame.height), luma.shape
                )
                self._keep = torch.tensor(grid, dtype=torch.bool, device=luma.device)
            self._pending = luma
            return 1.0
        self._pending = luma
        moved = (luma - self._reference).abs_() > self.config.threshold
        if self._keep is not None:
            total = int(self._keep.sum())
            return float((moved & self._keep).sum()) / total if total else 0.0
        return float(moved.float().mean())

    def still(self, frame: Frame) -> bool:
        """Whether ``frame`` changed less than ``min_area_fraction`` since the last detection."""
        return self.changed_fraction(frame) < self.config.min_area_fraction

    def remember(self) -> None:
        """The frame last measured is detected: later frames are compared with it."""
        self._reference = self._pending
