"""Render one annotated frame of the demo video as a small JPEG (the README's picture).

Runs the bundled demo model on one frame of ``vstream/assets/sample.mp4``, draws
the result with :class:`vstream.annotate.Annotator` and saves a JPEG under
``--max-bytes`` (lowering the quality until it fits). From the repository root::

    .venv/bin/python tools/annotated_demo_frame.py [--frame 60] [--out PATH.jpg]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from PIL import Image

import vstream
from vstream.annotate import Annotator
from vstream.sources import VideoFileSource


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame", type=int, default=60, help="frame index (default 60)")
    parser.add_argument("--out", type=Path, default=Path("docs/images/annotated_demo.jpg"))
    parser.add_argument("--max-bytes", type=int, default=95_000, help="size cap of the JPEG")
    args = parser.parse_args()
    with VideoFileSource(vstream.assets.SAMPLE_VIDEO) as source:
        frame = next(f for f in source if f.index == args.frame)
        fps = source.fps
    detector = vstream.Detector(vstream.assets.DEMO_MODEL, device="cpu")
    (result,) = detector.detect([frame])
    picture = Image.fromarray(Annotator().annotate(frame, result, fps=fps).numpy())
    for quality in range(90, 40, -5):
        buffer = io.BytesIO()
        picture.save(buffer, "JPEG", quality=quality, optimize=True)
        if buffer.tell() <= args.max_bytes:
            break
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(buffer.getvalue())
    print(
        f"{args.out}: frame {frame.index}, {len(result.detections)} detections, "
        f"JPEG quality {quality}, {buffer.tell()} bytes"
    )


if __name__ == "__main__":
    main()
