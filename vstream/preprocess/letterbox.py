"""Letterbox resize into the model's persistent input tensor.

The geometry follows the Ultralytics convention exactly (scale, rounding of the
resized size and of the padding, pad value 114), so models exported by
Ultralytics see the same pixels they were validated on, and boxes map back to
the same original-frame coordinates.

Two ways into a slot, with the same geometry:

- a picture the CPU decoder left in FFmpeg's memory is converted and resized
  in one pass of FFmpeg's scaler (:mod:`vstream.preprocess.scale`), then only
  copied into its window of the slot and normalised, in place: no tensor is
  allocated per frame;
- a tensor frame (NV12/I420 from NVDEC, or RGB) is converted to RGB and
  resized on its device with torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vstream.decoders.cpu import PyAVPicture
from vstream.frame import Frame, PixelFormat
from vstream.preprocess.colour import to_rgb_planar
from vstream.preprocess.scale import Scaler

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

    def __init__(self, input_tensor: torch.Tensor) -> None:
        if input_tensor.dim() != 4 or input_tensor.shape[1] != 3:
            raise ValueError(f"input tensor must be (N, 3, H, W), got {tuple(input_tensor.shape)}")
        self.input = input_tensor
        self._slot_geometry: list[LetterboxGeometry | None] = [None] * input_tensor.shape[0]
        self._scaler = Scaler()
        self._unit = torch.tensor(1 / 255, dtype=input_tensor.dtype, device=input_tensor.device)
        """0..255 to 0..1, as a tensor made once (a Python float is boxed anew at every call)."""

    @property
    def batch_size(self) -> int:
        return self.input.shape[0]

    def load(self, slot: int, frame: Frame) -> LetterboxGeometry:
        """Letterbox ``frame`` into batch slot ``slot``; return its geometry."""
        if frame.device != self.input.device:
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
        if isinstance(frame.picture, PyAVPicture) and window.device.type == "cpu":
            planes = self._scaler.rgb_planes(
                frame.picture.frame, geometry.resized_width, geometry.resized_height
            )
            # copy_ converts uint8 to the input's type as it goes and mul_ works in place
            # with a scale made once: nothing is allocated (torch.mul(..., out=window)
            # would allocate for the type promotion, a Python float for the scalar).
            for channel, plane in zip(window, planes, strict=True):
                channel.copy_(plane)
            window.mul_(self._unit)
            return geometry
        image = self._planar(frame)
        if (geometry.resized_width, geometry.resized_height) != (frame.width, frame.height):
            image = F.interpolate(
                image,
                size=(geometry.resized_height, geometry.resized_width),
                mode="bilinear",
                align_corners=False,
            )
        torch.mul(image[0], 1.0 / 255.0, out=window)
        return geometry

    @staticmethod
    def _planar(frame: Frame) -> torch.Tensor:
        """The frame as ``(1, 3, height, width)`` RGB in 0..255, as cheaply as the device allows.

        On the CPU a packed RGB frame stays uint8 (a channels-last view, no
        copy): resizing it moves a quarter of the bytes of float32, which on a
        small CPU is most of the preprocessing time, and it rounds to whole
        levels as OpenCV's resize (what Ultralytics uses) does. Other cases go
        through float32, which every device interpolates.
        """
        if frame.pixel_format is PixelFormat.RGB24 and frame.device.type == "cpu":
            return frame.data.permute(2, 0, 1).unsqueeze(0)
        return to_rgb_planar(frame)
