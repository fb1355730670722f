"""The 8-second sample video with exact per-frame ground truth, identities and line crossings.

Two scenes of 100 frames, each with its own background and five objects
(every class in each). Objects roam the whole frame, bouncing off its edges
while they rotate and breathe in size, so their paths cross and they pass in
front of one another: the tracker has real work to do.

Each scene is drawn at random and kept only if it has the properties the demo
promises (:func:`scene_problems`), so the scene is both hard and fair:

- objects cross paths: at least two pairs overlap at some point;
- objects cross the demo line, at least :data:`MIN_CROSSINGS` times;
- occlusion stays mild and brief, since the demo detector was trained on
  shapes that never touch: at most :data:`MAX_HIDDEN` of an object's pixels
  hidden, contacts in at most :data:`MAX_CONTACT_FRAMES` object-frames and
  for at most :data:`MAX_PAIR_CONTACT_FRAMES` frames per pair, and never one
  object touching two others;
- every crossing of the demo line is clean: the anchor comes from at least
  :data:`CLEAN_PIXELS` on one side and goes at least as far on the other, and
  stays there for :data:`CLEAN_FRAMES` frames, not in a scene's first
  :data:`SETTLE_FRAMES` frames, so the true count is exact;
- at the cut between the scenes no new object appears where an old one just
  was (no tracker can tell them apart across a cut).

Boxes are exact (the full shape, hidden parts included, as MOT ground truth
has it). Identities are 1..5 in the first scene and 6..10 in the second.
"""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import scenes

WIDTH, HEIGHT, FPS, NUM_FRAMES = 640, 360, 25, 200
SEGMENT_FRAMES = 100
OBJECTS_PER_SEGMENT = 5
EDGE_MARGIN = 6

LINE = {"name": "gate", "start": [320, 360], "end": [320, 0], "anchor": "bottom_center"}
"""The demo counting line: vertical through the middle, drawn bottom to top, so by the
convention of :class:`vstream.analytics.LineConfig` ``in`` is moving to the right."""

MAX_HIDDEN = 0.2
"""Largest fraction of an object's pixels another object may cover."""
CONTACT_PIXELS = 4.0
"""Objects whose boxes come closer than this touch (or overlap)."""
MAX_CONTACT_FRAMES = 150
"""Most object-frames (of 500 per scene) in which an object touches another."""
MIN_OVERLAPPING_PAIRS = 2
MIN_CROSSINGS = 2
"""Least crossings of the demo line per scene."""
CLEAN_PIXELS = 12.0
CLEAN_FRAMES = 10
SETTLE_FRAMES = 20
"""No crossing in a scene's first frames: a tracker needs a few frames to confirm a track."""
MAX_PAIR_CONTACT_FRAMES = 30
"""Most frames two given objects may touch: they pass, they do not travel together."""
MAX_ATTEMPTS = 2000
MIN_COLOR_DISTANCE = 110.0
"""Least RGB distance of an object's colour from both main colours of its background."""


@dataclass
class Mover:
    """One object's identity and motion state."""

    id: int
    shape: scenes.Shape
    vx: float
    vy: float
    spin: float
    r_mid: float
    r_amp: float
    period: float
    phase: float

    def radius(self, t: int) -> float:
        return self.r_mid + self.r_amp * math.sin(2 * math.pi * t / self.period + self.phase)

    def step(self, t: int) -> None:
        """Advance to frame ``t``: new size, rotation, and position reflected at the edges."""
        s = self.shape
        s.radius = self.radius(t)
        s.angle += self.spin
        lo = EDGE_MARGIN + s.radius
        s.cx, self.vx = _bounce(s.cx + self.vx, self.vx, lo, WIDTH - lo)
        s.cy, self.vy = _bounce(s.cy + self.vy, self.vy, lo, HEIGHT - lo)


def _bounce(pos: float, vel: float, lo: float, hi: float) -> tuple[float, float]:
    """Reflect a 1-D position into ``[lo, hi]``, flipping the velocity on contact."""
    if pos < lo:
        return lo + (lo - pos), abs(vel)
    if pos > hi:
        return hi - (pos - hi), -abs(vel)
    return pos, vel


