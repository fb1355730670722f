"""The CUDA letterbox kernel (``runtime.letterbox_kernel``) without a GPU.

Its source is compiled twice here: by NVRTC, as the GPU gets it (NVRTC needs
no GPU), and by the C++ compiler with ``VSTREAM_HOST``, whose build runs the
kernel's per-pixel function over every output pixel on the CPU, with the
launch parameters :func:`vstream.preprocess.kernel.launch_parameters` makes
for the GPU (the same ctypes structures, passed by value). The oracle is the
torch resampler (itself tested against FFmpeg and OpenCV in
``test_reference_letterbox.py``): every value must be equal, bit for bit. The
launch on a GPU is tested in ``test_gpu.py``.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch

from vstream.errors import ModelError
from vstream.frame import ColourMatrix, ColourSpace, Frame, PixelFormat
from vstream.preprocess import kernel
from vstream.preprocess.kernel import (
    MAX_FRAMES,
    Conversion,
    Frames,
    Output,
    compile_kernel,
    launch_parameters,
    taps_of,
)
from vstream.preprocess.resample import FixedPoint, Resampler, ffmpeg_coefficients

HOST_DRIVER = """
#define VSTREAM_HOST
#include "letterbox_nv12.cu"

template <typename Element>
static void every_pixel(Frames frames, int frame_count, int source_height, const int* row_taps,
                        int height, const int* column_taps, int width, Conversion k,
                        Output out) {
    const long long pixels = (long long)frame_count * height * width;
    for (long long i = 0; i < pixels; ++i) {
        letterbox_pixel<Element>(frames, source_height, row_taps, height, column_taps, width, k,
                                 out, i);
    }
}

extern "C" void letterbox_nv12_host(Frames frames, int frame_count, int source_height,
                                    const int* row_taps, int height, const int* column_taps,
                                    int width, Conversion k, Output out) {
    every_pixel<float>(frames, frame_count, source_height, row_taps, height, column_taps, width,
                       k, out);
}

extern "C" void letterbox_nv12_host_half(Frames frames, int frame_count, int source_height,
                                         const int* row_taps, int height,
                                         const int* column_taps, int width, Conversion k,
                                         Output out) {
    every_pixel<half_t>(frames, frame_count, source_height, row_taps, height, column_taps,
                        width, k, out);
}

