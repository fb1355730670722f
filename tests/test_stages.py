"""Overlapped stages: batches across streams, results back per stream, timeouts, shutdown."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import write_video
from onnx_models import brightness_model

from vstream import Detector, Frame, ModelError, PixelFormat, VideoFileSource
from vstream.config import load_config
from vstream.engine import Engine, detect_iter
from vstream.engine.intake import Intake
from vstream.engine.queue import FrameQueue
from vstream.engine.stages import Batch, OverlappedStages
from vstream.errors import SourceError
from vstream.sources import FreshnessPolicy

STAGE_THREADS = ("preprocess-", "inference-", "postprocess-", "reader-")
BLOCK = FreshnessPolicy.BLOCK


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return brightness_model(tmp_path_factory.mktemp("model") / "brightness.onnx")


def frames_of(stream: str, count: int, width: int, height: int, shade: int = 0) -> list[Frame]:
    """Frames of one stream, each a different grey, so each gets a different box."""
    return [
        Frame(
            torch.full((height, width, 3), (shade + 37 * i) % 256, dtype=torch.uint8),
            PixelFormat.RGB24,
            width,
            height,
            stream_id=stream,
            index=i,
            pts_seconds=i / 25,
        )
        for i in range(count)
    ]


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(STAGE_THREADS)]


def wait_for_no_stage_threads(seconds: float = 5.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while stage_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return stage_threads()


def test_results_land_in_their_stream_with_its_coordinates_in_order(model: Path) -> None:
    detector = Detector(model, device="cpu", batch_size=4)
    wide = frames_of("wide", 13, 640, 360)
    tall = frames_of("tall", 9, 240, 320, shade=11)
    small = frames_of("small", 11, 64, 48, shade=23)
    results = list(detect_iter(detector, [wide, tall, small]))

    by_stream: dict[str, list] = {}
    for result in results:
        by_stream.setdefault(result.stream_id, []).append(result)
    for frames in (wide, tall, small):
        got = by_stream[frames[0].stream_id]
        assert [r.frame_index for r in got] == [f.index for f in frames], "all, once, in order"
        for frame, result in zip(frames, got, strict=True):
            # The reference: the same frame detected alone, synchronously.
            (alone,) = detector.detect([frame])
            assert (result.width, result.height) == (frame.width, frame.height)
            assert len(result.detections) == 1
            assert result.detections[0].bbox == pytest.approx(alone.detections[0].bbox, abs=1e-3)
    assert wait_for_no_stage_threads() == []


def test_batches_mix_streams_round_robin_up_to_the_batch_size(model: Path) -> None:
    detector = Detector(model, device="cpu", batch_size=4)
    intake = Intake()
    lanes = {stream: intake.register(stream, 8, BLOCK) for stream in ("a", "b")}
    stop = threading.Event()
    for frame in frames_of("a", 8, 64, 48) + frames_of("b", 8, 64, 48, shade=5):
        assert intake.put(lanes[frame.stream_id], frame, stop)
    batches: list[Batch] = []
    stages = OverlappedStages(detector, intake, batches.append, batch_timeout=1.0)
    stages.start()
    stages.finish()
    assert stages.join(10)
    assert [len(b.arrivals) for b in batches] == [4, 4, 4, 4]
    for batch in batches:  # alternating, starting with a different stream each time
        assert sorted(f.stream_id for f in batch.frames) == ["a", "a", "b", "b"]
        assert batch.frames[0].stream_id != batch.frames[1].stream_id
    for stream in ("a", "b"):
        indices = [f.index for b in batches for f in b.frames if f.stream_id == stream]
        assert indices == list(range(8))
    assert all(not b.failures and len(b.results) == 4 for b in batches)
    assert {b.buffer for b in batches} == set(range(detector.buffers)), "batches rotate"


def test_a_slow_stream_does_not_hold_back_a_fast_one(model: Path) -> None:
    detector = Detector(model, device="cpu", batch_size=4, batch_timeout_seconds=0.05)
    release = threading.Event()

    def slow() -> Iterator[Frame]:
        first, second = frames_of("slow", 2, 64, 48)
        yield first
        release.wait(20)  # a camera that stalls until the fast stream is done
        yield second

    fast = frames_of("fast", 40, 64, 48, shade=3)
    order: list[tuple[str, int]] = []
    for result in detect_iter(detector, [slow(), fast]):
        order.append((result.stream_id, result.frame_index))
        if sum(1 for s, _ in order if s == "fast") == len(fast):
            release.set()
    assert release.is_set(), "every fast frame had its result while the slow stream stalled"
    assert order.index(("slow", 0)) < order.index(("fast", 39)), "the lone frame left on time"
    assert order[-1] == ("slow", 1)
    assert [i for s, i in order if s == "fast"] == list(range(40))


def test_a_file_goes_through_every_frame_once_in_order(model: Path, small_video: Path) -> None:
    detector = Detector(model, device="cpu", batch_size=4)
    with VideoFileSource(small_video) as source:
        indices = [r.frame_index for r in detect_iter(detector, [source])]
    assert indices == list(range(30))


def test_frames_before_a_source_error_are_delivered_then_it_is_raised(model: Path) -> None:
    detector = Detector(model, device="cpu", batch_size=4)

    def failing() -> Iterator[Frame]:
        yield from frames_of("cam", 6, 64, 48)
        raise SourceError("camera fell over")

    seen: list[int] = []
    with pytest.raises(SourceError, match="camera fell over"):
        for result in detect_iter(detector, [failing()]):
            seen.append(result.frame_index)
    assert seen == list(range(6))
    assert wait_for_no_stage_threads() == []


def test_an_inference_error_fails_the_stream_once_and_every_stage_ends(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    detector = Detector(model, device="cpu", batch_size=2, concurrent_runs=1)
    calls = []

    def broken(buffer: int, frames: int) -> torch.Tensor:
        calls.append(frames)
        raise ModelError("inference failed: out of memory")

    monkeypatch.setattr(detector, "infer", broken)
    with pytest.raises(ModelError, match="out of memory"):
        list(detect_iter(detector, [frames_of("a", 10, 64, 48)]))
    assert calls == [2, 2], "run again once, then the stream stops: its later frames are not run"
    assert wait_for_no_stage_threads() == []


def test_a_run_that_fails_once_costs_no_frame_and_is_said_and_counted(
    model: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A moment short of device memory: the run again (stream by stream, once) works. A
    batch of one stream failed for good at the first error; one of several left no trace
    (no log line, no count: vstream_inference_errors_total stayed 0)."""
    detector = Detector(model, device="cpu", batch_size=2, concurrent_runs=1)
    real_infer = detector.infer
    calls = []

    def flaky(buffer: int, frames: int) -> torch.Tensor:
        calls.append(frames)
        if len(calls) == 3:
            raise ModelError("inference failed: out of memory")
        return real_infer(buffer, frames)

    monkeypatch.setattr(detector, "infer", flaky)
    intake = Intake()
    lane = intake.register("a", 10, BLOCK)
    for frame in frames_of("a", 10, 64, 48):
        assert intake.put(lane, frame, threading.Event())
    batches: list[Batch] = []
    stages = OverlappedStages(detector, intake, batches.append, batch_timeout=1.0, name="main")
    stages.start()
    stages.finish()
    assert stages.join(60)
    assert [r.frame_index for b in batches for r in b.results] == list(range(10))
    assert not any(b.failures for b in batches) and len(calls) == 6  # 5 runs, 1 again
    assert [b.failed_runs for b in batches] == [0, 0, 1, 0, 0]
    said = [r.getMessage() for r in caplog.records if "model run failed" in r.getMessage()]
    assert said == [
        "pipeline main: a model run failed (inference failed: out of memory); "
        "its frames run again stream by stream"
    ]


