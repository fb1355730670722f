"""Live RTSP against a real server on 127.0.0.1: reconnection, freshness, stalls, credentials.

The server is GStreamer's gst-rtsp-server (tests/rtsp_server.py under Debian's
python3); every test stops it, whatever happens. Sources are read as the
engine reads them (a reader thread per stream, the intake's freshness policy).
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
from helpers import (
    RtspServer,
    free_port,
    joined_between_key_frames,
    key_frames,
    packet_times,
    run_cli,
    slow_decoding,
    wait_for,
    write_video,
)
from onnx_models import constant_output_model

from vstream import Detector, assets
from vstream.config import parse_data
from vstream.decoders import demux
from vstream.engine import Engine
from vstream.errors import SourceError, TransientError
from vstream.frame import Frame
from vstream.sources import (
    LiveSource,
    ReconnectPolicy,
    SourceOptions,
    SourceState,
)

FAST_RECONNECT = {"initial_delay_seconds": 0.2, "max_delay_seconds": 1.0}


class StateLog:
    """Polls a stream's state from another thread, as a monitoring client would."""

    def __init__(self, state: Callable[[], SourceState]) -> None:
        self.state = state
        self.changes: list[tuple[float, SourceState]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            state = self.state()
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
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "empty.onnx"
    return constant_output_model(path, np.zeros((1, 6, 10), np.float32), imgsz=(64, 64))


def engine_for(model: Path, url: str, out: Path, **source: object) -> Engine:
    config = parse_data(
        {
            "pipelines": [
                {
                    "name": "live",
                    "model": {"path": str(model)},
                    "runtime": {"device": "cpu"},
                    "sources": [{"id": "cam", "uri": url, **source}],
                    "sinks": [{"type": "jsonl", "path": str(out)}],
                }
            ]
        }
    )
    return Engine(config)


def test_a_stream_survives_a_server_restart(
    tmp_path: Path, model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vstream")
    out = tmp_path / "live.jsonl"
    with RtspServer() as server:
        engine = engine_for(model, server.url(), out, reconnect=FAST_RECONNECT)
        engine.start()
        reader = engine.pipelines["live"].streams["cam"]
        states = StateLog(lambda: reader.state)
        try:
            wait_for(lambda: reader.counters.frames_processed >= 20, 15, "frames before")
            server.kill()
            killed = time.monotonic()
            before_restart = reader.counters.frames_processed
            wait_for(lambda: reader.state is SourceState.RECONNECTING, 15, "the loss noticed")
            server.start()
            ready = time.monotonic()
            wait_for(
                lambda: reader.counters.frames_processed >= before_restart + 20, 20, "frames again"
            )
        finally:
            engine.stop(timeout=20)
            states.stop()
    back = states.first(SourceState.STREAMING, after=killed)
    assert back is not None
    print(f"\nreconnect time after the server came back: {back - ready:.2f} s")
    seen = states.states
    assert SourceState.STREAMING in seen
    assert seen[seen.index(SourceState.RECONNECTING) :][1] is SourceState.STREAMING
    stats = reader.source_stats
    assert stats.reconnects >= 1
    assert stats.last_gap_seconds is not None and stats.last_gap_seconds > 0
    assert any("streaming again after a" in r.getMessage() for r in caplog.records)
    # Records resumed after a gap that shows in their time stamps, in order, never repeated.
    produced = [json.loads(line) for line in out.read_text().splitlines()]
    frames = [r["frame"] for r in produced]
    assert frames == sorted(set(frames))
    pts = np.array([r["pts"] for r in produced])
    jump = int(np.argmax(np.diff(pts)))
    assert np.diff(pts)[jump] > 3 / 25, "the gap shows: more than three frame periods"
    assert len(produced) - (jump + 1) >= 10


def read_frames(source: LiveSource, count: int, timeout: float) -> list[tuple[Frame, float]]:
    """The first ``count`` frames of ``source``, each with its age when it came (seconds
    since its capture time), read on a thread (bounded); then the source is closed."""
    frames: list[tuple[Frame, float]] = []
    enough = threading.Event()

    def consume() -> None:
        for frame in source:
            frames.append((frame, time.time() - (frame.capture_time or 0.0)))
            if len(frames) == count:
                enough.set()
                return

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        assert enough.wait(timeout), f"{count} frames from the server"
    finally:
        source.close()
        consumer.join(10)
    return frames


def test_a_live_frame_is_aged_from_its_packet_s_arrival(monkeypatch: pytest.MonkeyPatch) -> None:
    """A live frame's capture time, which its age counts from, is when its packet was read,
    not when the decoder handed the picture out: the decoder's delay is part of its age. (The
    demuxer's clock is a counter far in the past here, a frame period a packet, so the two
    cannot be mistaken, and the stream is in step with it.) The first packet of an RTSP
    session has no time stamp yet (FFmpeg's RTP demuxer gives it none before the sender's
    first report), so its picture cannot be matched to it and is aged from its decoding (its
    read still took a tick of the clock: packet k was read at tick k + 1)."""
    reads = itertools.count(1)
    clock = SimpleNamespace(time=lambda: 1000.0 + next(reads) / 25, monotonic=time.monotonic)
    monkeypatch.setattr(demux, "time", clock)
    with RtspServer() as server:
        frames = read_frames(LiveSource(server.url()), 10, 30)
    stamps = [frame.capture_time for frame, _ in frames]
    assert stamps[0] is not None and stamps[0] > time.time() - 60, "decoded: the wall clock"
    assert stamps[1:] == pytest.approx([1000.0 + (k + 1) / 25 for k in range(1, 10)])


def test_a_stream_read_slower_than_its_camera_ages_by_its_backlog_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Decoding at 70 ms a frame a camera that sends one every 40: the packets wait in the
    socket, each read later than the last. The frames' ages grow with that backlog (read
    against the stream's own clock), the source says how far behind it is, and the log says
    so once it lasts. Aged from the packet's read alone, every frame would look 70 ms old.
    (The backlog is left unbounded here: ``max_behind_seconds`` null.)"""
    caplog.set_level(logging.INFO, logger="vstream")
    slow_decoding(monkeypatch, 0.07)
    with RtspServer() as server:
        source = LiveSource(server.url(), options=SourceOptions(max_behind_seconds=None))
        ages = [age for _, age in read_frames(source, 100, 60)]
    assert ages[-1] > 2.0 and ages[-1] > ages[20] + 1.5, ages[::10]
    assert source.stats.behind_seconds > 2.0 and source.stats.packets_skipped == 0
    told = [r.getMessage() for r in caplog.records if "behind the camera's pace" in r.getMessage()]
    assert len(told) == 1, told


def test_a_stream_too_far_behind_its_camera_skips_to_catch_up_and_counts_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same slow decoding under the default policy (latest) with a limit of 1 s: once
    that far behind, the waiting packets are skipped, counted, to a key frame read in step
    (the server sends one every 5 frames), so the frames' age stays near the limit instead
    of growing 30 ms a frame, the gaps show in the time stamps, and the log says so once."""
    caplog.set_level(logging.INFO, logger="vstream")
    slow_decoding(monkeypatch, 0.07)
    with RtspServer() as server:
        source = LiveSource(server.url(), options=SourceOptions(max_behind_seconds=1.0))
        frames = read_frames(source, 150, 90)
    ages = [age for _, age in frames]
    pts = [frame.pts_seconds for frame, _ in frames]
    assert source.stats.packets_skipped > 0
    assert max(ages[50:]) < 1.0 + 0.7, ages[::10]  # unbounded: above 3 s by frame 100
    assert max(np.diff(pts)) > 0.4, "a gap where the packets were skipped"
    steps = np.diff([frame.index for frame, _ in frames])
    assert np.diff(pts) == pytest.approx(steps / 25, abs=1e-3), "numbered as the camera sent"
    told = [r.getMessage() for r in caplog.records if "packets skipped" in r.getMessage()]
    assert len(told) == 1 and "to catch up at a key frame" in told[0], told

    blocked = LiveSource("rtsp://127.0.0.1:1/x", options=SourceOptions(policy="block"))
    assert blocked._skip_limit() is None, "block never skips"


def test_a_connection_joined_between_key_frames_starts_at_the_first_and_numbers_from_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A camera joined between key frames (here a recording of one: the same demuxing):
    the packets before the first key frame are skipped and counted, the first frame is
    numbered after them (its place among the packets read), the log says so once, and not
    as falling behind the camera."""
    caplog.set_level(logging.INFO, logger="vstream")
    whole = write_video(tmp_path / "c.ts", frames=60, width=64, height=48, gop=20, b_frames=0)
    joined = joined_between_key_frames(whole, tmp_path / "joined.ts", after=9)
    read = packet_times(joined)
    before = read.index(min(key_frames(joined)))
    assert before > 0, "the cut is between key frames"

    class Counts:
        """A packet tap that notes the count of packets skipped as each packet is read."""

        def __init__(self) -> None:
            self.offset = 0.0
            self.seen: list[int] = []

        def add(self, packet: av.Packet) -> None:
            self.seen.append(source.stats.packets_skipped)

    tap = Counts()
    source = LiveSource(
        str(joined), options=SourceOptions(reconnect={"on_end": False}), packet_tap=tap
    )
    frames = list(source)
    assert source.stats.packets_skipped == before
    # Counted as they are skipped, not when the first picture comes (0 until then).
    assert tap.seen[: before + 1] == list(range(before + 1))
    assert [f.index for f in frames] == list(range(before, len(read)))
    messages = [r.getMessage() for r in caplog.records]
    told = f"joined between key frames: {before} packets before the first skipped"
    assert sum(told in m for m in messages) == 1, messages
    assert not any("behind the camera" in m for m in messages), messages


@pytest.mark.parametrize("where", ["camera clock", "reconnection"])
def test_time_stamps_never_go_back(tmp_path: Path, where: str) -> None:
    """Two ways a live stream's time stamps went back, which a tracker takes for a new
    scene (every track forgotten, a crossing in progress lost): the camera's clock starting
    again within a connection (here a recording of it: the same clip twice in one MPEG-TS),
    and a connection that read faster than the wall clock (a burst the camera held for a
    new client; here a recording read at full speed) followed by one anchored to the wall
    clock. Each goes on after the last frame delivered, by the last step between two."""
    clip = write_video(tmp_path / "c.ts", frames=50, width=64, height=48, gop=10, b_frames=0)
    if where == "camera clock":
        twice = tmp_path / "twice.ts"
        twice.write_bytes(clip.read_bytes() * 2)
        source = LiveSource(str(twice), options=SourceOptions(reconnect={"on_end": False}))
    else:  # read again at its end, as a camera's stream is after it ends
        policy = ReconnectPolicy(on_end=True, initial_delay_seconds=0.01)
        source = LiveSource(str(clip), options=SourceOptions(reconnect=policy))
    pts = [frame.pts_seconds for frame in itertools.islice(source, 100)]
    source.close()
    assert len(pts) == 100
    steps = np.diff(pts)
    assert steps.min() > 0, f"went back by {-steps.min():.3f} s at frame {steps.argmin() + 1}"
    if where == "camera clock":  # one connection: the frames' own steps, throughout
        assert steps == pytest.approx(0.04, abs=1e-3)


def test_a_stop_ends_the_packets_while_they_are_skipped(tmp_path: Path) -> None:
    """While packets are skipped (here those before the first key frame) no picture comes
    out for the reader to see its stop at: ``close()`` waited for the skipping to end,
    which a camera whose clock misled the catch-up never did. The demuxer sees it now."""
    whole = write_video(tmp_path / "c.ts", frames=60, width=64, height=48, gop=20, b_frames=0)
    joined = joined_between_key_frames(whole, tmp_path / "joined.ts", after=9)
    demuxer = demux.Demuxer(str(joined), stamp_packets=True)
    demuxer.stop = threading.Event()
    read: list[int | None] = []

    class StopAtTheThird:
        def add(self, packet: av.Packet) -> None:
            read.append(packet.pts)
            if len(read) == 3:
                demuxer.stop.set()  # type: ignore[union-attr]

    demuxer.tap = StopAtTheThird()
    try:
        assert list(demuxer.packets()) == [] and len(read) == 3
    finally:
        demuxer.close()


@pytest.mark.soak
def test_connect_disconnect_cycles_keep_memory_bounded() -> None:
    """50 open/first frame/close cycles; RSS and threads must not grow with them.

    Each connection allocates an RTSP demuxer and an H.264 decoder with its
    frame pool: several MB for this 320x240 stream (the decoder's reference
    frames alone are ~2 MB). Leaking one connection's worth per cycle would
    add 100 MB or more over 50 cycles; 25 MB leaves room for allocator
    caching and Python's own growth while catching such a leak.
    """
    options = SourceOptions(reconnect=ReconnectPolicy(**FAST_RECONNECT))

    def cycle(url: str) -> None:
        source = LiveSource(url, options=options)
        frames = iter(source)
        assert next(frames).width == 320
        source.close()
        frames.close()

    def rss_mb() -> float:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * 4096 / 2**20

    with RtspServer() as server:
        for _ in range(5):
            cycle(server.url())
        threads, before = threading.active_count(), rss_mb()
        for _ in range(50):
            cycle(server.url())
        growth = rss_mb() - before
    print(f"\nRSS growth over 50 cycles: {growth:.1f} MB")
    assert growth < 25.0
    wait_for(lambda: threading.active_count() <= threads, 5, "threads to end")


def slow_model(detector: Detector, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every model run take ``seconds``: a pipeline slower than the camera."""
    real = detector.infer

    def infer(buffer: int, frames: int):
        time.sleep(seconds)
        return real(buffer, frames)

    monkeypatch.setattr(detector, "infer", infer)


def test_engine_latest_policy_drops_oldest_and_accounts_for_every_frame(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    with RtspServer() as server:
        engine = engine_for(model, server.url(), out, policy="latest", queue_size=2)
        slow_model(engine.pipelines["live"].detector, 0.2, monkeypatch)
        engine.start()
        reader = engine.pipelines["live"].streams["cam"]
        try:
            wait_for(lambda: reader.counters.frames_processed >= 12, 20, "records")
            age = reader.counters.frame_age_seconds
        finally:
            engine.stop(timeout=20)
    # Without dropping, each record would be 0.16 s older than the last (1.9 s by the
    # twelfth); the intake holds queue_size frames, the stages two batches.
    assert age is not None and age < 1.5, age
    decoded = reader.source_stats.frames_decoded
    processed, dropped = reader.counters.frames_processed, reader.frames_dropped
    assert dropped > 0
    assert processed + dropped == decoded, "every frame read was processed or counted dropped"
    frames = [json.loads(line)["frame"] for line in out.read_text().splitlines()]
    assert frames == sorted(frames) and len(frames) == processed


def test_packets_skipped_to_catch_up_are_in_the_status_metrics_and_summary(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the source counted reaches every place a user looks: the stream's status (the
    API's JSON), its metric and the summary; the frames decoded still add up on their own."""
    slow_decoding(monkeypatch, 0.07)
    out = tmp_path / "out.jsonl"
    with RtspServer() as server:
        engine = engine_for(model, server.url(), out, max_behind_seconds=0.5)
        engine.start()
        reader = engine.pipelines["live"].streams["cam"]
        try:
            wait_for(lambda: reader.packets_skipped > 0, 60, "packets skipped")
        finally:
            engine.stop(timeout=20)
    skipped = reader.packets_skipped
    assert reader.status().to_json()["packets_skipped"] == skipped
    metric = 'vstream_stream_packets_skipped_total{pipeline="live",stream="cam"}'
    assert f"{metric} {float(skipped)}" in engine.metrics.render().decode()
    (summary,) = engine.summary()
    assert summary.packets_skipped == skipped
    counted = reader.counters.frames_processed + reader.frames_failed + reader.frames_dropped
    assert counted + reader.frames_skipped == reader.frames_decoded


def test_block_policy_drops_nothing(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    with RtspServer() as server:
        engine = engine_for(model, server.url(), out, policy="block", queue_size=2)
        slow_model(engine.pipelines["live"].detector, 0.06, monkeypatch)
        engine.start()
        reader = engine.pipelines["live"].streams["cam"]
        try:
            wait_for(lambda: reader.counters.frames_processed >= 30, 20, "records")
        finally:
            engine.stop(timeout=20)
    frames = [json.loads(line)["frame"] for line in out.read_text().splitlines()]
    assert reader.frames_dropped == reader.counters.frames_discarded, "the policy dropped none"
    assert reader.counters.frames_discarded <= 1, "at most the frame in hand at the stop"
    assert frames == list(range(len(frames))) and len(frames) >= 30


def test_a_hung_server_is_detected_and_close_ends_the_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
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
        got_frame = threading.Event()
        consumer_done = threading.Event()

        def consume() -> None:
            for _ in source:
                got_frame.set()
            consumer_done.set()

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        assert got_frame.wait(15)
        server.pause()  # the camera hangs: the connection stays open, no data comes
        wait_for(lambda: source.state is SourceState.RECONNECTING, 10, "the watchdog")
        server.resume()
        got_frame.clear()
        assert got_frame.wait(15), "streaming again"
        server.pause()
        wait_for(lambda: source.state is SourceState.RECONNECTING, 10, "the second hang")
        source.close()
        # A read blocked in FFmpeg returns at its timeout (1 s here); then the iteration ends.
        assert consumer_done.wait(5), "close() did not end the iteration"
        consumer.join(5)
    assert source.state is SourceState.FINISHED


def test_credentials_never_reach_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret, wrong = "s3cret-Pw", "wr0ng-Pw"
    with RtspServer(None, "--user", "alice", "--password", secret) as server:
        source = LiveSource(server.url(f"alice:{secret}"), options=SourceOptions())
        frames = iter(source)
        assert next(frames).width == 320
        source.close()
        frames.close()
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


def test_a_refused_password_fails_the_camera_once() -> None:
    """A 401 cannot pass by connecting again, and a camera may lock the account after a few
    wrong tries: it was retried forever, a warning each time, under the default policy
    (reconnect without end)."""
    with RtspServer(None, "--user", "alice", "--password", "right") as server:
        refused = LiveSource(
            server.url("alice:wrong"),
            options=SourceOptions(reconnect=ReconnectPolicy(initial_delay_seconds=0.01)),
        )
        errors: list[BaseException] = []

        def read() -> None:
            try:
                list(refused)
            except BaseException as exc:
                errors.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(60)
        refused.close()
    assert not reader.is_alive(), f"still reconnecting ({refused.stats.reconnects} times)"
    assert [type(e) for e in errors] == [SourceError] and "401" in str(errors[0])
    assert refused.state is SourceState.FAILED and refused.stats.reconnects == 0


def test_a_damaged_packet_s_debug_line_shows_no_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PyAV's ``str()`` of a demuxing error quotes its input's name, the camera's URL with
    its password; the debug line of a damaged packet printed it where vstream's masking
    log handler is not installed (the Python API under the user's own logging)."""
    url = "rtsp://admin:Sup3rSecret@10.0.0.5/stream1"
    error = av.error.InvalidDataError(errno.EINVAL, "Invalid data found", url)  # as PyAV builds it
    assert "Sup3rSecret" in str(error)
    demuxer = demux.Demuxer(str(assets.SAMPLE_VIDEO))
    try:
        with caplog.at_level(logging.DEBUG, logger="vstream"):
            demuxer.damaged("demux", error)
    finally:
        demuxer.close()
    assert "damaged packet (demux: Invalid data found)" in caplog.text
    assert "Sup3rSecret" not in caplog.text


def test_a_bug_in_a_live_source_fails_it_once_instead_of_reconnecting_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only transient faults are retried: anything else ends the stream with state failed."""
    from vstream.sources import live

    opened = []

    def broken_open(*args: object, **kwargs: object) -> None:
        opened.append(1)
        raise KeyError("a bug in the decoder set-up")

    monkeypatch.setattr(live, "open_decoder", broken_open)
    source = LiveSource(
        f"rtsp://127.0.0.1:{free_port()}/cam",
        options=SourceOptions(reconnect=ReconnectPolicy(initial_delay_seconds=0.01)),
    )
    with pytest.raises(KeyError):
        list(source)
    assert len(opened) == 1 and source.state is SourceState.FAILED
    assert not issubclass(KeyError, TransientError)


def test_cli_runs_on_rtsp_with_redacted_credentials(tmp_path: Path, model: Path) -> None:
    out = tmp_path / "out.jsonl"
    with RtspServer(None, "--user", "bob", "--password", "hunter2") as server:
        url = server.url("bob:hunter2")
        result = run_cli(
            "run", "--source", url, "--model", model, "--end", "3", "-o", out, timeout=60
        )
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stderr
    assert "test: streaming" in result.stderr
    assert f"rtsp://***@127.0.0.1:{server.port}/test:" in result.stderr_lines[-2]
    lines = out.read_text().splitlines()
    assert len(lines) >= 10


def test_cli_unreachable_camera_fails_cleanly(tmp_path: Path, model: Path) -> None:
    url = f"rtsp://carol:topsecret@127.0.0.1:{free_port()}/cam"
    result = run_cli(
        "run", "--source", url, "--model", model, "--reconnect-attempts", "1",
        "--open-timeout", "2", timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "topsecret" not in result.stderr and "Traceback" not in result.stderr
    last = result.stderr_lines[-1]
    assert "failed:" in last and "rtsp://***@127.0.0.1" in last
    assert "no reconnection attempts left" in last
