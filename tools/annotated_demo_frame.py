"""Save one frame of ``make demo``'s annotated video as a small JPEG (the README's picture).

Runs what ``make demo`` runs (the demo detector, the colour classifier and the
appearance embedder, tracking and the ``gate`` line) into a temporary
directory, decodes frame ``--frame`` of its annotated video with PyAV and
saves it under ``--max-bytes`` (lowering the quality until it fits), so the
picture is exactly what a user's ``out/demo.mp4`` shows. From the repository
root::

    .venv/bin/python tools/annotated_demo_frame.py [--frame 170] [--out PATH.jpg]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame", type=int, default=170, help="frame index (default 170)")
    parser.add_argument("--out", type=Path, default=Path("docs/images/annotated_demo.jpg"))
    parser.add_argument("--max-bytes", type=int, default=95_000, help="size cap of the JPEG")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="demo-frame-") as tmp:
        video = Path(tmp) / "demo.mp4"
        command = [sys.executable, "-m", "vstream", "run", "-q", *DEMO_FLAGS]
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
