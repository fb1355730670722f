"""The reference letterbox resize, computed only where the model input samples the picture.

Ultralytics validates its models on pictures that FFmpeg converted to RGB at
full size (OpenCV decodes through FFmpeg) and OpenCV then resized with
``INTER_LINEAR``. A detector trained that way notices small changes of those
pixels: scores near the threshold move, boxes appear and vanish. On the CPU
vstream lets those two libraries make it (:mod:`vstream.preprocess.letterbox`);
a frame on a GPU (NVDEC's NV12) has neither at hand, so this module
reproduces the same picture on the device, without a full-size conversion:

- bilinear interpolation reads at most 2 x 2 source pixels for each output
  pixel, so only those pixels are gathered (their Y, and the U and V of the
  4:2:0 block each lies in, as FFmpeg's converter takes them);
- each gathered pixel is converted with FFmpeg's own fixed-point arithmetic
  (:func:`ffmpeg_coefficients`), clipped as FFmpeg clips it;
- the pixels are blended with OpenCV's fixed-point weights (:class:`Taps`)
  and rounded as OpenCV rounds.

The work depends on the model input's size, not the picture's: a 4K frame
costs what a 720p one does. Measured against OpenCV (``cv2.resize`` of the
same RGB pictures, and the reference letterbox of
``tests/test_reference_letterbox.py`` on this project's videos), a downscale
is equal in every value. An upscale (a picture smaller than the model input)
is not: some values are one level off, anywhere in the picture (10 to 40 in a
hundred thousand on the videos letterboxed to 1280, up to 150 on random
pictures upscaled twice), where OpenCV's upscaling rounds a blend
differently; that step is not reproduced here. Every step is a tensor
operation into scratch buffers made once per picture size, so the same code
runs on any device (the tests run it on the CPU) and allocates nothing per
frame. On a CPU it costs about 2 ms for a 720p frame, three times what FFmpeg
and OpenCV take, which is why CPU frames do not come here.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from vstream.devices import same_device
from vstream.frame import ColourMatrix, ColourSpace, PixelFormat
from vstream.preprocess.colour import chroma_planes
from vstream.preprocess.recent import Recent
from vstream.transfer import upload

WEIGHT_BITS = 11
"""OpenCV's ``INTER_RESIZE_COEF_BITS``: interpolation weights are integers out of 2048."""

MAX_PLANS = 8
"""Resampling plans kept per :class:`Resampler`, one per source and target size."""

# FFmpeg's YUV -> RGB coefficients in 16.16 fixed point (crv, cbu, cgu, cgv), the values its
# converter uses for each matrix (libswscale's ff_yuv2rgb_coeffs): V to R, U to B, U and V to G.
_FFMPEG_MATRICES = {
    ColourMatrix.BT601: (104597, 132201, 25675, 53279),
    ColourMatrix.BT709: (117489, 138438, 13975, 34925),
}


@dataclass(frozen=True)
class FixedPoint:
    """FFmpeg's YUV -> RGB conversion of one colour space, as its x86 converter runs it.

    FFmpeg multiplies ``8 * (U - 128)`` by a 3.13 coefficient and keeps the
    high 16 bits, which is ``((U - 128) * c) >> 13``: every term rounds down.
    With ``y = max(Y - y_offset, 0)``, ``u = U - 128``, ``v = V - 128``::

        R = clip(y*y_gain>>13 + v*v_to_r>>13)
        G = clip(y*y_gain>>13 + u*u_to_g>>13 + v*v_to_g>>13)
        B = clip(y*y_gain>>13 + u*u_to_b>>13)

    The rounding down of every term is why FFmpeg's RGB sits about one level
    below the textbook formula; a model trained on FFmpeg's pictures expects it.
    """

    y_gain: int
    y_offset: int
    v_to_r: int
    u_to_b: int
    u_to_g: int
    v_to_g: int


def _to_13_bits(value: int) -> int:
    """A 16.16 coefficient as the 3.13 value FFmpeg's vector code multiplies by (rounded)."""
    return (value * 8192 + 32768) >> 16