def test_a_failing_frame_fails_only_its_own_stream(model: Path, monkeypatch) -> None:
    """One bad stream in a shared batch: the batch runs again per stream, the others keep going."""
    detector = Detector(model, device="cpu", batch_size=4, batch_timeout_seconds=0.5)
    real_infer = detector.infer

    def infer(buffer: int, frames: int) -> torch.Tensor:
        # The bad stream's frames are pure white, the only ones that letterbox to 1.0.
        slots = detector.model.buffers[buffer].input[:frames]
        if (slots.amax(dim=(1, 2, 3)) == 1.0).any():
            raise ModelError("inference failed: NaN in the input")
        return real_infer(buffer, frames)

    monkeypatch.setattr(detector, "infer", infer)
    bad = [
        Frame(torch.full((48, 64, 3), 255, dtype=torch.uint8), PixelFormat.RGB24, 64, 48, "bad", i)
        for i in range(12)
    ]
    good_a, good_b = frames_of("a", 12, 64, 48), frames_of("b", 12, 64, 48, shade=9)
    results = []
    with pytest.raises(ModelError, match="NaN"):
        for result in detect_iter(detector, [good_a, bad, good_b]):
            results.append(result)
    by_stream: dict[str, list[int]] = {}
    for result in results:
        by_stream.setdefault(result.stream_id, []).append(result.frame_index)
    assert by_stream["a"] == list(range(12)) and by_stream["b"] == list(range(12))
    assert "bad" not in by_stream
    assert wait_for_no_stage_threads() == []