extern "C" long long structure_size(int which) {
    return which == 0 ? sizeof(Frames) : which == 1 ? sizeof(Conversion) : sizeof(Output);
}
"""

NO_NVRTC = "no cuda-bindings (torch's CUDA wheels bring it)"

COLOURS = [
    ColourSpace(ColourMatrix.BT601, full_range=False),
    ColourSpace(ColourMatrix.BT709, full_range=False),
    ColourSpace(ColourMatrix.BT709, full_range=True),
]


@pytest.fixture(scope="module")
def host_kernel(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the kernel's host twin")
    folder = tmp_path_factory.mktemp("kernel")
    source_folder = Path(str(resources.files("vstream.preprocess")))
    (folder / "host.cpp").write_text(HOST_DRIVER)
    library = folder / "letterbox_host.so"
    subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-std=c++17", f"-I{source_folder}",
         f"-DVSTREAM_MAX_FRAMES={MAX_FRAMES}", str(folder / "host.cpp"), "-o", str(library)],
        check=True, timeout=120,
    )  # fmt: skip
    built = ctypes.CDLL(str(library))
    for function in (built.letterbox_nv12_host, built.letterbox_nv12_host_half):
        function.restype = None
        function.argtypes = [
            Frames, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
            ctypes.c_void_p, ctypes.c_int, Conversion, Output,
        ]  # fmt: skip
    built.structure_size.restype = ctypes.c_longlong
    return built


def nv12_frames(count: int, width: int, height: int, seed: int) -> list[torch.Tensor]:
    """NV12 pictures, ``(height * 3 / 2, width)``: noise over gradients, full 0..255 range."""
    rng = np.random.default_rng(seed)
    rows = height * 3 // 2
    ramp = np.add.outer(np.arange(rows) * 255 // rows, np.arange(width) * 255 // width) // 2
    return [
        torch.from_numpy(
            (ramp + rng.integers(-60, 60, (rows, width))).clip(0, 255).astype(np.uint8)
        )
        for _ in range(count)
    ]


def host_run(
    host: ctypes.CDLL, pictures: list[torch.Tensor], height: int, k: FixedPoint, out: torch.Tensor
) -> None:
    """The host build over every output pixel, as one launch on a GPU (float32 or float16)."""
    width = pictures[0].shape[1]
    rows = torch.from_numpy(taps_of(height, out.shape[2]))
    columns = torch.from_numpy(taps_of(width, out.shape[3]))
    run = host.letterbox_nv12_host_half if out.dtype == torch.float16 else host.letterbox_nv12_host
    run(*launch_parameters(pictures, height, k, rows, columns, out))


def by_kernel(
    host: ctypes.CDLL,
    pictures: list[torch.Tensor],
    size: tuple[int, int],
    colour: ColourSpace,
    out: torch.Tensor,
) -> None:
    host_run(host, pictures, size[1], ffmpeg_coefficients(colour), out)


def by_torch(
    pictures: list[torch.Tensor], size: tuple[int, int], colour: ColourSpace, out: torch.Tensor
) -> None:
    Resampler(frames=len(pictures)).resample(pictures, PixelFormat.NV12, size, colour, out)


def test_the_structures_are_laid_out_as_the_compiler_lays_them_out(host_kernel) -> None:
    for which, structure in enumerate((Frames, Conversion, Output)):
        assert host_kernel.structure_size(which) == ctypes.sizeof(structure), structure.__name__


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ((1920, 1080), (320, 180)),  # 1080p into the demo model's letterbox
        ((1280, 720), (640, 360)),
        ((640, 480), (320, 240)),
        ((160, 90), (320, 180)),  # enlarged
        ((642, 478), (319, 237)),  # odd targets, uneven scales
        ((64, 48), (64, 48)),  # as it is: no blend
    ],
)
@pytest.mark.parametrize("colour", COLOURS, ids=lambda c: f"{c.matrix.name}-{c.full_range}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_the_kernel_gives_the_torch_resamplers_pixels(
    host_kernel,
    source: tuple[int, int],
    target: tuple[int, int],
    colour: ColourSpace,
    dtype: torch.dtype,
) -> None:
    pictures = nv12_frames(3, *source, seed=sum(source))
    width, height = target
    expected = torch.full((3, 3, height, width), -1.0, dtype=dtype)
    got = torch.full((3, 3, height, width), -2.0, dtype=dtype)
    by_torch(pictures, source, colour, expected)
    by_kernel(host_kernel, pictures, source, colour, got)
    assert (expected >= 0).all()
    assert torch.equal(got, expected), (got - expected).abs().max()


def test_strided_frames_and_windows_are_read_and_written_where_they_lie(host_kernel) -> None:
    """Pitched rows (NVDEC's surfaces), every other byte (the high bytes of 10-bit P016), and a
    window inside a padded model input."""
    width, height = 320, 180
    source = nv12_frames(2, width, height, seed=7)
    pitched = [torch.zeros(height * 3 // 2, width + 64, dtype=torch.uint8) for _ in source]
    for buffer, picture in zip(pitched, source, strict=True):
        buffer[:, :width] = picture
    wide = [torch.zeros(height * 3 // 2, 2 * width, dtype=torch.uint8) for _ in source]
    for buffer, picture in zip(wide, source, strict=True):
        buffer[:, 1::2] = picture
    pictures = [pitched[0][:, :width], wide[1][:, 1::2]]
    colour = COLOURS[1]
    expected = torch.empty(2, 3, 90, 160)
    by_torch([p.contiguous() for p in source], (width, height), colour, expected)
    model_input = torch.full((2, 3, 160, 160), 0.5)
    window = model_input[:, :, 35:125, :]
    by_kernel(host_kernel, pictures, (width, height), colour, window)
    assert torch.equal(window, expected)
    assert (model_input[:, :, :35] == 0.5).all() and (model_input[:, :, 125:] == 0.5).all()


def test_a_launch_takes_at_most_its_frames() -> None:
    pictures = nv12_frames(1, 16, 16, seed=1) * (MAX_FRAMES + 1)
    with pytest.raises(ValueError, match=f"at most {MAX_FRAMES} frames"):
        kernel.frames_of(pictures)


@pytest.mark.parametrize("architecture", ["sm_75", "sm_90"])
def test_nvrtc_compiles_the_kernel_without_a_gpu(architecture: str) -> None:
    pytest.importorskip(
        "cuda.bindings.nvrtc", reason="cuda-bindings comes with torch's CUDA wheels"
    )
    cubin = compile_kernel(architecture)
    assert cubin.startswith(b"\x7fELF")
    assert all(name.encode() in cubin for name in kernel.KERNELS.values())


def test_a_kernel_that_does_not_compile_says_why_in_one_error(monkeypatch) -> None:
    pytest.importorskip(
        "cuda.bindings.nvrtc", reason="cuda-bindings comes with torch's CUDA wheels"
    )
    monkeypatch.setattr(kernel, "kernel_source", lambda: 'extern "C" __global__ void k( {}')
    with pytest.raises(ModelError, match=r"did not compile for sm_90: .*error") as refused:
        compile_kernel("sm_90")
    assert "\n" not in str(refused.value)
    with pytest.raises(ModelError, match="invalid value for --gpu-architecture"):
        compile_kernel("sm_52")  # a GPU CUDA 13 no longer builds for


class RecordingKernel:
    """Stands in for :class:`LetterboxKernel` (which needs a GPU) to see which frames reach it:
    the resampler's side of the kernel is its ``NV12Kernel`` protocol, nothing of the GPU."""

    dtypes = frozenset({torch.float32})

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.calls: list[int] = []

    def run(self, pictures, size, k, out) -> None:
        self.calls.append(len(pictures))


def test_only_8_bit_nv12_into_float32_on_the_kernels_device_takes_it() -> None:
    recording = RecordingKernel("cpu")
    resampler = Resampler(frames=4, kernel=recording)
    colour = COLOURS[0]
    nv12 = nv12_frames(2, 64, 48, seed=3)
    resampler.resample(nv12, PixelFormat.NV12, (64, 48), colour, torch.empty(2, 3, 32, 32))
    assert recording.calls == [2]
    assert resampler.scratch_bytes == 0  # no plan: the kernel needs no scratch buffers
    resampler.resample(nv12, PixelFormat.NV12, (64, 48), colour, torch.empty(2, 3, 32, 32).half())
    assert resampler.scratch_bytes > 0
    rgb = [torch.zeros(48, 64, 3, dtype=torch.uint8)]
    resampler.resample(rgb, PixelFormat.RGB24, (64, 48), colour, torch.empty(1, 3, 32, 32))
    elsewhere = Resampler(frames=4, kernel=RecordingKernel("meta"))
    elsewhere.resample(nv12, PixelFormat.NV12, (64, 48), colour, torch.empty(2, 3, 32, 32))
    assert recording.calls == [2]


def test_the_option_is_refused_on_the_cpu_and_said_where_auto_chose_it(caplog) -> None:
    from vstream.assets import DEMO_MODEL
    from vstream.config.loading import ConfigError
    from vstream.detector import Detector

    with pytest.raises((ConfigError, ValueError), match="letterbox_kernel is a CUDA kernel"):
        Detector(DEMO_MODEL, device="cpu", letterbox_kernel=True)
    with caplog.at_level(logging.WARNING, logger="vstream.engine"):
        detector = Detector(DEMO_MODEL, device="auto", letterbox_kernel=True)
    assert detector.model.device.type == "cpu"
    assert "runtime.letterbox_kernel: the model runs on cpu, so torch letterboxes" in caplog.text


def as_tensor_nv12(decoded: Frame) -> Frame:
    """The CPU decoder's picture as an NV12 tensor frame, as NVDEC hands them over (such a
    frame takes the resampler, where the decoder's own picture takes FFmpeg and OpenCV)."""
    assert decoded.picture is not None
    nv12 = torch.from_numpy(decoded.picture.frame.to_ndarray(format="nv12"))
    return Frame(nv12, PixelFormat.NV12, decoded.width, decoded.height, colour=decoded.colour)


class HostKernel:
    """The kernel's own source built for the CPU (``VSTREAM_HOST``), as a resampler takes a
    kernel: each call runs its per-pixel function over the batch, with the GPU's parameters."""

    dtypes = frozenset({torch.float32, torch.float16})

    def __init__(self, library: ctypes.CDLL) -> None:
        self.device = torch.device("cpu")
        self.library = library
        self.launches = 0

    def run(self, pictures, size, k, out) -> None:
        self.launches += 1
        host_run(self.library, pictures, size[1], k, out)


def test_nv12_frames_through_the_kernel_give_the_cpu_paths_input_exactly(
    host_kernel, tmp_path: Path
) -> None:
    """As on a GPU (``test_gpu.py``): NV12 frames letterboxed by the kernel give what FFmpeg and
    OpenCV give the CPU decoder's pictures, on the parity videos and a full-range clip."""
    from helpers import write_video

    from vstream.parity import PARITY_DIR
    from vstream.preprocess import Letterboxer
    from vstream.sources import VideoFileSource

    full_range = write_video(
        tmp_path / "full.mp4", frames=4, width=640, height=360, pix_fmt="yuvj420p"
    )
    kernel = HostKernel(host_kernel)
    for video in [*sorted(PARITY_DIR.glob("*.mp4")), full_range]:
        with VideoFileSource(video) as source:
            decoded = list(itertools.islice(source, 4))
        nv12 = [as_tensor_nv12(f) for f in decoded]
        by_reference, by_the_kernel = torch.zeros((4, 3, 320, 320)), torch.zeros((4, 3, 320, 320))
        Letterboxer(by_reference).load_batch(0, decoded)
        Letterboxer(by_the_kernel, resampler=Resampler(4, kernel=kernel)).load_batch(0, nv12)
        assert torch.equal(by_the_kernel, by_reference), video.name
    assert kernel.launches == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_a_batch_of_two_sizes_is_padded_and_normalised_around_the_kernels_windows(
    host_kernel, dtype: torch.dtype
) -> None:
    """Runs of frames alike each get a launch; the letterboxer's padding and normalisation
    around them are as with torch's letterbox."""
    from vstream.preprocess import Letterboxer

    frames = [
        Frame(p, PixelFormat.NV12, width, height)
        for width, height, seed in ((640, 360, 1), (640, 360, 2), (480, 640, 3))
        for p in nv12_frames(1, width, height, seed)
    ]
    normalise = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    kernel = HostKernel(host_kernel)
    inputs = torch.zeros((2, 3, 3, 256, 256), dtype=dtype)
    expected = Letterboxer(inputs[0], normalise=normalise).load_batch(0, frames)
    with_kernel = Letterboxer(inputs[1], normalise=normalise, resampler=Resampler(3, kernel))
    assert with_kernel.load_batch(0, frames) == expected
    assert kernel.launches == 2
    assert torch.equal(inputs[1], inputs[0])


def test_a_detector_letterboxing_by_the_kernel_finds_what_it_finds_with_torch(
    host_kernel, monkeypatch
) -> None:
    """Through the detector's own letterboxers and batches: the demo detector on NV12 frames of
    the parity videos, its letterbox made by the kernel's host build, gives the same records."""
    from vstream.assets import DEMO_MODEL
    from vstream.detector import Detector
    from vstream.parity import PARITY_DIR
    from vstream.sources import VideoFileSource

    frames = []
    for video in sorted(PARITY_DIR.glob("*.mp4")):
        with VideoFileSource(video) as source:
            frames += [as_tensor_nv12(f) for f in itertools.islice(source, 3)]
    with_torch = Detector(DEMO_MODEL, device="cpu", batch_size=4, conf=0.25)
    kernel = HostKernel(host_kernel)
    monkeypatch.setattr(Detector, "_letterbox_kernel", lambda self: kernel)
    with_kernel = Detector(DEMO_MODEL, device="cpu", batch_size=4, conf=0.25)
    for first in range(0, len(frames), 4):
        batch = frames[first : first + 4]
        expected = [r.to_record() for r in with_torch.detect(batch)]
        assert [r.to_record() for r in with_kernel.detect(batch)] == expected
        assert sum(len(r["detections"]) for r in expected) > 0
    assert kernel.launches >= 3  # one a run of frames alike: each video's size