@functools.cache
def ffmpeg_coefficients(colour: ColourSpace) -> FixedPoint:
    """The fixed-point conversion FFmpeg applies to a picture of ``colour``.

    Limited range takes 16 off the luma and stretches it by 255/219; full
    range takes the luma as it is and narrows the chroma coefficients by 224/255.
    """
    crv, cbu, cgu, cgv = _FFMPEG_MATRICES[colour.matrix]
    cgu, cgv = -cgu, -cgv
    if colour.full_range:
        y_gain, y_offset = 1 << 16, 0
        crv, cbu, cgu, cgv = ((c * 224) // 255 for c in (crv, cbu, cgu, cgv))
    else:
        y_gain, y_offset = ((1 << 16) * 255) // 219, 16
    return FixedPoint(
        y_gain=_to_13_bits(y_gain),
        y_offset=y_offset,
        v_to_r=_to_13_bits(crv),
        u_to_b=_to_13_bits(cbu),
        u_to_g=_to_13_bits(cgu),
        v_to_g=_to_13_bits(cgv),
    )


@dataclass(frozen=True)
class Taps:
    """OpenCV's ``INTER_LINEAR`` along one axis: two source indices and weights per output.

    Output ``i`` samples source position ``(i + 0.5) * scale - 0.5`` (half-pixel
    centres, no anti-aliasing), clamped to the picture; its two neighbours get
    weights out of 2048, rounded from single precision as OpenCV rounds them.
    """

    index: np.ndarray
    """``(2, target)`` int64: the first neighbour of every output, then the second."""
    weight: np.ndarray
    """``(2, target)`` int32: their weights; each column sums to 2048."""

    @classmethod
    def fit(cls, source: int, target: int) -> Taps:
        if source <= 0 or target <= 0:
            raise ValueError(f"sizes must be positive, got {source} -> {target}")
        if source == target:  # every pixel once, with all of its weight
            index = np.arange(source)
            return cls(np.stack([index, index]), np.array([[1 << WEIGHT_BITS], [0]], np.int32))
        scale = 1.0 / (target / source)  # as OpenCV derives it, from the inverse scale
        position = ((np.arange(target) + 0.5) * scale - 0.5).astype(np.float32)
        first = np.floor(position).astype(np.int64)
        fraction = position - first.astype(np.float32)
        outside = (first < 0) | (first >= source - 1)
        fraction[outside] = 0
        first = np.clip(first, 0, source - 1)
        unit = np.float32(1 << WEIGHT_BITS)
        weight = np.stack([np.rint((np.float32(1) - fraction) * unit), np.rint(fraction * unit)])
        index = np.stack([first, np.minimum(first + 1, source - 1)])
        return cls(index=index, weight=weight.astype(np.int32))


FRAMES_PER_PASS = 16
"""Most frames one pass of tensor operations resamples: a batch of up to this many costs the
host the same ~30 dispatches as one frame (plus one gather per frame), while the scratch
buffers stay bounded (about 30 MB per pass frame for a 640x360 window: they are int32)."""


@dataclass(frozen=True)
class _Views:
    """The scratch buffers of one pass of ``frames`` frames, as the steps read and write them.

    Made once per pass size: a view costs the host a dispatch like any operation.
    """

    samples: torch.Tensor
    """``(frames, 3, rows, cols)`` uint8: the gathered samples (Y, V, U or R, G, B)."""
    slots: tuple[torch.Tensor, ...]
    """``samples`` frame by frame, where each frame's gather writes."""
    luma: torch.Tensor
    luma_by_channel: torch.Tensor
    chroma: torch.Tensor
    terms: torch.Tensor
    rgb: torch.Tensor
    red_blue: torch.Tensor
    green: torch.Tensor
    across: torch.Tensor | None
    down: torch.Tensor | None


class _Plan:
    """Index tensors and scratch buffers for one source size, target size and layout on one device.

    The samples of an output pixel's neighbours are laid out in blocks,
    ``(3, 2 * height, 2 * width)``: the rows of every output's first
    neighbour, then of its second, and the same for columns, so that each
    blending step reads contiguous halves. One indexing operation gathers a
    whole NV12 or RGB frame's samples (a plane at a time for I420), through
    index tensors of one row or one column each, broadcast; every later step
    runs on a pass of up to :data:`FRAMES_PER_PASS` frames at once.
    """

    def __init__(
        self,
        source: tuple[int, int],
        target: tuple[int, int],
        layout: PixelFormat,
        frames: int,
        device: torch.device,
    ) -> None:
        (source_width, source_height), (width, height) = source, target
        # Same size: the picture is converted as it is, nothing to blend (as the reference
        # skips its resize). Else the neighbours of every output pixel are blended.
        self.blend = (width, height) != (source_width, source_height)
        self.layout = layout
        self.source = source
        self.frames = frames
        taps = 2 if self.blend else 1
        rows = Taps.fit(source_height, height)
        cols = Taps.fit(source_width, width)
        row_index = rows.index[:taps].reshape(-1)
        col_index = cols.index[:taps].reshape(-1)
        self.shape = (len(row_index), len(col_index))
        self.device = device
        self.index = tuple(
            self._tensor(i) for i in _sample_index(layout, source_height, row_index, col_index)
        )
        """What one indexing operation takes: broadcast rows, columns (and channels for RGB);
        for I420, rows and columns of the luma plane then of the chroma planes."""
        if self.blend:
            self.col_weights = self._tensor(cols.weight[:, None, None, :], torch.int32)
            self.row_weights = self._tensor(rows.weight[:, :, None], torch.int32)
        n_rows, n_cols = self.shape

        def empty(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.empty((frames, *shape), dtype=dtype, device=device)

        self._samples = empty(3, n_rows, n_cols, dtype=torch.uint8)
        self._rgb = empty(3, n_rows, n_cols)
        self._luma = empty(n_rows, n_cols)
        self._chroma = empty(2, n_rows, n_cols)
        self._terms = empty(2, n_rows, n_cols)
        self._across = empty(3, n_rows, width) if self.blend else None
        self._down = empty(3, 2, height, width) if self.blend else None
        self._views: dict[int, _Views] = {}
        self._coefficients: tuple | None = None
        # Scalars as tensors made once: a Python number is wrapped in a new tensor at every call.
        self.constants = {
            value: torch.tensor(value, dtype=torch.int32, device=device)
            for value in (2, 4, 13, 16, 128)
        }
        self.levels = torch.tensor(255.0, device=device)

    @property
    def nbytes(self) -> int:
        """Bytes of the plan's index tensors and scratch buffers."""
        held = [v for v in vars(self).values() if isinstance(v, torch.Tensor)] + [*self.index]
        return sum(t.numel() * t.element_size() for t in held)

    def _tensor(self, array: np.ndarray, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return upload(torch.from_numpy(np.ascontiguousarray(array)).to(dtype), self.device)

    def views(self, frames: int) -> _Views:
        """The scratch buffers of a pass of ``frames`` frames (made on first use)."""
        views = self._views.get(frames)
        if views is None:
            samples, luma, rgb = self._samples[:frames], self._luma[:frames], self._rgb[:frames]
            views = self._views[frames] = _Views(
                samples=samples,
                slots=samples.unbind(0),
                luma=luma,
                luma_by_channel=luma.unsqueeze(1),
                chroma=self._chroma[:frames],
                terms=self._terms[:frames],
                rgb=rgb,
                red_blue=rgb[:, ::2],
                green=rgb[:, 1],
                across=self._across[:frames] if self._across is not None else None,
                down=self._down[:frames] if self._down is not None else None,
            )
        return views

    def gather(self, pictures: Sequence[torch.Tensor], views: _Views) -> None:
        """Each picture's samples into its slot: one operation per frame (three for I420)."""
        if self.layout is PixelFormat.YUV420P:
            width, height = self.source
            rows, cols, chroma_rows, chroma_cols = self.index
            for picture, out in zip(pictures, views.slots, strict=False):
                u, v = chroma_planes(picture, self.layout, width, height)
                _index_into(picture[:height], (rows, cols), out[0])
                _index_into(v, (chroma_rows, chroma_cols), out[1])
                _index_into(u, (chroma_rows, chroma_cols), out[2])
            return
        for picture, out in zip(pictures, views.slots, strict=False):
            _index_into(picture, self.index, out)

    def _coefficients_of(self, k: FixedPoint) -> tuple[torch.Tensor, ...]:
        """``(v_to_r, u_to_b)``, ``(v_to_g, u_to_g)``, the luma offset and gain as tensors.

        Made when the colour space changes, not per frame.
        """
        if self._coefficients is None or self._coefficients[0] != k:
            values = [(k.v_to_r, k.u_to_b), (k.v_to_g, k.u_to_g), k.y_offset, k.y_gain]
            made = [torch.tensor(v, dtype=torch.int32, device=self.device) for v in values]
            self._coefficients = (k, made[0].view(2, 1, 1), made[1].view(2, 1, 1), *made[2:])
        return self._coefficients[1:]

    def convert(self, views: _Views, k: FixedPoint) -> torch.Tensor:
        """FFmpeg's conversion of gathered ``(Y, V, U)`` samples (see :class:`FixedPoint`)."""
        to_red_blue, to_green, y_offset, y_gain = self._coefficients_of(k)
        samples, luma, chroma, terms = views.samples, views.luma, views.chroma, views.terms
        bits = self.constants[13]
        luma.copy_(samples[:, 0]).sub_(y_offset).relu_()
        luma.mul_(y_gain).bitwise_right_shift_(bits)
        chroma.copy_(samples[:, 1:]).sub_(self.constants[128])  # (V, U)
        torch.mul(chroma, to_red_blue, out=terms).bitwise_right_shift_(bits)
        torch.add(terms, views.luma_by_channel, out=views.red_blue)  # R and B
        torch.mul(chroma, to_green, out=terms).bitwise_right_shift_(bits)
        torch.add(terms[:, 0], terms[:, 1], out=views.green).add_(luma)
        return views.rgb.clamp_(0, 255)

    def interpolate(self, rgb: torch.Tensor, views: _Views, out: torch.Tensor) -> None:
        """OpenCV's fixed-point blend of the gathered pixels into ``out`` (levels / 255).

        Across: ``a0 * p0 + a1 * p1`` exactly. Down: as OpenCV's vector code
        (``VResizeLinearVec_32s8u``) does it: each row's sum shifted right by 4,
        multiplied by its weight keeping the high 16 bits, the two added and
        rounded off by 2 bits (never above 255, so no clip is needed).
        """
        if views.across is not None and views.down is not None:
            frames, _, n_rows, width = views.across.shape
            height = views.down.shape[3]
            pairs = rgb.view(frames, 3, n_rows, 2, width)
            torch.mul(pairs[:, :, :, 0], self.col_weights[0], out=views.across)
            views.across.addcmul_(pairs[:, :, :, 1], self.col_weights[1])
            rows = views.across.bitwise_right_shift_(self.constants[4])
            torch.mul(rows.view(frames, 3, 2, height, width), self.row_weights, out=views.down)
            views.down.bitwise_right_shift_(self.constants[16])
            rgb = views.down[:, :, 0].add_(views.down[:, :, 1]).add_(self.constants[2])
            rgb.bitwise_right_shift_(self.constants[2])
        out.copy_(rgb).div_(self.levels)  # as Ultralytics scales: float, then divided by 255

    def run(
        self, pictures: Sequence[torch.Tensor], k: FixedPoint | None, out: torch.Tensor
    ) -> None:
        """Resample ``pictures`` into ``out`` in passes of :attr:`frames`; ``k`` converts YUV
        (None: the pictures are RGB already)."""
        for first in range(0, len(pictures), self.frames):
            chunk = pictures[first : first + self.frames]
            views = self.views(len(chunk))
            self.gather(chunk, views)
            rgb = views.rgb.copy_(views.samples) if k is None else self.convert(views, k)
            target = out if len(chunk) == len(pictures) else out[first : first + len(chunk)]
            self.interpolate(rgb, views, target)


def _index_into(picture: torch.Tensor, index: Sequence[torch.Tensor], out: torch.Tensor) -> None:
    """``picture[index]`` written into ``out``: advanced indexing with broadcast index tensors,
    in one operation that allocates nothing (any strides: NVDEC's pitched planes too)."""
    torch.ops.aten.index.Tensor_out(picture, list(index), out=out)


def _sample_index(
    layout: PixelFormat, source_height: int, rows: np.ndarray, cols: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Index arrays that gather the ``(3, len(rows), len(cols))`` samples of a picture.

    Luma (and RGB) at full resolution; 4:2:0 chroma halved, a pixel taking the
    chroma of the 2x2 block it lies in, as FFmpeg's converter does. NV12
    (``(height * 3 / 2, width)``, interleaved U and V after the luma rows) and
    packed RGB take one index each, broadcast; I420 is three planes, so its
    index is the luma's rows and columns, then the chroma planes'.
    """
    if layout is PixelFormat.RGB24:
        return rows[None, :, None], cols[None, None, :], np.arange(3)[:, None, None]
    if layout is PixelFormat.NV12:
        chroma_row = source_height + rows // 2
        chroma_col = (cols // 2) * 2
        return (
            np.stack([rows, chroma_row, chroma_row])[:, :, None],  # Y, V, U
            np.stack([cols, chroma_col + 1, chroma_col])[:, None, :],
        )
    return rows[:, None], cols[None, :], (rows // 2)[:, None], (cols // 2)[None, :]


class NV12Kernel(Protocol):
    """What letterboxes NV12 frames on one device in place of the tensor operations
    (:class:`vstream.preprocess.kernel.LetterboxKernel`), with the same pixels."""

    device: torch.device
    dtypes: frozenset[torch.dtype]
    """The model input types it writes."""

    def run(
        self,
        pictures: Sequence[torch.Tensor],
        size: tuple[int, int],
        k: FixedPoint,
        out: torch.Tensor,
    ) -> None: ...


class Resampler:
    """Letterbox windows from NV12, I420 or RGB pictures, as the reference makes them.

    Keeps one plan (indices and scratch buffers) per source size, target
    size and layout, least recently used dropped past :data:`MAX_PLANS`. One
    call at a time uses them (a lock): the letterboxers of one model's
    buffers share one resampler, used by the preprocessing stage (and, when a
    batch is run again stream by stream, by a model thread).
    """

    def __init__(self, frames: int = 1, kernel: NV12Kernel | None = None) -> None:
        """``frames``: the most frames a call resamples at once (the letterboxer's batch).
        ``kernel``: NV12 frames on its device into inputs of its types go through it instead
        (:mod:`vstream.preprocess.kernel`: the same pixels in one launch a batch)."""
        self.frames = max(1, min(frames, FRAMES_PER_PASS))
        self.kernel = kernel
        self._plans: Recent[tuple, _Plan] = Recent(MAX_PLANS)
        self._lock = threading.Lock()

    @property
    def scratch_bytes(self) -> int:
        """Device memory the kept plans hold: a pass of 16 frames of 1080p into 320x180 takes
        165 MiB, into 640x360 661 MiB (their int32 steps); none where the kernel letterboxes."""
        with self._lock:
            return sum(plan.nbytes for plan in self._plans.values())

    def _plan(self, source: tuple[int, int], layout: PixelFormat, out: torch.Tensor) -> _Plan:
        target = (out.shape[-1], out.shape[-2])
        return self._plans.get(
            (source, target, layout, out.device),
            lambda: _Plan(source, target, layout, self.frames, out.device),
        )

    def resample(
        self,
        pictures: Sequence[torch.Tensor],
        layout: PixelFormat,
        size: tuple[int, int],
        colour: ColourSpace,
        out: torch.Tensor,
    ) -> None:
        """Resize ``pictures`` (each ``size`` = (width, height), laid out as ``layout`` says)
        into ``out``, ``(len(pictures), 3, h, w)``, RGB in 0..1, in passes of up to
        :data:`FRAMES_PER_PASS` frames."""
        coefficients = None if layout is PixelFormat.RGB24 else ffmpeg_coefficients(colour)
        with self._lock:
            if coefficients is not None and self._takes_kernel(pictures, layout, out):
                assert self.kernel is not None
                self.kernel.run(pictures, size, coefficients, out)
            else:
                self._plan(size, layout, out).run(pictures, coefficients, out)

    def _takes_kernel(
        self, pictures: Sequence[torch.Tensor], layout: PixelFormat, out: torch.Tensor
    ) -> bool:
        """Whether the kernel letterboxes these: 8-bit NV12 on its device, into its types."""
        kernel = self.kernel
        return (
            kernel is not None
            and layout is PixelFormat.NV12
            and out.dtype in kernel.dtypes
            and same_device(out.device, kernel.device)
            and pictures[0].dtype == torch.uint8
        )
