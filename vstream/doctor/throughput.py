"""``fps-cpu`` and ``fps-gpu``: frames per second of each stage alone and of the whole engine.

The device is synchronised before every clock stop, so on a GPU the
figures measure work done, not kernels launched. The whole engine is timed
as ``vstream bench`` times it: from the end of its warm-up (a batch through
every buffer) to its last result, so neither opening the video nor starting
and stopping the stage threads counts as frames' time. On the GPU they are taken
with CUDA graphs off and on, since which is faster depends on the model and
the batch. A model that cannot be captured still gets its figures without
graphs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vstream.doctor.harness import build_detector, open_video
from vstream.errors import first_line


def fps_cpu(detector: Any, video: Path, frames: int) -> tuple[str, dict[str, Any]]:
    """The figures of a CPU ``detector``."""
    figures = throughput(detector, video, frames)
    return fps_line(figures), figures


def fps_gpu(detector: Any, model: Path, video: Path, frames: int) -> tuple[str, dict[str, Any]]:
    """The figures of a CUDA ``detector``, then of a detector of ``model`` with CUDA graphs."""
    figures: dict[str, Any] = {"graphs_off": throughput(detector, video, frames)}
    try:
        graphs = build_detector(model, "cuda", graphs=True)
    except Exception as exc:  # a model that cannot be captured: figures without graphs
        figures["graphs_on"] = {"refused": first_line(exc)}
        return f"graphs off: {fps_line(figures['graphs_off'])}; graphs refused", figures
    figures["graphs_on"] = throughput(graphs, video, frames)
    return (
        f"graphs off: {fps_line(figures['graphs_off'])}; "
        f"graphs on: {fps_line(figures['graphs_on'])}"
    ), figures


def throughput(detector: Any, video: Path, frames: int) -> dict[str, float]:
    """Frames per second of each stage alone and of the whole engine, device synchronised."""
    from vstream.transfer import settle

    device = detector.device
    batch = detector.batch_size
    figures: dict[str, float] = {}

    def timed(work: Callable[[], int]) -> float:
        settle(device)
        started = time.perf_counter()
        done = work()
        settle(device)
        return round(done / max(time.perf_counter() - started, 1e-9), 1)

    with open_video(video, device, loop=True, stream=detector.cuda_stream) as source:
        pictures = iter(source)
        held = list(itertools.islice(pictures, batch))
        figures["decode"] = timed(lambda: sum(1 for _ in itertools.islice(pictures, frames)))

    def preprocess() -> int:
        for i in range(frames):
            detector.preprocess(0, i % batch, held[i % len(held)])
        return frames

    figures["preprocess"] = timed(preprocess)
    geometries = [detector.preprocess(0, slot, f) for slot, f in enumerate(held)]
    for _ in range(3):
        raw = detector.infer(0, batch)
    runs = max(1, frames // batch)

    def infer() -> int:
        for _ in range(runs):
            detector.infer(0, batch)
        return runs * batch

    figures["inference"] = timed(infer)

    def postprocess() -> int:
        for _ in range(runs):
            detector.postprocess(raw, geometries, held)
        return runs * batch

    figures["postprocess"] = timed(postprocess)
    figures["end_to_end"] = end_to_end(detector, video, frames)
    return figures


def end_to_end(detector: Any, video: Path, frames: int) -> float:
    """Frames per second of the overlapped engine (a reader, three stage threads) once warm:
    ``frames`` results after the warm-up's, each made a record as the sinks make them."""
    from vstream.engine.pipeline import detect_iter

    warmup = detector.buffers * detector.batch_size
    with open_video(video, detector.device, loop=True, stream=detector.cuda_stream) as source:
        results = detect_iter(detector, [itertools.islice(source, warmup + frames)])
        for _ in itertools.islice(results, warmup):
            pass
        started = time.perf_counter()
        done = 0
        for result in itertools.islice(results, frames):
            result.to_record()
            done += 1
        elapsed = time.perf_counter() - started
        for _ in results:  # the engine stops as its source ends: after the clock
            pass
    return round(done / max(elapsed, 1e-9), 1)


def fps_line(figures: dict[str, float]) -> str:
    """``decode 412, preprocess 380, ... fps``: the figures as one line."""
    return ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in figures.items()) + " fps"
