"""What a cluster worker pays to send a stream's analytics with its records.

A stream's tracker, lines and zones (:class:`~vstream.analytics.stream.StreamAnalytics`,
one counting line) fed 300 frames of N boxes moving at constant speeds; per
frame, this thread's CPU time for the analysis and for
:func:`vstream.engine.carry.dumps`, and the bytes (a worker dumps once
per stream per batch; the driver loads only to show counts, and the next
worker once per move).

    .venv/bin/python benchmarks/carry.py [--objects 5 20 50]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vstream.analytics.stream import StreamAnalytics
from vstream.config.analytics import AnalyticsConfig
from vstream.engine import carry
from vstream.engine.outputs import analyze
from vstream.results import Detections, FrameResult

FRAMES = 300
WARM = 50


def measure(objects: int) -> dict[str, float]:
    config = AnalyticsConfig.model_validate(
        {"tracking": {}, "lines": [{"name": "gate", "start": [640, 720], "end": [640, 0]}]}
    )
    rng = np.random.default_rng(0)
    start, speed = rng.uniform(0, 1200, (objects, 2)), rng.uniform(-3, 3, (objects, 2))
    analytics = StreamAnalytics(config, {0: "a"})
    analysis, dumps, size = [], [], 0
    for i in range(FRAMES):
        corner = start + speed * i
        boxes = np.concatenate([corner, corner + 40], axis=1).astype(np.float32)
        scores = np.full(objects, 0.8, np.float32)
        result = FrameResult(
            "s", i, i / 25, 1280, 720, Detections(boxes, scores, np.zeros(objects, np.int64))
        )
        began = time.thread_time()
        analyze(analytics, result)
        analysis.append(time.thread_time() - began)
        began = time.thread_time()
        data = carry.dumps(analytics)
        dumps.append(time.thread_time() - began)
        size = len(data)
    began = time.thread_time()
    for _ in range(50):
        carry.loads(data)
    loads = (time.thread_time() - began) / 50
    return {
        "objects": objects,
        "analysis_ms": 1000 * float(np.median(analysis[WARM:])),
        "dumps_ms": 1000 * float(np.median(dumps[WARM:])),
        "loads_ms": 1000 * loads,
        "bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, nargs="+", default=[5, 20, 50])
    args = parser.parse_args()
    print("| objects | analysis ms | dumps ms | loads ms | bytes |")
    print("|---:|---:|---:|---:|---:|")
    for objects in args.objects:
        r = measure(objects)
        print(
            f"| {objects} | {r['analysis_ms']:.2f} | {r['dumps_ms']:.2f} | "
            f"{r['loads_ms']:.2f} | {r['bytes']:,} |"
        )


if __name__ == "__main__":
    main()
