"""Files: every frame once, in order, on several containers and codecs, with PyAV's pixels."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from helpers import ffprobe_frame_count, write_timed_video, write_video

from vstream.sources import SourceOptions, SourceState, VideoFileSource, open_source

# (file name, codec, width, height): the containers and codecs people feed in, with
# sizes that are not multiples of 16 and one that is odd (no 4:2:0 plane packing).
FORMATS = [
    ("h264.mp4", "libx264", 320, 240),
    ("hevc.mkv", "libx265", 192, 108),
    ("mpeg4.avi", "mpeg4", 176, 144),
    ("h264.mov", "libx264", 322, 182),
    ("mpeg2.ts", "mpeg2video", 320, 240),
    ("odd.avi", "mpeg4", 161, 121),
]

# Uneven gaps between frames, in milliseconds: a variable frame rate.
VFR_PTS_MS = [0, 40, 80, 200, 210, 220, 500, 540, 1000, 1033, 1066, 1500, 1501, 1600]


def reference_decode(path: Path, fmt: str = "rgb24") -> list[tuple[float, np.ndarray]]:
    """PyAV's plain decode (no frame threading): (pts seconds, pixels) of each frame."""
    with av.open(str(path)) as container:
        return [
            (float(f.pts * f.time_base), f.to_ndarray(format=fmt))
            for f in container.decode(video=0)
        ]


@pytest.mark.parametrize(("name", "codec", "width", "height"), FORMATS)
def test_every_frame_once_in_order_with_reference_pixels(
    tmp_path: Path, name: str, codec: str, width: int, height: int
) -> None:
    path = write_video(tmp_path / name, frames=37, width=width, height=height, codec=codec)
    expected = reference_decode(path)
    source = VideoFileSource(path)
    frames = list(source)
    assert len(frames) == ffprobe_frame_count(path) == len(expected) == 37
    assert [f.index for f in frames] == list(range(37))
    assert [f.pts_seconds for f in frames] == pytest.approx([pts for pts, _ in expected])
    assert all((f.width, f.height) == (width, height) for f in frames)
    for frame, (_, pixels) in zip(frames, expected, strict=True):
        assert np.array_equal(frame.data.numpy(), pixels)
    assert source.state is SourceState.FINISHED
    assert source.stats.corrupt_packets == 0


def test_nv12_frames_match_ffmpeg_conversion(tmp_path: Path) -> None:
    path = write_video(tmp_path / "nv12.mkv", frames=12, width=192, height=108, codec="libx265")
    expected = reference_decode(path, "nv12")
    frames = list(open_source(str(path), options=SourceOptions(pixel_format="nv12")))
    assert [f.pixel_format.value for f in frames] == ["nv12"] * 12
    for frame, (_, pixels) in zip(frames, expected, strict=True):
        assert np.array_equal(frame.data.numpy(), pixels)


def test_variable_frame_rate_keeps_every_time_stamp(tmp_path: Path) -> None:
    path = write_timed_video(tmp_path / "vfr.mkv", VFR_PTS_MS)
    frames = list(open_source(str(path)))
    assert len(frames) == ffprobe_frame_count(path) == len(VFR_PTS_MS)
    assert [f.index for f in frames] == list(range(len(VFR_PTS_MS)))
    assert [f.pts_seconds for f in frames] == pytest.approx([ms / 1000 for ms in VFR_PTS_MS])
    expected = reference_decode(path)
    assert all(
        np.array_equal(f.data.numpy(), px) for f, (_, px) in zip(frames, expected, strict=True)
    )


def test_variable_frame_rate_mp4_range(tmp_path: Path) -> None:
    path = write_timed_video(tmp_path / "vfr.mp4", VFR_PTS_MS)
    options = SourceOptions(start_seconds=0.2, end_seconds=1.1)
    frames = list(open_source(str(path), options=options))
    in_range = [ms / 1000 for ms in VFR_PTS_MS if 200 <= ms < 1100]
    assert [f.pts_seconds for f in frames] == pytest.approx(in_range)
    assert [f.index for f in frames] == list(range(len(in_range)))


def test_every_decoded_frame_is_delivered_or_counted_as_skipped(tmp_path: Path) -> None:
    """decoded = delivered + skipped: the frames before start (decoding begins at the key
    frame before it), between stride picks, and the one that reached the end."""
    path = write_video(tmp_path / "clip.mp4", frames=50)  # 25 fps, one key frame, at 0
    options = SourceOptions(start_seconds=0.8, end_seconds=1.6, stride=2)
    with open_source(str(path), options=options) as source:
        frames = list(source)
    stats = source.stats
    assert [f.index for f in frames] == list(range(0, 20, 2))
    assert (stats.frames_decoded, stats.frames_delivered, stats.frames_skipped) == (41, 10, 31)


def test_a_looped_range_counts_what_every_pass_skips(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=30)
    options = SourceOptions(start_seconds=0.8, loop=True)
    with open_source(str(path), options=options) as source:
        for taken, _ in enumerate(source, 1):
            if taken == 25:  # 10 frames a pass: the third pass
                break
        stats = source.stats
        assert stats.frames_delivered == 25
        assert stats.frames_decoded == stats.frames_delivered + stats.frames_skipped
        assert stats.frames_skipped == 3 * 20, "20 frames before start, decoded in every pass"
