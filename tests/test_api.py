"""The Python API at the CLI's level: every pipeline option through ``vstream.detect()``,
checked by the pipelines file's models, and pictures as other tools hold them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import HANG

import vstream
from vstream.api import accepted_options
from vstream.config import ConfigError, parse_config
from vstream.frame import Frame, PixelFormat, as_frame

SAMPLE = "vstream://sample.mp4"


def file_message(pipeline_yaml: str) -> str:
    """What a pipelines file with this pipeline (indented keys) is refused with, less its path."""
    text = (
        "pipelines:\n  - name: p\n    model: {path: vstream://demo.onnx}\n"
        "    sinks: [{type: stdout}]\n" + pipeline_yaml
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    return str(caught.value).split(": ", 2)[-1]


@pytest.mark.parametrize(
    "options, where, in_file",
    [
        ({"detect_every": 0}, "detect_every",
         "    sources: [{id: s, uri: vstream://sample.mp4, detect_every: 0}]\n"),
        ({"tracking": {"track_buffer_seconds": 0}}, "analytics.tracking.track_buffer_seconds",
         "    analytics: {tracking: {track_buffer_seconds: 0}}\n"),
        ({"lines": [{"name": "g", "start": [0, 0], "end": [0, 0]}]}, "analytics.lines[0]",
         "    analytics: {lines: [{name: g, start: [0, 0], end: [0, 0]}]}\n"),
        ({"zones": [{"name": "z", "points": [[0, 0], [1, 1], [2, 2]]}]}, "analytics.zones[0]",
         "    analytics: {zones: [{name: z, points: [[0, 0], [1, 1], [2, 2]]}]}\n"),
        ({"secondary": [{"name": "c", "path": "vstream://colour.onnx", "kind": "embedding"}],
          "tracking": {"appearance": "nope"}}, "",
         "    secondary: [{name: c, path: vstream://colour.onnx, kind: embedding}]\n"
         "    analytics: {tracking: {appearance: nope}}\n"),
        ({"sinks": [{"type": "jsonl"}]}, "sinks[0].path", None),
    ],
    ids=["cadence", "tracking", "line", "zone", "appearance", "sink"],
)  # fmt: skip
def test_detect_checks_every_option_as_the_file_does(options, where, in_file) -> None:
    with pytest.raises(ConfigError) as caught:
        vstream.detect(SAMPLE, **options)
    message = str(caught.value)
    assert message.startswith(f"{where}: " if where else "")
    if in_file is not None:
        assert message.split(": ", 1 if where else 0)[-1].endswith(file_message(in_file))


def test_detect_refuses_an_unknown_keyword_listing_every_one_taken() -> None:
    with pytest.raises(TypeError) as caught:
        vstream.detect(SAMPLE, track_every=2)
    listed = str(caught.value).split("options are: ")[1].split(", ")
    assert listed == accepted_options()
    for name in ("detect_every", "tracking", "track", "lines", "zones", "secondary", "sinks",
                 "motion", "conf", "batch_size", "loop", "anchor", "channels"):  # fmt: skip
        assert name in listed
    with pytest.raises(ConfigError, match="zone 'dock=0,0,1,1': expected an even count"):
        vstream.detect(SAMPLE, zones=["dock=0,0,1,1"])
    with pytest.raises(TypeError, match=r"source options \['detect_every'\] need a path"):
        vstream.detect([np.zeros((8, 8, 3), np.uint8)], detect_every=2)


@pytest.fixture(scope="module")
def opencv_frames() -> list[np.ndarray]:
    """The sample's first frames as OpenCV decodes them: BGR, FFmpeg's conversion."""
    cv2 = pytest.importorskip("cv2")
    capture = cv2.VideoCapture(str(vstream.assets.SAMPLE_VIDEO))
    frames = [capture.read()[1] for _ in range(4)]
    capture.release()
    return frames


def test_detector_takes_numpy_and_torch_pictures_in_either_channel_order(opencv_frames) -> None:
    """OpenCV's BGR arrays give the detections of vstream's own decode of the same file."""
    import torch

    from vstream.sources.file import VideoFileSource

    detector = vstream.Detector("vstream://demo.onnx", device="cpu", batch_size=4)
    own = list(itertools.islice(VideoFileSource(str(vstream.assets.SAMPLE_VIDEO)), 4))
    expected = [r.detections for r in detector.detect(own)]
    rgb = [f[..., ::-1] for f in opencv_frames]
    for pictures, channels in [
        (opencv_frames, None),
        (rgb, "rgb"),
        ([torch.from_numpy(f.copy()) for f in rgb], None),
        ([torch.from_numpy(f.copy()).permute(2, 0, 1) for f in rgb], None),
        ([torch.from_numpy(f.copy()) for f in opencv_frames], "bgr"),
    ]:
        results = detector.detect(pictures, channels=channels)
        for result, want in zip(results, expected, strict=True):
            np.testing.assert_allclose(result.detections.xyxy, want.xyxy, atol=0.01)
            assert result.detections.labels == want.labels
    # The order matters: the same array read the other way round is another picture.
    swapped = detector.detect(opencv_frames, channels="rgb")
    assert any(
        len(s.detections) != len(w) or not np.allclose(s.detections.confidence, w.confidence)
        for s, w in zip(swapped, expected, strict=True)
    )


@pytest.mark.parametrize(
    "picture, message",
    [
        (np.zeros((360, 640, 3), np.float32), r"a numpy picture must be \(H, W, 3\) uint8, got "
         r"shape \(360, 640, 3\) float32"),
        (np.zeros((360, 640), np.uint8), r"got shape \(360, 640\) uint8"),
        (np.zeros((4, 360, 640), np.uint8), r"got shape \(4, 360, 640\)"),
        ([[0, 0, 0]], "expected a Frame, a numpy array or a torch tensor, got list"),
    ],
)  # fmt: skip
def test_a_picture_of_another_layout_is_refused_naming_it(picture, message) -> None:
    with pytest.raises(ValueError, match=message):
        as_frame(picture)
    with pytest.raises(ValueError, match="channels must be 'bgr' or 'rgb', got 'BGR'"):
        as_frame(np.zeros((2, 2, 3), np.uint8), "BGR")  # type: ignore[arg-type]


def test_stream_id_names_the_stream_of_a_file_and_of_pictures(opencv_frames) -> None:
    from_file = next(iter(vstream.detect(SAMPLE, stream_id="door", device="cpu")))
    from_pictures = list(vstream.detect(opencv_frames[:2], stream_id="door", device="cpu"))
    assert [r.stream_id for r in [from_file, *from_pictures]] == ["door"] * 3
    assert [r.stream_id for r in vstream.detect(opencv_frames[:1], device="cpu")] == ["0"]
    with pytest.raises(ConfigError, match="stream_id: 'a b' does not match"):
        vstream.detect(opencv_frames, stream_id="a b")


def test_frames_of_their_own_stream_are_refused_a_stream_id_that_names_no_file(
    tmp_path: Path,
) -> None:
    """A Frame brings its stream id, which ``{stream}`` puts in a sink's path: one that would
    leave the sink's directory is refused as a config's would be, and nothing is written."""
    frames = [Frame(torch.zeros((48, 64, 3), dtype=torch.uint8), PixelFormat.RGB24, 64, 48,
                    "../escaped", i, i / 25) for i in range(3)]  # fmt: skip
    sink = {"type": "video", "path": str(tmp_path / "videos" / "{stream}.mp4"), "encoder": "cpu"}
    with pytest.raises(ValueError, match=r"picture 0: stream id '\.\./escaped' does not match"):
        list(vstream.detect(frames, device="cpu", sinks=[sink]))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_detector_from_a_model_config_takes_the_keyword_options_too() -> None:
    """Every field unset but the path: the config's defaults are not read back as values."""
    from vstream.config.model import ModelConfig

    config = ModelConfig(path="vstream://demo.onnx")
    detector = vstream.Detector(config, device="cpu", dtype="float32", conf=0.6)
    assert detector.config.dtype == "float32" and str(detector.model.device) == "cpu"
    with pytest.raises(ConfigError, match=r"model\.dtype"):
        vstream.Detector(config, dtype="int3")


