"""File playback options: loop, start/end, stride, realtime pacing, state and counters."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from vstream.errors import SourceError
from vstream.sources import SourceOptions, SourceState, open_source

FPS = 25
FRAMES = 30


def test_plain_file_gives_every_frame_and_finishes(small_video: Path) -> None:
    source = open_source(str(small_video))
    assert source.state is SourceState.STREAMING
    frames = list(source)
    assert [f.index for f in frames] == list(range(FRAMES))
    assert [f.pts_seconds for f in frames] == pytest.approx([i / FPS for i in range(FRAMES)])
    assert source.state is SourceState.FINISHED
    assert source.stats.frames_decoded == source.stats.frames_delivered == FRAMES


def test_loop_keeps_indices_and_time_stamps_increasing(small_video: Path) -> None:
    source = open_source(str(small_video), options=SourceOptions(loop=True))
    frames = []
    for frame in source:
        frames.append(frame)
        if len(frames) == 2 * FRAMES + 5:
            break
    source.close()
    assert [f.index for f in frames] == list(range(2 * FRAMES + 5))
    assert [f.pts_seconds for f in frames] == pytest.approx(
        [i / FPS for i in range(2 * FRAMES + 5)]
    )
    # The second pass decodes the same pictures as the first.
    assert frames[FRAMES + 3].data.equal(frames[3].data)
    assert source.state is SourceState.FINISHED
    assert source.stats.frames_delivered == 2 * FRAMES + 5


def test_start_end_and_stride_select_frames_by_time(small_video: Path) -> None:
    options = SourceOptions(start_seconds=0.4, end_seconds=1.0, stride=3)
    frames = list(open_source(str(small_video), options=options))
    # 0.4 s .. 1.0 s at 25 fps is file frames 10..24; the range is numbered from 0.
    assert [f.index for f in frames] == [0, 3, 6, 9, 12]
    assert [f.pts_seconds for f in frames] == pytest.approx(
        [(10 + i) / FPS for i in (0, 3, 6, 9, 12)]
    )
    reference = list(open_source(str(small_video)))
    assert all(f.data.equal(reference[10 + f.index].data) for f in frames)


def test_loop_with_a_range_repeats_only_the_range(small_video: Path) -> None:
    options = SourceOptions(start_seconds=0.8, end_seconds=1.0, loop=True)
    source = open_source(str(small_video), options=options)
    frames = [f for f, _ in zip(source, range(12), strict=False)]
    source.close()
    assert [f.index for f in frames] == list(range(12))
    pts = [f.pts_seconds for f in frames]
    assert pts == pytest.approx([0.8 + i / FPS for i in range(12)])


def test_realtime_paces_at_the_native_rate(small_video: Path) -> None:
    start = time.monotonic()
    frames = list(open_source(str(small_video), options=SourceOptions(realtime=True)))
    elapsed = time.monotonic() - start
    assert len(frames) == FRAMES
    # 30 frames at 25 fps: the last is due 29/25 s after the first.
    assert elapsed >= 29 / FPS - 0.05, "paced at the file's own rate, never faster"


def test_close_from_another_thread_stops_a_paced_loop(small_video: Path) -> None:
    source = open_source(str(small_video), options=SourceOptions(loop=True, realtime=True))
    threading.Timer(0.5, source.close).start()
    start = time.monotonic()
    count = sum(1 for _ in source)
    assert time.monotonic() - start < 1.5
    assert 5 <= count <= 20
    assert source.state is SourceState.FINISHED


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stride": 0}, r"must be in \[1, 10000\], got 0"),
        ({"start_seconds": -1}, r"must be in \[0, 10000000\], got -1"),
        ({"start_seconds": 2, "end_seconds": 1}, r"end_seconds \(1\.0\) must be after"),
    ],
)
def test_impossible_ranges_are_rejected(options: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SourceOptions(**options)


def test_a_range_past_the_end_is_an_error(small_video: Path) -> None:
    source = open_source(str(small_video), options=SourceOptions(start_seconds=60))
    with pytest.raises(SourceError, match="no frames"):
        list(source)
    assert source.state is SourceState.FAILED
