"""Save one frame of ``make demo``'s annotated video as a small JPEG (the README's picture).

Runs what ``make demo`` runs (the demo detector, the colour classifier and the
appearance embedder, tracking and the ``gate`` line) into a temporary
directory, decodes frame ``--frame`` of its annotated video with PyAV and
saves it under ``--max-bytes`` (lowering the quality until it fits), so the
picture is exactly what a user's ``out/demo.mp4`` shows. From the repository
root::

    .venv/bin/python tools/annotated_demo_frame.py [--frame 170] [--out PATH.jpg] [--seg]

``--seg`` saves the frame of ``make demo-seg`` (the segmentation demo model's masks)
as ``docs/images/masks_demo.jpg`` instead.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
from pathlib import Path

import av

import vstream

DEMO_FLAGS = (
    "--line", "gate=320,360,320,0",
    "--secondary", str(vstream.assets.COLOUR_MODEL),
    "--appearance", str(vstream.assets.APPEARANCE_MODEL),
)  # fmt: skip
"""The flags of the Makefile's ``demo`` target."""
SEG_DEMO_FLAGS = ("--model", str(vstream.assets.DEMO_SEG_MODEL), "--line", "gate=320,360,320,0")
"""The flags of the Makefile's ``demo-seg`` target (``--seg``)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame", type=int, default=170, help="frame index (default 170)")
    parser.add_argument("--out", type=Path, help="default: docs/images/annotated_demo.jpg")
    parser.add_argument("--seg", action="store_true", help="the masks demo (demo_seg.onnx)")
    parser.add_argument("--max-bytes", type=int, default=95_000, help="size cap of the JPEG")
    args = parser.parse_args()
    flags = SEG_DEMO_FLAGS if args.seg else DEMO_FLAGS
    name = "masks_demo.jpg" if args.seg else "annotated_demo.jpg"
    args.out = args.out or Path("docs/images") / name
    with tempfile.TemporaryDirectory(prefix="demo-frame-") as tmp:
        video = Path(tmp) / "demo.mp4"
        command = [sys.executable, "-m", "vstream", "run", "-q", *flags]
        command += ["--output", str(Path(tmp) / "demo.jsonl"), "--save-video", str(video)]
        subprocess.run(command, check=True)
        with av.open(str(video)) as container:
            frames = container.decode(video=0)
            picture = next(f for i, f in enumerate(frames) if i == args.frame).to_image()
    for quality in range(90, 40, -5):
        buffer = io.BytesIO()
        picture.save(buffer, "JPEG", quality=quality, optimize=True)
        if buffer.tell() <= args.max_bytes:
            break
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(buffer.getvalue())
    print(f"{args.out}: frame {args.frame}, JPEG quality {quality}, {buffer.tell()} bytes")


if __name__ == "__main__":
    main()
