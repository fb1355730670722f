"""Each stage of the pipeline alone, on the same video, model, batch and threads.

Decoding reads the video; preprocessing letterboxes decoded frames held in
memory; the model runs on a full batch of letterboxed frames; postprocessing
decodes the model's real output. Each runs on the calling thread, with the
same code the overlapped pipeline runs.

Beside them, :func:`model_alone` is the model as users measure it: one
ONNX Runtime session with its default options, batch 1, one run after
another. That is the figure a pipeline has to beat: the whole pipeline,
decoding included, should deliver more frames per second than a bare
inference loop on the same cores.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import torch

from vstream.bench.measure import Measurement, Stopwatch
from vstream.config.sources import SourceOptions
from vstream.detector import Detector
from vstream.frame import Frame
from vstream.inference.wheels import load_onnxruntime
from vstream.sources.file import VideoFileSource
from vstream.transfer import settle

WARMUP_RUNS = 3
"""Model runs before timing: the first runs of a session allocate and plan."""

HELD_FRAMES = 8
"""Decoded frames kept in memory for the preprocessing-only run (reused in turn)."""


def looped_source(
    path: Path, device: torch.device, stream_id: str = "bench", decoder_threads: int = 0
) -> VideoFileSource:
    """The benchmark video, starting again at its end, so any number of frames can be read."""
    options = SourceOptions(loop=True, decoder_threads=decoder_threads)
    return VideoFileSource(path, stream_id=stream_id, device=device, options=options)


def decode_only(path: Path, device: torch.device, frames: int, decoder_threads: int) -> Measurement:
    """Frames per second of decoding alone, as the pipeline's readers decode."""
    with looped_source(path, device, decoder_threads=decoder_threads) as source:
        frames_in = iter(source)
        next(frames_in)  # opening and the first key frame are not the steady state
        latencies = []
        watch = Stopwatch().start()
        last = time.perf_counter()
        for _ in itertools.islice(frames_in, frames):
            now = time.perf_counter()
            latencies.append(now - last)
            last = now
        watch.stop()
    return watch.measurement(len(latencies), latencies)


def held_frames(path: Path, device: torch.device, count: int = HELD_FRAMES) -> list[Frame]:
    """A few decoded frames of the video, kept for the stages that start after decoding."""
    with looped_source(path, device) as source:
        return list(itertools.islice(source, count))


def preprocess_only(detector: Detector, frames: list[Frame], count: int) -> Measurement:
    """Letterboxing alone: decoded frames into the model input's slots, in turn."""
    batch = detector.batch_size
    latencies = []
    watch = Stopwatch().start()
    for i in range(count):
        started = time.perf_counter()
        detector.preprocess(0, i % batch, frames[i % len(frames)])
        settle(detector.device)  # on a GPU: the work, not its launch
        latencies.append(time.perf_counter() - started)
    watch.stop()
    return watch.measurement(count, latencies)


def inference_only(detector: Detector, frames: list[Frame], count: int) -> Measurement:
    """The model alone on full batches: the fps ceiling of the pipeline on this machine.

    Latencies are per run, i.e. what each frame of a batch waits for the model.
    """
    batch = detector.batch_size
    for slot in range(batch):
        detector.preprocess(0, slot, frames[slot % len(frames)])
    for _ in range(WARMUP_RUNS):
        detector.infer(0, batch)
    runs = max(1, -(-count // batch))
    latencies = []
    watch = Stopwatch().start()
    for _ in range(runs):
        started = time.perf_counter()
        detector.infer(0, batch)
        settle(detector.device)  # on a GPU: the work, not its launch
        latencies.append(time.perf_counter() - started)
    watch.stop()
    return watch.measurement(runs * batch, latencies)


def postprocess_only(detector: Detector, frames: list[Frame], count: int) -> Measurement:
    """Decoding boxes from a real model output, NMS and the copy to the host, alone."""
    batch = detector.batch_size
    held = [frames[slot % len(frames)] for slot in range(batch)]
    geometries = [detector.preprocess(0, slot, f) for slot, f in enumerate(held)]
    raw = detector.infer(0, batch)
    runs = max(1, -(-count // batch))
    latencies = []
    watch = Stopwatch().start()
    for _ in range(runs):
        started = time.perf_counter()
        detector.postprocess(raw, geometries, held)
        latencies.append(time.perf_counter() - started)
    watch.stop()
    return watch.measurement(runs * batch, latencies)


def model_alone(model: Path, detector: Detector, frames: list[Frame], count: int) -> Measurement:
    """The model as users measure it: default session options, batch 1, run after run.

    The input is a real letterboxed frame of the video, in the model's own
    input type, with the image sizes the pipeline binds (the input's) for the
    DETR exports that take them; the session is ONNX Runtime's defaults on
    the detector's device (every core, its own spin-waiting), what
    ``InferenceSession(path)`` gives.
    """
    ort = load_onnxruntime()
    detector.preprocess(0, 0, frames[0])
    image = detector.model.buffers[0].input[:1].cpu().numpy()
    providers = ["CPUExecutionProvider"]
    if detector.device.type == "cuda":
        providers.insert(0, "CUDAExecutionProvider")
    session = ort.InferenceSession(str(model), providers=providers)
    spec, (height, width) = detector.model.spec, detector.model.input_size
    feed = {spec.input.name: image}
    feed |= {s.name: np.array([[width, height]], s.numpy_dtype) for s in spec.size_inputs}
    for _ in range(WARMUP_RUNS):
        session.run(None, feed)
    latencies = []
    watch = Stopwatch().start()
    for _ in range(count):
        started = time.perf_counter()
        session.run(None, feed)
        latencies.append(time.perf_counter() - started)
    watch.stop()
    return watch.measurement(count, latencies)
