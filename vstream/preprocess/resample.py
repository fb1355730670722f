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
costs what a 720p one does. Measured against OpenCV on this project's videos
(``tests/test_reference_letterbox.py``), every value is equal but a few in a
hundred thousand, which differ by one level where OpenCV's vector code rounds
the last columns of a row differently. Every step is a tensor operation into
scratch buffers made once per picture size, so the same code runs on any
device (the tests run it on the CPU) and allocates nothing per frame. On a
CPU it costs about 2 ms for a 720p frame, three times what FFmpeg and OpenCV
take, which is why CPU frames do not come here.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from vstream.frame import ColourMatrix, ColourSpace

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


class _Plan:
    """Index tensors and scratch buffers for one source size and target size on one device.

    The gathered samples are laid out in blocks, ``(3, 2 * height, 2 * width)``:
    the rows of every output's first neighbour, then of its second, and the
    same for columns, so that each step reads contiguous halves.
    """

    def __init__(
        self,
        source: tuple[int, int],
        target: tuple[int, int],
        plane_widths: tuple[int, ...],
        device: torch.device,
    ) -> None:
        (source_width, source_height), (width, height) = source, target
        # Same size: the picture is converted as it is, nothing to blend (as the reference
        # skips its resize). Else the neighbours of every output pixel are blended.
        self.blend = (width, height) != (source_width, source_height)
        taps = 2 if self.blend else 1
        rows = Taps.fit(source_height, height)
        cols = Taps.fit(source_width, width)
        row_index = rows.index[:taps].reshape(-1)
        col_index = cols.index[:taps].reshape(-1)
        n_rows, n_cols = len(row_index), len(col_index)

        def tensor(array: np.ndarray, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)

        def empty(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.empty(shape, dtype=dtype, device=device)

        # Full-resolution indices for luma (and RGB), halved for 4:2:0 chroma: a pixel takes
        # the chroma of the 2x2 block it lies in, as FFmpeg's converter does.
        self.rows = (tensor(row_index), tensor(row_index // 2))
        # One row of column indices, expanded (a view): every row gathers the same columns. A
        # materialised (rows, cols) table was a frame-sized upload per plan (an H100's profile).
        self.cols = tuple(tensor(col_index // factor).expand(n_rows, n_cols) for factor in (1, 2))
        # Where every tap is an evenly spaced run of source indices (a whole-number scale: 720p
        # or 1080p to 320, 640 to 320), the samples are strided views: copied, not gathered.
        self.runs = tuple(
            (_runs(rows.index[:taps] // factor), _runs(cols.index[:taps] // factor))
            for factor in (1, 2)
        )
        self.row_scratch = {w: empty(n_rows, w, dtype=torch.uint8) for w in set(plane_widths)}
        self.samples = empty(3, n_rows, n_cols, dtype=torch.uint8)
        self.rgb = empty(3, n_rows, n_cols)
        self.luma = empty(n_rows, n_cols)
        self.chroma = empty(2, n_rows, n_cols)
        self.terms = empty(2, n_rows, n_cols)
        if self.blend:
            self.col_weights = tensor(cols.weight[:, None, None, :], torch.int32)
            self.row_weights = tensor(rows.weight[:, :, None], torch.int32)
            self.across = empty(3, n_rows, width)
            self.down = empty(3, 2, height, width)
        self._coefficients: tuple | None = None
        # Scalars as tensors made once: a Python number is wrapped in a new tensor at every call.
        self.constants = {
            value: torch.tensor(value, dtype=torch.int32, device=device)
            for value in (2, 4, 13, 16, 128)
        }
        self.levels = torch.tensor(255.0, device=device)

    def gather(self, planes: tuple[torch.Tensor, ...], chroma: bool) -> torch.Tensor:
        """The source samples the output reads, ``(3, rows, cols)`` uint8, plane by plane."""
        for index, plane in enumerate(planes):
            halved = chroma and index > 0
            row_runs, col_runs = self.runs[halved]
            out = self.samples[index]
            if row_runs is not None and col_runs is not None:
                blocks = out.view(len(row_runs), -1, len(col_runs), out.shape[1] // len(col_runs))
                for i, rows in enumerate(row_runs):
                    for j, cols in enumerate(col_runs):
                        blocks[i, :, j].copy_(plane[rows, cols])
                continue
            rows = self.row_scratch[plane.shape[1]]
            torch.index_select(plane, 0, self.rows[halved], out=rows)
            torch.gather(rows, 1, self.cols[halved], out=out)
        return self.samples

    def _coefficients_of(self, k: FixedPoint) -> tuple[torch.Tensor, ...]:
        """``(v_to_r, u_to_b)``, ``(v_to_g, u_to_g)``, the luma offset and gain as tensors.

        Made when the colour space changes, not per frame.
        """
        if self._coefficients is None or self._coefficients[0] != k:
            values = [(k.v_to_r, k.u_to_b), (k.v_to_g, k.u_to_g), k.y_offset, k.y_gain]
            made = [torch.tensor(v, dtype=torch.int32, device=self.rgb.device) for v in values]
            self._coefficients = (k, made[0].view(2, 1, 1), made[1].view(2, 1, 1), *made[2:])
        return self._coefficients[1:]

    def convert(self, samples: torch.Tensor, k: FixedPoint) -> torch.Tensor:
        """FFmpeg's conversion of gathered ``(Y, V, U)`` samples (see :class:`FixedPoint`)."""
        to_red_blue, to_green, y_offset, y_gain = self._coefficients_of(k)
        rgb, luma, chroma, terms = self.rgb, self.luma, self.chroma, self.terms
        bits = self.constants[13]
        luma.copy_(samples[0]).sub_(y_offset).relu_()
        luma.mul_(y_gain).bitwise_right_shift_(bits)
        chroma.copy_(samples[1:]).sub_(self.constants[128])  # (V, U)
        torch.mul(chroma, to_red_blue, out=terms).bitwise_right_shift_(bits)
        torch.add(terms, luma, out=rgb[::2])  # R and B
        torch.mul(chroma, to_green, out=terms).bitwise_right_shift_(bits)
        torch.add(terms[0], terms[1], out=rgb[1]).add_(luma)
        return rgb.clamp_(0, 255)

    def interpolate(self, rgb: torch.Tensor, out: torch.Tensor) -> None:
        """OpenCV's fixed-point blend of the gathered pixels into ``out`` (levels / 255).

        Across: ``a0 * p0 + a1 * p1`` exactly. Down: as OpenCV's vector code
        (``VResizeLinearVec_32s8u``) does it: each row's sum shifted right by 4,
        multiplied by its weight keeping the high 16 bits, the two added and
        rounded off by 2 bits (never above 255, so no clip is needed).
        """
        if self.blend:
            height, width = self.down.shape[2:]
            pairs = rgb.view(3, rgb.shape[1], 2, width)
            torch.mul(pairs[:, :, 0], self.col_weights[0], out=self.across)
            self.across.addcmul_(pairs[:, :, 1], self.col_weights[1])
            rows = self.across.bitwise_right_shift_(self.constants[4]).view(3, 2, height, width)
            torch.mul(rows, self.row_weights, out=self.down)
            self.down.bitwise_right_shift_(self.constants[16])
            rgb = self.down[:, 0].add_(self.down[:, 1]).add_(self.constants[2])
            rgb.bitwise_right_shift_(self.constants[2])
        out.copy_(rgb).div_(self.levels)  # as Ultralytics scales: float, then divided by 255


def _runs(taps: np.ndarray) -> tuple[slice, ...] | None:
    """Each tap's source indices as a slice, if every tap's are evenly spaced; else None."""
    runs = []
    for index in taps:
        step = int(index[1] - index[0]) if len(index) > 1 else 1
        if step <= 0 or not np.array_equal(index, index[0] + step * np.arange(len(index))):
            return None
        runs.append(slice(int(index[0]), int(index[-1]) + 1, step))
    return tuple(runs)


class Resampler:
    """Letterbox windows from YUV 4:2:0 or RGB planes, as the reference makes them.

    Keeps one plan (indices and scratch buffers) per source and target size,
    least recently used dropped past :data:`MAX_PLANS`. Not thread-safe: each
    letterboxer has its own, used by whichever stage holds its buffer.
    """

    def __init__(self) -> None:
        self._plans: OrderedDict[tuple, _Plan] = OrderedDict()

    def _plan(
        self, planes: tuple[torch.Tensor, ...], source: tuple[int, int], out: torch.Tensor
    ) -> _Plan:
        target = (out.shape[2], out.shape[1])
        widths = tuple([p.shape[1] for p in planes])  # a generator here leaves garbage behind
        key = (source, target, widths, out.device)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _Plan(source, target, widths, out.device)
            if len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def yuv420(
        self,
        y: torch.Tensor,
        u: torch.Tensor,
        v: torch.Tensor,
        colour: ColourSpace,
        out: torch.Tensor,
    ) -> None:
        """Resize the 4:2:0 picture ``(y, u, v)`` into ``out`` (``(3, h, w)``, RGB in 0..1).

        ``y`` is ``(height, width)`` and ``u``, ``v`` are ``(height / 2, width / 2)``
        ``uint8`` planes, any strides (NV12's interleaved chroma are views).
        """
        plan = self._plan((y, v, u), (y.shape[1], y.shape[0]), out)
        rgb = plan.convert(plan.gather((y, v, u), chroma=True), ffmpeg_coefficients(colour))
        plan.interpolate(rgb, out)

    def rgb(self, image: torch.Tensor, out: torch.Tensor) -> None:
        """Resize a packed ``(height, width, 3)`` ``uint8`` RGB picture into ``out``."""
        planes = image.unbind(2)
        plan = self._plan(planes, (image.shape[1], image.shape[0]), out)
        samples = plan.gather(planes, chroma=False)
        plan.interpolate(plan.rgb.copy_(samples), out)
