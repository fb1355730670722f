"""The whole overlapped pipeline: one or more streams of the video, records written out.

Each stream is the benchmark video read by its own source (looped, so every
stream has as many frames as asked), all of them batched together through
:func:`~vstream.engine.detect_iter`, with every record encoded by the JSON Lines sink
into ``os.devnull``: decoding, preprocessing, the model, postprocessing and
the sink all run, as in ``vstream run``.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

from vstream.bench.measure import Measurement, Stopwatch, rss_bytes
from vstream.bench.stages import looped_source
from vstream.detector import Detector
from vstream.engine.pipeline import detect_iter
from vstream.errors import VstreamError
from vstream.frame import Frame
from vstream.results import FrameResult
from vstream.sinks.jsonl import JsonLinesSink
from vstream.transfer import transfers


class DecodeClock:
    """Remembers when each frame left its decoder, to measure its latency to the result."""

    def __init__(self) -> None:
        self.decoded_at: dict[tuple[str, int], float] = {}

    def through(self, frames: Iterator[Frame]) -> Iterator[Frame]:
        for frame in frames:
            self.decoded_at[frame.stream_id, frame.index] = time.perf_counter()
            yield frame

    def latency(self, result: FrameResult, now: float) -> float:
        return now - self.decoded_at.pop((result.stream_id, result.frame_index))


def end_to_end(
    detector: Detector,
    video: Path,
    streams: int,
    frames_per_stream: int,
    *,
    decoder_threads: int = 0,
    rss_at: int | None = None,
) -> Measurement:
    """``streams`` copies of the video through the pipeline at once.

    Reports aggregate fps, per-frame latency (decoded to result), per-stream
    fps and the fairness between streams, the bytes handed to the host per
    frame and, with ``rss_at``, resident memory after that many frames and at
    the end. Every stream first runs enough frames to warm up every buffer;
    those are processed, written out and not counted. The clock stops at the last
    result, before the pipeline shuts down. ``rss_at`` must be fewer frames than the
    run's, or the end would be compared with itself.
    """
    timed = streams * frames_per_stream
    if rss_at is not None and not 0 < rss_at < timed:
        raise ValueError(f"rss_at must be between 1 and {timed - 1} frames, got {rss_at}")
    sources = [
        looped_source(video, detector.device, f"s{i}", decoder_threads) for i in range(streams)
    ]
    # Timed from the moment every buffer has carried a batch (the model's first runs in each
    # allocate and plan), as the model alone is timed after its warm-up runs.
    warmup = -(-detector.buffers * detector.batch_size // streams)
    clock = DecodeClock()
    limited = [clock.through(itertools.islice(s, warmup + frames_per_stream)) for s in sources]
    finished_at: dict[str, float] = {}
    done: dict[str, int] = {}
    latencies: list[float] = []
    pending: list[FrameResult] = []
    rss_early: int | None = None
    watch: Stopwatch | None = None
    warmed = 0
    # Bytes are counted over every frame, warm-up included: results arrive while later
    # batches have already crossed, so a window opened at the first timed result would
    # miss some of those bytes.
    bytes_before, _ = transfers.snapshot()
    try:
        with JsonLinesSink(os.devnull) as sink:
            for result in detect_iter(detector, limited):
                now = time.perf_counter()
                latency = clock.latency(result, now)
                pending.append(result)
                if len(pending) >= detector.batch_size:
                    sink.send([r.to_record() for r in pending])
                    pending.clear()
                if watch is None:
                    warmed += 1
                    if warmed == warmup * streams:
                        watch = Stopwatch().start()
                    continue
                latencies.append(latency)
                done[result.stream_id] = done.get(result.stream_id, 0) + 1
                finished_at[result.stream_id] = now
                if rss_at is not None and len(latencies) == rss_at:
                    rss_early = rss_bytes()
                if len(latencies) == timed:
                    # The last frame's result: the pipeline's shutdown is no frame's time.
                    watch.stop(at=now)
            sink.send([r.to_record() for r in pending])
            if watch is None:
                raise VstreamError(f"{video}: the pipeline ended during its warm-up")
            if len(latencies) < timed:  # a stream ended early: timed to the last result
                watch.stop(at=max(finished_at.values(), default=watch.started_at))
    finally:
        for source in sources:
            source.close()
    frames = len(latencies)
    per_stream = {s: done[s] / (finished_at[s] - watch.started_at) for s in sorted(done)}
    mean = sum(per_stream.values()) / len(per_stream) if per_stream else 0.0
    spread = max((abs(v - mean) / mean for v in per_stream.values()), default=0.0) if mean else 0.0
    bytes_after, _ = transfers.snapshot()
    extra = {
        "streams": streams,
        "per_stream_fps": {s: round(v, 2) for s, v in per_stream.items()},
        "fairness_max_deviation": round(spread, 4),
        "device_bytes_per_frame": round((bytes_after - bytes_before) / (warmed + frames), 1),
    }
    if rss_at is not None:
        rss_end = rss_bytes()
        extra["rss_mb_after_frames"] = {
            str(rss_at): _mb(rss_early),
            str(frames): _mb(rss_end),
        }
        extra["rss_growth_mb"] = (
            _mb(rss_end - rss_early) if rss_end is not None and rss_early is not None else None
        )
    return watch.measurement(frames, latencies, **extra)


def _mb(value: int | None) -> float | None:
    return round(value / 2**20, 1) if value is not None else None
