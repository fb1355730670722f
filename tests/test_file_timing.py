"""Healthy files with unusual time stamps or declarations: every frame once, in order, at
the time FFmpeg gives it, and none of them taken for damage.

PyAV decoding the whole file is the reference for which frames there are and their time
stamps; the clips are made with FFmpeg's own tool, as the files met in the wild are.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path

import av
import pytest

from vstream.config.sources import SourceOptions
from vstream.decoders.demux import Demuxer
from vstream.frame import Frame
from vstream.sources import ResumePoint, VideoFileSource, open_source


def ffmpeg(*args: str | Path) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *map(str, args)], check=True, timeout=60)


def lavfi_video(seconds: float) -> list[str]:
    """FFmpeg input arguments for ``seconds`` of a small moving test picture at 25 fps."""
    return ["-f", "lavfi", "-i", f"testsrc=size=64x48:rate=25:duration={seconds}"]


H264_B_FRAMES = ["-c:v", "libx264", "-bf", "2", "-g", "12"]
"""A key frame every 12 frames (something for a seek to land between), B-frames in it."""


def reference_pts(path: Path) -> list[float | None]:
    """The time stamps (seconds) of every picture PyAV decodes, in order; None where the
    picture has none."""
    with av.open(str(path)) as container:
        return [
            None if f.pts is None else float(f.pts * f.time_base) for f in container.decode(video=0)
        ]


def read(path: Path, **options: object) -> list[Frame]:
    """Every frame the file source delivers; it fails on anything it takes for damage."""
    return list(open_source(str(path), options=SourceOptions(**options) if options else None))


def times(frames: list[Frame]) -> list[float]:
    return [f.pts_seconds for f in frames]


def assert_numbered(frames: list[Frame]) -> None:
    assert [f.index for f in frames] == list(range(len(frames)))


@pytest.fixture(scope="module")
def mpeg_ts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 s of H.264 in MPEG-TS, its first time stamp at 1.48 s, as FFmpeg writes TS."""
    path = tmp_path_factory.mktemp("ts") / "clip.ts"
    ffmpeg(*lavfi_video(2), *H264_B_FRAMES, path)
    return path


@pytest.mark.parametrize("after_first", [0.3, 0.5, 1.0, 1.7])
def test_a_start_in_mpeg_ts_keeps_the_frames_before_the_next_key_frame(
    mpeg_ts: Path, after_first: float
) -> None:
    """FFmpeg's seek in MPEG-TS lands on the key frame after the time asked for (1.98 s
    went to 2.44 s): the frames between were lost, without a word."""
    expected = reference_pts(mpeg_ts)
    start = expected[0] + after_first
    frames = read(mpeg_ts, start_seconds=start)
    assert times(frames) == pytest.approx([t for t in expected if t >= start - 1e-6])
    assert_numbered(frames)


@pytest.mark.parametrize("after_first", [-1.0, 0.0, 0.5, 1.0, 1.98, 5.0])
def test_a_seek_in_mpeg_ts_lands_on_a_key_frame_at_or_before_it(
    mpeg_ts: Path, after_first: float
) -> None:
    """What both decoders read after a seek: a key frame at or before the time asked
    for, or the first key frame where that time is before the stream's first."""
    with av.open(str(mpeg_ts)) as container:
        stream = container.streams.video[0]
        keys = [p.pts for p in container.demux(stream) if p.size and p.is_keyframe]
    demuxer = Demuxer(str(mpeg_ts))
    try:
        time_base = demuxer.stream.time_base
        target = keys[0] * time_base + after_first
        demuxer.seek(float(target))
        landed = next(demuxer.packets())
    finally:
        demuxer.close()
    assert landed.is_keyframe and landed.pts in keys
    assert landed.pts * time_base <= max(target, keys[0] * time_base)


def test_a_resumed_mpeg_ts_file_goes_on_with_the_frame_after_the_last_delivered(
    mpeg_ts: Path,
) -> None:
    expected = reference_pts(mpeg_ts)
    last = 20
    resume = ResumePoint(index=last, pts_seconds=expected[last], wall_time=time.time())
    frames = list(VideoFileSource(mpeg_ts, resume=resume))
    assert times(frames) == pytest.approx(expected[last + 1 :])
    assert [f.index for f in frames] == list(range(last + 1, len(expected)))


def test_a_start_in_raw_h264_counts_its_frames_from_its_first(tmp_path: Path) -> None:
    """Raw H.264 carries no time stamps: FFmpeg cannot seek it, and its attempt read the
    stream to its end, so not one frame came. Its frames are timed by their place."""
    clip = tmp_path / "raw.h264"
    ffmpeg(*lavfi_video(2), *H264_B_FRAMES, "-f", "h264", clip)
    expected = reference_pts(clip)
    assert set(expected) == {None}
    frames = read(clip, start_seconds=1.0)
    assert len(frames) == len(expected) - 25
    assert times(frames) == pytest.approx([1.0 + n / 25 for n in range(len(frames))])


