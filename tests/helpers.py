"""Test helpers: running the real CLI and generating small videos."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import av
import numpy as np

if TYPE_CHECKING:
    from vstream.frame import Frame, PixelFormat


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_cli(
    *args: str | Path,
    timeout: float = 300,
    limits: Mapping[int, int] | None = None,
    cwd: Path | None = None,
) -> CliResult:
    """Run ``python -m vstream`` as a user would, bounded in time (and by ``limits``,
    see :func:`rlimited`); in ``cwd`` if given, this checkout's package still first."""
    env = None
    if cwd is not None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "vstream", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=rlimited(limits),
        cwd=cwd,
        env=env,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def rlimited(limits: Mapping[int, int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` setting resource limits of a child (``{resource.RLIMIT_AS: bytes}``),
    so that an input that would take gigabytes or minutes fails there, not on the machine."""
    if not limits:
        return None

    def bound() -> None:
        for which, value in limits.items():
            resource.setrlimit(which, (value, value))

    return bound


def write_video(
    path: Path,
    frames: int = 30,
    width: int = 320,
    height: int = 240,
    codec: str = "libx264",
    fps: int = 25,
    options: dict[str, str] | None = None,
    *,
    pix_fmt: str = "yuv420p",
    colorspace: int | None = None,
    gop: int | None = None,
    b_frames: int | None = None,
    codec_options: dict[str, str] | None = None,
) -> Path:
    """Encode a moving gradient with PyAV; every frame differs from the next.

    ``pix_fmt`` ``yuvj420p`` makes a full-range stream (as many IP cameras send);
    ``colorspace`` tags the stream's matrix (FFmpeg's code: 1 is BT.709); ``gop``
    puts a key frame every ``gop`` frames (something for a seek to land on);
    ``b_frames`` caps the B-frames in a row (0: none, as most cameras send);
    ``codec_options`` go to the encoder (``{"x265-params": ...}``).
    """
    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w", options=options or {}) as container:
        stream = container.add_stream(codec, rate=fps, options=codec_options or {})
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        if colorspace is not None:
            stream.codec_context.colorspace = colorspace
        if gop is not None:
            stream.codec_context.gop_size = gop
        if b_frames is not None:
            stream.codec_context.max_b_frames = b_frames
        for i in range(frames):
            rgb = np.stack(
                [
                    (xx * 255 // width + 8 * i) % 256,
                    (yy * 255 // height) % 256,
                    np.full_like(xx, (40 * i) % 256),
                ],
                axis=-1,
            ).astype(np.uint8)
            picture = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=pix_fmt)
            for packet in stream.encode(picture):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_10bit(path: Path, frames: int = 6, width: int = 160, height: int = 120) -> Path:
    """A 10-bit HEVC clip (Main 10, yuv420p10le), which NVDEC would output as P016."""
    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(
            "libx265", rate=25, options={"x265-params": "log-level=error"}
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p10le"
        for i in range(frames):
            rgb = np.stack(
                [(xx * 2 + 9 * i) % 256, (yy * 2) % 256, np.full_like(xx, 30 * i % 256)], -1
            ).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_timed_video(
    path: Path,
    pts_ms: list[int],
    width: int = 160,
    height: int = 120,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
) -> Path:
    """Encode frames at the given time stamps (milliseconds): variable frame rate when uneven."""
    from fractions import Fraction

    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.codec_context.time_base = Fraction(1, 1000)
        for i, pts in enumerate(pts_ms):
            rgb = np.stack(
                [(xx + 9 * i) % 256, (yy + 5 * i) % 256, np.full_like(xx, (31 * i) % 256)], axis=-1
            ).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = pts, Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def ffprobe_frame_count(path: Path) -> int:
    """Frames FFmpeg's own tool decodes from the first video stream (``-count_frames``)."""
    done = subprocess.run(
        [
            "ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
            "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", str(path),
        ],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    # MPEG-TS lists the stream once more under its program: the first line is the stream's.
    return int(done.stdout.split()[0].strip(","))


def tiny_detector(
    path: Path, classes: tuple[str, ...] = ("a", "b"), centres: tuple[int, ...] = (100,)
) -> Path:
    """A YOLOv8-layout ONNX model (320x320 input) that finds one box in every frame.

    The box is centred at (100, 100) of the model input, 40 pixels wide, with
    score 0.9 for class 0: enough to check that records carry detections.
    ``centres``: one such box per value, centred at (value, value), apart.
    """
    from onnx_models import constant_output_model

    output = np.zeros((1, 4 + len(classes), 16), np.float32)
    for slot, centre in enumerate(centres):
        output[0, :5, slot] = [centre, centre, 40, 40, 0.9]
    names = str(dict(enumerate(classes)))
    return constant_output_model(path, output, metadata={"names": names})


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def frames_by_stream(path: Path) -> dict[str, list[int]]:
    """The frame numbers of a JSON Lines records file, per stream, in the order written.

    Only complete lines count: a daemon still running may be halfway through writing
    the last one (seen: a record cut after 167 characters while a test polled)."""
    found: dict[str, list[int]] = {}
    text = path.read_text()
    for line in text[: text.rfind("\n") + 1].splitlines():
        record = json.loads(line)
        found.setdefault(record["stream"], []).append(record["frame"])
    return found


HANG = 120.0
"""Seconds a test waits for a thread, worker or process before it calls it a hang: far beyond
what any takes on a loaded machine, so only a real hang fails."""


def packet_times(path: Path) -> list[float]:
    """The time stamps (seconds) of the video's packets in the order PyAV reads them."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [float(p.pts * p.time_base) for p in container.demux(stream) if p.size]


def decoding_lags(decoder: Any, path: Path, keep: list | None = None) -> list[int]:
    """Each picture's lag as ``decoder`` (open on ``path``) hands it out: the packets read
    after its own before it came out, its own found by its time stamp in PyAV's reading
    order. Pictures handed out by the end of the stream are left out (nothing more was
    coming); ``keep`` collects every picture. Closes the decoder."""
    place = {pts: i for i, pts in enumerate(packet_times(path), start=1)}
    reads = 0
    read_packets = decoder.demuxer.packets

    def counted() -> Any:
        nonlocal reads
        for packet in read_packets():
            reads += packet.size > 0
            yield packet

    decoder.demuxer.packets = counted
    lags = []
    try:
        for picture in decoder.pictures():
            if keep is not None:
                keep.append(picture)
            if reads < len(place):
                lags.append(reads - place[picture.pts_seconds])
    finally:
        decoder.close()
    return lags


OPEN_GOP = {"x265-params": "open-gop=1:scenecut=0:bframes=3:log-level=error"}
"""``codec_options`` of libx265 for key frames that are CRA pictures with leading pictures
after them (decoded after, shown before; the RASL among them refer to the group before),
as broadcast encoders and some cameras send."""


def joined_between_key_frames(whole: Path, joined: Path, after: int) -> Path:
    """``whole``'s packets from the ``after``-th on (in read order), as MPEG-TS: what a camera
    joined between key frames sends (parameter sets only in front of its key frames)."""
    with av.open(str(whole)) as source, av.open(str(joined), "w", format="mpegts") as output:
        copy = output.add_stream_from_template(source.streams.video[0])
        for packet in [p for p in source.demux(video=0) if p.size][after:]:
            packet.stream = copy
            output.mux(packet)
    return joined


def key_frames(path: Path) -> set[float]:
    """The time stamps of the key frames of ``path``, as its container flags them."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            float(p.pts * p.time_base) for p in container.demux(stream) if p.size and p.is_keyframe
        }


def resumes(read: list[float], decoded: set[float]) -> list[float]:
    """The packets decoding started again at: decoded after packets skipped, of those
    read (time stamps, in the order read). A packet skipped that comes before the last one
    decoded (a B-frame, a key frame's leading picture) is no gap: decoding went on."""
    found, gap, last = [], False, -float("inf")
    for t in read:
        if t not in decoded:
            gap = gap or t > last
        else:
            if gap:
                found.append(t)
            gap, last = False, t
    return found


def slow_decoding(monkeypatch: Any, seconds: float) -> None:
    """The CPU decoder takes ``seconds`` more for every picture: a stream decoded slower
    than its camera. ``monkeypatch`` (pytest's) undoes it."""
    from vstream.decoders.cpu import PyAVDecoder

    picture = PyAVDecoder._picture

    def slow(self: PyAVDecoder, decoded: Any) -> Any:
        time.sleep(seconds)
        return picture(self, decoded)

    monkeypatch.setattr(PyAVDecoder, "_picture", slow)


class SlowReader:
    """The demuxer's clock (``demux.time``) for a stream read slower than its camera: each
    packet read costs ``decode_seconds`` after a decoded one and 1 ms after a skipped one
    (the decision recorded from ``CatchUp.skip``, wrapped), so the stream falls behind as
    it would and catches up as skipping lets it. ``monkeypatch`` undoes both."""

    def __init__(self, monkeypatch: Any, decode_seconds: float) -> None:
        from vstream.decoders import demux
        from vstream.decoders.backlog import CatchUp

        self.now, self.skipping, self.decode_seconds = 1000.0, False, decode_seconds
        real = CatchUp.skip

        def skip(catch_up: CatchUp, pts: float | None, behind: float, key: bool) -> bool:
            self.skipping = real(catch_up, pts, behind, key)
            return self.skipping

        monkeypatch.setattr(CatchUp, "skip", skip)
        monkeypatch.setattr(
            demux, "time", SimpleNamespace(time=self.time, monotonic=time.monotonic)
        )

    def time(self) -> float:
        self.now += 0.001 if self.skipping else self.decode_seconds
        return self.now


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    """``condition()``'s first true value, asked every 50 ms; fails naming ``what`` after
    ``timeout`` seconds (every wait of a test is bounded; the default only catches a hang,
    a loaded machine never comes near it)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.05)
    return value


def eventually(condition: Callable[[], Any], timeout: float = 30.0) -> bool:
    """Whether ``condition()`` turns true within ``timeout`` seconds (asked every 20 ms):
    ``assert eventually(...)``, or a wait whose failure the test reports itself."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class ManualClock:
    """A stand-in for a module's ``time``: ``monotonic()`` moves only by :meth:`advance`,
    everything else is the real module's. Set it as that one module's ``time`` (not the
    time module's ``monotonic``, which every other thread also reads)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class RtspServer:
    """tests/rtsp_server.py (GStreamer, under Debian's python3) as a context manager.

    The server is always stopped on exit, whatever the test did to it;
    :meth:`kill` and :meth:`start` simulate a camera that dies and comes back
    on the same port, :meth:`pause` and :meth:`resume` one that hangs.
    """

    SCRIPT = Path(__file__).with_name("rtsp_server.py")

    def __init__(self, port: int | None = None, *extra: str) -> None:
        self.port = port or free_port()
        self.extra = extra
        self.process: subprocess.Popen[str] | None = None

    def url(self, userinfo: str = "") -> str:
        return f"rtsp://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}/test"

    def start(self, timeout: float = 15.0) -> RtspServer:
        import select

        self.process = subprocess.Popen(
            ["/usr/bin/python3", str(self.SCRIPT), "--port", str(self.port), *self.extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline().strip() if ready else ""
        if line != "ready":
            self.kill()
            raise RuntimeError(f"the RTSP server did not start on port {self.port}")
        return self

    def kill(self) -> None:
        import signal

        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def pause(self) -> None:
        import signal

        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        import signal

        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def __enter__(self) -> RtspServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def model_session(path: Path | str, **options: object):
    """A ModelSession from the same keyword options a Detector takes; one buffer unless asked."""
    from vstream.config.detector_options import split_options
    from vstream.inference.session import ModelSession

    options.setdefault("in_flight", 1)
    model, _, runtime = split_options(path, options)
    return ModelSession(model, runtime)


def bucket_sessions(engine, buckets: int) -> list:
    """The ONNX Runtime sessions of ``engine``'s buckets, checked to be one per bucket (and
    ``buckets`` of them), shared by every buffer, the largest being ``engine.session``."""
    first, *others = engine.buffers
    sessions = [b.session for b in first.buckets]
    assert len({id(s) for s in sessions}) == len(sessions) == buckets, "a session per bucket"
    for buffer in others:
        assert [b.session for b in buffer.buckets] == sessions, "the buffers share them"
    assert first.largest.session is engine.session
    return sessions


def as_tensor_frame(frame: Frame, pixel_format: PixelFormat) -> Frame:
    """A CPU-decoded frame's picture as a tensor frame laid out as ``pixel_format`` says: NV12
    as NVDEC hands it, I420, or RGB as FFmpeg converts it (its own full-size picture)."""
    import torch  # here: the helpers serve tests that never import torch

    from vstream.frame import Frame

    picture = frame.picture.frame  # type: ignore[union-attr]
    data = torch.from_numpy(picture.to_ndarray(format=pixel_format.value))
    return Frame(data, pixel_format, frame.width, frame.height, colour=frame.colour)


def api_client(url: str, **options: Any) -> Any:
    """An HTTP client for a daemon that lives through a whole module: a new connection per
    request. The server closes a connection idle for ``idle_timeout_seconds`` (5 s); a
    client that reuses one at that moment gets "Server disconnected without sending a
    response" (seen once, on a loaded machine), and httpx retries no POST."""
    import httpx

    no_reuse = httpx.Limits(max_keepalive_connections=0)
    return httpx.Client(base_url=url, limits=no_reuse, **options)
