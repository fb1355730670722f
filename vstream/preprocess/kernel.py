"""NV12 frames letterboxed by one CUDA kernel a batch (``runtime.letterbox_kernel``).

On a GPU the pipeline's limit is the host. The torch resampler
(:mod:`vstream.preprocess.resample`) costs a batch of 32 frames about a hundred
dispatches (a gather per frame, the rest once for the batch), and torch lets go
of the GIL around every one of them and takes it back after: each is a chance
for the preprocessing thread to wait behind the readers' and the delivery's
Python. ``letterbox_nv12.cu`` does the same arithmetic, step for step in
32-bit integers, one thread per output pixel, so a batch is one launch: one
call into the driver through cuda-bindings (NVIDIA's Python bindings of the
driver and of NVRTC, which torch's CUDA wheels install), which lets go of the
GIL once. The frames' addresses travel by value in the launch's parameters,
so nothing is copied to the GPU first.

The kernel is compiled by NVRTC for the device's architecture when the
pipeline is built; a failure there is one line before any stream starts.
The same source is compiled as C++ by the tests and gives the torch
resampler's pixels on the CPU, and NVRTC compiles it there too (it needs no
GPU); the launch itself runs only on a GPU (``tests/test_gpu.py``).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np
import torch

from vstream.errors import ModelError, first_line
from vstream.preprocess.recent import Recent
from vstream.preprocess.resample import MAX_PLANS, FixedPoint, Taps
from vstream.transfer import upload

log = logging.getLogger("vstream.engine")

SOURCE = "letterbox_nv12.cu"
"""The kernel's source, beside this module."""

KERNELS = {torch.float32: "letterbox_nv12", torch.float16: "letterbox_nv12_half"}
"""The kernel's entry point for each model input type."""

MAX_FRAMES = 64
"""Frames one launch takes (their addresses are a launch parameter): the kernel is compiled
with it as ``VSTREAM_MAX_FRAMES``."""

THREADS_PER_BLOCK = 256

_Addresses = ctypes.c_longlong * MAX_FRAMES


class Frames(ctypes.Structure):
    """The kernel's ``Frames``: where each frame's samples begin and its strides, in samples."""

    _fields_ = [
        ("address", _Addresses),
        ("row_stride", _Addresses),
        ("column_stride", _Addresses),
    ]


class Conversion(ctypes.Structure):
    """The kernel's ``Conversion``: :class:`~vstream.preprocess.resample.FixedPoint`'s integers."""

    _fields_ = [
        (name, ctypes.c_int)
        for name in ("y_offset", "y_gain", "v_to_r", "u_to_b", "u_to_g", "v_to_g")
    ]


class Output(ctypes.Structure):
    """The kernel's ``Output``: the first float of the window and its strides, in floats."""

    _fields_ = [
        (name, ctypes.c_longlong)
        for name in ("address", "frame_stride", "channel_stride", "row_stride", "column_stride")
    ]


def kernel_source() -> str:
    return resources.files("vstream.preprocess").joinpath(SOURCE).read_text("utf-8")


def frames_of(pictures: Sequence[torch.Tensor]) -> Frames:
    """The launch's ``Frames`` for up to :data:`MAX_FRAMES` NV12 pictures (any strides)."""
    if len(pictures) > MAX_FRAMES:
        raise ValueError(f"a launch takes at most {MAX_FRAMES} frames, got {len(pictures)}")
    frames = Frames()
    for i, picture in enumerate(pictures):
        frames.address[i] = picture.data_ptr()
        frames.row_stride[i], frames.column_stride[i] = picture.stride()
    return frames


def output_of(out: torch.Tensor) -> Output:
    """The launch's ``Output`` for a ``(frames, 3, height, width)`` window (any strides)."""
    return Output(out.data_ptr(), *out.stride())


def conversion_of(k: FixedPoint) -> Conversion:
    return Conversion(k.y_offset, k.y_gain, k.v_to_r, k.u_to_b, k.u_to_g, k.v_to_g)


