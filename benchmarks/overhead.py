"""Host overhead per frame without a GPU: dispatches, host waits and CPU time by stream count.

Drives the real pipeline (the GPU plan, run on the CPU) with a trivial YOLOv8-layout model
and synthetic 1080p NV12 frames; see :mod:`vstream.bench.overhead` for what is counted.

    .venv/bin/python benchmarks/overhead.py [--streams 1 8 32] [--frames 1024] [--json out.json]
        [--size 64 64 --imgsz 64]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vstream.bench.overhead import measure, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--frames", type=int, default=1024, help="frames per run, all streams")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--size",
        type=int,
        nargs=2,
        default=[1920, 1080],
        metavar=("W", "H"),
        help="source frame size (64 64 with --imgsz 64: the host's bookkeeping alone)",
    )
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(
        stream_counts=args.streams,
        batch=args.batch,
        frames=args.frames,
        source_size=tuple(args.size),
        imgsz=args.imgsz,
    )
    print("\n".join(report(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
