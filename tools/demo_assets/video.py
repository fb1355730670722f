"""The 8-second sample video and its exact per-frame ground truth.

The frame is split into a fixed 3x2 grid and each object lives in its own cell,
bouncing off the cell walls while it rotates and breathes in size. Because
cells never overlap, objects never occlude each other and every box is exact.
Halfway through, a new background and a new set of objects appear, so the
sample shows ten distinct objects and two textures in total.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import scenes

WIDTH, HEIGHT, FPS, NUM_FRAMES = 640, 360, 25, 200
GRID_COLS, GRID_ROWS = 3, 2
SEGMENT_FRAMES = 100
OBJECTS_PER_SEGMENT = 5
CELL_MARGIN = 6


@dataclass
class Mover:
    """One object's motion state inside its cell."""

    shape: scenes.Shape
    cell: tuple[int, int, int, int]
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
        """Advance to frame ``t``: new size, rotation, and position reflected at cell walls."""
        s = self.shape
        s.radius = self.radius(t)
        s.angle += self.spin
        x0, y0, x1, y1 = self.cell
        s.cx, self.vx = _bounce(
            s.cx + self.vx, self.vx, x0 + CELL_MARGIN + s.radius, x1 - CELL_MARGIN - s.radius
        )
        s.cy, self.vy = _bounce(
            s.cy + self.vy, self.vy, y0 + CELL_MARGIN + s.radius, y1 - CELL_MARGIN - s.radius
        )


def _bounce(pos: float, vel: float, lo: float, hi: float) -> tuple[float, float]:
    """Reflect a 1-D position into ``[lo, hi]``, flipping the velocity on contact."""
    if pos < lo:
        return lo + (lo - pos), abs(vel)
    if pos > hi:
        return hi - (pos - hi), -abs(vel)
    return pos, vel


def cells() -> list[tuple[int, int, int, int]]:
    """Grid cells as integer ``(x0, y0, x1, y1)``."""
    xs = [round(i * WIDTH / GRID_COLS) for i in range(GRID_COLS + 1)]
    ys = [round(j * HEIGHT / GRID_ROWS) for j in range(GRID_ROWS + 1)]
    return [
        (xs[i], ys[j], xs[i + 1], ys[j + 1]) for j in range(GRID_ROWS) for i in range(GRID_COLS)
    ]


def make_movers(rng: np.random.Generator, background: np.ndarray) -> list[Mover]:
    """Five objects covering all four classes, each in a random distinct cell.

    Colours are chosen to stand out from the mean background of their cell so
    the demo reads clearly.
    """
    classes = [*rng.permutation(len(scenes.NAMES)).tolist(), int(rng.integers(len(scenes.NAMES)))]
    chosen = rng.choice(len(cells()), OBJECTS_PER_SEGMENT, replace=False)
    movers = []
    for cls, cell_index in zip(classes, chosen, strict=True):
        cell = cells()[int(cell_index)]
        x0, y0, x1, y1 = cell
        mean = background[y0:y1, x0:x1].reshape(-1, 3).mean(axis=0)
        r_mid, r_amp = rng.uniform(30, 40), rng.uniform(6, 12)
        speed, heading = rng.uniform(0.8, 2.0), rng.uniform(0, 2 * math.pi)
        shape = scenes.Shape(
            cls=int(cls),
            cx=(x0 + x1) / 2 + rng.uniform(-20, 20),
            cy=(y0 + y1) / 2 + rng.uniform(-15, 15),
            radius=r_mid,
            angle=rng.uniform(0, 2 * math.pi),
            color=scenes.contrasting_color(rng, mean, min_distance=110),
            arm=rng.uniform(0.25, 0.33),
        )
        movers.append(
            Mover(
                shape=shape,
                cell=cell,
                vx=speed * math.cos(heading),
                vy=speed * math.sin(heading),
                spin=math.radians(rng.uniform(0.5, 2.0)) * rng.choice([-1, 1]),
                r_mid=r_mid,
                r_amp=r_amp,
                period=rng.uniform(50, 120),
                phase=rng.uniform(0, 2 * math.pi),
            )
        )
    return movers


def render_sample(seed: int) -> tuple[list[np.ndarray], list[list[list[int]]]]:
    """All frames (RGB uint8) and per-frame boxes ``[x1, y1, x2, y2, cls]``."""
    rng = np.random.default_rng(seed)
    frames: list[np.ndarray] = []
    gt: list[list[list[int]]] = []
    background, movers = None, []
    for t in range(NUM_FRAMES):
        if t % SEGMENT_FRAMES == 0:
            background = scenes.random_background(rng, HEIGHT, WIDTH)
            movers = make_movers(rng, background)
        assert background is not None
        frame = background.copy()
        boxes = []
        for mover in movers:
            mover.step(t)
            box = scenes.draw_shape(frame, mover.shape)
            assert box is not None
            boxes.append([*box, mover.shape.cls])
        frames.append(frame)
        gt.append(boxes)
    return frames, gt


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


def write_ground_truth(path: Path, video_name: str, gt: list[list[list[int]]]) -> None:
    """The GT JSON, one frame per line so diffs stay readable."""
    header = {
        "video": video_name,
        "width": WIDTH,
        "height": HEIGHT,
        "fps": FPS,
        "names": list(scenes.NAMES),
    }
    lines = [json.dumps({"frame": i, "boxes": boxes}) for i, boxes in enumerate(gt)]
    text = json.dumps(header)[:-1] + ', "frames": [\n' + ",\n".join(lines) + "\n]}\n"
    json.loads(text)
    path.write_text(text)


def build_sample(out_dir: Path, seed: int) -> tuple[Path, Path]:
    """Write ``sample.mp4`` and ``sample_ground_truth.json`` into ``out_dir``."""
    frames, gt = render_sample(seed)
    video_path = out_dir / "sample.mp4"
    gt_path = out_dir / "sample_ground_truth.json"
    write_video(video_path, frames)
    write_ground_truth(gt_path, video_path.name, gt)
    return video_path, gt_path
