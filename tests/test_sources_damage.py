"""Damaged, truncated, garbage and missing inputs: clear errors, nothing produced is lost."""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, write_video
from onnx_models import constant_output_model

from vstream.errors import SourceError
from vstream.sources import SourceState, VideoFileSource, open_source

FRAMES = 60


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A detector that finds nothing, fast: the tests are about sources, not boxes."""
    path = tmp_path_factory.mktemp("model") / "empty.onnx"
    return constant_output_model(path, np.zeros((1, 6, 10), np.float32), imgsz=(64, 64))


def damage_middle(path: Path, size: int = 3000) -> Path:
    """Overwrite ``size`` bytes in the middle of ``path`` with random bytes."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + size] = np.random.default_rng(7).bytes(size)
    damaged = path.with_name("damaged" + path.suffix)
    damaged.write_bytes(bytes(data))
    return damaged


def truncate(path: Path, fraction: float = 0.6) -> Path:
    data = path.read_bytes()
    cut = path.with_name("truncated" + path.suffix)
    cut.write_bytes(data[: int(len(data) * fraction)])
    return cut


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("suffix", [".mp4", ".ts"])
def test_damaged_packets_are_skipped_counted_and_reported(tmp_path: Path, suffix: str) -> None:
    damaged = damage_middle(write_video(tmp_path / f"clip{suffix}", frames=FRAMES))
    source = open_source(str(damaged))
    frames = []
    with pytest.raises(SourceError, match="damaged packets skipped") as error:
        frames.extend(source)
    assert source.stats.corrupt_packets > 0
    assert f"{len(frames)} frames were read" in str(error.value)
    assert source.state is SourceState.FAILED
    # Skipped, not stopped: frames after the damage were delivered, in order, once.
    # `frame` is the picture's place among those decoded (README, "Using it"): it goes on
    # by one over the pictures lost to the damage, while the time stamps show the gap.
    indices = [f.index for f in frames]
    assert indices == list(range(len(frames)))
    assert FRAMES // 2 < len(frames) < FRAMES
    steps = [b.pts_seconds - a.pts_seconds for a, b in itertools.pairwise(frames)]
    assert max(steps) > 1.5 / 25, "the lost pictures leave a gap in the time stamps"
    decoded = source.stats.frames_decoded
    assert decoded == source.stats.frames_delivered + source.stats.frames_skipped == len(frames)


def test_truncated_mkv_is_reported_after_its_frames(tmp_path: Path) -> None:
    cut = truncate(write_video(tmp_path / "clip.mkv", frames=FRAMES))
    source = open_source(str(cut))
    frames = []
    with pytest.raises(SourceError, match="damaged or truncated"):
        frames.extend(source)
    assert 0 < len(frames) < FRAMES
    assert [f.index for f in frames] == list(range(len(frames)))


def test_a_truncated_mp4_with_its_index_in_front_is_reported_after_its_frames(
    tmp_path: Path,
) -> None:
    """Its index (before the pictures: ``faststart``) lists every sample, those cut off
    too: fewer pictures than its samples (edit lists aside) is truncation."""
    whole = write_video(tmp_path / "clip.mp4", frames=FRAMES, options={"movflags": "faststart"})
    source = open_source(str(truncate(whole)))
    frames = []
    with pytest.raises(SourceError, match=f"of {FRAMES} frames decoded"):
        frames.extend(source)
    assert 0 < len(frames) < FRAMES


def test_mp4_cut_before_its_index_cannot_be_opened(tmp_path: Path) -> None:
    cut = truncate(write_video(tmp_path / "clip.mp4", frames=FRAMES))
    with pytest.raises(SourceError, match=r"cannot open .*truncated\.mp4"):
        open_source(str(cut))


def test_cli_keeps_records_before_a_truncation_and_exits_2(tmp_path: Path, model: Path) -> None:
    cut = truncate(write_video(tmp_path / "clip.mkv", frames=FRAMES))
    out = tmp_path / "out.jsonl"
    result = run_cli("run", "--source", cut, "--model", model, "--output", out, timeout=120)
    assert result.returncode == 2
    line = error_line(result.stderr)
    assert "truncated.mkv" in line and "damaged or truncated" in line
    produced = records(out)
    assert 0 < len(produced) < FRAMES
    assert [r["frame"] for r in produced] == list(range(len(produced)))


def test_cli_reads_past_damage_then_fails(tmp_path: Path, model: Path) -> None:
    damaged = damage_middle(write_video(tmp_path / "clip.ts", frames=FRAMES))
    out = tmp_path / "out.jsonl"
    result = run_cli("run", "--source", damaged, "--model", model, "--output", out, timeout=120)
    assert result.returncode == 2
    assert "damaged packets skipped" in error_line(result.stderr)
    produced = records(out)
    assert len(produced) > FRAMES // 2
    assert produced[-1]["frame"] > FRAMES // 2


def test_a_directory_is_called_one(tmp_path: Path) -> None:
    folder = tmp_path / "clip.mp4"
    folder.mkdir()
    with pytest.raises(
        SourceError, match=rf"^{re.escape(str(folder))} is a directory, not a video file$"
    ):
        VideoFileSource(folder)


def test_a_song_with_cover_art_has_no_video(tmp_path: Path) -> None:
    """An MP3's cover picture is a video stream marked ``attached_pic``: it was read as
    a one-frame video, then called truncated against the song's duration."""
    cover = write_video(tmp_path / "cover.png", frames=1, width=32, height=32, codec="png",
                        pix_fmt="rgb24")  # fmt: skip
    song = tmp_path / "song.mp3"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=duration=1", "-i", str(cover),
         "-map", "0:a", "-map", "1:v", "-c:a", "libmp3lame", "-c:v", "copy",
         "-disposition:v", "attached_pic", str(song)],
        check=True, timeout=60,
    )  # fmt: skip
    with pytest.raises(SourceError, match=r"song\.mp3 has no video stream \(only cover art\)$"):
        open_source(str(song))


GARBAGE = random.Random(0).randbytes(50_000)
"""Bytes no container format takes: fixed, since about one random draw in 200 FFmpeg
does open (as a stream of damaged packets, a different one-line failure)."""


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("garbage.mp4", GARBAGE, "cannot open"),
        ("empty.mkv", b"", "cannot open"),
        ("missing.mp4", None, "video file not found"),
    ],
)
def test_cli_bad_inputs_give_one_line_and_exit_2(
    tmp_path: Path, model: Path, name: str, content: bytes | None, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    result = run_cli("run", "--source", path, "--model", model, timeout=120)
    assert result.returncode == 2
    line = error_line(result.stderr)
    assert message in line and name in line
    assert result.stdout == ""
