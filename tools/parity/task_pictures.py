"""The README's pictures of a pose and an OBB model: one annotated frame of each, as JPEG.

Builds the parity pose and OBB models (``tests/onnx_models.py``'s ``task_model``; the
pose model's keypoints made more often visible),
runs each through :class:`vstream.Detector` on a parity video and annotates frame
``--frame`` with :class:`vstream.annotate.Annotator`, as the annotated video and the
previews draw it (skeleton joining the visible keypoints; the rotated boxes).
From the repository root::

    .venv/bin/python tools/parity/task_pictures.py [--frame 40] [--out-dir docs/images]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from onnx_models import task_model  # noqa: E402

from vstream import Detector, VideoFileSource  # noqa: E402
from vstream.annotate import Annotator  # noqa: E402
from vstream.assets import ASSETS_DIR  # noqa: E402

VIDEOS = {"pose": "landscape_854x480.mp4", "obb": "standard_640x480.mp4"}
SKELETON = ((0, 1), (0, 2), (1, 3), (2, 3), (4, 0))
"""The pose model's keypoints (top, left, right, bottom, centre) joined round the shape."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame", type=int, default=40)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--max-bytes", type=int, default=60_000)
    args = parser.parse_args()
    parity = ASSETS_DIR / "parity"
    with tempfile.TemporaryDirectory(prefix="task-pictures-") as tmp:
        for task, video in VIDEOS.items():
            model = task_model(
                parity / "demo_tempered.onnx", Path(tmp) / f"{task}.onnx", task, visibility_shift=4
            )
            detector = Detector(model, device="cpu", batch_size=1, conf=0.4)
            annotator = Annotator(skeleton=SKELETON, show_status=False)
            frame = next(f for f in VideoFileSource(parity / video) if f.index == args.frame)
            (result,) = detector.detect([frame])
            picture = Image.fromarray(annotator.annotate(frame, result).numpy())
            for quality in range(90, 40, -5):
                buffer = io.BytesIO()
                picture.save(buffer, "JPEG", quality=quality, optimize=True)
                if buffer.tell() <= args.max_bytes:
                    break
            out = args.out_dir / f"{task}.jpg"
            out.write_bytes(buffer.getvalue())
            print(f"{out}: {len(result.detections)} objects, {buffer.tell()} bytes")


if __name__ == "__main__":
    main()