def test_leaving_early_stops_every_thread(model: Path) -> None:
    detector = Detector(model, device="cpu", batch_size=2)

    def endless() -> Iterator[Frame]:
        frame = frames_of("loop", 1, 64, 48)[0]
        while True:
            yield frame

    for count, _ in enumerate(detect_iter(detector, [endless(), endless()]), 1):
        if count == 25:
            break
    assert wait_for_no_stage_threads() == []


def test_finish_drains_the_intake_and_abort_stops_a_blocked_pipeline(model: Path) -> None:
    detector = Detector(model, device="cpu", batch_size=2)
    intake = Intake()
    lane = intake.register("a", 16, BLOCK)
    stop = threading.Event()
    for frame in frames_of("a", 16, 64, 48):
        intake.put(lane, frame, stop)
    # Nobody reads the delivered batches: the stages fill up and wait (backpressure).
    outlet: FrameQueue[Batch] = FrameQueue(1, FreshnessPolicy.BLOCK)
    blocked = threading.Event()

    def deliver(batch: Batch) -> None:
        if len(outlet):
            blocked.set()
        outlet.put(batch)

    stages = OverlappedStages(detector, intake, deliver, batch_timeout=0.04)
    stages.start()
    assert blocked.wait(10), "the outlet filled up"
    assert stages.alive and intake.queued() > 0, "blocked downstream, frames wait upstream"
    stages.abort()
    outlet.close()
    assert stages.join(5) and not stages.alive

    drained: list[Batch] = []
    lane = intake.register("b", 16, BLOCK)
    for frame in frames_of("b", 5, 64, 48):
        intake.put(lane, frame, stop)
    stages = OverlappedStages(detector, intake, drained.append, batch_timeout=0.01)
    stages.start()
    stages.finish()
    assert stages.join(5)
    delivered = [f.index for b in drained for f in b.frames if f.stream_id == "b"]
    assert delivered == list(range(5))


def test_the_engine_batches_its_streams_and_stops_every_stage(model: Path, tmp_path: Path) -> None:
    write_video(tmp_path / "wide.mp4", frames=30, width=320, height=240)
    write_video(tmp_path / "tall.mp4", frames=20, width=160, height=240)
    out = tmp_path / "records.jsonl"
    config_path = tmp_path / "pipelines.yaml"
    config_path.write_text(
        f"""
pipelines:
  - name: main
    model: {{path: {model}}}
    runtime: {{device: cpu, batch_size: 4, batch_timeout_seconds: 0.02}}
    sources:
      - {{id: wide, uri: wide.mp4}}
      - {{id: tall, uri: tall.mp4}}
    sinks:
      - {{type: jsonl, path: records.jsonl}}
"""
    )
    engine = Engine(load_config(config_path), base_dir=tmp_path)
    engine.start()
    deadline = time.monotonic() + 60
    while not engine.files_done() and time.monotonic() < deadline:
        time.sleep(0.05)
    engine.stop(timeout=20)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for stream, frames, size in (("wide", 30, (320, 240)), ("tall", 20, (160, 240))):
        mine = [r for r in records if r["stream"] == stream]
        assert [r["frame"] for r in mine] == list(range(frames)), "every frame once, in order"
        assert all((r["width"], r["height"]) == size for r in mine)
        assert all(len(r["detections"]) == 1 for r in mine)
    pipeline = engine.pipelines["main"]
    assert not pipeline.stages.alive
    assert not [t for t in stage_threads() if t.endswith("-main")]
    sizes = engine.metrics.registry.get_sample_value(
        "vstream_inference_batch_size_sum", {"pipeline": "main"}
    )
    batches = engine.metrics.registry.get_sample_value(
        "vstream_inference_batch_size_count", {"pipeline": "main"}
    )
    assert sizes == 50 and batches < 50, "frames of both streams were batched together"


