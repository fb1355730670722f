"""What the CPU decoder makes of what a container says of its pictures, against FFmpeg's
own reading: their times (ffprobe's ``best_effort_timestamp``) where the packets have
no pts (AVI), and a rotation it does not apply (a phone's display matrix)."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import av
import pytest
import torch
from helpers import write_video

from vstream.decoders.cpu import PyAVDecoder


def best_effort_seconds(path: Path) -> list[float | None]:
    """Each picture's time as ffprobe guesses it, None where it has none."""
    done = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "frame=best_effort_timestamp_time", "-of", "json", str(path)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    frames = json.loads(done.stdout)["frames"]
    return [
        float(f["best_effort_timestamp_time"]) if "best_effort_timestamp_time" in f else None
        for f in frames
    ]


@pytest.fixture(scope="module")
def avi_with_b_frames(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("avi") / "b.avi"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=25", "-t", "1.2",
         "-c:v", "libx264", "-bf", "2", "-g", "12", "-pix_fmt", "yuv420p", str(path)],
        check=True, timeout=60,
    )  # fmt: skip
    return path


def test_an_avi_with_b_frames_is_timed_as_ffmpeg_times_it(avi_with_b_frames: Path) -> None:
    """With made-up pts the times went back every third picture (0.04, 0.12, 0.16,
    0.08...); FFmpeg's guess, from the dts, runs forward. The last two pictures have no
    time in either (the file source fills them in)."""
    decoder = PyAVDecoder(str(avi_with_b_frames), device=torch.device("cpu"))
    try:
        ours = [p.pts_seconds for p in decoder.pictures()]
    finally:
        decoder.close()
    theirs = best_effort_seconds(avi_with_b_frames)
    assert len(ours) == len(theirs) == 30
    assert ours == pytest.approx(theirs), (ours, theirs)
    assert theirs[-2:] == [None, None] and ours[:-2] == sorted(set(ours[:-2]))


def test_a_rotation_the_pictures_are_not_turned_by_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Phones store a portrait video landscape with a display matrix; players turn it,
    vstream does not: its boxes are of the stored picture, which is said, once."""
    plain = write_video(tmp_path / "plain.mp4", frames=5, width=96, height=64)
    turned = tmp_path / "turned.mp4"
    with av.open(str(plain)) as source, av.open(str(turned), "w") as target:
        stream = target.add_stream_from_template(source.streams.video[0])
        stream.set_display_rotation(90)
        for packet in source.demux(source.streams.video[0]):
            if packet.dts is not None:
                packet.stream = stream
                target.mux(packet)
    caplog.set_level(logging.WARNING)
    decoder = PyAVDecoder(str(turned), device=torch.device("cpu"))
    try:
        sizes = [(p.width, p.height) for p in decoder.pictures()]
    finally:
        decoder.close()
    assert sizes == [(96, 64)] * 5
    said = [r.getMessage() for r in caplog.records if "display matrix" in r.getMessage()]
    assert said == [
        f"{turned}: the video is to be shown turned 90 degrees (its display matrix); vstream "
        "reads its pictures as they are stored, 96x64, and its boxes are of those"
    ]
