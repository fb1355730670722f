"""The engine as a service: signals, joined threads, safe counters, one definition of options.

Every entry point (``vstream run`` with flags or a file, ``vstream serve``,
the Python API) runs the same engine; these tests hold it to the contract in
the README's "Stop and failure semantics" table.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import HANG, RtspServer, free_port, tiny_detector, wait_for, write_video
from onnx_models import brightness_model
from pydantic import BaseModel

from vstream.cli import build_parser
from vstream.cli.options import RUN_SECTIONS, SERVE_SECTIONS, options
from vstream.config import VstreamConfig, parse_data
from vstream.config.base import Cli
from vstream.engine import Engine
from vstream.engine.reader import StreamCounters
from vstream.engine.signals import REPEAT_SECONDS
from vstream.sinks.base import DeliveryError
from vstream.sinks.buffered import BufferedSink


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_detector(tmp_path_factory.mktemp("model") / "tiny.onnx")


@pytest.fixture(scope="module")
def batch_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return brightness_model(tmp_path_factory.mktemp("model") / "brightness.onnx")


def run_process(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vstream", "run", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_lines(path: Path, count: int) -> None:
    wait_for(
        lambda: path.exists() and len(path.read_text().splitlines()) >= count,
        HANG,
        f"{count} records in {path}",
    )


def files_done(engine: Engine) -> None:
    """Wait until every file stream of ``engine`` has ended (a hang fails the test)."""
    wait_for(engine.files_done, HANG, "every file stream to end")


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_signal_stops_a_live_run_gracefully_with_every_record_intact(
    tmp_path: Path, model: Path, sig: signal.Signals, status: int
) -> None:
    """``docker stop`` and Ctrl-C: intake stops, frames in flight finish, the output is whole."""
    out = tmp_path / "live.jsonl"
    with RtspServer() as server:
        process = run_process("--source", server.url(), "--model", model, "-o", out)
        try:
            wait_for_lines(out, 20)
            process.send_signal(sig)
            _, stderr = process.communicate(timeout=HANG)
        finally:
            process.kill()
    assert process.returncode == status, stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]  # every line whole
    frames = [r["frame"] for r in records]
    assert len(frames) >= 20 and frames == sorted(set(frames)), "in order, never twice"
    assert f"{len(frames)} frames" in stderr, "the summary counts what was written"
    assert f"{sig.name}: stopping (send it again to cut the stop short)" in stderr
    assert "Traceback" not in stderr


def test_a_second_signal_arriving_inside_the_first_ones_handler_still_cuts_the_stop_short(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Python runs a handler between any two bytecodes, a running handler's too: a second
    SIGTERM landing while the first one's log line is written must count as the second
    (before, both said "stopping" and the stop was never cut short)."""
    from vstream.engine import signals as module

    monkeypatch.setattr(module, "FORCED_EXIT_SECONDS", 3600.0)  # no exit from this test
    monkeypatch.setattr(module, "REPEAT_SECONDS", 0.0)  # sent again by a person, not repeated
    caplog.set_level(logging.INFO, logger=module.log.name)
    shutdown = module.ShutdownSignals()
    hurried: list[float] = []
    shutdown.on_force = hurried.append
    nested = []

    class SecondSignalWhileLogging(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "stopping" in record.getMessage() and not nested:
                nested.append(record)
                shutdown._handle(signal.SIGTERM, None)

    handler = SecondSignalWhileLogging()
    module.log.addHandler(handler)
    try:
        shutdown._handle(signal.SIGTERM, None)
    finally:
        module.log.removeHandler(handler)
    assert nested, "the first signal logged its stop"
    assert shutdown.requested.is_set()
    assert (shutdown.received, shutdown.exit_status) == (signal.SIGTERM, 128 + signal.SIGTERM)
    wait_for(lambda: hurried == [module.FORCED_FLUSH_SECONDS], HANG, "the hurry thread")


def test_a_signal_delivered_twice_at_once_is_taken_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``timeout`` sends its signal to the command, then to its process group: the second
    came as the first was handled, and cut every stop short. Another signal still does."""
    from vstream.engine import signals as module

    monkeypatch.setattr(module, "FORCED_EXIT_SECONDS", 3600.0)  # no exit from this test
    shutdown = module.ShutdownSignals()
    shutdown._handle(signal.SIGTERM, None)
    shutdown._handle(signal.SIGTERM, None)
    assert shutdown.requested.is_set() and shutdown.forced is None
    shutdown._handle(signal.SIGINT, None)  # another signal is no repeat
    assert shutdown.forced == signal.SIGINT


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs GNU timeout")
def test_a_run_under_timeout_stops_gracefully_with_every_record(
    tmp_path: Path, model: Path
) -> None:
    """``timeout 5 vstream run ...``, GNU timeout itself: a clean stop, nothing dropped."""
    write_video(tmp_path / "clip.mp4", frames=20)
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        ["timeout", "--preserve-status", "-s", "TERM", "5", sys.executable, "-m", "vstream",
         "run", "--source", tmp_path / "clip.mp4", "--loop", "--realtime", "--model", model,
         "-o", out],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SIGTERM again" not in done.stderr and "dropped" not in done.stderr, done.stderr
    frames = [json.loads(line)["frame"] for line in out.read_text().splitlines()]
    assert f"{len(frames)} frames" in done.stderr


def test_a_second_signal_cuts_the_flush_short_and_counts_what_is_left(
    tmp_path: Path, model: Path
) -> None:
    """A flush that cannot finish (a webhook nobody answers) is cut short by a second signal;
    what the sinks held is written (the file) or counted as dropped (the webhook)."""
    write_video(tmp_path / "clip.mp4", frames=20)
    config = tmp_path / "pipelines.yaml"
    config.write_text(
        f"""
pipelines:
  - name: main
    model: {{path: {model}}}
    sources: [{{id: cam, uri: clip.mp4, loop: true, realtime: true}}]
    sinks:
      - {{type: jsonl, path: out.jsonl}}
      - type: webhook
        url: http://127.0.0.1:{free_port()}/hook
        timeout_seconds: 0.5
        flush_timeout_seconds: 120
"""
    )
    process = run_process(config)
    logged: list[str] = []
    reader = threading.Thread(target=lambda: logged.extend(iter(process.stderr.readline, "")))
    reader.start()
    try:
        wait_for_lines(tmp_path / "out.jsonl", 10)
        process.send_signal(signal.SIGTERM)
        # The second signal only once the first was taken: two sent at once can arrive as one.
        wait_for(lambda: any("SIGTERM: stopping" in x for x in logged), HANG, "the first signal")
        assert process.poll() is None, "the graceful stop waits on the webhook's flush"
        time.sleep(REPEAT_SECONDS)  # sooner, it is taken for the first one delivered twice
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=HANG)
    finally:
        process.kill()
        reader.join(timeout=HANG)
    stderr = "".join(logged)
    assert process.returncode == 128 + signal.SIGTERM
    written = len((tmp_path / "out.jsonl").read_text().splitlines())
    expected = (
        f"sink webhook (pipeline main): {written} records produced: 0 delivered, {written} dropped"
    )
    assert expected in stderr


def main_pipeline(
    tmp_path: Path,
    model: Path,
    sources: list[dict[str, Any]],
    *,
    out: str | Path = "out.jsonl",
    runtime: dict[str, Any] | None = None,
    **top: Any,
) -> VstreamConfig:
    """A config of one pipeline ``main``: ``model`` on the CPU, batches of 2, records to
    ``out``; ``top``: other top-level sections (``limits``)."""
    pipeline = {
        "name": "main",
        "model": {"path": str(model)},
        "runtime": runtime or {"device": "cpu", "batch_size": 2},
        "sources": sources,
        "sinks": [{"type": "jsonl", "path": str(out)}],
    }
    return parse_data({"pipelines": [pipeline], **top}, base_dir=tmp_path)


def engine_config(tmp_path: Path, model: Path, streams: int, frames: int) -> VstreamConfig:
    for i in range(streams):
        write_video(tmp_path / f"s{i}.mp4", frames=frames, width=160, height=120)
    return main_pipeline(
        tmp_path, model, [{"id": f"s{i}", "uri": f"s{i}.mp4"} for i in range(streams)]
    )


def test_every_thread_the_engine_starts_is_joined_when_it_stops(
    tmp_path: Path, batch_model: Path
) -> None:
    before = set(threading.enumerate())
    config = engine_config(tmp_path, batch_model, streams=3, frames=15)
    engine = Engine(config, base_dir=tmp_path)
    engine.start()
    files_done(engine)
    during = set(threading.enumerate()) - before
    engine.stop(timeout=30)
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert during, "the engine runs threads of its own"
    assert left == [], f"threads still running after stop(): {left}"
    records = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    for i in range(3):
        assert [r["frame"] for r in records if r["stream"] == f"s{i}"] == list(range(15))


def test_worker_threads_never_change_process_wide_torch_settings(
    tmp_path: Path, batch_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    callers: list[str] = []
    real = torch.set_num_threads

    def recording(n: int) -> None:
        callers.append(threading.current_thread().name)
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", recording)
    config = engine_config(tmp_path, batch_model, streams=2, frames=10)
    with Engine(config, base_dir=tmp_path) as engine:
        files_done(engine)
    assert callers == [threading.main_thread().name]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 128 KiB file system (tmpfs), so the kernel itself says the disk is full.

    Mounting needs root (or CAP_SYS_ADMIN); elsewhere this is skipped, and
    ``tests/test_sinks.py`` covers the same sink with ``os.write`` failing as
    the kernel's does.
    """
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("a tmpfs cannot be mounted here (needs root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_is_retried_with_whole_lines_and_ready_says_why(
    tmp_path: Path, batch_model: Path, small_disk: Path
) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (120 * 1024))
    write_video(tmp_path / "s0.mp4", frames=60, width=160, height=120)
    config = main_pipeline(
        tmp_path, batch_model, [{"id": "s0", "uri": "s0.mp4"}], out=small_disk / "out.jsonl"
    )
    engine = Engine(config, base_dir=tmp_path)
    engine.start()
    try:
        wait_for(
            lambda: any("No space left on device" in r for r in engine.not_ready()),
            HANG,
            "the sink to say the disk is full",
        )
        [reason] = [r for r in engine.not_ready() if "No space" in r]
        assert reason.startswith("sink jsonl (pipeline main) is retrying: cannot write ")
        written = (small_disk / "out.jsonl").read_bytes()
        assert written.endswith(b"\n") or not written, "only whole lines while the disk is full"
        filler.unlink()
        files_done(engine)
    finally:
        engine.stop(timeout=30)
    lines = (small_disk / "out.jsonl").read_text().splitlines()
    assert [json.loads(x)["frame"] for x in lines] == list(range(60))
    assert engine.failures() == []


