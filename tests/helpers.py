"""Test helpers: running the real CLI and generating small videos."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_cli(*args: str | Path, timeout: float = 300) -> CliResult:
    """Run ``python -m vstream`` as a user would, bounded in time."""
    done = subprocess.run(
        [sys.executable, "-m", "vstream", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def write_video(
    path: Path,
    frames: int = 30,
    width: int = 320,
    height: int = 240,
    codec: str = "libx264",
    fps: int = 25,
    options: dict[str, str] | None = None,
) -> Path:
    """Encode a moving gradient with PyAV; every frame differs from the next."""
    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w", options=options or {}) as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            rgb = np.stack(
                [
                    (xx * 255 // width + 8 * i) % 256,
                    (yy * 255 // height) % 256,
                    np.full_like(xx, (40 * i) % 256),
                ],
                axis=-1,
            ).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