def taps_of(source: int, target: int) -> np.ndarray:
    """``(4, target)`` int32: OpenCV's two neighbours along an axis, then their weights.

    A picture already at the target size gets each pixel with all of the
    weight, which the kernel's blend gives back unchanged (as the resampler
    skips its blend).
    """
    taps = Taps.fit(source, target)
    index = np.broadcast_to(taps.index, (2, target))
    weight = np.broadcast_to(taps.weight, (2, target))
    return np.ascontiguousarray(np.concatenate([index, weight]).astype(np.int32))


def launch_parameters(
    pictures: Sequence[torch.Tensor],
    source_height: int,
    k: FixedPoint,
    rows: torch.Tensor,
    columns: torch.Tensor,
    out: torch.Tensor,
) -> tuple[ctypes.Structure | ctypes.c_int | ctypes.c_void_p, ...]:
    """The kernel's parameters, in its order: ``pictures`` (NV12, ``source_height`` rows of
    luma) into ``out``, with the taps of its rows and columns (:func:`taps_of`)."""
    return (
        frames_of(pictures),
        ctypes.c_int(len(pictures)),
        ctypes.c_int(source_height),
        ctypes.c_void_p(rows.data_ptr()),
        ctypes.c_int(out.shape[2]),
        ctypes.c_void_p(columns.data_ptr()),
        ctypes.c_int(out.shape[3]),
        conversion_of(k),
        output_of(out),
    )


