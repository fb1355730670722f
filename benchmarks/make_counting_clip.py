"""A scripted clip for counting: crossings back and forth, and jitter on the line.

The demo video's crossings are all clean and each object crosses at most
once, so every counter gets them right. This 10-second clip has the cases
counters get wrong (the peers' bug reports in the tracking issue), with
exact ground truth, drawn the way the demo video is (the demo detector
finds these shapes):

- a disc crosses the line to the right, comes back, and crosses again
  (3 real crossings: ``in``, ``out``, ``in``);
- a square walks up to the line, stands on it while its box jitters
  4 pixels to either side for 3 seconds, then leaves the way it came
  (no real crossing);
- a triangle crosses once, to the left (``out``).

The line is the demo's (vertical through the middle, drawn bottom to top,
so ``in`` is to the right). A crossing is real when the anchor (bottom
centre) goes from at least 12 pixels on one side to at least 12 pixels on
the other, as in the demo's ground truth.

Writes ``benchmarks/generated/counting.mp4`` and ``counting.json``::

    .venv/bin/python benchmarks/make_counting_clip.py
    .venv/bin/python benchmarks/tracking.py accuracy --video benchmarks/generated/counting.mp4 \\
        --ground-truth benchmarks/generated/counting.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "demo_assets"))

import scenes  # noqa: E402
import video  # noqa: E402

FRAMES = 250
"""10 seconds at the demo's 25 fps."""
CLEAR_PIXELS = 12.0


def disc_x(t: int) -> float:
    """Right across the line, back across it, right again; pauses between."""
    waypoints = [(0, 120.0), (60, 460.0), (90, 460.0), (150, 180.0), (170, 180.0), (230, 500.0)]
    return float(np.interp(t, [w[0] for w in waypoints], [w[1] for w in waypoints]))


def square_x(t: int) -> float:
    """Up to the line, jitter on it (+-4 px, period 4 frames) for 3 s, then back."""
    line = video.LINE["start"][0]
    if t < 60:
        return float(np.interp(t, [0, 60], [80.0, line]))
    if t < 135:
        return line + (4.0 if (t // 2) % 2 else -4.0)
    return float(np.interp(t, [135, 200], [line, 90.0]))


def triangle_x(t: int) -> float:
    return float(np.interp(t, [0, 40, 160], [560.0, 560.0, 100.0]))


def render(seed: int = 7) -> video.Sample:
    rng = np.random.default_rng(seed)
    background = scenes.random_background(rng, video.HEIGHT, video.WIDTH)
    palette = video._background_palette(background)
    objects = [  # id, class, y of the centre, radius, x(t)
        (1, 0, 80.0, 28.0, disc_x),
        (2, 1, 185.0, 28.0, square_x),
        (3, 2, 290.0, 30.0, triangle_x),
    ]
    shapes = {
        oid: scenes.Shape(cls, 0.0, y, radius, 0.3, video._distinct_color(rng, palette))
        for oid, cls, y, radius, _ in objects
    }
    sample = video.Sample([], [], [], [], {oid: shapes[oid].color for oid in shapes})
    line_x = video.LINE["start"][0]
    side: dict[int, int] = {}
    for t in range(FRAMES):
        frame = background.copy()
        boxes, ids = [], []
        for oid, _cls, _y, _r, x_of in objects:
            shape = shapes[oid]
            shape.cx = x_of(t)
            shape.angle += 0.02
            box = scenes.draw_shape(frame, shape)
            assert box is not None
            boxes.append([*box, shape.cls])
            ids.append(oid)
            offset = (box[0] + box[2]) / 2 - line_x
            if abs(offset) >= CLEAR_PIXELS:
                now = 1 if offset > 0 else -1
                if side.get(oid, now) != now:
                    direction = "in" if now > 0 else "out"
                    sample.crossings.append({"frame": t, "id": oid, "direction": direction})
                side[oid] = now
        sample.frames.append(frame)
        sample.boxes.append(boxes)
        sample.ids.append(ids)
    return sample


def main() -> None:
    out = ROOT / "benchmarks" / "generated"
    out.mkdir(parents=True, exist_ok=True)
    sample = render()
    video.write_video(out / "counting.mp4", sample.frames)
    video.write_ground_truth(out / "counting.json", "counting.mp4", sample)
    print(f"wrote {out / 'counting.mp4'} ({FRAMES} frames) and its ground truth")
    for c in sample.crossings:
        print(f"  crossing: frame {c['frame']}, id {c['id']}, {c['direction']}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    main()
