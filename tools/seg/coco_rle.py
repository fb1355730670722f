"""COCO's own RLE of a few masks, for the test of vstream's encoder (pycocotools as the oracle).

Random blobs, rings (holes) and edge cases (empty, a whole window, touching the
frame's edges, long runs that need several 5-bit groups) in windows of frames
of a few sizes; each case stores the window's bits as vstream keeps them
(``np.packbits``, row-major) and what ``pycocotools.mask.encode`` and ``area``
say of the whole frame. pycocotools (BSD-2) runs in a separate environment,
never in vstream's::

    python -m venv /tmp/coco && /tmp/coco/bin/pip install pycocotools
    /tmp/coco/bin/python tools/seg/coco_rle.py [--output tests/data/coco_rle.json]
"""

from __future__ import annotations

import argparse
import base64
import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
from pycocotools import mask as coco

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = ROOT / "tests" / "data" / "coco_rle.json"


def cases(rng: np.random.Generator) -> list[tuple[int, int, int, int, np.ndarray]]:
    """``(frame_width, frame_height, x, y, window)`` masks to encode."""
    made = []
    for frame_width, frame_height in ((64, 48), (640, 480), (1920, 1080)):
        for _ in range(4):
            w = int(rng.integers(1, min(frame_width, 120)))
            h = int(rng.integers(1, min(frame_height, 120)))
            x = int(rng.integers(0, frame_width - w + 1))
            y = int(rng.integers(0, frame_height - h + 1))
            yy, xx = np.mgrid[0:h, 0:w]
            cx, cy = rng.uniform(0, w), rng.uniform(0, h)
            radius = np.hypot(xx - cx, yy - cy)
            window = radius < rng.uniform(0.3, 0.7) * max(w, h)
            if rng.random() < 0.5:
                window &= radius > 0.2 * max(w, h)  # a ring: a hole inside
            window ^= rng.random((h, w)) < 0.02  # speckle
            made.append((frame_width, frame_height, x, y, window))
        made.append((frame_width, frame_height, 0, 0, np.zeros((5, 7), bool)))
        made.append((frame_width, frame_height, 3, 2, np.ones((9, 4), bool)))
        w, h = min(frame_width // 2, 80), min(frame_height // 3, 40)
        corner = (frame_width - w, frame_height - h)
        made.append((frame_width, frame_height, *corner, np.ones((h, w), bool)))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    records = []
    for frame_width, frame_height, x, y, window in cases(np.random.default_rng(0)):
        full = np.zeros((frame_height, frame_width), np.uint8)
        h, w = window.shape
        full[y : y + h, x : x + w] = window
        rle = coco.encode(np.asfortranarray(full))
        records.append(
            {
                "frame": [frame_width, frame_height],
                "window": [x, y, w, h],
                "bits": base64.b64encode(np.packbits(window.reshape(-1)).tobytes()).decode(),
                "size": [int(v) for v in rle["size"]],
                "counts": rle["counts"].decode(),
                "area": int(coco.area(rle)),
            }
        )
    header = {"pycocotools": version("pycocotools"), "numpy": np.__version__}
    args.output.write_text(json.dumps({"made_with": header, "cases": records}) + "\n")
    print(args.output, len(records))


if __name__ == "__main__":
    main()
