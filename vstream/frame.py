"""The decoded frame: a device tensor plus what is needed to map results back.

Every decoder (PyAV on the CPU, NVDEC on a GPU) produces :class:`Frame`; every
later stage consumes it, so this type is the contract between decoding and the
rest of the pipeline.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

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


class DecodedPicture(Protocol):
    """A decoded picture still in its decoder's memory, made a tensor only when asked.

    The CPU decoder hands these out instead of converting every picture to a
    full-size RGB tensor: preprocessing keeps only the picture at the model's
    letterbox size (:mod:`vstream.preprocess.letterbox`), and only what
    needs the whole picture (annotated video, previews, snapshots) pays for
    :meth:`to_tensor`.
    """

    @property
    def device(self) -> torch.device: ...

    def to_tensor(self, pixel_format: PixelFormat) -> torch.Tensor:
        """The whole picture as a ``uint8`` tensor laid out as ``pixel_format`` says."""
        ...


_FIELDS = (
    "pixel_format",
    "width",
    "height",
    "stream_id",
    "index",
    "pts_seconds",
    "colour",
    "capture_time",
    "picture",
)


class Frame:
    """One decoded video frame on a device, immutable.

    ``data`` stays wherever the decoder put it (CPU or CUDA memory); nothing in
    the pipeline copies it to the host. A frame is made either from a tensor
    (``data``) or from a :class:`DecodedPicture` (``picture``, with ``data``
    None), in which case ``data`` is converted on first use and kept.
    """

    __slots__ = ("_data", *_FIELDS)

    pixel_format: PixelFormat
    """Layout of :attr:`data`."""
    width: int
    height: int
    stream_id: str
    index: int
    """Position of the frame in its stream, counted from 0."""
    pts_seconds: float
    """Presentation time stamp in seconds from the start of the stream."""
    colour: ColourSpace
    capture_time: float | None
    """Wall-clock time (``time.time()``) the frame's age counts from: when its camera sent it
    (live input: its packet's read time less the stream's backlog then), or when it was
    decoded (files)."""
    picture: DecodedPicture | None
    """The decoder's own picture when the frame was made from one (the CPU decoder's)."""

    def __init__(
        self,
        data: torch.Tensor | None,
        pixel_format: PixelFormat,
        width: int,
        height: int,
        stream_id: str = "0",
        index: int = 0,
        pts_seconds: float = 0.0,
        colour: ColourSpace = ColourSpace(),
        capture_time: float | None = None,
        *,
        picture: DecodedPicture | None = None,
    ) -> None:
        if width <= 0 or height <= 0:
            raise ValueError(f"frame size must be positive, got {width}x{height}")
        if (data is None) == (picture is None):
            raise ValueError("a frame is made from a tensor or from a decoded picture, not both")
        values = (pixel_format, width, height, stream_id, index, pts_seconds, colour)
        for name, value in zip(_FIELDS, (*values, capture_time, picture), strict=True):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_data", None)
        if data is not None:
            self._check(data)
            object.__setattr__(self, "_data", data)
        else:
            self.expected_shape(pixel_format, width, height)  # odd-sized 4:2:0 fails now

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Frame is immutable: cannot set {name!r}")

    def __repr__(self) -> str:
        return (
            f"Frame({self.pixel_format.value} {self.width}x{self.height}, "
            f"stream {self.stream_id!r} #{self.index}, pts {self.pts_seconds:.3f} s)"
        )

    def in_stream(self, stream_id: str) -> Frame:
        """This frame (the same pixels, not copied) as a frame of stream ``stream_id``."""
        copy = object.__new__(Frame)
        for name in ("_data", *_FIELDS):
            object.__setattr__(copy, name, getattr(self, name))
        object.__setattr__(copy, "stream_id", stream_id)
        return copy

    def _check(self, data: torch.Tensor) -> None:
        if str(data.dtype) != "torch.uint8":
            raise ValueError(f"frame data must be uint8, got {data.dtype}")
        expected = self.expected_shape(self.pixel_format, self.width, self.height)
        if tuple(data.shape) != expected:
            raise ValueError(
                f"{self.pixel_format.value} frame of {self.width}x{self.height} needs data of "
                f"shape {expected}, got {tuple(data.shape)}"
            )

    @property
    def data(self) -> torch.Tensor:
        """The whole picture, laid out as :attr:`pixel_format` says (converted once, on demand)."""
        data = self._data
        if data is None:
            assert self.picture is not None
            data = self.picture.to_tensor(self.pixel_format)
            self._check(data)
            # Two threads asking at once both convert; either result is the same picture.
            object.__setattr__(self, "_data", data)
        return data

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
        if self._data is not None:
            return self._data.device
        assert self.picture is not None
        return self.picture.device


Channels = Literal["bgr", "rgb"]

IMAGE_CHANNELS = {"numpy": "bgr", "torch": "rgb"}
"""The channel order a picture is read in when not told: OpenCV's (BGR) for numpy arrays,
as ``cv2.imread`` and ``cv2.VideoCapture`` give them and as Ultralytics reads arrays;
torchvision's (RGB) for torch tensors, as ``torchvision.io.decode_image`` gives them."""


def as_frame(
    image: Frame | Any,
    channels: Channels | None = None,
    *,
    stream_id: str = "0",
    index: int = 0,
    pts_seconds: float = 0.0,
) -> Frame:
    """``image`` as a :class:`Frame`: a frame as it is, or a picture others' tools make.

    Takes a numpy array ``(H, W, 3)`` ``uint8`` or a torch tensor ``(H, W, 3)`` or
    ``(3, H, W)`` ``uint8`` (on any device), in the channel order ``channels`` says,
    else :data:`IMAGE_CHANNELS`' for its kind; a PIL image is read as RGB. Anything
    else is a ValueError naming what was given and what is taken, so that a wrong
    layout never reaches the model as garbage pictures.
    """
    if isinstance(image, Frame):
        return image
    import numpy as np
    import torch

    if channels is not None and channels not in IMAGE_CHANNELS.values():
        raise ValueError(f"channels must be 'bgr' or 'rgb', got {channels!r}")
    kind = "torch" if isinstance(image, torch.Tensor) else "numpy"
    if kind == "numpy" and hasattr(image, "convert") and hasattr(image, "mode"):
        image, channels = np.asarray(image.convert("RGB")), "rgb"  # a PIL image
    if kind == "numpy" and not isinstance(image, np.ndarray):
        raise ValueError(
            f"expected a Frame, a numpy array or a torch tensor, got {type(image).__name__}"
        )
    shape, dtype = tuple(image.shape), str(image.dtype).removeprefix("torch.")
    if kind == "torch" and len(shape) == 3 and shape[0] == 3 and shape[2] != 3:
        image = image.permute(1, 2, 0)  # CHW, torchvision's layout
        shape = tuple(image.shape)
    if len(shape) != 3 or shape[2] != 3 or dtype != "uint8":
        layouts = "(H, W, 3)" if kind == "numpy" else "(H, W, 3) or (3, H, W)"
        raise ValueError(f"a {kind} picture must be {layouts} uint8, got shape {shape} {dtype}")
    if kind == "numpy":
        image = np.ascontiguousarray(image)
        data = torch.from_numpy(image if image.flags.writeable else image.copy())
    else:
        data = image
    if (channels or IMAGE_CHANNELS[kind]) == "bgr":
        data = data.flip(-1)
    height, width = shape[0], shape[1]
    return Frame(
        data.contiguous(),
        PixelFormat.RGB24,
        width,
        height,
        stream_id=stream_id,
        index=index,
        pts_seconds=pts_seconds,
    )