@pytest.fixture(scope="module")
def opencv_video() -> list[np.ndarray]:
    """Every frame of the sample as OpenCV decodes them."""
    cv2 = pytest.importorskip("cv2")
    capture = cv2.VideoCapture(str(vstream.assets.SAMPLE_VIDEO))
    frames = []
    while (picture := capture.read()[1]) is not None:
        frames.append(picture)
    capture.release()
    return frames


def test_pictures_are_timed_by_their_fps_so_tracks_and_lines_count_as_the_files_do(
    opencv_video, caplog: pytest.LogCaptureFixture
) -> None:
    """Pictures were all at 0 s: the tracker's clock stood still (no lost track forgotten,
    confirmed at the second detection) and no line crossing was ever counted (0 in, 0 out
    on the sample, where the file gives 3 in, 2 out)."""
    options = {"track": True, "device": "cpu", "lines": ["gate=320,360,320,0"]}
    from_file = list(vstream.detect(SAMPLE, **options))
    with caplog.at_level("WARNING", logger="vstream"):
        from_pictures = list(vstream.detect(opencv_video, fps=25, **options))
    assert not caplog.records
    assert len(from_pictures) == len(from_file) == 200
    assert [r.pts_seconds for r in from_pictures] == pytest.approx(
        [r.pts_seconds for r in from_file]
    )
    counts = from_file[-1].to_record()["lines"]
    assert counts["gate"]["in"] and from_pictures[-1].to_record()["lines"] == counts
    with caplog.at_level("WARNING", logger="vstream"):
        untimed = list(vstream.detect(opencv_video[:10], **options))
    assert [r.pts_seconds for r in untimed] == pytest.approx([i / 30 for i in range(10)])
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith("the pictures have no time: taken at 30 fps (give detect() their fps=")
    with pytest.raises(ConfigError, match=r"fps: must be in \(0, 1000\], got 0"):
        vstream.detect(opencv_video, fps=0)


