"""``vstream bench`` end to end, in reduced form, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, tiny_detector, write_video

from vstream.bench import naive
from vstream.bench.naive import decode_output, nms

STAGES = {"decode", "preprocess", "inference", "postprocess"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A model that finds exactly one box in every frame, and a 40-frame video."""
    folder = tmp_path_factory.mktemp("bench")
    return tiny_detector(folder / "tiny.onnx"), write_video(folder / "clip.mp4", frames=40)


def test_bench_on_the_demo_assets_reports_every_figure() -> None:
    result = run_cli("bench", "--frames", "24", "--streams", "1,2", "--batch", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["stages"]) == STAGES
    for name, stage in report["stages"].items():
        assert stage["frames"] == 24 and stage["fps"] > 0, name
        assert stage["latency_ms"]["p50"] <= stage["latency_ms"]["p99"]
    assert set(report["end_to_end"]) == {"1", "2"}
    for streams, run in report["end_to_end"].items():
        assert run["frames"] == 24 * int(streams)
        assert len(run["per_stream_fps"]) == int(streams)
        assert run["cpu_ms_per_frame"] > 0
    naive = report["naive"]
    assert naive["frames"] == 24 and naive["decoder"] in ("opencv", "pyav")
    assert naive["detections"] > 0, "the demo model finds the sample's shapes"
    # The demo model finds shapes in the sample: boxes (7 float32 each) reach the host.
    assert report["end_to_end"]["1"]["device_bytes_per_frame"] > 0
    assert report["config"]["buckets"] == [1, 2]
    assert {t["target"] for t in report["targets"]} >= {
        "end to end >= 0.95x model-only",
        "end to end >= 1.05x naive (in process)",
    }
    assert all(isinstance(t["met"], bool) for t in report["targets"])
    assert report["peak_rss_mb"] > 0 and report["machine"]["cpus"] >= 1


def test_bench_counts_the_bytes_that_reach_the_host(tiny: tuple[Path, Path]) -> None:
    model, video = tiny
    result = run_cli(
        "bench", "--model", model, "--source", video, "--frames", "30",
        "--streams", "1,3", "--threads", "1", "--soak", "50", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # One box per frame: one row of seven float32 crosses the boundary per frame, no more.
    for run in report["end_to_end"].values():
        assert run["device_bytes_per_frame"] == 28
    naive = report["naive"]
    assert naive["detections"] == 30, "the naive loop finds the same box in every frame"
    assert naive["device_bytes_per_frame"] == (3 * 320 * 320 + 6 * 16) * 4
    three = report["end_to_end"]["3"]
    assert three["frames"] == 90 and len(three["per_stream_fps"]) == 3
    soak = report["soak"]
    assert soak["frames"] == 50
    assert set(soak["rss_mb_after_frames"]) == {"50"}
    assert isinstance(soak["rss_growth_mb"], float)
    # The model fixes a batch of one: the bench runs it frame by frame.
    assert report["config"]["threads"] == 1 and report["config"]["batch"] == 1
    assert any(t["target"].startswith("RSS growth after 50 frames") for t in report["targets"])


def test_bench_prints_a_table_by_default(tiny: tuple[Path, Path]) -> None:
    model, video = tiny
    result = run_cli(
        "bench", "--model", model, "--source", video, "--frames", "8", "--streams", "2"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for line in ("decode only", "inference only", "end to end, 2 stream(s)", "naive", "target:"):
        assert line in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--source", "/nonexistent/video.mp4"], "video file not found"),
        (["--model", "/nonexistent/model.onnx"], "model file not found"),
        (["--streams", "0"], "stream counts must be positive"),
        (["--threads", "-1"], "--threads: must be in [0, 64], got -1"),
    ],
)
def test_bench_bad_input_is_one_line_and_status_2(args: list[str], fragment: str) -> None:
    result = run_cli("bench", *args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr_lines) == 1 and fragment in result.stderr


def test_naive_nms_and_box_mapping() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], dtype=np.float32)
    assert nms(boxes, np.array([0.9, 0.8, 0.7]), 0.45) == [0, 2]
    # A YOLOv8 output with one box at (100, 100) of a 320 input, frame 640x360 letterboxed
    # with a gain of 0.5 and 70 rows of padding on top.
    output = np.zeros((1, 6, 4), np.float32)
    output[0, :, 0] = [100, 100, 40, 40, 0.9, 0.1]
    ((x1, y1, x2, y2, score, cls),) = decode_output(output, 0.5, (0, 70), (640, 360))
    assert (x1, y1, x2, y2) == pytest.approx((160, 20, 240, 100))
    assert score == pytest.approx(0.9) and cls == 0


def test_naive_loop_without_opencv_decodes_and_resizes_with_pyav(
    tiny: tuple[Path, Path], monkeypatch
) -> None:
    model, video = tiny
    monkeypatch.setattr(naive, "has_opencv", lambda: False)
    result = naive.run_naive(video, model, 320, 1, 12)
    assert result.extra["decoder"] == "pyav"
    assert result.frames == 12 and result.extra["detections"] == 12
