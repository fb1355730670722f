"""The parity videos: three short clips, in frame shapes other than the demo's, with ground truth.

vstream must give Ultralytics' answers whatever the frame's shape, and the
shapes that break letterboxing are the ones the demo video (640x360) does
not have: a width whose chroma plane is odd (854x480: 427 chroma columns), a
portrait frame (480x848: the padding is on the sides), and 4:3 (640x480).

Each clip is one scene of the demo video's kind, drawn by
``tools/demo_assets/video.py`` itself: five objects of every class roam the
frame, pass each other and cross a vertical counting line ``gate`` through
the middle (drawn bottom to top, so ``in`` is moving right), and the scene is
kept only if it passes that module's checks (mild occlusion, clean
crossings). That module reads the frame size, length and line from its
constants, so they are set for each clip while it renders. The ground truth
(exact boxes, identities, crossings) is in the demo's format, so
``vstream eval`` reads it. x264 runs single-threaded: the bytes are the same
from one run to the next. Run from the repository root::

    .venv/bin/python tools/parity/videos.py [--out-dir vstream/assets/parity]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "demo_assets"))

import video  # noqa: E402

OUT_DIR = ROOT / "vstream" / "assets" / "parity"


@dataclass(frozen=True)
class Clip:
    """One parity video: its name, frame size, length and scene seed."""

    name: str
    width: int
    height: int
    frames: int
    seed: int
    crf: int

    @property
    def video_path(self) -> str:
        return f"{self.name}.mp4"

    @property
    def ground_truth_path(self) -> str:
        return f"{self.name}_ground_truth.json"


CLIPS: tuple[Clip, ...] = (
    Clip("landscape_854x480", 854, 480, 90, seed=7, crf=26),
    Clip("portrait_480x848", 480, 848, 75, seed=2, crf=26),
    Clip("standard_640x480", 640, 480, 75, seed=3, crf=26),
)


@contextmanager
def clip_geometry(clip: Clip) -> Iterator[None]:
    """Set ``video``'s frame size, length (one scene) and line for ``clip`` while it renders."""
    middle = clip.width // 2
    line = {"name": "gate", "start": [middle, clip.height], "end": [middle, 0]}
    with mock.patch.multiple(
        video,
        WIDTH=clip.width,
        HEIGHT=clip.height,
        NUM_FRAMES=clip.frames,
        SEGMENT_FRAMES=clip.frames,
        LINE={**line, "anchor": "bottom_center"},
    ):
        yield


def build(clip: Clip, out_dir: Path) -> video.Sample:
    """Render ``clip`` and write its video and ground truth into ``out_dir``."""
    with clip_geometry(clip):
        sample = video.render_sample(clip.seed)
        video.write_video(out_dir / clip.video_path, sample.frames, crf=clip.crf)
        video.write_ground_truth(out_dir / clip.ground_truth_path, clip.video_path, sample)
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for clip in CLIPS:
        sample = build(clip, args.out_dir)
        size = (args.out_dir / clip.video_path).stat().st_size
        directions = [c["direction"] for c in sample.crossings]
        print(
            f"{clip.video_path}: {clip.width}x{clip.height}, {clip.frames} frames, "
            f"{size / 1024:.0f} KB, {sum(len(b) for b in sample.boxes)} boxes, "
            f"crossings {directions.count('in')} in, {directions.count('out')} out"
        )


if __name__ == "__main__":
    main()
