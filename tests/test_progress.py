"""``vstream run``'s progress: percent and ETA on a terminal, a log line every N seconds
elsewhere, nothing for a short run; and a stop that does not call the frame in hand dropped."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import tiny_detector, wait_for, write_video
from test_sources_live import slow_model

from vstream.assets import SAMPLE_VIDEO
from vstream.cli.run import Progress, _expected_frames, duration_text, progress_text
from vstream.config import SourceConfig, parse_data
from vstream.engine import Engine
from vstream.engine.status import StreamSummary


def test_the_progress_text_of_files_and_of_live_streams() -> None:
    assert progress_text(120, 200, 4.0, "streaming") == "120/200 frames (60%), 30.0 fps, ETA 3 s"
    assert progress_text(1200, None, 48.0, "streaming") == "streaming, 1200 frames, 25.0 fps"
    assert progress_text(0, 200, 0.5, "connecting") == "0/200 frames (0%), 0.0 fps"
    assert [duration_text(s) for s in (42.4, 185, 7620)] == ["42 s", "3 min 05 s", "2 h 07 min"]


def run_for(progress: Progress, seconds: float, fps: float = 25.0, total: int = 2500) -> None:
    """What the run loop hands ``progress`` every 0.2 s of a run at ``fps``."""
    for tick in range(round(seconds / 0.2) + 1):
        elapsed = tick * 0.2
        progress(round(elapsed * fps), total, elapsed, "streaming")


def test_off_a_terminal_a_line_every_n_seconds_and_nothing_for_a_short_run(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, logger="vstream")
    run_for(Progress(every=10.0, terminal=False), 9.8)
    assert caplog.messages == [], "a run shorter than the period prints nothing"
    run_for(Progress(every=10.0, terminal=False), 25.0)
    assert caplog.messages == [
        "250/2500 frames (10%), 25.0 fps, ETA 1 min 30 s",
        "500/2500 frames (20%), 25.0 fps, ETA 1 min 20 s",
    ]
    caplog.clear()
    run_for(Progress(every=0.0, terminal=False), 25.0)
    assert caplog.messages == [], "progress_seconds: 0 turns it off"
    assert capsys.readouterr().err == ""


def test_on_a_terminal_one_line_redrawn_from_a_second_in(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, logger="vstream")
    short = Progress(every=10.0, terminal=True)
    run_for(short, 0.8)
    short.clear()
    assert capsys.readouterr().err == "", "a short run prints nothing"
    long = Progress(every=10.0, terminal=True)
    run_for(long, 2.0)
    long.clear()
    drawn = capsys.readouterr().err
    assert drawn.startswith("\rvstream: 25/2500 frames (1%), 25.0 fps, ETA 1 min 39 s \033[K")
    # Drawn at 1.0, 1.4 and 1.8 s (at most every 0.25 s), then cleared.
    assert drawn.count("\r") == 4 and drawn.endswith("\r\033[K")
    assert caplog.messages == []


def test_the_frames_to_come_follow_start_end_and_stride() -> None:
    """As in tests/test_engine.py: 50 frames at 25 fps, 0.8 s to 1.6 s, every 2nd: 10."""

    def engine(**options: object) -> SimpleNamespace:
        source = SourceConfig(id="s", uri=str(SAMPLE_VIDEO), **options)
        reader = SimpleNamespace(expected_frames=50, config=source, source_fps=25.0)
        return SimpleNamespace(readers=lambda: [reader, reader])

    assert _expected_frames(engine(start_seconds=0.8, end_seconds=1.6, stride=2)) == 20
    assert _expected_frames(engine(stride=3)) == 2 * 17
    assert _expected_frames(engine(loop=True)) is None
    unopened = SimpleNamespace(expected_frames=None, config=engine().readers()[0].config)
    assert _expected_frames(SimpleNamespace(readers=lambda: [unopened])) is None


def test_a_stop_does_not_call_the_frame_in_hand_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C on a file run: the reader, waiting to queue the frame it had decoded
    (the model is slower), gives it up. It is accounted for, and the summary does not
    count it as dropped (it said "(1 dropped)")."""
    write_video(tmp_path / "v.mp4", frames=30, width=160, height=120)
    source = {"id": "v", "uri": "v.mp4", "queue_size": 1}
    pipeline = {
        "name": "main",
        "model": {"path": str(tiny_detector(tmp_path / "tiny.onnx"))},
        "runtime": {"device": "cpu"},
        "sources": [source],
        "sinks": [{"type": "jsonl", "path": "out.jsonl"}],
    }
    engine = Engine(parse_data({"pipelines": [pipeline]}, base_dir=tmp_path), base_dir=tmp_path)
    slow_model(engine.pipelines["main"].detector, 0.1, monkeypatch)
    with engine:  # stopped on leaving, as Ctrl-C stops a run
        reader = engine.pipelines["main"].streams["v"]
        wait_for(lambda: reader.counters.frames_processed >= 3, 60, "records")
    status = reader.status().to_json()
    assert reader.counters.frames_at_stop == 1, "the frame in hand when the stop came"
    assert StreamSummary.of(reader).dropped == 0
    accounted = ("frames_processed", "frames_failed", "frames_dropped", "frames_skipped")
    assert status["frames_decoded"] == sum(status[k] for k in accounted), status
