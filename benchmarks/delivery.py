"""The delivery thread's work per frame, on the CPU: trackers, lines and zones, record, JSON.

On a GPU one process's limit is its GIL, and the postprocessing thread that
delivers a batch holds it for about half the time (BENCHMARKS.md, the H100
profiles): each frame's tracker, its lines and zones
(:func:`vstream.engine.outputs.analyze`), its record (:meth:`FrameResult.to_record`)
and that record's JSON (the sinks' encoder); a batch's trackers stepped together,
and its tracks placed against the lines and zones together, as the pipeline does.
None of it touches the GPU, so it is measured here: ``--streams`` synthetic
1080p scenes of about ``--objects`` moving boxes each (scores 0.3-0.9), every
frame delivered in that order, CPU time of this process per frame.

To compare two commits, run it alternately against each (a worktree of the
other on ``PYTHONPATH``) and keep the best of a few runs of each::

    .venv/bin/python benchmarks/delivery.py [--streams 32] [--frames 200] [--objects 10]
        [--lines-and-zones]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from vstream.analytics.stream import StreamAnalytics
from vstream.config.analytics import AnalyticsConfig
from vstream.engine.outputs import analyze
from vstream.results import Detections, FrameResult
from vstream.tracking import update_together

try:
    from vstream.sinks.base import encode_records
except ImportError:  # a commit before the sinks' one encoder (to compare with it)

    def encode_records(record: dict) -> bytes:  # type: ignore[misc]
        return json.dumps(record, separators=(",", ":")).encode()


try:
    from vstream.analytics.placing import place
except ImportError:  # a commit before lines and zones placed streams together
    place = None  # type: ignore[assignment]


NAMES = {0: "person", 1: "car"}
LINES_AND_ZONES = {
    "lines": [{"name": "gate", "start": [0, 540], "end": [1920, 540]}],
    "zones": [{"name": "dock", "points": [[0, 0], [960, 0], [960, 1080], [0, 1080]]}],
}


def scenes(streams: int, frames: int, objects: int, seed: int = 0) -> list[list[Detections]]:
    """Each frame's detections of every stream: boxes drifting at a few pixels a frame."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 1800, (streams, objects, 2))
    step = rng.uniform(-4, 4, (streams, objects, 2))
    out = []
    for frame in range(frames):
        row = []
        for s in range(streams):
            corner = start[s] + step[s] * frame
            boxes = np.concatenate([corner, corner + 60], axis=1).astype(np.float32)
            scores = rng.uniform(0.3, 0.9, objects).astype(np.float32)
            row.append(Detections(boxes, scores, rng.integers(0, 2, objects), class_names=NAMES))
        out.append(row)
    return out


def deliver(streams: int, frames: list[list[Detections]], config: AnalyticsConfig) -> float:
    """CPU seconds to deliver every frame, as the pipeline's postprocessing thread does."""
    analytics = [StreamAnalytics(config, NAMES, conf=0.25) for _ in range(streams)]
    trackers = [a.tracker for a in analytics]
    size = 0
    started = time.process_time()
    for index, row in enumerate(frames):
        pts = index / 30
        ids = update_together(trackers, [(d.xyxy, d.confidence, d.class_id, pts) for d in row])
        placed: list = [None] * streams
        if place is not None and (config.lines or config.zones):
            placed = place(analytics[0], [(i, d.xyxy, None) for i, d in zip(ids, row, strict=True)])
        for s, detections in enumerate(row):
            result = FrameResult(f"cam{s}", index, pts, 1920, 1080, detections)
            if place is None:
                result = analyze(analytics[s], result, track_ids=ids[s])
            else:
                result = analyze(analytics[s], result, track_ids=ids[s], placement=placed[s])
            size += len(encode_records(result.to_record()))
    assert size > 0
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--objects", type=int, default=10)
    parser.add_argument(
        "--lines-and-zones", action="store_true", help="a counting line and a zone as well"
    )
    args = parser.parse_args()
    config = AnalyticsConfig.model_validate(
        {"tracking": {}, **(LINES_AND_ZONES if args.lines_and_zones else {})}
    )
    frames = scenes(args.streams, args.frames, args.objects)
    seconds = deliver(args.streams, frames, config)
    per_frame_us = seconds / (args.streams * args.frames) * 1e6
    what = "tracking, a line and a zone" if args.lines_and_zones else "tracking"
    print(
        f"{args.streams} streams x {args.frames} frames, about {args.objects} objects, {what}: "
        f"{per_frame_us:.1f} us of CPU a frame"
    )


if __name__ == "__main__":
    main()