def make_movers(
    rng: np.random.Generator, background: np.ndarray, first_id: int, start: int
) -> list[Mover]:
    """Five objects covering all four classes, heading mostly sideways, two pairs of which
    are set to pass each other (see :func:`_plan_encounter`).

    Colours are chosen to stand out from both main colours of the background.
    """
    classes = [*rng.permutation(len(scenes.NAMES)).tolist(), int(rng.integers(len(scenes.NAMES)))]
    palette = _background_palette(background)
    movers = []
    for offset, cls in enumerate(classes):
        r_mid, r_amp = rng.uniform(24, 32), rng.uniform(4, 8)
        reach = r_mid + r_amp + EDGE_MARGIN
        speed = rng.uniform(2.0, 3.5)
        heading = rng.uniform(-0.6, 0.6) + (math.pi if offset % 2 else 0.0)
        shape = scenes.Shape(
            cls=int(cls),
            cx=rng.uniform(reach, WIDTH - reach),
            cy=rng.uniform(reach, HEIGHT - reach),
            radius=r_mid,
            angle=rng.uniform(0, 2 * math.pi),
            color=_distinct_color(rng, palette),
            arm=rng.uniform(0.25, 0.33),
        )
        movers.append(
            Mover(
                id=first_id + offset,
                shape=shape,
                vx=speed * math.cos(heading),
                vy=speed * math.sin(heading),
                spin=math.radians(rng.uniform(0.5, 2.0)) * rng.choice([-1, 1]),
                r_mid=r_mid,
                r_amp=r_amp,
                period=rng.uniform(50, 120),
                phase=rng.uniform(0, 2 * math.pi),
            )
        )
    for a, b in ((movers[0], movers[1]), (movers[2], movers[3])):
        _plan_encounter(rng, a, b, start)
    return movers


def _plan_encounter(rng: np.random.Generator, a: Mover, b: Mover, start: int) -> None:
    """Start ``a`` and ``b`` (heading opposite ways) so that they pass each other, side by
    side and overlapping a little, at a random frame of the scene, away from the demo line.

    Each is placed at the meeting point and then run backwards to the scene's
    first frame (bounces included), which is only nearly the exact reverse of
    the forward motion; :func:`scene_problems` checks the result.
    """
    meet = start + int(rng.integers(20, 80))
    side = 1.0 if rng.random() < 0.5 else -1.0
    mx = LINE["start"][0] + side * rng.uniform(70, 250)
    my = rng.uniform(90, HEIGHT - 90)
    rx, ry = a.vx - b.vx, a.vy - b.vy
    norm = math.hypot(rx, ry)
    across = np.array([-ry / norm, rx / norm])  # perpendicular to their relative motion
    distance = rng.uniform(0.55, 0.8) * (a.radius(meet) + b.radius(meet))
    for mover, sign in ((a, 0.5), (b, -0.5)):
        x, y = np.array([mx, my]) + sign * distance * across
        _rewind(mover, x, y, meet, start)


def _rewind(mover: Mover, x: float, y: float, at: int, start: int) -> None:
    """Set ``mover``'s initial state so that it is (nearly) at ``(x, y)`` in frame ``at``."""
    s = mover.shape
    s.cx, s.cy = x, y
    vx, vy = -mover.vx, -mover.vy
    for t in range(at, start - 1, -1):
        lo = EDGE_MARGIN + mover.radius(t)
        s.cx, vx = _bounce(s.cx + vx, vx, lo, WIDTH - lo)
        s.cy, vy = _bounce(s.cy + vy, vy, lo, HEIGHT - lo)
    mover.vx, mover.vy = -vx, -vy


def _background_palette(background: np.ndarray) -> np.ndarray:
    """The background's two main colours: mean of its darker and of its brighter half.

    Objects roam the whole frame, so their colour must stand out from every part
    of it; for a checkerboard these are the two checker colours.
    """
    pixels = background.reshape(-1, 3).astype(np.float64)
    luma = pixels @ np.array([0.299, 0.587, 0.114])
    dark = luma <= np.median(luma)
    return np.stack([pixels[dark].mean(axis=0), pixels[~dark].mean(axis=0)])


def _distinct_color(
    rng: np.random.Generator, palette: np.ndarray, tries: int = 50
) -> tuple[int, int, int]:
    """A random colour far (RGB distance) from every colour of ``palette``: the farthest of
    the first candidates, stopping early at :data:`MIN_COLOR_DISTANCE`."""
    best, best_distance = None, -1.0
    for _ in range(tries):
        color = rng.uniform(0, 255, 3)
        distance = float(np.linalg.norm(palette - color, axis=1).min())
        if distance > best_distance:
            best, best_distance = color, distance
        if distance >= MIN_COLOR_DISTANCE:
            break
    assert best is not None
    return (int(best[0]), int(best[1]), int(best[2]))


def _masks(movers: list[Mover]) -> list[tuple[np.ndarray, int, int]]:
    return [scenes.shape_mask(m.shape, HEIGHT, WIDTH) for m in movers]


