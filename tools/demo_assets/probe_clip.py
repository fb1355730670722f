"""Write ``vstream/assets/probe.mp4``: the clip NVDEC must decode before ``auto`` chooses it.

Four 96x64 frames of a moving gradient, H.264 yuv420p without B-frames: well
above NVDEC's smallest size, a multiple of 16 (no cropping), 2 KB.
``vstream.decoders.nvdec.probe`` decodes it and compares the frames with
FFmpeg's.

    .venv/bin/python tools/demo_assets/probe_clip.py [--out vstream/assets/probe.mp4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import av
import numpy as np

FRAMES = 4
WIDTH, HEIGHT = 96, 64


def write_probe_clip(path: Path) -> Path:
    """Encode the probe clip to ``path``."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(
            "libx264", rate=25, options={"preset": "veryfast", "crf": "18", "bf": "0"}
        )
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for i in range(FRAMES):
            rgb = np.stack(
                [
                    (xx * 255 // WIDTH + 40 * i) % 256,
                    (yy * 255 // HEIGHT) % 256,
                    np.full_like(xx, 60 * i % 256),
                ],
                axis=-1,
            ).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("vstream/assets/probe.mp4"))
    print(write_probe_clip(parser.parse_args().out))


if __name__ == "__main__":
    main()