@pytest.mark.parametrize("loop", [False, True], ids=["range", "looped-range"])
def test_decoded_frames_add_up_to_processed_failed_dropped_and_skipped(
    tmp_path: Path, batch_model: Path, loop: bool
) -> None:
    """decoded = processed + failed + dropped + skipped, once a stream has stopped."""
    write_video(tmp_path / "s0.mp4", frames=50, width=160, height=120)
    source = {"id": "s0", "uri": "s0.mp4", "start_seconds": 0.8, "stride": 2, "loop": loop}
    if not loop:
        source["end_seconds"] = 1.6
    config = main_pipeline(tmp_path, batch_model, [source])
    engine = Engine(config, base_dir=tmp_path)
    engine.start()
    try:
        if loop:
            wait_for(lambda: engine.stream("s0").frames_processed >= 40, HANG, "40 frames")
        else:
            files_done(engine)
    finally:
        engine.stop(timeout=30)
    counts = engine.stream("s0").to_json()
    accounted = sum(
        counts[k] for k in ("frames_processed", "frames_failed", "frames_dropped", "frames_skipped")
    )
    assert counts["frames_decoded"] == accounted, counts
    assert counts["frames_skipped"] > counts["frames_processed"], "before start, and stride"
    if not loop:
        assert (counts["frames_decoded"], counts["frames_processed"]) == (41, 10)


