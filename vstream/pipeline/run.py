"""A detection job: every frame of a source through a detector into a sink."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vstream.frame import Frame
from vstream.pipeline.detector import Detector
from vstream.results import FrameResult
from vstream.sinks import JsonLinesSink


@dataclass(frozen=True)
class RunSummary:
    """What a job did, for the summary line and for callers."""

    frames: int
    detections: int
    elapsed_seconds: float

    @property
    def fps(self) -> float:
        return self.frames / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"{self.frames} frames, {self.detections} detections, "
            f"{self.elapsed_seconds:.1f} s, {self.fps:.1f} fps"
        )


Progress = Callable[[int, float], None]
"""Called with (frames done, seconds elapsed) after each batch."""


def run_detection(
    frames: Iterable[Frame],
    detector: Detector,
    sink: JsonLinesSink,
    progress: Progress | None = None,
) -> RunSummary:
    """Run ``detector`` on every frame and write every frame's record to ``sink``.

    Records are written batch by batch as they are produced, so whatever was
    processed before an error stays in the output.
    """
    start = time.perf_counter()
    n_frames = n_detections = 0
    pending: list[FrameResult] = []
    try:
        for result in detector.stream(frames):
            pending.append(result)
            n_frames += 1
            n_detections += len(result.detections)
            if len(pending) >= detector.batch_size:
                sink.write(pending)
                pending = []
                if progress is not None:
                    progress(n_frames, time.perf_counter() - start)
    finally:
        if pending:
            sink.write(pending)
    return RunSummary(n_frames, n_detections, time.perf_counter() - start)