def test_a_script_that_leaves_the_loop_early_without_closing_it_exits_cleanly() -> None:
    """The pipeline's threads ran on into the interpreter's exit, which tore ONNX Runtime
    down under a run: "terminate called without an active exception", SIGABRT (134)."""
    import subprocess
    import sys

    code = (
        "import itertools, vstream\n"
        "results = vstream.detect('vstream://sample.mp4', device='cpu')\n"
        "print(sum(1 for _ in itertools.islice(results, 2)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG
    )
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr
    assert "terminate" not in done.stderr


def test_a_script_that_never_stops_its_engine_exits_cleanly_with_its_records(
    tmp_path: Path,
) -> None:
    """The same for ``vstream.Engine``: SIGABRT at exit, and the records its sink held lost.
    Stopped at exit, every record of a frame processed is in the file."""
    import subprocess
    import sys

    config = tmp_path / "p.yaml"
    config.write_text(
        "pipelines:\n  - name: main\n    model: {path: vstream://demo.onnx}\n"
        "    runtime: {device: cpu}\n"
        "    sources: [{id: cam, uri: vstream://sample.mp4}]\n"
        f"    sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]\n"
    )
    code = (
        "import vstream\n"
        f"engine = vstream.Engine(vstream.load_config({str(config)!r}))\n"
        "engine.start()\n"
        "while engine.stream('cam').frames_processed < 5:\n"
        "    engine.stopping.wait(0.05)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG
    )
    assert done.returncode == 0, done.stderr
    frames = [
        json.loads(line)["frame"] for line in (tmp_path / "out.jsonl").read_text().splitlines()
    ]
    assert len(frames) >= 5 and frames == list(range(len(frames)))