def test_frames_before_the_mpeg_ts_clock_wraps_are_read(tmp_path: Path) -> None:
    """The 33-bit MPEG-TS clock wraps at 95443.7 s; FFmpeg gives the frames before the wrap
    negative time stamps. Only a start time drops frames before it: without one, they
    were dropped too, without a word."""
    clip = tmp_path / "wrap.ts"
    ffmpeg(*lavfi_video(1), "-c:v", "libx264", "-output_ts_offset", "95442", clip)
    expected = reference_pts(clip)
    assert min(expected) < 0 < max(expected)
    frames = read(clip)
    assert times(frames) == pytest.approx(expected)
    assert_numbered(frames)


def test_a_resume_at_a_time_stamp_two_frames_share_loses_neither(tmp_path: Path) -> None:
    """Every time stamp twice (a stream timed at half its frame rate): resumed after the
    first frame of a pair, the second was skipped with it, and every later index was one
    too low."""
    single = tmp_path / "single.mkv"
    ffmpeg(*lavfi_video(0.6), "-c:v", "mjpeg", single)
    doubled = tmp_path / "doubled.mkv"
    ffmpeg("-i", single, "-c", "copy", "-bsf:v", "setts=ts=trunc(N/2)*40", doubled)
    expected = reference_pts(doubled)
    assert expected[6] == expected[7] != expected[8]
    for last in (6, 7):
        resume = ResumePoint(index=last, pts_seconds=expected[last], wall_time=time.time())
        source = VideoFileSource(doubled, resume=resume)
        frames = list(source)
        assert times(frames) == pytest.approx(expected[last + 1 :])
        assert [f.index for f in frames] == list(range(last + 1, len(expected)))
        assert source.stats.frames_decoded == len(frames) + source.stats.frames_skipped


def test_pictures_without_a_time_stamp_keep_time_running_forward(tmp_path: Path) -> None:
    """An MKV written with negative time stamps: FFmpeg gives its first 13 pictures none.
    Counted on from 0 they ran up to 0.48 s, then back to the 0.02 s of the next."""
    clip = tmp_path / "negative.mkv"
    ffmpeg(*lavfi_video(1), *H264_B_FRAMES, "-output_ts_offset", "-0.5",
           "-avoid_negative_ts", "disabled", clip)  # fmt: skip
    expected = reference_pts(clip)
    assert expected[0] is None and expected[-1] is not None
    frames = read(clip)
    assert len(frames) == len(expected)
    pts = times(frames)
    assert all(a < b for a, b in itertools.pairwise(pts)), pts
    assert pts[0] == pytest.approx(-0.5), "the time it was written at, 0.5 s before 0"
    known = [(got, want) for got, want in zip(pts, expected, strict=True) if want is not None]
    assert [got for got, _ in known] == pytest.approx([want for _, want in known])


def test_an_mp4_cut_by_stream_copy_is_whole(tmp_path: Path) -> None:
    """``ffmpeg -ss 1.3 -c copy`` keeps the samples from the key frame before 1.3 s on,
    those before 1.3 s hidden by an edit list: FFmpeg never shows them, yet they are in
    the sample count, and the file was called damaged ("17 of 50 frames decoded")."""
    whole = tmp_path / "whole.mp4"
    ffmpeg(*lavfi_video(2), "-c:v", "libx264", "-bf", "2", "-g", "50", whole)
    cut = tmp_path / "cut.mp4"
    ffmpeg("-ss", "1.3", "-i", whole, "-c", "copy", cut)
    expected = reference_pts(cut)
    with av.open(str(cut)) as container:
        assert container.streams.video[0].frames > len(expected)
    frames = read(cut)
    assert times(frames) == pytest.approx(expected)
    assert_numbered(frames)


@pytest.mark.parametrize("suffix", [".mkv", ".flv"])
def test_a_file_whose_audio_runs_on_past_its_video_is_whole(tmp_path: Path, suffix: str) -> None:
    """The file's duration spans its audio (2 s) too: the video (1 s) was called truncated.
    Matroska declares the video's own (its ``DURATION`` tag); FLV does not, and there is
    nothing to check against."""
    clip = tmp_path / f"longer_audio{suffix}"
    ffmpeg(*lavfi_video(1), "-f", "lavfi", "-i", "sine=duration=2", "-c:v", "libx264",
           "-c:a", "aac", clip)  # fmt: skip
    with av.open(str(clip)) as container:
        assert container.duration / av.time_base > 1.5
    expected = reference_pts(clip)
    assert times(read(clip)) == pytest.approx(expected)
    with VideoFileSource(clip, options=SourceOptions(loop=True)) as looped:
        two_passes = list(itertools.islice(looped, 2 * len(expected)))
    assert len(two_passes) == 2 * len(expected), "a looped file goes on after its first pass"


def test_an_mkv_starting_at_10_s_is_whole(tmp_path: Path) -> None:
    """Matroska declares where the video ends (12 s), not how long it lasts: added to its
    start, it made a file of 2 s look cut short of 22 s."""
    clip = tmp_path / "late.mkv"
    ffmpeg(*lavfi_video(2), "-c:v", "libx264", "-output_ts_offset", "10", clip)
    expected = reference_pts(clip)
    assert expected[0] == pytest.approx(10.0)
    assert times(read(clip)) == pytest.approx(expected)
