"""Hostile input, round three: a fault in one stream or one secondary model stays there.

1. a file whose timestamps jump by 1e12 s, run with ``detect_fps``, must not
   hold the pipeline's shared preprocessing thread (nor the other streams);
   a stage that is held anyway is named by ``/ready``, and a stop gives up on
   it in time with every frame counted;
2. a secondary model that fails at run time (an export whose output batch is
   fixed at 1) fails the streams it reads alone, in one line, and ``vstream
   run`` ends (exit 2); a pipeline whose stages did die refuses new streams
   (503 with the reason), ``/ready`` says why, and every frame is counted.

The second signal's flush is tested with the daemon (tests/test_daemon.py)
and ``vstream run`` (tests/test_engine.py). Everything runs on 127.0.0.1:
the engine under the real uvicorn, the CLI as a subprocess.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from helpers import (
    HANG,
    frames_by_stream,
    run_cli,
    tiny_detector,
    wait_for,
    write_timed_video,
    write_video,
)
from secondary_models import batch_of_one_model

from vstream.config import parse_config
from vstream.engine import Engine
from vstream.engine.cadence import Cadence, Decision
from vstream.engine.interface import STARTING
from vstream.engine.stages import OverlappedStages
from vstream.frame import Frame
from vstream.server import ApiServer, create_app

JUMP_MS = 10**15
"""1e12 s, in the milliseconds of a Matroska time stamp."""


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("isolation")
    tiny_detector(directory / "model.onnx")
    tiny_detector(directory / "two.onnx", centres=(100, 220))
    batch_of_one_model(directory / "batch_of_one.onnx")
    write_video(directory / "clip.mp4", frames=30, width=96, height=64)
    write_video(directory / "large.mp4", frames=10, width=640, height=480)
    # 25 fps, then a jump of 1e12 s after frame 49 (a crafted or broken muxer).
    stamps = [40 * i for i in range(50)] + [JUMP_MS + 40 * i for i in range(50, 80)]
    write_timed_video(directory / "jump.mkv", stamps, width=96, height=64)
    return directory


BROKEN_CASCADE = """
pipelines:
  - name: main
    model: {path: two.onnx}
    runtime: {device: cpu}
    # Two boxes a frame: 80 pixels wide in large.mp4 (read, a batch of 2: it fails),
    # 12 in clip.mp4 (under min_size: never read).
    secondary: [{name: broken, path: batch_of_one.onnx, on: {min_size: 30}}]
    sources:
      - {id: small, uri: clip.mp4%s}
      - {id: large, uri: large.mp4}
    sinks: [{type: jsonl, path: %s}]
"""


StartEngine = Callable[[str], Engine]
ServeApi = Callable[[Engine], httpx.Client]


@pytest.fixture
def engines(media: Path) -> Iterator[StartEngine]:
    """Start engines of a config text; each is stopped at the end whatever the test did
    (bounded: a stage still held is given up on)."""
    started: list[Engine] = []

    def start(text: str) -> Engine:
        engine = Engine(parse_config(text, base_dir=media), base_dir=media)
        started.append(engine)
        engine.start()
        return engine

    yield start
    for engine in started:
        engine.stop(timeout=5.0)


@pytest.fixture
def api() -> Iterator[ServeApi]:
    """An HTTP client of an engine's API under uvicorn on 127.0.0.1 (no token)."""
    with contextlib.ExitStack() as stack:

        def serve(engine: Engine) -> httpx.Client:
            server = ApiServer(create_app(engine), port=0)
            server.start()
            stack.callback(server.stop)
            return stack.enter_context(httpx.Client(base_url=server.url, timeout=30))

        yield serve


def every_frame_counted(engine: Engine) -> None:
    """Once a stream stops, decoded = processed + failed + dropped + skipped; the sink took
    a record for each frame processed."""
    statuses = engine.streams()
    for status in statuses:
        counted = (
            status.frames_processed
            + status.frames_failed
            + status.frames_dropped
            + status.frames_skipped
        )
        assert counted == status.frames_decoded, status
    (sink,) = engine.pipelines["main"].sinks
    assert sink.stats.delivered + sink.stats.dropped == sum(s.frames_processed for s in statuses)


