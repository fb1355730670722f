"""The annotated-video writer: every frame at the source's size and timing, boxes where the
records say, drop/block policies, failures that are logged once and counted, atomic files."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import torch
from helpers import ffprobe_frame_count, write_timed_video, write_video

from vstream.annotate import Annotator, class_colour
from vstream.config.sinks import VideoSinkConfig
from vstream.results import Detection, Detections, FrameResult
from vstream.sinks.video import encoders, nvenc
from vstream.sinks.video.container import VideoWriteError, partial_path
from vstream.sinks.video.encoders import resolve_encoder
from vstream.sinks.video.writer import VideoWriter
from vstream.sources import VideoFileSource

WAIT = 60.0
"""Upper bound for waiting on an event that must come: a hang fails the test, never a slow box."""


def probe(path: Path) -> dict[str, str]:
    done = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "stream=codec_name,width,height,pix_fmt,avg_frame_rate", "-of", "default=nw=1", str(path)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in done.stdout.split())


def decoded(path: Path) -> list[tuple[float, np.ndarray]]:
    """Every frame of ``path`` as (time stamp in seconds, RGB array)."""
    with av.open(str(path)) as container:
        return [
            (float(frame.pts * frame.time_base), frame.to_ndarray(format="rgb24"))
            for frame in container.decode(video=0)
        ]


def moving_box(index: int) -> Detection:
    return Detection((40.0 + 4 * index, 50.0, 140.0 + 4 * index, 150.0), 0.9, 3, "cross")


def annotate_file(source: Path, output: Path, boxes: bool = True, **options: Any) -> VideoWriter:
    """Read ``source``, draw a moving box on every frame, write ``output``; the closed writer."""
    annotator = Annotator()
    with VideoFileSource(source) as frames:
        writer = VideoWriter(output, frames.info.width, frames.info.height, frames.fps, **options)
        with writer:
            for frame in frames:
                dets = Detections.from_detections([moving_box(frame.index)] if boxes else [])
                result = FrameResult(
                    frame.stream_id, frame.index, frame.pts_seconds, frame.width, frame.height, dets
                )
                assert writer.write(annotator.annotate(frame, result, fps=25.0), frame.pts_seconds)
    return writer


def rgb(value: int = 90, width: int = 64, height: int = 48) -> torch.Tensor:
    return torch.full((height, width, 3), value, dtype=torch.uint8)


class GatedWriter(VideoWriter):
    """Holds the encoder at frame ``gate_at`` until :attr:`release` is set: a slow encoder."""

    def __init__(self, *args: Any, gate_at: int = 0, **kwargs: Any) -> None:
        self.gate_at = gate_at
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        super().__init__(*args, **kwargs)

    def _encode_one(self, backend: Any, item: Any, ticks: int) -> None:
        if self.calls == self.gate_at:
            self.entered.set()
            assert self.release.wait(WAIT)
        self.calls += 1
        super()._encode_one(backend, item, ticks)


class DiskFullWriter(VideoWriter):
    """The disk fills up at frame ``fail_at``."""

    def __init__(self, *args: Any, fail_at: int, **kwargs: Any) -> None:
        self.fail_at = fail_at
        self.calls = 0
        super().__init__(*args, **kwargs)

    def _encode_one(self, backend: Any, item: Any, ticks: int) -> None:
        self.calls += 1
        if self.calls > self.fail_at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.partial_path))
        super()._encode_one(backend, item, ticks)


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "vstream.sinks.video.writer" and r.levelno >= logging.ERROR
    ]


# -- what the video holds ---------------------------------------------------------------------


def test_annotated_video_has_every_frame_at_the_source_size(tmp_path: Path) -> None:
    source = write_video(tmp_path / "in.mp4", frames=30, width=320, height=240, fps=25)
    output = tmp_path / "out.mp4"
    writer = annotate_file(source, output)
    assert writer.stats.frames_written == 30
    assert writer.stats.frames_dropped == writer.stats.frames_failed == writer.stats.failures == 0
    assert ffprobe_frame_count(output) == ffprobe_frame_count(source) == 30
    info = probe(output)
    assert (info["codec_name"], info["width"], info["height"]) == ("h264", "320", "240")
    assert (info["pix_fmt"], info["avg_frame_rate"]) == ("yuv420p", "25/1")
    assert not partial_path(output).exists()


def test_variable_frame_rate_keeps_its_time_stamps(tmp_path: Path) -> None:
    pts_ms = [0, 40, 80, 200, 240, 250, 400, 1000, 1040]
    source = write_timed_video(tmp_path / "vfr.mp4", pts_ms)
    output = tmp_path / "out.mkv"
    annotate_file(source, output, boxes=False)
    assert ffprobe_frame_count(output) == len(pts_ms)
    times = [t for t, _ in decoded(output)]
    assert times == pytest.approx([ms / 1000 for ms in pts_ms], abs=0.0015)


def test_boxes_appear_where_the_records_say(tmp_path: Path) -> None:
    source = write_video(tmp_path / "in.mp4", frames=12, width=320, height=240)
    output = tmp_path / "out.mp4"
    annotate_file(source, output)
    before, after = decoded(source), decoded(output)
    assert len(before) == len(after) == 12
    colour = np.array(class_colour(3), float)
    for index, ((_, src), (_, out)) in enumerate(zip(before, after, strict=True)):
        x1, y1, x2, y2 = (int(v) for v in moving_box(index).bbox)
        src, out = src.astype(float), out.astype(float)

        def loss(rows: slice, cols: slice, src: np.ndarray = src, out: np.ndarray = out) -> float:
            return float(np.abs(out[rows, cols] - src[rows, cols]).mean())

        # Along each drawn edge: the class colour (up to H.264's loss on a 2-pixel line) ...
        for edge in (
            out[y1 : y1 + 2, x1 + 6 : x2 - 6],
            out[y2 - 2 : y2, x1 + 6 : x2 - 6],
            out[y1 + 6 : y2 - 6, x1 : x1 + 2],
            out[y1 + 6 : y2 - 6, x2 - 2 : x2],
        ):
            assert np.abs(edge - colour).mean() < 35, index
        # ... and a few pixels beside the edges, inside the box and far from it, the source.
        assert loss(slice(y1 + 6, y2 - 6), slice(x1 - 6, x1 - 3)) < 8, index
        assert loss(slice(y1 + 6, y2 - 6), slice(x2 + 3, x2 + 6)) < 8, index
        assert loss(slice(y2 + 3, y2 + 6), slice(x1 + 6, x2 - 6)) < 8, index
        assert loss(slice(y1 + 8, y2 - 8), slice(x1 + 8, x2 - 8)) < 6, index
        assert loss(slice(180, 236), slice(0, 320)) < 6, index


# -- policies ---------------------------------------------------------------------------------


def test_drop_policy_counts_drops_and_never_waits(tmp_path: Path) -> None:
    output = tmp_path / "out.mp4"
    writer = GatedWriter(output, 64, 48, 25, policy="drop", queue_frames=2, encoder="cpu")
    assert writer.write(rgb(0), 0.0)
    assert writer.entered.wait(WAIT)  # the encoder holds frame 0: it is "slow"
    accepted = [writer.write(rgb(10 * i), i / 25) for i in range(1, 10)]
    assert accepted == [True, True] + [False] * 7  # two fit in the queue, the rest are dropped
    assert writer.stats.frames_dropped == 7
    writer.release.set()
    stats = writer.close()
    assert (stats.frames_written, stats.frames_dropped, stats.frames_failed) == (3, 7, 0)
    assert ffprobe_frame_count(output) == 3


def test_block_policy_waits_and_keeps_every_frame(tmp_path: Path) -> None:
    output = tmp_path / "out.mp4"
    writer = GatedWriter(output, 64, 48, 25, policy="block", queue_frames=2, encoder="cpu")
    done = [threading.Event() for _ in range(6)]

    def produce() -> None:
        for i in range(6):
            writer.write(rgb(10 * i), i / 25)
            done[i].set()

    producer = threading.Thread(target=produce)
    producer.start()
    assert writer.entered.wait(WAIT)
    assert done[2].wait(WAIT)  # frame 0 in the encoder, 1 and 2 in the queue ...
    assert not done[3].wait(0.3)  # ... so frame 3 waits for room
    writer.release.set()
    producer.join(WAIT)
    assert not producer.is_alive()
    stats = writer.close()
    assert (stats.frames_written, stats.frames_dropped, stats.frames_failed) == (6, 0, 0)
    assert ffprobe_frame_count(output) == 6


# -- failures ---------------------------------------------------------------------------------


def test_unwritable_directory_gives_one_clear_line_and_a_counted_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    output = blocker / "out.mp4"
    caplog.set_level(logging.INFO, logger="vstream.sinks.video")
    writer = VideoWriter(output, 64, 48, 25, encoder="cpu")
    for i in range(5):
        writer.write(rgb(), i / 25)  # never raises: the caller's thread goes on
    stats = writer.close()
    assert stats.failures == 1
    assert stats.frames_failed == 5 and stats.frames_written == 0
    lines = error_lines(caplog)
    assert len(lines) == 1 and "\n" not in lines[0]
    assert str(output) in lines[0] and "Not a directory" in lines[0]
    assert isinstance(writer.error, VideoWriteError)
    assert not writer.write(rgb(), 1.0)  # refused, and counted
    assert writer.stats.frames_failed == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-directory"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        writer = VideoWriter(locked / "out.mp4", 64, 48, 25, encoder="cpu")
        writer.write(rgb(), 0.0)
        stats = writer.close()
        assert stats.failures == 1 and stats.frames_failed == 1
        assert len(error_lines(caplog)) == 1
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def test_full_disk_mid_video_discards_the_partial_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out.mp4"
    writer = DiskFullWriter(output, 64, 48, 25, encoder="cpu", fail_at=4)
    for i in range(10):
        writer.write(rgb(i), i / 25)
    stats = writer.close()
    assert stats.failures == 1
    assert stats.frames_written == 0 and stats.frames_failed == 10  # 4 encoded, then discarded
    lines = error_lines(caplog)
    assert len(lines) == 1 and "No space left on device" in lines[0] and "\n" not in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_frames_are_skipped_below_min_free_bytes_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A video must not take the disk's last space; no disk has 2**50 bytes free."""
    caplog.set_level(logging.INFO, logger="vstream.sinks.video")
    output = tmp_path / "out.mkv"
    writer = VideoWriter(output, 64, 48, 10, encoder="cpu", min_free_bytes=2**50)
    for i in range(5):
        writer.write(rgb(i), i / 10)
    deadline = time.monotonic() + WAIT
    while writer.stats.frames_skipped < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    writer.min_free_bytes = 1  # space is freed
    for i in range(5, 10):
        writer.write(rgb(i), i / 10)
    stats = writer.close()
    assert (stats.frames_skipped, stats.frames_written, stats.failures) == (5, 5, 0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "below min_free_bytes" in warnings[0], warnings
    assert "writing frames (5 skipped so far)" in caplog.text
    times = [t for t, _ in decoded(output)]
    assert times == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9], abs=1e-3), "the gap shows"


