"""Letterbox resize into the model's persistent input tensor.

The geometry follows the Ultralytics convention exactly (scale, rounding of the
resized size and of the padding, pad value 114), and so do the pixels: by
default (``resize: linear``) the model sees the picture Ultralytics validates
its models on, FFmpeg's RGB resized by OpenCV's ``INTER_LINEAR``. On the CPU
those two libraries make it (0.6 ms for a 720p frame, less than reproducing
them); frames on a GPU (NVDEC's NV12) go through
:mod:`vstream.preprocess.resample`, which reproduces both in integer tensor
arithmetic. Boxes map back to the same original-frame coordinates.

``resize: area`` averages every source pixel instead (no aliasing when a
large frame shrinks a lot): FFmpeg's area scaler for pictures the CPU decoder
left in FFmpeg's memory (:mod:`vstream.preprocess.scale`), torch's area
interpolation for tensor frames. It is cheaper on the CPU, but the model then
sees pixels it was not validated on: scores near the threshold move, so
detections differ from the reference's (see the README's "Models").

``resize_mode: stretch`` (models trained without a letterbox: RT-DETR,
RF-DETR, D-FINE, DEIM) fills the whole input instead, with separate x and y
gains and no padding. A family's normalisation (value range, mean, std) is
applied to the window in place with per-channel tensors made once.

No tensor is allocated per frame: each slot's window is written in place
(on the CPU FFmpeg's full-size RGB lives only until OpenCV has resized it).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from vstream.decoders.cpu import PyAVPicture
from vstream.devices import same_device
from vstream.frame import Frame, PixelFormat
from vstream.preprocess.colour import to_rgb_planar
from vstream.preprocess.resample import Resampler
from vstream.preprocess.scale import Scaler

Resize = Literal["linear", "area"]
"""How a frame is resized into its window: the reference's bilinear, or area averaging."""

ResizeMode = Literal["letterbox", "stretch"]
"""Where the frame goes: kept in proportion with grey bars, or stretched to the whole input."""

RGB24 = PixelFormat.RGB24

MAX_SIZES = 8
"""Resized-picture buffers kept per letterboxer, one per window size."""

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
    """Horizontal offset subtracted from boxes before dividing by ``gain_x``."""
    box_pad_y: float
    """Vertical offset subtracted from boxes before dividing by ``gain_y``."""
    gain_x: float
    """Horizontal scale from source to input pixels: ``resized_w / w`` (``gain``, rounded as
    the picture's width was), or ``input_w / w`` stretched."""
    gain_y: float
    """Vertical scale from source to input pixels: ``resized_h / h``, or ``input_h / h``
    stretched."""

    @classmethod
    def fit(
        cls,
        source_width: int,
        source_height: int,
        input_width: int,
        input_height: int,
        mode: ResizeMode = "letterbox",
    ) -> LetterboxGeometry:
        """Compute the geometry for a ``source_width x source_height`` frame."""
        if min(source_width, source_height, input_width, input_height) <= 0:
            raise ValueError(
                f"letterbox sizes must be positive, got source {source_width}x{source_height} "
                f"and input {input_width}x{input_height}"
            )
        if mode == "stretch":
            return cls(
                source_width=source_width,
                source_height=source_height,
                input_width=input_width,
                input_height=input_height,
                resized_width=input_width,
                resized_height=input_height,
                left=0,
                top=0,
                gain=min(input_height / source_height, input_width / source_width),
                box_pad_x=0.0,
                box_pad_y=0.0,
                gain_x=input_width / source_width,
                gain_y=input_height / source_height,
            )
        gain = min(input_height / source_height, input_width / source_width)
        resized_width = max(round(source_width * gain), 1)
        resized_height = max(round(source_height * gain), 1)
        left = round((input_width - resized_width) / 2 - 0.1)
        top = round((input_height - resized_height) / 2 - 0.1)
        # Boxes go back as the reference maps them (Ultralytics' scale_boxes from 8.4): each
        # axis by the size it was rounded to, from the padding actually painted. One gain for
        # both would put an 854x480 frame's boxes up to 0.34 px away from Ultralytics'.
        return cls(
            source_width=source_width,
            source_height=source_height,
            input_width=input_width,
            input_height=input_height,
            resized_width=resized_width,
            resized_height=resized_height,
            left=left,
            top=top,
            gain=gain,
            box_pad_x=left,
            box_pad_y=top,
            gain_x=resized_width / source_width,
            gain_y=resized_height / source_height,
        )


