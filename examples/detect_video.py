"""Detect objects in a video with the vstream Python API.

    python examples/detect_video.py [VIDEO] [MODEL]

Defaults to the bundled sample video and demo model. Prints one line per frame
with detections, then a short summary.
"""

from __future__ import annotations

import sys
from collections import Counter

import vstream


def main(
    video: str = str(vstream.assets.SAMPLE_VIDEO), model: str = str(vstream.assets.DEMO_MODEL)
) -> None:
    counts: Counter[str] = Counter()
    frames = 0
    # The same engine as `vstream run`: decoding, the model and postprocessing overlap.
    for result in vstream.detect(video, model=model, device="auto", conf=0.25):
        frames += 1
        # Detections are columns (xyxy, confidence, class_id, tracker_id); labels resolve on demand.
        detections = result.detections
        names, scores = detections.labels, detections.confidence.tolist()
        counts.update(names)
        labels = ", ".join(f"{n} {s:.2f}" for n, s in zip(names, scores, strict=True))
        print(f"frame {result.frame_index:4d} @ {result.pts_seconds:6.2f}s: {labels or '-'}")
    print(f"{frames} frames; detections per class: {dict(counts)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
