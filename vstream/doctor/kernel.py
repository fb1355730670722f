"""``kernel-gpu``: the letterbox kernel compiles for this GPU and gives torch's letterbox exactly.

``runtime.letterbox_kernel`` swaps torch's device letterbox for one CUDA
kernel a batch (:mod:`vstream.preprocess.kernel`), compiled by NVRTC for the
GPU at hand. Here it is compiled and loaded as a pipeline would, and 32
frames of 1080p NV12 noise (every sample value, every chroma pair) are
letterboxed into a 320 input by both, in two colour spaces, into float32 and
float16 inputs: every value must be equal, bit for bit.
"""

from __future__ import annotations

import itertools
from typing import Any

from vstream.doctor.report import Failed

FRAMES = 32
SOURCE = (1920, 1080)
WINDOW = (320, 180)


def kernel_matches_torch() -> tuple[str, dict[str, Any]]:
    import torch

    from vstream.frame import ColourMatrix, ColourSpace, PixelFormat
    from vstream.preprocess.kernel import LetterboxKernel
    from vstream.preprocess.resample import Resampler

    device = torch.device("cuda", torch.cuda.current_device())
    kernel = LetterboxKernel(device)
    width, height = SOURCE
    generator = torch.Generator(device=device).manual_seed(0)
    pictures = [
        torch.randint(0, 256, (height * 3 // 2, width), dtype=torch.uint8, device=device,
                      generator=generator)
        for _ in range(FRAMES)
    ]  # fmt: skip
    shape = (FRAMES, 3, WINDOW[1], WINDOW[0])
    colours = [ColourSpace(ColourMatrix.BT601, False), ColourSpace(ColourMatrix.BT709, True)]
    for colour, dtype in itertools.product(colours, sorted(kernel.dtypes, key=str)):
        expected = torch.zeros(shape, device=device, dtype=dtype)
        got = torch.zeros_like(expected)
        Resampler(FRAMES).resample(pictures, PixelFormat.NV12, SOURCE, colour, expected)
        Resampler(FRAMES, kernel=kernel).resample(pictures, PixelFormat.NV12, SOURCE, colour, got)
        differ = int((got != expected).sum())
        if differ:
            worst = float((got.float() - expected.float()).abs().max()) * 255
            raise Failed(
                f"{colour}, {dtype}: {differ} of {got.numel()} values differ from torch's "
                f"letterbox, by up to {worst:.2f} levels"
            )
    detail = (
        f"compiled for {kernel.architecture}; {FRAMES} 1080p NV12 frames x {len(colours)} colour "
        "spaces, into float32 and float16, equal torch's letterbox, bit for bit"
    )
    return detail, {"architecture": kernel.architecture, "frames": FRAMES, "equal": True}