def test_a_stream_added_again_as_it_is_removed_waits_for_the_removal_then_gets_every_frame(
    tmp_path: Path, batch_model: Path
) -> None:
    """``DELETE`` and ``POST`` of one id at once: an add that comes while the removal is at
    work (stopping the old reader, waiting for its frames) is refused as a conflict, the
    stream's videos, clips, readings and metrics being still the old one's; once removed,
    the id is free, and the new stream reads through a lane of its own: every frame, in
    order. The old reader's leaving took the new one's lane away, and the intake's count
    of queued frames went wrong (the model's thread spun for ever on a frame it counted
    and could not find)."""
    from vstream.config.sources import SourceConfig
    from vstream.engine.errors import StreamConflict

    write_video(tmp_path / "loop.mp4", frames=20, width=160, height=120)
    write_video(tmp_path / "again.mp4", frames=30, width=160, height=120)
    config = main_pipeline(tmp_path, batch_model, [])
    engine = Engine(config, base_dir=tmp_path)
    engine.start()
    pipeline = engine.pipelines["main"]
    again = SourceConfig(id="cam", uri=str(tmp_path / "again.mp4"))
    refused: list[str] = []
    try:
        engine.add_stream("main", SourceConfig(id="cam", uri=str(tmp_path / "loop.mp4"), loop=True))
        wait_for(lambda: engine.stream("cam").frames_processed >= 10, HANG, "10 frames")
        old = pipeline.streams["cam"]
        stop = old.stop

        def stop_and_add_again() -> None:  # the POST, between the DELETE's steps
            with pytest.raises(StreamConflict) as conflict:
                engine.add_stream("main", again)
            refused.append(str(conflict.value))
            stop()

        old.stop = stop_and_add_again  # type: ignore[method-assign]
        removed = pipeline.remove_stream("cam")
        old.stop = stop  # type: ignore[method-assign]
        engine.add_stream("main", again)
        files_done(engine)
        assert pipeline.intake.queued() == 0
    finally:
        engine.stop(timeout=30)
    assert refused == ["the stream with id 'cam' is being removed; add it again once it is"]
    added = engine.stream("cam").to_json()
    assert (added["frames_processed"], added["frames_dropped"]) == (30, 0)
    assert removed is old and old.frames_in_flight == 0
    records = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["frame"] for r in records][-30:] == list(range(30))
    assert len(records) == old.counters.frames_processed + 30


