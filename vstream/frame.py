"""The decoded frame: a device tensor plus what is needed to map results back.

Every decoder (PyAV on the CPU, NVDEC on a GPU) produces :class:`Frame`; every
later stage consumes it, so this type is the contract between decoding and the
rest of the pipeline.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class PixelFormat(str, enum.Enum):
    """Memory layout of :attr:`Frame.data`."""

    RGB24 = "rgb24"
    """Packed RGB, ``uint8`` tensor of shape ``(height, width, 3)``."""
    NV12 = "nv12"
    """Luma plane then interleaved UV at half resolution: ``uint8`` ``(height * 3 // 2, width)``."""
    YUV420P = "yuv420p"
    """Planar Y, U, V (I420), chroma at half resolution: ``uint8`` ``(height * 3 // 2, width)``."""


class ColourMatrix(str, enum.Enum):
    """YUV -> RGB matrix coefficients, as signalled by the video stream."""

    BT601 = "bt601"
    BT709 = "bt709"


@dataclass(frozen=True)
class ColourSpace:
    """How YUV samples map to RGB. Ignored for RGB frames.

    ``full_range`` is False for "limited"/"TV"/"MPEG" range (Y in 16..235,
    chroma in 16..240), the usual case for broadcast and camera video.
    """

    matrix: ColourMatrix = ColourMatrix.BT601
    full_range: bool = False


@dataclass(frozen=True)
class Frame:
    """One decoded video frame on a device.

    ``data`` stays wherever the decoder put it (CPU or CUDA memory); nothing in
    the pipeline copies it to the host.
    """

    data: torch.Tensor
    pixel_format: PixelFormat
    width: int
    height: int
    stream_id: str = "0"
    index: int = 0
    """Position of the frame in its stream, counted from 0."""
    pts_seconds: float = 0.0
    """Presentation time stamp in seconds from the start of the stream."""
    colour: ColourSpace = ColourSpace()
    capture_time: float | None = None
    """Wall-clock time (``time.time()``) the frame was received, for frame-age reporting."""

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"frame size must be positive, got {self.width}x{self.height}")
        if str(self.data.dtype) != "torch.uint8":
            raise ValueError(f"frame data must be uint8, got {self.data.dtype}")
        expected = self.expected_shape(self.pixel_format, self.width, self.height)
        if tuple(self.data.shape) != expected:
            raise ValueError(
                f"{self.pixel_format.value} frame of {self.width}x{self.height} needs data of "
                f"shape {expected}, got {tuple(self.data.shape)}"
            )

    @staticmethod
    def expected_shape(pixel_format: PixelFormat, width: int, height: int) -> tuple[int, ...]:
        """Shape that ``data`` must have for a frame of this format and size."""
        if pixel_format is PixelFormat.RGB24:
            return (height, width, 3)
        if width % 2 or height % 2:
            raise ValueError(
                f"{pixel_format.value} frames need an even width and height, got {width}x{height}"
            )
        return (height * 3 // 2, width)

    @property
    def device(self) -> torch.device:
        return self.data.device
