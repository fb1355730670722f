"""Export untrained Ultralytics detectors of each family and check vstream reads each.

Ultralytics (AGPL-3.0) runs here as an external tool only, never imported by
vstream or its tests. It builds every model from its description with random
weights, offline (its settings go to a temporary directory), and exports it
to ONNX; vstream then loads each file, must recognise the family Ultralytics
made (from the file alone), and runs it end to end on two frames of odd sizes.

Untrained models find nothing real: a comparison with Ultralytics' own
predict (recall and precision) means nothing here, so none is made; what is
checked is the interface: the layout, the preprocessing, and that boxes
come out where the family's decoding puts them. Needs
``pip install -e '.[bench]'``::

    .venv/bin/python tools/families/export.py [--imgsz 320] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

# (model description, export arguments, the vstream format it must be recognised as)
MODELS = (
    ("yolo11n.yaml", {}, "yolov8"),
    ("yolov10n.yaml", {"nms": False}, "end2end"),
    ("yolo26n.yaml", {"nms": False}, "end2end"),
    ("yolo26n.yaml", {}, "yolov8"),
    ("rtdetr-l.yaml", {}, "rtdetr_topk"),
)


def export(description: str, options: dict, imgsz: int, folder: Path) -> Path:
    """The ONNX file Ultralytics exports for ``description``, untrained, into ``folder``."""
    from ultralytics import RTDETR, YOLO

    maker = RTDETR if description.startswith("rtdetr") else YOLO
    cwd = Path.cwd()
    os.chdir(folder)  # the export is written next to the model description
    try:
        exported = maker(description).export(format="onnx", imgsz=imgsz, opset=17, **options)
    finally:
        os.chdir(cwd)
    suffix = "-e2e" if options.get("nms") is False else ""
    target = folder / f"{Path(description).stem}{suffix}.onnx"
    shutil.move(str(folder / exported), target)
    return target


def check(path: Path, expected: str) -> str:
    """One line: what vstream recognised in ``path`` and what it found on two odd frames."""
    import torch

    from vstream import Detector, Frame, PixelFormat

    detector = Detector(path, device="cpu", batch_size=1, conf=0.0)
    got = detector.output_format.value
    frames = [
        Frame(torch.full((h, w, 3), 90, dtype=torch.uint8), PixelFormat.RGB24, w, h)
        for w, h in ((641, 479), (480, 848))
    ]
    found = []
    for frame in frames:
        (result,) = detector.detect([frame])
        inside = all(
            0 <= d.bbox[0] <= d.bbox[2] <= frame.width
            and 0 <= d.bbox[1] <= d.bbox[3] <= frame.height
            for d in result.detections
        )
        found.append(f"{len(result.detections)} boxes{'' if inside else ' OUTSIDE THE FRAME'}")
    verdict = "ok" if got == expected else f"WRONG (expected {expected})"
    size = path.stat().st_size / 2**20
    return (
        f"{path.name} ({size:.1f} MB): {got} {verdict}; {detector.preprocessing.describe()}; "
        f"because {'; '.join(detector.recognition.reasons)}; at conf 0 on 641x479 and "
        f"480x848: {', '.join(found)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--keep", type=Path, help="keep the exported files in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="families-") as tmp:
        os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=tmp)
        try:
            from ultralytics import settings
        except ImportError:
            sys.exit("ultralytics is not installed: .venv/bin/pip install -e '.[bench]'")
        settings.update({"sync": False})
        folder = args.keep.resolve() if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        failed = False
        for description, options, expected in MODELS:
            try:
                line = check(export(description, options, args.imgsz, folder), expected)
            except Exception as exc:  # one model's failure is reported, the others still run
                line = f"{description} {options}: FAILED: {type(exc).__name__}: {exc}"
            failed |= "ok;" not in line
            print(line, flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