def _hidden_fraction(
    back: tuple[np.ndarray, int, int], front: tuple[np.ndarray, int, int]
) -> float:
    """Fraction of ``back``'s pixels that ``front`` covers (masks with their offsets)."""
    (mb, yb, xb), (mf, yf, xf) = back, front
    y0, y1 = max(yb, yf), min(yb + mb.shape[0], yf + mf.shape[0])
    x0, x1 = max(xb, xf), min(xb + mb.shape[1], xf + mf.shape[1])
    if y1 <= y0 or x1 <= x0:
        return 0.0
    both = mb[y0 - yb : y1 - yb, x0 - xb : x1 - xb] & mf[y0 - yf : y1 - yf, x0 - xf : x1 - xf]
    return float(both.sum()) / max(float(mb.sum()), 1.0)


def _box(mask: tuple[np.ndarray, int, int]) -> list[int]:
    m, y0, x0 = mask
    rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
    return [x0 + int(cols[0]), y0 + int(rows[0]), x0 + int(cols[-1]) + 1, y0 + int(rows[-1]) + 1]


def _boxes_touch(a: np.ndarray | list[int], b: np.ndarray | list[int]) -> bool:
    """Whether two boxes overlap or come within :data:`CONTACT_PIXELS` of each other."""
    gap = CONTACT_PIXELS
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def line_side(box: list[float]) -> float:
    """Signed distance of the box's bottom centre from :data:`LINE`, positive on the ``in`` side."""
    (sx, sy), (ex, ey) = LINE["start"], LINE["end"]
    px, py = (box[0] + box[2]) / 2, box[3]
    return ((ex - sx) * (py - sy) - (ey - sy) * (px - sx)) / math.hypot(ex - sx, ey - sy)


def _unclean_crossings(sides: np.ndarray) -> int:
    """Crossings in one object's per-frame signed distances that are not clean (see module doc)."""
    unclean = 0
    for k in np.flatnonzero(np.sign(sides[1:]) != np.sign(sides[:-1])) + 1:
        before = sides[max(k - CLEAN_FRAMES, 0) : k]
        after = sides[k : k + CLEAN_FRAMES]
        sign = np.sign(sides[k])
        clean = (
            k >= SETTLE_FRAMES
            and len(after) == CLEAN_FRAMES
            and np.all(np.sign(after) == sign)
            and np.all(np.sign(before) == -sign)
            and np.abs(after).max() >= CLEAN_PIXELS
            and np.abs(before).max() >= CLEAN_PIXELS
        )
        unclean += not clean
    return unclean


def scene_problems(movers: list[Mover], start: int, previous: list[Mover] | None) -> list[str]:
    """Why a candidate scene breaks the promises of the module doc (empty when it keeps them)."""
    movers = copy.deepcopy(movers)
    problems = []
    previous_boxes = [_box(mask) for mask in _masks(previous or [])]
    overlapping: set[tuple[int, int]] = set()
    worst = 0.0
    contact_frames = crowded_frames = 0
    pair_contacts: Counter[tuple[int, int]] = Counter()
    sides = np.zeros((SEGMENT_FRAMES, len(movers)))
    for t in range(start, start + SEGMENT_FRAMES):
        for m in movers:
            m.step(t)
        masks = _masks(movers)
        boxes = np.array([_box(mask) for mask in masks], dtype=np.float64)
        contacts = np.zeros(len(movers), dtype=int)
        for i in range(len(movers)):
            for j in range(i + 1, len(movers)):
                if _boxes_touch(boxes[i], boxes[j]):
                    contacts[[i, j]] += 1
                    pair_contacts[i, j] += 1
                    hidden = _hidden_fraction(masks[i], masks[j])
                    if hidden > 0.02:
                        overlapping.add((i, j))
                    worst = max(worst, hidden)
        contact_frames += int(np.count_nonzero(contacts))
        crowded_frames += int(np.count_nonzero(contacts > 1))
        sides[t - start] = [line_side(box) for box in boxes]
        if t == start and previous is not None:
            for m, box in zip(movers, boxes, strict=True):
                for p, previous_box in zip(previous, previous_boxes, strict=True):
                    if _boxes_touch(box, previous_box):
                        problems.append(f"object {m.id} appears where {p.id} was")
    if worst > MAX_HIDDEN:
        problems.append(f"{worst:.0%} of an object hidden")
    if contact_frames > MAX_CONTACT_FRAMES:
        problems.append(f"objects touch others in {contact_frames} object-frames")
    if pair_contacts and max(pair_contacts.values()) > MAX_PAIR_CONTACT_FRAMES:
        problems.append(f"two objects touch for {max(pair_contacts.values())} frames")
    if crowded_frames:
        problems.append(f"objects touch two others in {crowded_frames} object-frames")
    if len(overlapping) < MIN_OVERLAPPING_PAIRS:
        problems.append(f"only {len(overlapping)} pairs of objects overlap")
    unclean = sum(_unclean_crossings(sides[:, i]) for i in range(len(movers)))
    if unclean:
        problems.append(f"{unclean} line crossings are not clean")
    crossings = int(np.count_nonzero(np.diff(np.sign(sides), axis=0)))
    if crossings < MIN_CROSSINGS:
        problems.append(f"only {crossings} line crossings")
    return problems


