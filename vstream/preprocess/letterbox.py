"""Letterbox resize into the model's persistent input tensor.

The geometry follows the Ultralytics convention exactly (scale, rounding of the
resized size and of the padding, pad value 114), and so do the pixels: by
default (``resize: linear``) every frame, from the CPU decoder or NVDEC, goes
through :mod:`vstream.preprocess.resample`, which makes the picture Ultralytics
validates its models on (FFmpeg's RGB, OpenCV's ``INTER_LINEAR``) with integer
arithmetic that is the same on every device. Boxes map back to the same
original-frame coordinates.

``resize: area`` averages every source pixel instead (no aliasing when a
large frame shrinks a lot): FFmpeg's area scaler for pictures the CPU decoder
left in FFmpeg's memory (:mod:`vstream.preprocess.scale`), torch's area
interpolation for tensor frames. It is cheaper on the CPU, but the model then
sees pixels it was not validated on: scores near the threshold move, so
detections differ from the reference's (see the README's "Models").

Either way nothing is allocated per frame: each slot's window is written in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import av
import numpy as np
import torch
import torch.nn.functional as F

from vstream.decoders.cpu import PyAVPicture
from vstream.devices import same_device
from vstream.frame import Frame, PixelFormat
from vstream.preprocess.colour import chroma_planes, to_rgb_planar
from vstream.preprocess.resample import Resampler
from vstream.preprocess.scale import Scaler

Resize = Literal["linear", "area"]
"""How a frame is resized into its window: the reference's bilinear, or area averaging."""

_FFMPEG_420 = {"yuv420p", "yuvj420p"}
"""Formats of decoded pictures whose planes :class:`Resampler` converts as FFmpeg does."""

_FFMPEG_MATRICES = {0, 1, 2, 5, 6}
"""FFmpeg colour spaces converted with the BT.601 or BT.709 matrix (RGB, BT.709,
unspecified, BT.470BG, SMPTE 170M); pictures in others are converted by FFmpeg itself."""

PAD_VALUE = 114
"""Grey level of the letterbox bars, as in Ultralytics."""


@dataclass(frozen=True)
class LetterboxGeometry:
    """Where a source frame lands inside the model input, and how to map boxes back."""

    source_width: int
    source_height: int
    input_width: int
    input_height: int
    resized_width: int
    resized_height: int
    left: int
    """Padding columns left of the resized image (letterbox rounding)."""
    top: int
    """Padding rows above the resized image (letterbox rounding)."""
    gain: float
    """Scale from source pixels to input pixels, ``min(input_h / h, input_w / w)``."""
    box_pad_x: float
    """Horizontal offset subtracted from boxes before dividing by ``gain``."""
    box_pad_y: float
    """Vertical offset subtracted from boxes before dividing by ``gain``."""

    @classmethod
    def fit(
        cls, source_width: int, source_height: int, input_width: int, input_height: int
    ) -> LetterboxGeometry:
        """Compute the geometry for a ``source_width x source_height`` frame."""
        if min(source_width, source_height, input_width, input_height) <= 0:
            raise ValueError(
                f"letterbox sizes must be positive, got source {source_width}x{source_height} "
                f"and input {input_width}x{input_height}"
            )
        gain = min(input_height / source_height, input_width / source_width)
        resized_width = round(source_width * gain)
        resized_height = round(source_height * gain)
        half_dw = (input_width - resized_width) / 2
        half_dh = (input_height - resized_height) / 2
        return cls(
            source_width=source_width,
            source_height=source_height,
            input_width=input_width,
            input_height=input_height,
            resized_width=resized_width,
            resized_height=resized_height,
            left=round(half_dw - 0.1),
            top=round(half_dh - 0.1),
            gain=gain,
            box_pad_x=round((input_width - source_width * gain) / 2 - 0.1),
            box_pad_y=round((input_height - source_height * gain) / 2 - 0.1),
        )


