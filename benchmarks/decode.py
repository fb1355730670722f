"""Decode throughput of vstream's CPU decoder on 720p and 1080p H.264.

Generates the test videos on the fly (moving gradients with noise, encoded by
libx264 with its default "medium" preset, 2 s key-frame interval), then reads
every frame through :class:`vstream.VideoFileSource` in each pixel format and
prints frames per second. Run from the repository root::

    .venv/bin/python benchmarks/decode.py [--frames 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import av
import numpy as np
import torch

from vstream.sources import DecoderKind, SourceOptions, VideoFileSource

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}


def make_video(
    path: Path, width: int, height: int, frames: int, fps: int = 30, b_frames: int | None = None
) -> Path:
    """H.264 in MP4 with enough detail and motion to keep the decoder honest; ``b_frames``
    caps the B-frames in a row (None: x264's default; 0: none, as most cameras send)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height, 0:width]
    noise = rng.integers(0, 32, size=(height, width, 3), dtype=np.uint8)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"g": str(2 * fps)})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if b_frames is not None:
            stream.codec_context.max_b_frames = b_frames
        for i in range(frames):
            base = np.stack(
                [(xx + 4 * i) % 224, (yy + 2 * i) % 224, (xx + yy + 6 * i) % 224], axis=-1
            ).astype(np.uint8)
            rgb = base + np.roll(noise, i * 7, axis=1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def decode_fps(path: Path, pixel_format: str, repeat: int) -> tuple[float, int]:
    """Best of ``repeat`` runs: frames per second through VideoFileSource, and the frame count."""
    best, count = 0.0, 0
    for _ in range(repeat):
        options = SourceOptions(decoder=DecoderKind.CPU, pixel_format=pixel_format)
        start = time.perf_counter()
        count = sum(1 for _ in VideoFileSource(path, options=options))
        best = max(best, count / (time.perf_counter() - start))
    return best, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300, help="frames per video (default 300)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case, best kept")
    args = parser.parse_args()
    print(
        f"cpu decoder (PyAV {av.__version__}, FFmpeg frame threading), torch threads: "
        f"{torch.get_num_threads()}"
    )
    print(f"{'video':<8}{'pixel format':<14}{'frames':>7}{'fps':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (width, height) in SIZES.items():
            path = make_video(Path(tmp) / f"{name}.mp4", width, height, args.frames)
            for pixel_format in ("rgb24", "nv12", "yuv420p"):
                fps, count = decode_fps(path, pixel_format, args.repeat)
                print(f"{name:<8}{pixel_format:<14}{count:>7}{fps:>9.1f}")


if __name__ == "__main__":
    main()
