"""The 720p H.264 video of the benchmark figures, generated, never committed.

The same moving, noisy gradients as ``benchmarks/decode.py`` (libx264's
default preset, a key frame every 2 s): detail and motion that keep the
decoder honest. Run from the repository root::

    .venv/bin/python benchmarks/make_video.py [--size 720p] [--frames 1200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from decode import SIZES, make_video

OUTPUT_DIR = Path(__file__).resolve().parent / "generated"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="720p")
    parser.add_argument("--frames", type=int, default=1200)
    parser.add_argument("--output", type=Path, help="default: benchmarks/generated/SIZE.mp4")
    args = parser.parse_args()
    output = args.output or OUTPUT_DIR / f"{args.size}.mp4"
    output.parent.mkdir(parents=True, exist_ok=True)
    width, height = SIZES[args.size]
    print(make_video(output, width, height, args.frames))


if __name__ == "__main__":
    main()