class Letterboxer:
    """Writes frames into slots of a preallocated NCHW model input tensor.

    The input tensor belongs to the model session and is bound to ONNX
    Runtime by address, so this class only ever writes into it in place. The
    padding of a slot is painted only when the geometry of that slot changes.
    """

    def __init__(self, input_tensor: torch.Tensor, resize: Resize = "linear") -> None:
        if input_tensor.dim() != 4 or input_tensor.shape[1] != 3:
            raise ValueError(f"input tensor must be (N, 3, H, W), got {tuple(input_tensor.shape)}")
        if resize not in ("linear", "area"):
            raise ValueError(f"resize must be 'linear' or 'area', got {resize!r}")
        self.input = input_tensor
        self.resize = resize
        self._slot_geometry: list[LetterboxGeometry | None] = [None] * input_tensor.shape[0]
        self._resampler = Resampler()
        self._scaler = Scaler()
        self._levels = torch.tensor(255, dtype=input_tensor.dtype, device=input_tensor.device)
        """255 as a tensor made once (a Python number is boxed anew at every call)."""

    @property
    def batch_size(self) -> int:
        return self.input.shape[0]

    def load(self, slot: int, frame: Frame) -> LetterboxGeometry:
        """Letterbox ``frame`` into batch slot ``slot``; return its geometry."""
        if not same_device(frame.device, self.input.device):
            raise ValueError(
                f"frame is on {frame.device} but the model input is on {self.input.device}"
            )
        _, _, input_height, input_width = self.input.shape
        geometry = LetterboxGeometry.fit(frame.width, frame.height, input_width, input_height)
        target = self.input[slot]
        if self._slot_geometry[slot] != geometry:
            target.fill_(PAD_VALUE / 255.0)
            self._slot_geometry[slot] = geometry
        window = target[
            :,
            geometry.top : geometry.top + geometry.resized_height,
            geometry.left : geometry.left + geometry.resized_width,
        ]
        if self.resize == "area":
            self._area(frame, window)
        else:
            self._linear(frame, window)
        return geometry

    def _linear(self, frame: Frame, window: torch.Tensor) -> None:
        """The reference's pixels: YUV planes as decoded where possible, else FFmpeg's RGB."""
        picture = frame.picture
        if isinstance(picture, PyAVPicture):
            decoded = picture.frame
            if (
                decoded.format.name in _FFMPEG_420
                and decoded.colorspace in _FFMPEG_MATRICES
                and not (decoded.width % 2 or decoded.height % 2)
            ):
                self._resampler.yuv420(*_planes(decoded), frame.colour, window)
            else:  # another layout or colour space: FFmpeg converts it, as for the reference
                self._resampler.rgb(picture.to_tensor(PixelFormat.RGB24), window)
            return
        if frame.pixel_format is PixelFormat.RGB24:
            self._resampler.rgb(frame.data, window)
            return
        u, v = chroma_planes(frame)
        self._resampler.yuv420(frame.data[: frame.height], u, v, frame.colour, window)

    def _area(self, frame: Frame, window: torch.Tensor) -> None:
        """Area averaging: FFmpeg's scaler for its own pictures, torch's for tensor frames."""
        height, width = window.shape[1:]
        if isinstance(frame.picture, PyAVPicture) and window.device.type == "cpu":
            planes = self._scaler.rgb_planes(frame.picture.frame, width, height)
            # copy_ converts uint8 to the input's type as it goes and div_ works in place
            # with a divisor made once: nothing is allocated.
            for channel, plane in zip(window, planes, strict=True):
                channel.copy_(plane)
            window.div_(self._levels)
            return
        image = self._planar(frame)
        if (width, height) != (frame.width, frame.height):
            image = F.interpolate(image.float(), size=(height, width), mode="area")
        torch.div(image[0], self._levels, out=window)

    @staticmethod
    def _planar(frame: Frame) -> torch.Tensor:
        """The frame as ``(1, 3, height, width)`` RGB in 0..255 (a view for packed RGB)."""
        if frame.pixel_format is PixelFormat.RGB24:
            return frame.data.permute(2, 0, 1).unsqueeze(0)
        return to_rgb_planar(frame)


def _planes(picture: av.VideoFrame) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Y, U and V planes of an even-sized 4:2:0 picture, as views of FFmpeg's memory."""
    luma = (picture.height, picture.width)
    chroma = (picture.height // 2, picture.width // 2)
    y, u, v = [
        torch.from_numpy(np.ndarray(shape, np.uint8, plane, strides=(plane.line_size, 1)))
        for plane, shape in zip(picture.planes, (luma, chroma, chroma), strict=True)
    ]
    return y, u, v