def hold_frame(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """A bug that holds the shared preprocessing thread (what the loop of 1. did), injected:
    at frame 3 of stream "held" it waits until the first event is set (60 s at most); the
    second is set once it is there."""
    release, reached = threading.Event(), threading.Event()
    decide = Cadence.decide

    def held(self: Cadence, frame: Frame, dropped: int = 0) -> Decision:
        if frame.stream_id == "held" and frame.index == 3:
            reached.set()
            release.wait(60)
        return decide(self, frame, dropped)

    monkeypatch.setattr(Cadence, "decide", held)
    return release, reached


def test_a_time_stamp_jump_with_detect_fps_holds_neither_its_pipeline_nor_the_others(
    media: Path, engines: StartEngine
) -> None:
    engine = engines(
        """
pipelines:
  - name: main
    model: {path: model.onnx}
    runtime: {device: cpu}
    sources:
      - {id: jump, uri: jump.mkv, detect_fps: 5}
      - {id: steady, uri: clip.mp4}
    sinks: [{type: jsonl, path: jump.jsonl}]
"""
    )
    wait_for(engine.files_done, timeout=60, what="both files to be through the pipeline")
    engine.stop()
    assert frames_by_stream(media / "jump.jsonl") == {
        "jump": list(range(80)),
        "steady": list(range(30)),
    }
    (jump,) = [r for r in engine.readers() if r.id == "jump"]
    assert jump.cadence is not None
    # Every 5th frame on the 5 fps grid: frames 0, 5 .. 45, then 50 (the jump), 55 .. 75.
    assert jump.cadence.counts()["frames_detected"] == 16


def test_a_stage_held_is_named_by_ready_and_a_stop_gives_up_on_it_counting_every_frame(
    media: Path,
    engines: StartEngine,
    api: ServeApi,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The held preprocessing thread (:func:`hold_frame`) is named, then given up on (the
    stop's line named "the model" whatever held it)."""
    release, _ = hold_frame(monkeypatch)
    engine = engines(
        """
pipelines:
  - name: main
    model: {path: model.onnx}
    runtime: {device: cpu, stall_seconds: 1}
    sources:
      - {id: held, uri: clip.mp4, detect_every: 2}
      - {id: steady, uri: clip.mp4, loop: true}
    sinks: [{type: jsonl, path: held.jsonl}]
"""
    )
    client = api(engine)
    try:
        held_stage = "pipeline main: the preprocess stage has been on one batch for "
        reasons = wait_for(
            lambda: [r for r in client.get("/ready").json()["reasons"] if r.startswith(held_stage)],
            what="/ready to name the held stage",
        )
        assert len(reasons) == 1
        engine.stop(timeout=1.0)
    finally:
        release.set()
    every_frame_counted(engine)
    assert "pipeline main: the preprocess stage did not finish in time" in caplog.text


def test_a_stream_removed_while_its_frames_are_held_counts_them_when_the_stop_gives_up(
    media: Path, engines: StartEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A removed stream's frames in a stage given up on at the stop were never counted (the
    count asked the intake by id, which forgot the stream at its removal): frames in flight
    for ever."""
    monkeypatch.setattr("vstream.engine.pipeline.SETTLE_SECONDS", 0.5)
    release, reached = hold_frame(monkeypatch)
    engine = engines(
        """
pipelines:
  - name: main
    model: {path: model.onnx}
    runtime: {device: cpu}
    sources: [{id: held, uri: clip.mp4, detect_every: 2}]
    sinks: [{type: jsonl, path: held.jsonl}]
"""
    )
    try:
        assert reached.wait(HANG), "the stage reached the frame it is held on"
        reader = engine.pipelines["main"].streams["held"]
        engine.remove_stream("held")  # its frames are not through: it waits, then goes on
        assert reader.frames_in_flight > 0
        engine.stop(timeout=1.0)
    finally:
        release.set()
    assert reader.frames_in_flight == 0
    assert reader.frames_dropped > 0


def test_a_secondary_model_failing_at_run_time_fails_its_stream_alone_and_run_ends(
    media: Path,
) -> None:
    out = media / "run.jsonl"
    config = media / "broken.yaml"
    config.write_text(BROKEN_CASCADE % ("", out))
    result = run_cli("run", config, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr_lines if "large" in line]
    assert line.startswith("vstream: stream large: failed: secondary model broken: ")
    assert frames_by_stream(out) == {"small": list(range(30))}


def test_in_the_daemon_a_failing_secondary_model_fails_one_stream_and_the_pipeline_goes_on(
    media: Path, engines: StartEngine, api: ServeApi
) -> None:
    engine = engines(BROKEN_CASCADE % (", loop: true", media / "daemon.jsonl"))
    client = api(engine)
    wait_for(
        lambda: client.get("/streams/large").json()["state"] == "failed",
        what="the stream the secondary model reads to fail",
    )
    assert "stream large is failed" in client.get("/ready").json()["reasons"]
    added = client.post("/streams", json={"id": "again", "uri": "clip.mp4"})
    assert added.status_code == 201, added.text
    wait_for(
        lambda: client.get("/streams/again").json()["state"] == "finished",
        what="a stream added after the failure to go through",
    )
    small = client.get("/streams/small").json()["frames_processed"]
    wait_for(
        lambda: client.get("/streams/small").json()["frames_processed"] > small + 30,
        what="the other stream to go on",
    )
    engine.stop()
    every_frame_counted(engine)


def test_a_pipeline_whose_stages_died_refuses_new_streams_and_its_files_end(
    media: Path, engines: StartEngine, api: ServeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a stage (injected: no input reaches one now) stops the pipeline for good."""

    def bug(self: OverlappedStages, batch: object) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(OverlappedStages, "_drop_failed_streams", bug)
    engine = engines(
        """
pipelines:
  - name: main
    model: {path: model.onnx}
    runtime: {device: cpu}
    sources: [{id: first, uri: clip.mp4}]
    sinks: [{type: jsonl, path: dead.jsonl}]
"""
    )
    client = api(engine)
    reason = "pipeline main has failed: RuntimeError: injected bug"
    wait_for(lambda: reason in client.get("/ready").json()["reasons"], what=reason)
    health = client.get("/health")  # liveness: only a restart mends it
    assert (health.status_code, health.json()) == (503, {"status": "failed", "error": reason})
    refused = client.post("/streams", json={"id": "second", "uri": "clip.mp4"})
    assert refused.status_code == 503
    assert refused.json()["error"] == (
        "pipeline main has failed (RuntimeError: injected bug): no new streams"
    )
    assert [s["id"] for s in client.get("/streams").json()["streams"]] == ["first"]
    # The stream is failed by the pipeline's failure as its reader learns of it: an event.
    wait_for(
        lambda: client.get("/streams/first").json()["state"] == "failed",
        what="the stream of the failed pipeline said failed",
    )
    wait_for(engine.files_done, what="vstream run's end: the queued frames are never taken")
    engine.stop()
    every_frame_counted(engine)


def test_the_api_is_not_ready_until_the_configs_streams_are_added(
    media: Path, api: ServeApi
) -> None:
    """``vstream serve`` answers before the engine starts: with no stream added yet, nothing
    was wrong, so ``/ready`` said ready, then not ready as the camera connected."""
    engine = Engine(
        parse_config(
            """
pipelines:
  - name: main
    model: {path: model.onnx}
    runtime: {device: cpu}
    sources: [{id: first, uri: clip.mp4, loop: true}]
    sinks: [{type: jsonl, path: out.jsonl}]
""",
            base_dir=media,
        ),
        base_dir=media,
    )
    client = api(engine)
    try:
        early = client.get("/ready")
        assert (early.status_code, early.json()["reasons"]) == (503, [STARTING])
        engine.start()
        wait_for(lambda: client.get("/ready").status_code == 200, what="the stream to deliver")
    finally:
        engine.stop()
