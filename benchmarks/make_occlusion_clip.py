"""A scripted clip where motion alone cannot keep identities: look-alike shapes cross and hide.

The demo video's encounters are mild (at most 20% of an object hidden) and
the tracker keeps every id there. This 10-second clip (640x360, 25 fps,
drawn the way the demo video is, so the demo detector finds the shapes) has
the cases an IoU tracker gets wrong, each in its own band of the frame, with
two objects of the *same shape class* and different colours, so only their
colour tells them apart:

- two discs meet head-on, the blue one in front, their centres passing 20 px
  beyond each other, and turn back; twice. A constant-velocity prediction
  says they went on, past each other;
- two triangles meet head-on and stop, the front one hiding about 80% of the
  other, for 12 frames; then each goes on the way it was heading (a real
  crossing, with a stop in the middle: the hidden one's track is lost and its
  prediction drifts on while the object stands still);
- a small square overtakes a big slow one behind it, is hidden entirely for
  12 frames, and comes back out the way it came;
- two crosses pass each other at constant speed, 10 px apart vertically (the
  case the motion model does handle: a control).

Every object is on screen for the whole clip: 8 identities. Boxes are the
whole shape, hidden parts included, as in MOT ground truth (and the demo's),
so a fully hidden object counts as a miss for any tracker. The ground truth
has the demo's format (``ids`` per frame) and no counting line.

Writes ``benchmarks/generated/occlusion.mp4`` and ``occlusion.json``::

    .venv/bin/python benchmarks/make_occlusion_clip.py
    .venv/bin/python benchmarks/appearance.py --video benchmarks/generated/occlusion.mp4
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
OUT_DIR = ROOT / "benchmarks" / "generated"
VIDEO = OUT_DIR / "occlusion.mp4"
GROUND_TRUTH = OUT_DIR / "occlusion.json"


def path(*waypoints: tuple[float, float]):
    """``x(t)`` through ``(frame, x)`` waypoints, straight between them, held at the ends."""
    frames = [w[0] for w in waypoints]
    xs = [w[1] for w in waypoints]
    return lambda t: float(np.interp(t, frames, xs))


# id, class, colour, y of the centre, radius, x(t); drawn in this order (later ones in front).
OBJECTS = [
    # Discs, band 1: meet at 6 px/frame, centres 20 px past each other, turn back; twice.
    (1, 0, (230, 40, 40), 60.0, 27.0,
     path((0, 90), (40, 330), (90, 90), (120, 90), (160, 330), (210, 90))),
    (2, 0, (40, 90, 235), 70.0, 27.0,
     path((0, 550), (40, 310), (90, 550), (120, 550), (160, 310), (210, 550))),
    # Triangles, band 2: meet at 5 px/frame and stop for 12 frames, 10 px apart, then go on.
    (3, 2, (250, 200, 30), 160.0, 30.0,
     path((20, 100), (68, 340), (80, 340), (128, 580), (150, 580), (198, 340), (210, 340),
          (250, 140))),
    (4, 2, (150, 40, 200), 165.0, 30.0,
     path((20, 580), (68, 330), (80, 330), (128, 90), (150, 90), (198, 330), (210, 330),
          (250, 530))),
    # Squares, band 3: the small one goes behind the big slow one, hides, and comes back.
    (5, 1, (40, 200, 90), 252.0, 16.0,
     path((0, 60), (48, 296), (54, 304), (100, 90), (150, 90), (198, 366), (204, 374),
          (250, 170))),
    (6, 1, (240, 130, 30), 250.0, 34.0, path((0, 290), (250, 390))),
    # Crosses, band 4: a plain crossing at constant speed (the control).
    (7, 3, (240, 240, 240), 312.0, 22.0, path((0, 40), (250, 600))),
    (8, 3, (30, 200, 210), 322.0, 22.0, path((0, 600), (250, 40))),
]  # fmt: skip


def render(seed: int = 45) -> video.Sample:
    rng = np.random.default_rng(seed)
    background = scenes.random_background(rng, video.HEIGHT, video.WIDTH)
    shapes = {
        oid: scenes.Shape(cls, 0.0, y, radius, float(rng.uniform(0, 6.28)), colour, 0.3)
        for oid, cls, colour, y, radius, _ in OBJECTS
    }
    spins = {oid: float(rng.choice([-1, 1]) * rng.uniform(0.01, 0.03)) for oid in shapes}
    sample = video.Sample([], [], [], [], {oid: shapes[oid].color for oid in shapes})
    for t in range(FRAMES):
        frame = background.copy()
        boxes, ids = [], []
        for oid, cls, _colour, _y, _radius, x_of in OBJECTS:
            shape = shapes[oid]
            shape.cx = x_of(t)
            shape.angle += spins[oid]
            box = scenes.draw_shape(frame, shape)
            assert box is not None
            boxes.append([*box, cls])
            ids.append(oid)
        sample.frames.append(frame)
        sample.boxes.append(boxes)
        sample.ids.append(ids)
    return sample


def hidden_fractions(sample: video.Sample) -> dict[int, int]:
    """Frames in which each object is more than half hidden (by the objects drawn after it)."""
    counts = dict.fromkeys(sample.colors, 0)
    for t in range(FRAMES):
        masks = []
        for oid, cls, colour, y, radius, x_of in OBJECTS:
            shape = scenes.Shape(cls, x_of(t), y, radius, 0.0, colour, 0.3)
            masks.append((oid, scenes.shape_mask(shape, video.HEIGHT, video.WIDTH)))
        for k, (oid, back) in enumerate(masks):
            hidden = max((video._hidden_fraction(back, front) for _, front in masks[k + 1 :]),
                         default=0.0)  # fmt: skip
            counts[oid] += hidden > 0.5
    return counts


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    sample = render()
    video.write_video(VIDEO, sample.frames)
    video.write_ground_truth(GROUND_TRUTH, VIDEO.name, sample)
    print(f"wrote {VIDEO} ({FRAMES} frames, {VIDEO.stat().st_size} bytes) and {GROUND_TRUTH}")
    print(f"frames each object is more than half hidden: {hidden_fractions(sample)}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    main()