def test_a_stream_removed_while_connecting_counts_against_the_limits_till_it_ends(
    tmp_path: Path, batch_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A camera that takes the connection and never answers: removing its stream cannot cut
    the attempt short (FFmpeg's open returns at its timeout), so its thread and socket live
    on. Removal does not wait for it (no frame can come), and until it ends it counts
    against ``limits.max_streams``: adding and removing such streams in a loop grew threads
    and sockets without bound, past every limit."""
    import socket

    from vstream.config.sources import SourceConfig
    from vstream.errors import LimitExceeded

    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []
    accepting = threading.Thread(target=lambda: taken.append(listener.accept()[0]), daemon=True)
    accepting.start()
    url = f"rtsp://127.0.0.1:{listener.getsockname()[1]}/silent"
    config = main_pipeline(
        tmp_path, batch_model, [], runtime={"device": "cpu"}, limits={"max_streams": 1}
    )
    engine = Engine(config, base_dir=tmp_path)
    engine.start()
    pipeline = engine.pipelines["main"]
    try:
        engine.add_stream("main", SourceConfig(id="cam", uri=url, open_timeout_seconds=HANG))
        accepting.join(HANG)
        wait_for(lambda: engine.stream("cam").state == "connecting", HANG, "the attempt")
        with caplog.at_level(logging.INFO, logger="vstream.engine"):
            engine.remove_stream("cam")
        assert "removed while connecting" in caplog.text
        assert "not through" not in caplog.text
        (leaving,) = pipeline.leaving()
        assert leaving.running and engine.streams() == []
        with pytest.raises(LimitExceeded, match=r"\(1 streams, 1 of them removed and still"):
            engine.add_stream("main", SourceConfig(id="other", uri=url))
        taken[0].close()  # the camera hangs up: the attempt ends
        wait_for(lambda: not pipeline.leaving(), HANG, "the attempt to end")
        write_video(tmp_path / "next.mp4", frames=2, width=160, height=120)
        engine.add_stream("main", SourceConfig(id="other", uri=str(tmp_path / "next.mp4")))
    finally:
        engine.stop(timeout=30)
        listener.close()


def test_stream_counters_are_exact_under_concurrent_updates() -> None:
    counters = StreamCounters()

    def hammer() -> None:
        for _ in range(20_000):
            counters.processed(1, 2, 0.01)
            counters.failed(1)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counters.frames_processed == 80_000 and counters.detections == 160_000
    assert counters.frames_failed == 80_000


class BrokenTransport:
    """A transport with a bug: it raises something that is not a delivery fault."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, records: list[dict]) -> None:
        self.calls += 1
        raise KeyError("a bug in the transport")

    def close(self, timeout: float) -> int:
        return 0


class FlakyTransport(BrokenTransport):
    def send(self, records: list[dict]) -> None:
        self.calls += 1
        if self.calls < 3:
            raise DeliveryError("broker not reachable")


def results(count: int) -> list:
    from vstream.results import FrameResult

    return [FrameResult("cam", i, i / 25, 64, 48) for i in range(count)]


def test_a_sink_with_a_bug_fails_once_and_is_never_retried() -> None:
    transport = BrokenTransport()
    sink = BufferedSink(transport, name="broken", batch_records=5)
    sink.write(results(5))
    wait_for(lambda: sink.error is not None, HANG, "the sink's first (failed) delivery")
    sink.write(results(7))
    sink.close()
    assert isinstance(sink.error, KeyError) and sink.state == "failed"
    assert transport.calls == 1, "a bug is not retried"
    assert sink.stats.dropped == 12 and sink.stats.delivered == 0, "every loss counted"


def test_a_transient_sink_fault_is_retried_until_delivered() -> None:
    transport = FlakyTransport()
    sink = BufferedSink(transport, name="flaky", batch_records=5)
    sink.write(results(5))
    sink.close()
    assert sink.error is None and transport.calls == 3
    assert sink.stats.delivered == 5 and sink.stats.retries == 2


# Options that a one-video `vstream run` has no use for, each with the reason.
NOT_ON_THE_RUN_COMMAND_LINE = {
    "model.dtype": "a check of the model's input type, for pipelines files",
    "model.class_names": "a list or mapping: a pipelines file says it better",
    "sources.motion": "a section with mask polygons: pipelines file or Python",
    "model.providers": "execution providers with their options: pipelines file or Python",
    "model.input_range": "the family's or the metadata's; a model's normalisation: pipelines file",
    "model.mean": "three numbers per model: a pipelines file says them better",
    "model.std": "three numbers per model: a pipelines file says them better",
    "postprocess.max_candidates": "a safety cap on NMS input, not a tuning knob",
    "model.max_io_mib": "a safety cap on a model's declared sizes, not a tuning knob",
    "runtime.stall_seconds": "when /ready calls a stage stuck: the daemon's pipelines file",
    "sources.input_format": "forcing an FFmpeg demuxer: pipelines file or Python",
    "sources.reconnect.max_delay_seconds": "backoff shape: pipelines file or Python",
    "sources.reconnect.jitter": "backoff shape: pipelines file or Python",
    "analytics.tracking": "set by --track (defaults) or a pipelines file (thresholds)",
    "analytics.lines": "set by --line NAME=X1,Y1,X2,Y2",
    "analytics.zones": "polygons: a pipelines file says them better",
    "model.keypoint_names": "a pose model's keypoint names, a list: the metadata's, else a file",
    "model.skeleton": "pairs of keypoints to join: a pipelines file says them better",
    "analytics.anchor_keypoints": "names of a pose model's keypoints: pipelines file or Python",
}


def _fields(prefix: str, model: type[BaseModel]) -> Iterator[tuple[str, object]]:
    for name, field in model.model_fields.items():
        inner = _model_of(field.annotation)
        if inner is not None and inner.__name__ == "ReconnectPolicy":
            yield from _fields(f"{prefix}.{name}", inner)  # a group of options, not one
        else:
            yield f"{prefix}.{name}", field


def _model_of(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def test_every_option_is_defined_once_and_reachable_from_flags_yaml_and_python() -> None:
    from vstream.config import ModelConfig, PostprocessOptions, RuntimeOptions, SourceOptions
    from vstream.config.analytics import AnalyticsConfig
    from vstream.config.detector_options import split_options

    sections = {
        "model": ModelConfig,
        "postprocess": PostprocessOptions,
        "runtime": RuntimeOptions,
        "sources": SourceOptions,
        "analytics": AnalyticsConfig,
    }
    flagged = {
        ".".join(str(p) for p in o.path[2:] if not isinstance(p, int)): o
        for o in options(RUN_SECTIONS)
    }
    parser = build_parser()
    run = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    defaults = {a.dest: a.default for a in run._actions}
    for section, model in sections.items():
        for path, _field in _fields(section, model):
            if path.endswith(("sources.id", "sources.uri")):
                continue
            option = flagged.get(path)
            if option is None:
                assert path in NOT_ON_THE_RUN_COMMAND_LINE, f"{path} has no flag and no reason"
                continue
            assert isinstance(option.cli, Cli)
            # One default: the flag adds nothing unless given; the model's default applies.
            assert defaults[option.dest] is argparse.SUPPRESS, path
    # Python: the detector takes the model, postprocess and runtime options by name,
    # and routes each to the model that defines it.
    model_config, post, runtime = split_options(
        "vstream/assets/demo.onnx", {"conf": 0.5, "in_flight": 2, "intra_op_threads": 1}
    )
    assert (post.conf, runtime.in_flight, model_config.intra_op_threads) == (0.5, 2, 1)
    assert {o.cli.flag for o in options(SERVE_SECTIONS)} >= {"--host", "--port", "--log-level"}


def run_demo(tmp_path: Path, name: str, analytics: dict) -> list[dict]:
    """The demo model on the first 1.5 s of the sample video, at conf 0.5, records read back."""
    from vstream import assets

    config = parse_data(
        {
            "pipelines": [
                {
                    "name": "demo",
                    "model": {"path": str(assets.DEMO_MODEL)},
                    "postprocess": {"conf": 0.5},
                    "runtime": {"device": "cpu"},
                    "analytics": analytics,
                    "sources": [
                        {"id": "sample", "uri": str(assets.SAMPLE_VIDEO), "end_seconds": 1.5}
                    ],
                    "sinks": [{"type": "jsonl", "path": f"{name}.jsonl"}],
                }
            ]
        },
        base_dir=tmp_path,
    )
    with Engine(config, base_dir=tmp_path) as engine:
        engine.wait(threading.Event(), until_files_done=True)
    return [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]


def test_tracking_sees_low_scores_and_records_keep_conf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ByteTrack's second stage gets the boxes between low_score and conf; records never do."""
    from vstream.analytics.stream import StreamAnalytics

    seen: list[float] = []
    track = StreamAnalytics.track

    def spying(self: StreamAnalytics, boxes: Any, scores: Any, *rest: Any, **options: Any) -> Any:
        seen.extend(scores.tolist())
        return track(self, boxes, scores, *rest, **options)

    monkeypatch.setattr(StreamAnalytics, "track", spying)
    plain = run_demo(tmp_path, "plain", {})
    tracked = run_demo(tmp_path, "tracked", {"tracking": {}})
    assert seen and min(seen) < 0.5 and min(seen) >= 0.1  # the tracker got its candidates
    assert [r["frame"] for r in tracked] == [r["frame"] for r in plain]
    for a, b in zip(plain, tracked, strict=True):
        # The records hold exactly what they hold without tracking, plus track ids.
        assert [{k: v for k, v in d.items() if k != "track_id"} for d in b["detections"]] == a[
            "detections"
        ]
        assert all(d["score"] > 0.5 for d in b["detections"])
    assert any("track_id" in d for r in tracked for d in r["detections"])