def shade_of(detector: Detector, buffer: int) -> float:
    """The grey level (0..255) of the frame letterboxed into slot 0 of ``buffer``."""
    return round(detector.model.buffers[buffer].input[0, 0, 32, 32].item() * 255)


def run_stages(detector: Detector, frames: list[Frame]) -> list[Batch]:
    """Every frame through the stages, as queued by stream; the batches in delivery order."""
    intake = Intake()
    stop = threading.Event()
    lanes = {
        s: intake.register(s, len(frames), BLOCK)
        for s in dict.fromkeys(f.stream_id for f in frames)
    }
    for frame in frames:
        assert intake.put(lanes[frame.stream_id], frame, stop)
    delivered: list[Batch] = []
    stages = OverlappedStages(detector, intake, delivered.append, batch_timeout=0.01)
    stages.start()
    stages.finish()
    assert stages.join(60)
    return delivered


def test_concurrent_runs_deliver_in_gathering_order_with_each_result_on_its_frame(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of random lengths finish out of order; results still leave in order, per stream."""
    detector = Detector(model, device="cpu", batch_size=2, concurrent_runs=3)
    assert detector.buffers == 5 and detector.plan.concurrent_runs == 3
    real_infer = detector.infer
    overlap = threading.Barrier(2, timeout=30)
    calls = 0
    in_flight = most_in_flight = 0
    lock = threading.Lock()
    rng = random.Random(7)

    def slow_infer(buffer: int, frames: int) -> torch.Tensor:
        nonlocal calls, in_flight, most_in_flight
        with lock:
            calls += 1
            first_two = calls <= 2
            in_flight += 1
            most_in_flight = max(most_in_flight, in_flight)
            delay = rng.uniform(0, 0.03)
        try:
            if first_two:
                overlap.wait()  # returns only if two runs are in flight at once
            time.sleep(delay)
            return real_infer(buffer, frames)
        finally:
            with lock:
                in_flight -= 1

    monkeypatch.setattr(detector, "infer", slow_infer)
    streams = [frames_of(f"s{n}", 12, 64, 48, shade=n * 5) for n in range(5)]
    frames = [f for group in zip(*streams, strict=True) for f in group]
    delivered = run_stages(detector, frames)

    assert 2 <= most_in_flight <= 3
    assert [b.sequence for b in delivered] == list(range(len(delivered))), "gathering order"
    assert not any(b.failures for b in delivered)
    results = [r for b in delivered for r in b.results]
    monkeypatch.undo()
    for group in streams:
        mine = [r for r in results if r.stream_id == group[0].stream_id]
        assert [r.frame_index for r in mine] == list(range(12)), "every frame once, in order"
        for frame, result in zip(group, mine, strict=True):
            (alone,) = detector.detect([frame])
            assert result.detections[0].bbox == pytest.approx(alone.detections[0].bbox, abs=1e-3)


def test_a_stream_failing_in_one_run_loses_its_frames_already_in_another(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frame 3 fails only after frame 4 has run beside it: frame 4 is not delivered."""
    detector = Detector(model, device="cpu", batch_size=1, concurrent_runs=2)
    frames = frames_of("cam", 8, 64, 48, shade=1)
    frames[3] = Frame(torch.full((48, 64, 3), 255, dtype=torch.uint8), PixelFormat.RGB24, 64, 48,
                      "cam", 3)  # fmt: skip
    real_infer = detector.infer
    four = (37 * 4 + 1) % 256
    four_ran = threading.Event()

    def infer(buffer: int, count: int) -> torch.Tensor:
        shade = shade_of(detector, buffer)
        if shade == 255:
            # Frame 4 is gathered only once this run has taken frame 3: it runs beside it.
            if not four_ran.wait(30):
                raise RuntimeError("frame 4 never ran while frame 3 was in the model")
            raise ModelError("inference failed: white frame")
        output = real_infer(buffer, count)
        if shade == four:
            four_ran.set()
        return output

    monkeypatch.setattr(detector, "infer", infer)
    delivered = run_stages(detector, frames)
    results = [r.frame_index for b in delivered for r in b.results]
    failed = sorted(a.frame.index for b in delivered for a, _ in b.failures)
    assert results == [0, 1, 2]
    assert failed == [3, 4, 5, 6, 7], "every lost frame is counted, frame 4 (which ran) too"
    assert four_ran.is_set()


def test_a_failure_in_a_later_batch_spares_the_frames_before_it(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frame 3 fails while frame 2 is still running: frame 2 came first and is delivered."""
    detector = Detector(model, device="cpu", batch_size=1, concurrent_runs=2)
    frames = frames_of("cam", 6, 64, 48, shade=1)
    frames[2] = Frame(torch.zeros((48, 64, 3), dtype=torch.uint8), PixelFormat.RGB24, 64, 48,
                      "cam", 2)  # fmt: skip
    frames[3] = Frame(torch.full((48, 64, 3), 255, dtype=torch.uint8), PixelFormat.RGB24, 64, 48,
                      "cam", 3)  # fmt: skip
    real_infer = detector.infer
    three_failed = threading.Event()

    def infer(buffer: int, count: int) -> torch.Tensor:
        shade = shade_of(detector, buffer)
        if shade == 255:
            three_failed.set()
            raise ModelError("inference failed: white frame")
        if shade == 0 and not three_failed.wait(30):
            raise RuntimeError("frame 3 never ran beside frame 2")
        return real_infer(buffer, count)

    monkeypatch.setattr(detector, "infer", infer)
    delivered = run_stages(detector, frames)
    assert [r.frame_index for b in delivered for r in b.results] == [0, 1, 2]
    assert sorted(a.frame.index for b in delivered for a, _ in b.failures) == [3, 4, 5]


@pytest.mark.parametrize("stage", ["preprocess", "inference"])
def test_a_stage_bug_is_recorded_before_the_stages_end_report_runs(
    model: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """The end callback fails every stream with ``stages.failure``: it must be set by then.

    Before, the failing stage first let the next one end (closing its queue,
    counting its run done) and only then recorded the failure; with the log
    line slow to write (a loaded machine: made slow here), the pipeline ended
    with no failure and its streams were never failed."""
    from vstream.engine import stages as module

    detector = Detector(model, device="cpu", batch_size=2, concurrent_runs=2)

    def bug(*args: object) -> None:
        raise RuntimeError("injected bug")

    method = "_gather" if stage == "preprocess" else "_drop_failed_streams"
    monkeypatch.setattr(OverlappedStages, method, bug)
    real_exception = module.log.exception

    def slow_exception(*args: object, **kwargs: object) -> None:
        time.sleep(0.3)  # widens the window the old order left open; not a wait for an event
        real_exception(*args, **kwargs)

    monkeypatch.setattr(module.log, "exception", slow_exception)
    intake = Intake()
    lane = intake.register("a", 8, BLOCK)
    for frame in frames_of("a", 8, 64, 48):
        intake.put(lane, frame, threading.Event())
    seen_at_end: list[BaseException | None] = []
    stages: OverlappedStages | None = None

    def on_end() -> None:
        assert stages is not None
        seen_at_end.append(stages.failure)

    stages = OverlappedStages(
        detector, intake, lambda batch: None, batch_timeout=0.01, on_end=on_end
    )
    stages.start()
    assert stages.join(60) and not stages.alive
    assert [str(f) for f in seen_at_end] == ["injected bug"]