def _check(result: Any) -> Any:
    """A cuda-bindings call's values, or :class:`ModelError` naming its error."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if int(error) != 0:
        raise ModelError(f"the letterbox kernel: CUDA: {getattr(error, 'name', error)}")
    return values[0] if len(values) == 1 else values


def compile_kernel(architecture: str) -> bytes:
    """The kernel as machine code for ``architecture`` (``sm_90``), compiled by NVRTC.

    Needs no GPU: the tests compile it on any machine with NVRTC.
    """
    from cuda.bindings import nvrtc

    source = kernel_source().encode()
    program = _check(nvrtc.nvrtcCreateProgram(source, SOURCE.encode(), 0, [], []))
    try:
        options = [
            f"--gpu-architecture={architecture}".encode(),
            b"--std=c++17",
            f"-DVSTREAM_MAX_FRAMES={MAX_FRAMES}".encode(),
        ]
        (error,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if int(error) != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(program))
            text = b" " * size
            _check(nvrtc.nvrtcGetProgramLog(program, text))
            lines = text.decode(errors="replace").strip(chr(0)).strip().splitlines()
            log.debug("NVRTC's log:\n%s", "\n".join(lines))
            first = next((line for line in lines if "error" in line), lines[0] if lines else "")
            raise ModelError(f"the letterbox kernel did not compile for {architecture}: {first}")
        size = _check(nvrtc.nvrtcGetCUBINSize(program))
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(program, cubin))
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(program)


class LetterboxKernel:
    """The kernel loaded on one CUDA device, with each size's taps on that device.

    Built when a pipeline is (compiling takes a fraction of a second); used
    by one thread at a time (the resampler's lock). A launch runs on the
    calling thread's current torch stream, in the device's primary context
    (torch's), pushed for the launch where the thread has another context
    current (another device's, or a library's own).
    """

    def __init__(self, device: torch.device) -> None:
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise ModelError(
                "runtime.letterbox_kernel needs cuda-bindings (pip install 'vstream[gpu]'; "
                f"torch's CUDA wheels bring it): {exc}"
            ) from exc
        if device.type != "cuda" or device.index is None:
            raise ValueError(f"the letterbox kernel runs on an indexed CUDA device, got {device}")
        self.device = device
        self._driver = driver
        major, minor = torch.cuda.get_device_capability(device)
        self.architecture = f"sm_{major}{minor}"
        """What NVRTC compiled the kernel for: this device's."""
        try:
            cubin = compile_kernel(self.architecture)
        except ModelError:
            raise
        except Exception as exc:  # NVRTC's library missing or refusing: one line, at start
            raise ModelError(
                f"runtime.letterbox_kernel: NVRTC could not compile the kernel: {first_line(exc)}"
            ) from exc
        self._context = _check(
            driver.cuDevicePrimaryCtxRetain(_check(driver.cuDeviceGet(device.index)))
        )
        with self._current():
            self._module = _check(driver.cuModuleLoadData(cubin))
            self._functions = {
                dtype: _check(driver.cuModuleGetFunction(self._module, name.encode()))
                for dtype, name in KERNELS.items()
            }
        self.dtypes = frozenset(KERNELS)
        """The model input types it writes."""
        self._taps: Recent[tuple[int, int], torch.Tensor] = Recent(2 * MAX_PLANS)
        """Two a picture size, rows and columns, for as many sizes as the resampler keeps."""

    def _current(self) -> _PrimaryContext:
        return _PrimaryContext(self._driver, self._context)

    def taps(self, source: int, target: int) -> torch.Tensor:
        """``(4, target)`` int32 taps on the device, made once per size (the last few kept)."""
        return self._taps.get(
            (source, target), lambda: upload(torch.from_numpy(taps_of(source, target)), self.device)
        )

    def run(
        self,
        pictures: Sequence[torch.Tensor],
        size: tuple[int, int],
        k: FixedPoint,
        out: torch.Tensor,
    ) -> None:
        """Letterbox NV12 ``pictures`` (``size`` = (width, height)) into ``out``, RGB in 0..1:
        ``(len(pictures), 3, h, w)`` float32 or float16 (:attr:`dtypes`), any strides; launches
        of up to :data:`MAX_FRAMES`."""
        width, height = size
        rows, columns = self.taps(height, out.shape[2]), self.taps(width, out.shape[3])
        stream = self._driver.CUstream(torch.cuda.current_stream(self.device).cuda_stream)
        for first in range(0, len(pictures), MAX_FRAMES):
            chunk = pictures[first : first + MAX_FRAMES]
            window = out if len(chunk) == len(pictures) else out[first : first + len(chunk)]
            parameters = launch_parameters(chunk, height, k, rows, columns, window)
            pointers = (ctypes.c_void_p * len(parameters))(
                *(ctypes.addressof(p) for p in parameters)
            )
            pixels = window.shape[0] * window.shape[2] * window.shape[3]
            blocks = min(-(-pixels // THREADS_PER_BLOCK), 1 << 20)
            self._launch(self._functions[out.dtype], blocks, stream, ctypes.addressof(pointers))

    def _launch(self, function: Any, blocks: int, stream: Any, parameters: int) -> None:
        """One launch: one call into the driver (which lets go of the GIL once) where the
        primary context is current, as torch leaves it on its threads; else, refused for
        another context, again with the primary context pushed around it."""
        driver = self._driver
        grid, block = (blocks, 1, 1), (THREADS_PER_BLOCK, 1, 1)
        result = driver.cuLaunchKernel(function, *grid, *block, 0, stream, parameters, 0)
        if int(result[0]) in _OTHER_CONTEXT:
            with self._current():
                result = driver.cuLaunchKernel(function, *grid, *block, 0, stream, parameters, 0)
        _check(result)


_OTHER_CONTEXT = frozenset({201, 400})
"""``CUDA_ERROR_INVALID_CONTEXT`` (none current) and ``CUDA_ERROR_INVALID_HANDLE`` (the
function is another context's): a launch refused before it ran, so it can be made again."""


class _PrimaryContext:
    """The device's primary context current for a block, the thread's own back after."""

    def __init__(self, driver: Any, context: Any) -> None:
        self._driver, self._context = driver, context

    def __enter__(self) -> None:
        _check(self._driver.cuCtxPushCurrent(self._context))

    def __exit__(self, *exc: object) -> None:
        _check(self._driver.cuCtxPopCurrent())