def test_the_partial_file_never_has_the_final_name(tmp_path: Path) -> None:
    output = tmp_path / "out.mp4"
    writer = GatedWriter(output, 64, 48, 25, encoder="cpu", gate_at=5)
    for i in range(8):
        writer.write(rgb(20 * i), i / 25)
    assert writer.entered.wait(WAIT)  # half-way through: like a crash now
    assert partial_path(output).exists() and partial_path(output).parent == tmp_path
    assert not output.exists()
    writer.release.set()
    writer.close()
    assert output.exists() and not partial_path(output).exists()
    assert ffprobe_frame_count(output) == 8


def test_bad_arguments_fail_at_once() -> None:
    with pytest.raises(VideoWriteError, match="unsupported file extension"):
        VideoWriter("out.avi2", 64, 48, 25)
    with pytest.raises(ValueError, match="policy"):
        VideoWriter("out.mp4", 64, 48, 25, policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fps"):
        VideoWriter("out.mp4", 64, 48, 0)
    with pytest.raises(ValueError, match="preset"):
        VideoWriter("out.mp4", 64, 48, 25, preset="warp")


WRITER_ARGUMENTS = {
    "encoder": "encoder",
    "overflow": "policy",
    "preset": "preset",
    "crf": "crf",
    "queue_frames": "queue_frames",
}
"""The ``video`` sink's options that :class:`VideoWriter` takes too, and the argument's name."""


def allowed_and_refused(option: str) -> tuple[list[Any], list[Any]]:
    """From the published schema: the values a pipelines file may give, and some it may not."""
    schema = VideoSinkConfig.model_json_schema()["properties"][option]
    schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
    if "enum" in schema:
        return schema["enum"], ["warp", "slow", "placebo"]
    low, high = schema["minimum"], schema["maximum"]
    return [low, high], [low - 1, high + 1]


def refusal(tmp_path: Path, argument: str, value: Any) -> str | None:
    """Why the writer refuses ``argument=value`` as a value (None: it takes it)."""
    options = {"encoder": "cpu", argument: value}
    try:
        writer = VideoWriter(tmp_path / "out.mp4", 64, 48, 25, **options)
    except VideoWriteError:  # nvenc on a machine without NVENC: a value known, not usable here
        return None
    except ValueError as exc:
        return str(exc)
    writer.close()
    return None


@pytest.mark.parametrize(("option", "argument"), WRITER_ARGUMENTS.items())
def test_a_writer_takes_exactly_the_values_its_sink_option_allows(
    tmp_path: Path, option: str, argument: str
) -> None:
    """The config defines each option once: the writer neither refuses a value a pipelines
    file may give nor takes one that the file would be refused for."""
    allowed, refused = allowed_and_refused(option)
    assert [v for v in allowed if refusal(tmp_path, argument, v) is not None] == []
    for value in refused:
        assert argument in (refusal(tmp_path, argument, value) or "taken"), value


def test_close_is_idempotent_and_writes_after_it_are_refused(tmp_path: Path) -> None:
    writer = VideoWriter(tmp_path / "out.mp4", 64, 48, 25, encoder="cpu")
    writer.write(rgb(), 0.0)
    first = writer.close()
    assert writer.close() == first
    assert not writer.write(rgb(), 1.0)
    assert writer.stats.frames_failed == 1 and writer.stats.frames_written == 1
    with pytest.raises(ValueError, match="RGB uint8"):
        writer.write(torch.zeros((48, 64), dtype=torch.uint8))


def test_a_stream_added_again_keeps_its_earlier_video(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream removed and added again under its id (DELETE, then POST /streams) writes a
    second video beside the first, said once; closing the second replaced the first."""
    from vstream.config import parse_data
    from vstream.engine.outputs import FrameOutputs
    from vstream.frame import Frame, PixelFormat

    write_video(tmp_path / "door.mp4", frames=2, width=64, height=48)
    config = parse_data(
        {
            "pipelines": [
                {
                    "name": "p",
                    "model": {"path": "vstream://demo.onnx"},
                    "runtime": {"device": "cpu"},
                    "sources": [{"id": "door", "uri": str(tmp_path / "door.mp4")}],
                    "sinks": [{"type": "video", "path": "videos/{stream}.mp4", "encoder": "cpu"}],
                }
            ]
        },
        base_dir=tmp_path,
    )
    outputs = FrameOutputs(config.pipelines[0], torch.device("cpu"), {0: "person"})

    def session(frames: int) -> None:
        for i in range(frames):
            picture = torch.full((48, 64, 3), 10 * i, dtype=torch.uint8)
            frame = Frame(picture, PixelFormat.RGB24, 64, 48, "door", i, i / 25)
            outputs.deliver(frame, FrameResult("door", i, i / 25, 64, 48, Detections.empty()), 25)

    session(20)
    outputs.remove_stream("door")
    # The metrics' counters: a removed stream's frames stay counted (a fall would read as
    # a reset to Prometheus, which would count the other streams' frames again).
    assert outputs.stats()["video_frames_written"] == 20
    session(5)
    outputs.close()
    assert outputs.stats()["video_frames_written"] == 25
    videos = tmp_path / "videos"
    assert sorted(p.name for p in videos.iterdir()) == ["door-2.mp4", "door.mp4"]
    assert ffprobe_frame_count(videos / "door.mp4") == 20
    assert ffprobe_frame_count(videos / "door-2.mp4") == 5
    assert "was written already in this run; this one goes to" in caplog.text


def test_no_frames_no_file(tmp_path: Path) -> None:
    stats = VideoWriter(tmp_path / "out.mp4", 64, 48, 25, encoder="cpu").close()
    assert stats.frames_written == 0 and stats.failures == 0
    assert list(tmp_path.iterdir()) == []


def test_odd_and_changing_sizes(tmp_path: Path) -> None:
    output = tmp_path / "out.mp4"
    with VideoWriter(output, 65, 49, 25, encoder="cpu") as writer:
        writer.write(rgb(width=65, height=49), 0.0)
        writer.write(rgb(width=130, height=98), 0.04)  # the camera changed its size: resized
    assert writer.stats.frames_written == 2
    info = probe(output)
    assert (info["width"], info["height"]) == ("64", "48")


def test_frames_without_time_stamps_follow_the_frame_rate(tmp_path: Path) -> None:
    output = tmp_path / "out.mkv"
    with VideoWriter(output, 64, 48, 10, encoder="cpu") as writer:
        for value in range(5):
            writer.write(rgb(value))
    assert [t for t, _ in decoded(output)] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4], abs=1e-3)


def test_time_going_back_continues_the_video(tmp_path: Path) -> None:
    output = tmp_path / "out.mkv"
    with VideoWriter(output, 64, 48, 10, encoder="cpu") as writer:
        for t in (5.0, 5.1, 5.2, 0.0, 0.1, 0.2):  # the camera came back with its clock at zero
            writer.write(rgb(), t)
    times = [t for t, _ in decoded(output)]
    assert times == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], abs=1e-3)


# -- encoder choice and the NVENC path --------------------------------------------------------


def test_encoder_choice(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    assert resolve_encoder("cpu")[0] == "cpu"
    assert resolve_encoder("auto", "cpu")[0] == "cpu"
    if nvenc.nvenc_unavailable(0) is not None:
        assert resolve_encoder("auto", "cuda")[0] == "cpu"
        with pytest.raises(VideoWriteError, match="nvenc encoder cannot be used"):
            resolve_encoder("nvenc", "cuda")
    encoders._choices_logged.clear()
    caplog.set_level(logging.INFO, logger="vstream.sinks.video")
    for name in ("a.mp4", "b.mp4"):
        VideoWriter(tmp_path / name, 64, 48, 25).close()
    chosen = [r.getMessage() for r in caplog.records if "encoder libx264" in r.getMessage()]
    assert len(chosen) == 1  # said once, however many writers


class FakeNvencEncoder:
    """PyNvVideoCodec's encoder as documented (``Encode`` / ``EndEncode``), backed by libx264.

    Takes NV12 like NVENC and, like NVENC, hands back Annex B a few frames late.
    """

    def __init__(self, width: int, height: int, fmt: str, cpu_input: bool, **settings: Any) -> None:
        assert fmt == "NV12" and cpu_input  # the test runs without a GPU
        self.settings = settings
        self.width, self.height = width, height
        context = av.CodecContext.create("libx264", "w")
        context.width, context.height, context.pix_fmt = width, height, "yuv420p"
        context.time_base, context.framerate = Fraction(1, 25), 25
        context.options = {"bf": settings["bf"], "preset": "medium", "rc-lookahead": "3"}
        self.context = context
        self.count = 0

    def _bytes(self, packets: list[Any]) -> bytes:
        return b"".join(bytes(p) for p in packets)

    def Encode(self, data: np.ndarray) -> bytes:
        assert data.ndim == 1 and data.size == self.width * self.height * 3 // 2
        nv12 = data.reshape(self.height * 3 // 2, self.width)
        frame = av.VideoFrame.from_ndarray(nv12, format="nv12")
        frame.pts = self.count
        self.count += 1
        return self._bytes(self.context.encode(frame))

    def EndEncode(self) -> bytes:
        return self._bytes(self.context.encode(None))


def test_nvenc_path_with_a_stand_in_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NVENC backend's NV12 input, late bitstream, time stamps and muxing, without a GPU."""
    made: list[FakeNvencEncoder] = []

    class FakeModule:
        @staticmethod
        def CreateEncoder(*args: Any, **kwargs: Any) -> FakeNvencEncoder:
            made.append(FakeNvencEncoder(*args, **kwargs))
            return made[-1]

    monkeypatch.setattr(nvenc, "nvenc_unavailable", lambda gpu=0: None)
    monkeypatch.setattr(nvenc, "_import_nvc", lambda: FakeModule)
    output = tmp_path / "out.mp4"
    pts = [0.0, 0.04, 0.08, 0.2, 0.24, 0.3, 0.5, 0.54, 0.58, 0.62]
    with VideoWriter(output, 64, 48, 25, encoder="nvenc", device="cpu") as writer:
        assert writer.encoder == "nvenc"
        for i, t in enumerate(pts):
            writer.write(rgb(20 * i), t)
    assert writer.stats.frames_written == len(pts) and writer.stats.failures == 0
    assert made[0].settings["codec"] == "h264" and made[0].settings["bf"] == "0"
    assert ffprobe_frame_count(output) == len(pts)
    frames = decoded(output)
    assert [t for t, _ in frames] == pytest.approx(pts, abs=1e-3)
    # The pictures are the ones written, in order (grey levels 0, 20, 40, ...).
    levels = [float(picture.mean()) for _, picture in frames]
    assert levels == pytest.approx([20.0 * i for i in range(len(pts))], abs=3)


# -- CUDA -------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_pictures_are_encoded(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    output = tmp_path / "out.mp4"
    with VideoWriter(output, 64, 48, 25, device="cuda") as writer:
        for i in range(10):
            writer.write(rgb(20 * i).cuda(), i / 25)
    assert writer.stats.frames_written == 10
    # FFmpeg (through PyAV) decodes ten pictures at the written levels; PyAV, not ffprobe, so the
    # test runs on GPU machines that have no FFmpeg tools (the H100 it ran on had none).
    levels = [float(picture.mean()) for _, picture in decoded(output)]
    assert levels == pytest.approx([20.0 * i for i in range(10)], abs=3)
