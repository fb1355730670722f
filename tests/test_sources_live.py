"""Live RTSP against a real server on 127.0.0.1: reconnection, freshness, stalls, credentials.

The server is GStreamer's gst-rtsp-server (tests/rtsp_server.py under Debian's
python3); every test stops it, whatever happens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import RtspServer, free_port, run_cli
from onnx_models import constant_output_model

from vstream.errors import SourceError
from vstream.pipeline import Detector, run_detection
from vstream.sinks import JsonLinesSink
from vstream.sources import (
    FreshnessPolicy,
    LiveSource,
    ReconnectPolicy,
    SourceOptions,
    SourceState,
    open_source,
)

FAST_RECONNECT = ReconnectPolicy(initial_delay_seconds=0.2, max_delay_seconds=1.0)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


class StateLog:
    """Polls a source's state from another thread, as a monitoring client would."""

    def __init__(self, source: LiveSource) -> None:
        self.source = source
        self.changes: list[tuple[float, SourceState]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            state = self.source.state
            if not self.changes or self.changes[-1][1] is not state:
                self.changes.append((time.monotonic(), state))
            time.sleep(0.005)

    @property
    def states(self) -> list[SourceState]:
        return [state for _, state in self.changes]

    def first(self, state: SourceState, after: float = 0.0) -> float | None:
        return next((t for t, s in self.changes if s is state and t >= after), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Detector:
    path = tmp_path_factory.mktemp("model") / "empty.onnx"
    model = constant_output_model(path, np.zeros((1, 6, 10), np.float32), imgsz=(64, 64))
    return Detector(model, device="cpu")


def test_pipeline_survives_a_server_restart(
    tmp_path: Path, detector: Detector, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vstream")
    out = tmp_path / "live.jsonl"
    with RtspServer() as server:
        source = open_source(server.url(), options=SourceOptions(reconnect=FAST_RECONNECT))
        states = StateLog(source)
        with JsonLinesSink(out) as sink:
            job = threading.Thread(target=run_detection, args=(source, detector, sink))
            job.start()
            try:
                wait_for(lambda: sink.records >= 20, 15, "records before the restart")
                server.kill()
                killed = time.monotonic()
                before_restart = sink.records
                time.sleep(1.0)
                server.start()
                ready = time.monotonic()
                wait_for(lambda: sink.records >= before_restart + 20, 20, "records to resume")
            finally:
                source.close()
                job.join(10)
                states.stop()
    assert not job.is_alive()
    back = states.first(SourceState.STREAMING, after=killed)
    assert back is not None
    reconnect_seconds = back - ready
    print(f"\nreconnect time after the server came back: {reconnect_seconds:.2f} s")
    assert reconnect_seconds < 4.0
    # connecting -> streaming -> reconnecting -> streaming -> finished (closed)
    seen = states.states
    assert seen[:2] == [SourceState.CONNECTING, SourceState.STREAMING]
    assert SourceState.RECONNECTING in seen[2:]
    assert seen[seen.index(SourceState.RECONNECTING) :][1] is SourceState.STREAMING
    assert source.stats.reconnects >= 1
    assert source.stats.last_gap_seconds is not None and source.stats.last_gap_seconds >= 1.0
    assert any("streaming again after a" in r.getMessage() for r in caplog.records)
    # Records resumed after a gap that shows in their time stamps, in order, never repeated.
    import json

    produced = [json.loads(line) for line in out.read_text().splitlines()]
    frames = [r["frame"] for r in produced]
    assert frames == sorted(set(frames))
    pts = np.array([r["pts"] for r in produced])
    jump = int(np.argmax(np.diff(pts)))
    assert np.diff(pts)[jump] >= 1.0
    assert len(produced) - (jump + 1) >= 10


def test_connect_disconnect_cycles_keep_memory_bounded() -> None:
    """50 open/first frame/close cycles; RSS and threads must not grow with them.

    Each connection allocates an RTSP demuxer, an H.264 decoder with its
    frame pool and a reader thread: several MB for this 320x240 stream (the
    decoder's reference frames alone are ~2 MB). Leaking one connection's
    worth per cycle would add 100 MB or more over 50 cycles; 25 MB leaves room
    for allocator caching and Python's own growth while catching such a leak.
    """
    options = SourceOptions(reconnect=FAST_RECONNECT)

    def cycle(url: str) -> None:
        source = LiveSource(url, options=options)
        frame = next(iter(source))
        assert frame.width == 320
        source.close()

    def rss_mb() -> float:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * 4096 / 2**20

    with RtspServer() as server:
        for _ in range(5):
            cycle(server.url())
        threads, before = threading.active_count(), rss_mb()
        start = time.monotonic()
        for _ in range(50):
            cycle(server.url())
        elapsed = time.monotonic() - start
        growth = rss_mb() - before
    print(f"\n50 cycles in {elapsed:.1f} s, RSS growth {growth:.1f} MB")
    assert growth < 25.0
    wait_for(lambda: threading.active_count() <= threads, 5, "reader threads to end")


def test_latest_policy_keeps_frames_fresh_for_a_slow_consumer() -> None:
    options = SourceOptions(policy=FreshnessPolicy.LATEST, queue_size=2)
    ages = []
    with RtspServer() as server:
        source = LiveSource(server.url(), options=options)
        try:
            for frame in source:
                ages.append(time.time() - frame.capture_time)
                time.sleep(0.2)  # a pipeline at 5 fps on a 25 fps stream
                if len(ages) == 15:
                    break
        finally:
            source.close()
    stats = source.stats
    # Without dropping, each frame would be 0.16 s older than the last (2.4 s by the end).
    assert max(ages[3:]) < 0.5, ages
    assert stats.frames_dropped > 0
    # Every decoded frame was delivered, dropped and counted, or still queued at close().
    unaccounted = stats.frames_decoded - stats.frames_delivered - stats.frames_dropped
    assert 0 <= unaccounted <= options.queue_size + 1


def test_block_policy_drops_nothing() -> None:
    options = SourceOptions(policy=FreshnessPolicy.BLOCK, queue_size=2)
    indices, ages = [], []
    with RtspServer() as server:
        source = LiveSource(server.url(), options=options)
        try:
            for frame in source:
                indices.append(frame.index)
                ages.append(time.time() - frame.capture_time)
                time.sleep(0.06)  # slower than the stream's 40 ms per frame
                if len(indices) == 30:
                    break
        finally:
            source.close()
    assert source.stats.frames_dropped == 0
    assert indices == list(range(30))


def test_a_hung_server_is_detected_and_close_is_prompt(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vstream")
    options = SourceOptions(
        reconnect=ReconnectPolicy(
            initial_delay_seconds=0.2, max_delay_seconds=0.5, watchdog_seconds=1.0
        ),
        open_timeout_seconds=1.0,
        read_timeout_seconds=1.0,
    )
    with RtspServer() as server:
        source = LiveSource(server.url(), options=options)
        frames = iter(source)
        next(frames)
        server.pause()  # the camera hangs: the connection stays open, no data comes
        paused = time.monotonic()
        wait_for(lambda: source.state is SourceState.RECONNECTING, 5, "the watchdog")
        detected = time.monotonic() - paused
        server.resume()
        wait_for(lambda: source.state is SourceState.STREAMING, 10, "streaming again")
        next(frames)
        server.pause()
        wait_for(lambda: source.state is SourceState.RECONNECTING, 5, "the second hang")
        consumer_done = threading.Event()

        def consume() -> None:
            for _ in frames:
                pass
            consumer_done.set()

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        start = time.monotonic()
        source.close()
        closing = time.monotonic() - start
        assert consumer_done.wait(1.0), "close() did not end the iteration"
    print(f"\nstall detected after {detected:.2f} s, close() took {closing:.2f} s")
    assert detected < 3.0
    assert closing < 1.5
    assert source.state is SourceState.FINISHED


def test_credentials_never_reach_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret, wrong = "s3cret-Pw", "wr0ng-Pw"
    with RtspServer(None, "--user", "alice", "--password", secret) as server:
        source = LiveSource(server.url(f"alice:{secret}"), options=SourceOptions())
        frames = iter(source)
        assert next(frames).width == 320
        source.close()
        refused = LiveSource(
            server.url(f"alice:{wrong}"),
            options=SourceOptions(reconnect=ReconnectPolicy(max_attempts=0)),
        )
        with pytest.raises(SourceError) as error:
            list(refused)
    assert refused.state is SourceState.FAILED
    message = str(error.value)
    assert "rtsp://***@127.0.0.1" in message and "401" in message
    texts = [message, repr(error.value), str(error.value.__cause__), source.name, refused.name]
    texts += [record.getMessage() for record in caplog.records]
    assert any("rtsp://***@" in text for text in texts)
    for text in texts:
        assert secret not in text and wrong not in text, text


def test_cli_runs_on_rtsp_with_redacted_credentials(tmp_path: Path) -> None:
    model = constant_output_model(
        tmp_path / "empty.onnx", np.zeros((1, 6, 10), np.float32), imgsz=(64, 64)
    )
    out = tmp_path / "out.jsonl"
    with RtspServer(None, "--user", "bob", "--password", "hunter2") as server:
        url = server.url("bob:hunter2")
        result = run_cli(
            "run", "--source", url, "--model", model, "--end", "3", "-o", out, timeout=60
        )
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stderr
    assert "test: streaming" in result.stderr
    assert f"rtsp://***@127.0.0.1:{server.port}/test:" in result.stderr_lines[-1]
    lines = out.read_text().splitlines()
    assert len(lines) >= 10


def test_cli_unreachable_camera_fails_cleanly(tmp_path: Path) -> None:
    model = constant_output_model(
        tmp_path / "empty.onnx", np.zeros((1, 6, 10), np.float32), imgsz=(64, 64)
    )
    url = f"rtsp://carol:topsecret@127.0.0.1:{free_port()}/cam"
    result = run_cli(
        "run", "--source", url, "--model", model, "--reconnect-attempts", "1", "--timeout", "2",
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "topsecret" not in result.stderr and "Traceback" not in result.stderr
    last = result.stderr_lines[-1]
    assert "error:" in last and "rtsp://***@127.0.0.1" in last
    assert "no reconnection attempts left" in last