@dataclass
class Sample:
    """Rendered frames and their ground truth."""

    frames: list[np.ndarray]
    boxes: list[list[list[int]]]
    """Per frame: ``[x1, y1, x2, y2, class_id]`` per object."""
    ids: list[list[int]]
    """Per frame: the identity of each box, in box order."""
    crossings: list[dict]
    """True crossings of :data:`LINE`: ``{"frame", "id", "direction"}``."""
    colors: dict[int, tuple[int, int, int]]
    """The RGB colour each identity is painted in (the demo classifier's ground truth)."""


def render_sample(seed: int) -> Sample:
    """Draw both scenes (see the module doc) and render every frame."""
    rng = np.random.default_rng(seed)
    motion_rng = np.random.default_rng([seed, 1])
    sample = Sample([], [], [], [], {})
    previous: list[Mover] | None = None
    last_side: dict[int, float] = {}
    for start in range(0, NUM_FRAMES, SEGMENT_FRAMES):
        background = scenes.random_background(rng, HEIGHT, WIDTH)
        first_id = 1 + OBJECTS_PER_SEGMENT * (start // SEGMENT_FRAMES)
        for _ in range(MAX_ATTEMPTS):
            movers = make_movers(motion_rng, background, first_id, start)
            if not scene_problems(movers, start, previous):
                break
        else:
            raise RuntimeError(f"no acceptable scene at frame {start} in {MAX_ATTEMPTS} draws")
        for t in range(start, start + SEGMENT_FRAMES):
            frame = background.copy()
            boxes, ids = [], []
            for mover in movers:
                mover.step(t)
                box = scenes.draw_shape(frame, mover.shape)
                assert box is not None
                boxes.append([*box, mover.shape.cls])
                ids.append(mover.id)
                side = line_side(box)
                before = last_side.get(mover.id)
                if before is not None and (side > 0) != (before > 0):
                    direction = "in" if side > 0 else "out"
                    sample.crossings.append({"frame": t, "id": mover.id, "direction": direction})
                last_side[mover.id] = side
            sample.frames.append(frame)
            sample.boxes.append(boxes)
            sample.ids.append(ids)
        sample.colors.update({m.id: m.shape.color for m in movers})
        previous = copy.deepcopy(movers)
    return sample


def write_video(path: Path, frames: list[np.ndarray], crf: int = 20) -> None:
    """H.264 yuv420p MP4 with BT.601 limited-range tags (swscale's default RGB->YUV matrix).

    A single encoder thread keeps the output byte-identical between runs.
    """
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "medium", "threads": "1"}
        ctx = stream.codec_context
        ctx.colorspace, ctx.color_primaries, ctx.color_trc, ctx.color_range = 6, 6, 6, 1
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def write_ground_truth(path: Path, video_name: str, sample: Sample) -> None:
    """The GT JSON, one frame (and one crossing) per line so diffs stay readable."""
    header = {
        "video": video_name,
        "width": WIDTH,
        "height": HEIGHT,
        "fps": FPS,
        "names": list(scenes.NAMES),
    }
    frames = [
        json.dumps({"frame": i, "boxes": boxes, "ids": ids})
        for i, (boxes, ids) in enumerate(zip(sample.boxes, sample.ids, strict=True))
    ]
    line = json.dumps({**LINE, "crossings": []})[:-2]
    crossings = ",\n".join(json.dumps(c) for c in sample.crossings)
    text = (
        json.dumps(header)[:-1]
        + ', "lines": [\n'
        + line
        + "\n"
        + crossings
        + '\n]}],\n"frames": [\n'
        + ",\n".join(frames)
        + "\n]}\n"
    )
    json.loads(text)
    path.write_text(text)


def build_sample(out_dir: Path, seed: int) -> tuple[Path, Path]:
    """Write ``sample.mp4`` and ``sample_ground_truth.json`` into ``out_dir``."""
    sample = render_sample(seed)
    video_path = out_dir / "sample.mp4"
    gt_path = out_dir / "sample_ground_truth.json"
    write_video(video_path, sample.frames)
    write_ground_truth(gt_path, video_path.name, sample)
    return video_path, gt_path