class Letterboxer:
    """Writes frames into slots of a preallocated NCHW model input tensor.

    The input tensor belongs to the model session and is bound to ONNX
    Runtime by address, so this class only ever writes into it in place. The
    padding of a slot is painted only when the geometry of that slot changes.
    """

    def __init__(
        self,
        input_tensor: torch.Tensor,
        resize: Resize = "linear",
        mode: ResizeMode = "letterbox",
        normalise: tuple[Sequence[float], Sequence[float]] | None = None,
        resampler: Resampler | None = None,
    ) -> None:
        """``normalise`` is (offset, divisor) per channel: ``value = (pixel - offset) / divisor``
        for pixels in 0..1 (see :meth:`ModelConfig.normalisation`); None leaves 0..1.
        ``resampler`` may be shared by the letterboxers of one model's buffers (it locks):
        its scratch buffers are the largest part of a GPU pipeline's own memory."""
        if input_tensor.dim() != 4 or input_tensor.shape[1] != 3:
            raise ValueError(f"input tensor must be (N, 3, H, W), got {tuple(input_tensor.shape)}")
        if resize not in ("linear", "area"):
            raise ValueError(f"resize must be 'linear' or 'area', got {resize!r}")
        if mode not in ("letterbox", "stretch"):
            raise ValueError(f"resize mode must be 'letterbox' or 'stretch', got {mode!r}")
        self.input = input_tensor
        self.resize = resize
        self.mode = mode
        self._offset: torch.Tensor | None = None
        self._divisor: torch.Tensor | None = None
        self._pad = [PAD_VALUE / 255.0] * 3
        if normalise is not None:
            offset, divisor = normalise
            made = dict(dtype=input_tensor.dtype, device=input_tensor.device)
            self._offset = torch.tensor(list(offset), **made).view(3, 1, 1)
            self._divisor = torch.tensor(list(divisor), **made).view(3, 1, 1)
            self._pad = [(PAD_VALUE / 255.0 - o) / d for o, d in zip(offset, divisor, strict=True)]
        self._slot_geometry: list[LetterboxGeometry | None] = [None] * input_tensor.shape[0]
        self._resampler = resampler or Resampler(frames=input_tensor.shape[0])
        self._windows: dict[tuple[int, int, LetterboxGeometry], torch.Tensor] = {}
        """Views of the input where runs of slots are resampled together, made once each."""
        self._resized: dict[tuple[int, int], np.ndarray] = {}
        self._scaler = Scaler()
        self._levels = torch.tensor(255, dtype=input_tensor.dtype, device=input_tensor.device)
        """255 as a tensor made once (a Python number is boxed anew at every call)."""

    @property
    def batch_size(self) -> int:
        return self.input.shape[0]

    def load(self, slot: int, frame: Frame) -> LetterboxGeometry:
        """Letterbox ``frame`` into batch slot ``slot``; return its geometry."""
        return self.load_batch(slot, [frame])[0]

    def load_batch(self, first_slot: int, frames: Sequence[Frame]) -> list[LetterboxGeometry]:
        """Letterbox ``frames`` into consecutive slots from ``first_slot``; their geometries.

        Frames alike (size, layout, colour and device) that take the device
        resampler go through it together: each costs one gathering operation,
        and every later step runs once for all of them. The CPU decoder's
        pictures go to FFmpeg and OpenCV one by one, as before.
        """
        geometries: list[LetterboxGeometry] = []
        slot = first_slot
        for run in _alike_runs(frames):
            first = run[0]
            if not same_device(first.device, self.input.device):
                raise ValueError(
                    f"frame is on {first.device} but the model input is on {self.input.device}"
                )
            if self._resampled(first):
                geometries += self._load_together(slot, run)
            else:
                geometries += [self._load_one(slot + i, frame) for i, frame in enumerate(run)]
            slot += len(run)
        return geometries

    def _fit(self, frame: Frame) -> LetterboxGeometry:
        _, _, input_height, input_width = self.input.shape
        return LetterboxGeometry.fit(
            frame.width, frame.height, input_width, input_height, self.mode
        )

    def _place(self, slot: int, geometry: LetterboxGeometry) -> None:
        """Make ``slot`` ready for a frame of ``geometry``: its padding is painted when the
        geometry changes."""
        if self._slot_geometry[slot] != geometry:
            for channel, value in zip(self.input[slot], self._pad, strict=True):
                channel.fill_(value)
            self._slot_geometry[slot] = geometry

    def _normalise(self, window: torch.Tensor) -> None:
        if self._offset is not None and self._divisor is not None:
            window.sub_(self._offset).div_(self._divisor)  # in place, broadcast: no allocation

    def _resampled(self, frame: Frame) -> bool:
        """Whether ``frame`` takes the device resampler: the reference's pixels off the CPU
        decoder (NVDEC's NV12, tensor frames); FFmpeg and OpenCV make them for its pictures."""
        if self.resize != "linear":
            return False
        on_cpu = self.input.device.type == "cpu"
        return not (
            on_cpu and (isinstance(frame.picture, PyAVPicture) or frame.pixel_format is RGB24)
        )

    def _load_together(self, first_slot: int, frames: Sequence[Frame]) -> list[LetterboxGeometry]:
        first = frames[0]
        geometry = self._fit(first)  # frames alike: one geometry for all of them
        for slot in range(first_slot, first_slot + len(frames)):
            self._place(slot, geometry)
        key = (first_slot, len(frames), geometry)
        windows = self._windows.get(key)
        if windows is None:
            if len(self._windows) >= MAX_SIZES * self.batch_size:
                self._windows.clear()
            windows = self._windows[key] = self.input[
                first_slot : first_slot + len(frames),
                :,
                geometry.top : geometry.top + geometry.resized_height,
                geometry.left : geometry.left + geometry.resized_width,
            ]
        self._resampler.resample(
            [f.data for f in frames],
            first.pixel_format,
            (first.width, first.height),
            first.colour,
            windows,
        )
        self._normalise(windows)
        return [geometry] * len(frames)

    def _load_one(self, slot: int, frame: Frame) -> LetterboxGeometry:
        geometry = self._fit(frame)
        self._place(slot, geometry)
        window = self.input[
            slot,
            :,
            geometry.top : geometry.top + geometry.resized_height,
            geometry.left : geometry.left + geometry.resized_width,
        ]
        if self.resize == "area":
            self._area(frame, window)
        else:
            self._opencv(frame, window)
        self._normalise(window)
        return geometry

    def _opencv(self, frame: Frame, window: torch.Tensor) -> None:
        """FFmpeg's RGB of the picture, resized by OpenCV's ``INTER_LINEAR``: the reference itself.

        The full-size RGB is FFmpeg's, converted on this thread and dropped
        after the resize (the frame keeps no full-size copy); the resized
        picture goes into a buffer kept per size, then into the window.
        """
        cv2 = _opencv()
        picture = frame.picture
        if isinstance(picture, PyAVPicture):
            rgb = picture.frame.to_ndarray(format="rgb24", threads=1)
        else:
            rgb = frame.data.numpy()
        height, width = window.shape[1:]
        if (width, height) != (frame.width, frame.height):
            resized = self._resized.get((height, width))
            if resized is None:
                if len(self._resized) >= MAX_SIZES:
                    self._resized.clear()
                resized = self._resized[height, width] = np.empty((height, width, 3), np.uint8)
            rgb = cv2.resize(rgb, (width, height), dst=resized, interpolation=cv2.INTER_LINEAR)
        window.copy_(torch.from_numpy(rgb).permute(2, 0, 1)).div_(self._levels)

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


def _alike_runs(frames: Sequence[Frame]) -> list[list[Frame]]:
    """``frames`` cut into runs of consecutive frames of one size, layout, colour and device."""
    runs: list[list[Frame]] = []
    last = None
    for frame in frames:
        key = (frame.width, frame.height, frame.pixel_format, frame.colour, frame.device)
        if runs and key == last:
            runs[-1].append(frame)
        else:
            runs.append([frame])
        last = key
    return runs


@functools.cache
def _opencv() -> ModuleType:
    """OpenCV, imported on first use, with its own thread pool off.

    Letterboxing runs on the pipeline's stage threads beside the model runs;
    OpenCV would otherwise spread every resize over a thread per core. The
    setting is OpenCV's, process-wide.
    """
    import cv2

    cv2.setNumThreads(1)
    return cv2
