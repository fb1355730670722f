"""One contract, two decoders: the same cases on the CPU decoder and on NVDEC's adapter.

NVDEC runs here on the fake PyNvVideoCodec and the fake ``cuda:0``
(:mod:`fakes`), which hand out what the library does: the coded samples as
NV12 (a full-range stream's stay full range), in device memory. Each case
runs on both decoders and checks what the pipeline relies on: time stamps,
what the container says, the colour space (matrix and range; ``yuvj420p``
with and without ``color_range``), seeking, damaged packets, and, for live
input, the time each picture's own packet was read. Pixels are
compared as the model sees them: both decoders' frames letterboxed, the CPU's
by FFmpeg and OpenCV (the reference), NVDEC's NV12 by the device resampler.
"""

from __future__ import annotations

import errno
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import av
import numpy as np
import pytest
import torch
from fakes import fake_pynvvideocodec as fake
from fakes.fake_cuda import FakeGpu, host
from helpers import (
    OPEN_GOP,
    RtspServer,
    SlowReader,
    joined_between_key_frames,
    key_frames,
    packet_times,
    resumes,
    write_video,
)

from vstream.decoders import demux
from vstream.decoders import nvdec as nvdec_module
from vstream.decoders.backlog import Backlog
from vstream.decoders.base import Picture
from vstream.decoders.cpu import PyAVDecoder
from vstream.decoders.demux import Demuxer
from vstream.decoders.nvdec import NvdecDecoder
from vstream.errors import SourceUnavailable
from vstream.frame import ColourMatrix, ColourSpace
from vstream.preprocess import Letterboxer

DECODERS = ["cpu", "nvdec"]
CUDA = torch.device("cuda", 0)
FRAMES = 20
SIZE = 64
"""Letterbox size the pixels are compared at."""


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake ``cuda:0`` and PyNvVideoCodec; no NVDEC decoder outlives a test."""
    FakeGpu().install(monkeypatch)
    fake.install(monkeypatch)
    fake.reset()
    nvdec_module.DECODERS.clear()
    yield
    nvdec_module.DECODERS.clear()


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small clips: limited range BT.601 (the usual camera), BT.709, full range (yuvj420p),
    and a clip with a key frame every 10 frames (for seeking)."""
    folder = tmp_path_factory.mktemp("clips")
    made = {
        "limited": dict(),
        "bt709": dict(colorspace=1),
        "full range": dict(pix_fmt="yuvj420p"),
        "key frames": dict(gop=10),
    }
    return {
        name: write_video(folder / f"{i}.mp4", frames=FRAMES, width=96, height=64, **options)
        for i, (name, options) in enumerate(made.items())
    }


def open_decoder(
    kind: str, path: Path | str, low_delay: bool = False, **options: Any
) -> PyAVDecoder | NvdecDecoder:
    options["low_delay"] = low_delay
    if kind == "cpu":
        return PyAVDecoder(str(path), device=torch.device("cpu"), **options)
    return NvdecDecoder(str(path), device=CUDA, cuda_stream=0x7F00, cache=None, **options)


def decode(
    kind: str, path: Path, seek: float = 0.0, low_delay: bool = False
) -> tuple[list[Picture], int]:
    """Every picture of ``path`` (after seeking to ``seek``) and the damaged packets counted."""
    decoder = open_decoder(kind, path, low_delay)
    try:
        decoder.seek(seek)
        return list(decoder.pictures()), decoder.corrupt_packets
    finally:
        decoder.close()


def letterboxed(kind: str, pictures: list[Picture]) -> np.ndarray:
    """The model input the pictures make, ``(N, 3, SIZE, SIZE)`` in 0..1, on the host."""
    device = torch.device("cpu") if kind == "cpu" else CUDA
    inputs = torch.zeros((len(pictures), 3, SIZE, SIZE), device=device)
    letterboxer = Letterboxer(inputs)
    for slot, picture in enumerate(pictures):
        letterboxer.load(slot, picture.to_frame("0", slot, picture.pts_seconds or 0.0, 0.0))
    return host(inputs).numpy()


def reference_pts(path: Path) -> list[float]:
    with av.open(str(path)) as container:
        return [float(f.pts * f.time_base) for f in container.decode(video=0)]


def assert_same_pixels(cpu: np.ndarray, gpu: np.ndarray) -> None:
    """The letterbox of both decoders' frames: within one grey level everywhere, equal but for
    a few values (where OpenCV's vector code rounds a row's last columns its own way)."""
    levels = np.abs(cpu.astype(np.float64) - gpu) * 255
    assert levels.max() <= 1 + 1e-3, f"{levels.max():.1f} grey levels apart"
    assert (levels > 1e-3).mean() < 0.01


@pytest.mark.parametrize("kind", DECODERS)
def test_time_stamps_are_the_streams(kind: str, clips: dict[str, Path]) -> None:
    pictures, _ = decode(kind, clips["limited"])
    assert [p.pts_seconds for p in pictures] == pytest.approx(reference_pts(clips["limited"]))
    assert len(pictures) == FRAMES


@pytest.mark.parametrize("kind", DECODERS)
def test_stream_info_is_what_the_container_says(kind: str, clips: dict[str, Path]) -> None:
    decoder = open_decoder(kind, clips["limited"])
    try:
        info = decoder.info
    finally:
        decoder.close()
    assert (info.codec, info.width, info.height, info.fps) == ("h264", 96, 64, 25.0)
    assert info.frame_count == FRAMES
    assert info.duration_seconds == pytest.approx(FRAMES / 25)


def _range_unsignalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream whose decoder says yuvj420p and nothing of the range (the ``color_range`` the
    decoders read, cleared). FFmpeg 5's H.264 decoder always fills it for yuvj420p; other
    decoders and cameras leave it unset, and FFmpeg's converter still takes yuvj as full."""
    picture = PyAVDecoder._picture

    def unsignalled_frame(self: PyAVDecoder, decoded: av.VideoFrame) -> Picture:
        decoded.color_range = 0  # AVCOL_RANGE_UNSPECIFIED
        return picture(self, decoded)

    class UnsignalledStream(Demuxer):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            self.stream.codec_context.color_range = 0

    monkeypatch.setattr(PyAVDecoder, "_picture", unsignalled_frame)
    monkeypatch.setattr(nvdec_module, "Demuxer", UnsignalledStream)


@pytest.mark.parametrize(
    ("clip", "signalled", "expected"),
    [
        ("limited", True, ColourSpace(ColourMatrix.BT601, full_range=False)),
        ("bt709", True, ColourSpace(ColourMatrix.BT709, full_range=False)),
        ("full range", True, ColourSpace(ColourMatrix.BT601, full_range=True)),
        ("full range", False, ColourSpace(ColourMatrix.BT601, full_range=True)),
    ],
    ids=["bt601 limited", "bt709", "yuvj420p with color_range", "yuvj420p without color_range"],
)
def test_both_decoders_give_the_same_colour_and_pixels(
    clips: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    clip: str,
    signalled: bool,
    expected: ColourSpace,
) -> None:
    if not signalled:
        _range_unsignalled(monkeypatch)
    path = clips[clip]
    cpu, _ = decode("cpu", path)
    gpu, _ = decode("nvdec", path)
    assert {p.colour for p in cpu} == {p.colour for p in gpu} == {expected}
    first = slice(0, 4)
    assert_same_pixels(letterboxed("cpu", cpu[first]), letterboxed("nvdec", gpu[first]))


@pytest.mark.parametrize("kind", DECODERS)
def test_a_seek_lands_on_the_key_frame_before_it(kind: str, clips: dict[str, Path]) -> None:
    path = clips["key frames"]
    pictures, _ = decode(kind, path, seek=0.5)  # key frames at 0, 0.4, 0.8 s
    assert [p.pts_seconds for p in pictures] == pytest.approx(reference_pts(path)[10:])


def damage(clean: Path) -> Path:
    """``clean`` with 1500 random bytes in its middle (a lost stretch of a network stream)."""
    data = bytearray(clean.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 1500] = np.random.default_rng(7).bytes(1500)
    damaged = clean.with_name("damaged" + clean.suffix)
    damaged.write_bytes(bytes(data))
    return damaged


@pytest.mark.parametrize("suffix", [".ts", ".mp4"])
def test_damaged_packets_are_skipped_and_the_stream_goes_on(tmp_path: Path, suffix: str) -> None:
    """Both decoders carry on past the damage to the end, each picture once. What MPEG-TS
    flags as damaged is counted on both; what only a decoder finds is counted on the CPU
    (FFmpeg's decoder says so), while NVDEC's parser conceals it without a word."""
    clean = write_video(tmp_path / f"clip{suffix}", frames=40, width=96, height=64, gop=10)
    expected = reference_pts(clean)
    damaged = damage(clean)
    (cpu, cpu_corrupt), (gpu, gpu_corrupt) = decode("cpu", damaged), decode("nvdec", damaged)
    for pictures in cpu, gpu:
        pts = [p.pts_seconds for p in pictures]
        assert len(set(pts)) == len(pts), "each picture once"
        assert pts[:10] == pytest.approx(expected[:10]), "the pictures before the damage"
        assert 20 < len(pictures) < 40 and pts[-1] == pytest.approx(expected[-1])
    assert cpu_corrupt > 0
    assert gpu_corrupt == cpu_corrupt if suffix == ".ts" else gpu_corrupt <= cpu_corrupt
    first = slice(0, 4)
    assert_same_pixels(letterboxed("cpu", cpu[first]), letterboxed("nvdec", gpu[first]))


def test_the_fake_hands_out_a_full_range_streams_coded_samples(clips: dict[str, Path]) -> None:
    """As NVDEC does: the NV12 of a yuvj420p stream is its Y, U and V planes as coded."""
    pictures, _ = decode("nvdec", clips["full range"])
    with av.open(str(clips["full range"])) as container:
        frames = list(container.decode(video=0))
    for picture, frame in zip(pictures, frames, strict=True):
        assert frame.format.name == "yuvj420p"
        y, u, v = (
            np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:, : plane.width]
            for plane in frame.planes
        )
        nv12 = host(picture.data).numpy()
        assert np.array_equal(nv12[:64], y[:64])
        assert np.array_equal(nv12[64:, 0::2], u[:32]) and np.array_equal(nv12[64:, 1::2], v[:32])


@pytest.mark.parametrize("headers", ["in-band", "sdp-only"])
@pytest.mark.parametrize("kind", DECODERS)
def test_a_camera_decodes_with_its_parameter_sets_in_the_sdp_alone(kind: str, headers: str) -> None:
    """Some cameras send H.264's SPS and PPS in the SDP only, never in the stream. NVDEC's
    parser reads them only from the bitstream (the fake's FFmpeg decoder is given no
    extradata either): unless the decoder puts them there, not one picture comes, and
    the stream stalls and reconnects forever."""
    extra = ["--headers-in-sdp-only"] if headers == "sdp-only" else []
    with RtspServer(None, *extra) as server:
        decoder = open_decoder(
            kind,
            server.url(),
            low_delay=True,
            options={"rtsp_transport": "tcp"},
            timeout=(30.0, 30.0),
            stall_seconds=30.0,
        )
        try:
            pictures = list(itertools.islice(decoder.pictures(), 12))
        finally:
            decoder.close()
    assert len(pictures) == 12 and decoder.corrupt_packets == 0
    assert [p.width for p in pictures] == [320] * 12


@pytest.mark.parametrize("kind", DECODERS)
def test_live_pictures_carry_the_time_their_own_packet_was_read(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With B-frames a picture leaves the decoder after packets read later than its own; a
    live picture is stamped with its own packet's read time all the same (the demuxer's
    clock made a counter here, so a time is the packet's place in PyAV's reading order),
    and with the backlog measured at that packet, in presentation order, on either
    decoder. A file's pictures carry none."""
    path = write_video(tmp_path / "b.mp4", frames=FRAMES, width=64, height=48)
    read = packet_times(path)
    place = {pts: float(i) for i, pts in enumerate(read, start=1)}
    reads = itertools.count(1)
    clock = SimpleNamespace(time=lambda: float(next(reads)), monotonic=time.monotonic)
    monkeypatch.setattr(demux, "time", clock)

    pictures, _ = decode(kind, path, low_delay=True)
    assert [p.pts_seconds for p in pictures] == sorted(read)
    stamped = [p.packet.read_time for p in pictures if p.packet is not None]
    assert stamped == [place[p.pts_seconds] for p in pictures if p.pts_seconds is not None]
    assert any(later < earlier for earlier, later in itertools.pairwise(stamped)), "reordered"
    backlog = Backlog()
    behind = {pts: backlog.behind(place[pts], pts) for pts in read}
    assert [p.packet.behind_seconds for p in pictures if p.packet is not None] == [
        behind[p.pts_seconds] for p in pictures if p.pts_seconds is not None
    ]

    pictures, _ = decode(kind, path)
    assert len(pictures) == FRAMES and all(p.packet is None for p in pictures)


def test_read_times_of_pictures_never_asked_for_are_forgotten(tmp_path: Path) -> None:
    """Damage can swallow a picture, whose packet's read time is then never asked for: the
    demuxer keeps only the newest ``PACKET_STAMPS_KEPT``, so a long stream cannot grow it."""
    frames = demux.PACKET_STAMPS_KEPT + 44
    path = write_video(tmp_path / "long.mp4", frames=frames, width=16, height=16, b_frames=0)
    demuxer = Demuxer(str(path), stamp_packets=True)
    try:
        read = [p.pts for p in demuxer.packets() if p.size]
    finally:
        demuxer.close()
    assert len(read) == frames
    assert [demuxer.packet_stamp(pts) for pts in read[:44]] == [None] * 44
    kept = [demuxer.packet_stamp(pts) for pts in read[44:]]
    assert all(s is not None for s in kept) and kept == sorted(kept)
    assert demuxer.packet_stamp(read[-1]) is None, "forgotten once asked"


@pytest.mark.parametrize(
    "encoding",
    [dict(b_frames=0), dict(), dict(codec="libx265", codec_options=OPEN_GOP)],
    ids=["camera", "b-frames", "hevc-open-gop"],
)
@pytest.mark.parametrize("kind", DECODERS)
def test_a_stream_too_far_behind_skips_to_a_key_frame_and_decodes_on_cleanly(
    kind: str, encoding: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read at 60 ms a packet of a 25 frames/s stream, the stream passes its limit of 1 s
    behind again and again: the demuxer skips packets up to a key frame each time. Every
    picture decoded after a skip is the reference's own (FFmpeg decoding the whole stream):
    decoding started again at a key frame, not from a picture whose references were skipped
    (an open group's leading pictures are skipped with the rest: FFmpeg would drop its RASL
    uncounted, NVDEC's parser may decode them from the wrong references). Every packet is
    decoded or counted skipped, and the packet tap still gets every one."""
    path = write_video(tmp_path / "c.mp4", frames=150, width=64, height=48, gop=10, **encoding)
    reference = {p.pts_seconds: p for p in decode("cpu", path)[0]}
    SlowReader(monkeypatch, decode_seconds=0.06)
    tapped: list[float] = []  # every packet's time stamp, in the order read
    decoder = open_decoder(kind, path, low_delay=True, max_behind_seconds=1.0)
    decoder.demuxer.tap = SimpleNamespace(
        add=lambda packet: tapped.append(round(float(packet.pts * packet.time_base), 6))
    )
    try:
        pictures, skipped, corrupt = (
            list(decoder.pictures()),
            decoder.packets_skipped,
            decoder.corrupt_packets,
        )
    finally:
        decoder.close()
    pts = [p.pts_seconds for p in pictures]
    order = sorted(reference)
    assert pts == sorted(set(pts)) and set(pts) <= set(order)
    assert skipped > 0 and len(pictures) + skipped == 150 and corrupt == 0
    assert len(tapped) == 150
    resumed = resumes(tapped, decoded={round(t, 6) for t in pts})
    assert len(resumed) >= 2 and set(resumed) <= key_frames(path), resumed
    expected = [reference[t] for t in pts]
    if kind == "cpu":
        assert np.array_equal(letterboxed("cpu", pictures), letterboxed("cpu", expected))
    else:
        assert_same_pixels(letterboxed("cpu", expected), letterboxed("nvdec", pictures))


@pytest.mark.parametrize(
    "encoding",
    [
        dict(b_frames=0),
        dict(),
        dict(
            codec="libx265",
            codec_options={"x265-params": OPEN_GOP["x265-params"] + ":repeat-headers=1"},
        ),
    ],
    ids=["camera", "b-frames", "hevc-open-gop"],
)
@pytest.mark.parametrize("kind", DECODERS)
def test_a_stream_joined_between_key_frames_starts_at_its_first_and_counts_those_before(
    kind: str, encoding: dict[str, Any], tmp_path: Path
) -> None:
    """A camera is joined where it is, mostly between two key frames: the packets before the
    first refer to pictures never received. FFmpeg's decoder drops them without a word (and
    an open group's leading pictures after it); NVDEC's parser might show them decoded from
    nothing. Live input starts at the first key frame on both decoders instead, with those
    packets counted skipped: every picture is the reference's own (FFmpeg decoding the whole
    stream), and pictures and packets skipped add up to the packets read."""
    whole = write_video(tmp_path / "c.ts", frames=60, width=64, height=48, gop=10, **encoding)
    joined = joined_between_key_frames(whole, tmp_path / "joined.ts", after=5)
    read = packet_times(joined)
    first_key = next(t for t in read if t in key_frames(joined))
    reference = {round(p.pts_seconds, 6): p for p in decode("cpu", whole)[0]}
    tapped: list[float] = []
    decoder = open_decoder(kind, joined, low_delay=True)
    decoder.demuxer.tap = SimpleNamespace(add=lambda packet: tapped.append(packet.pts))
    try:
        pictures = list(decoder.pictures())
        skipped, corrupt = decoder.packets_skipped, decoder.corrupt_packets
    finally:
        decoder.close()
    pts = [round(p.pts_seconds, 6) for p in pictures]
    assert pts and pts[0] == round(first_key, 6) and pts == sorted(pts)
    assert skipped > 0 and len(pictures) + skipped == len(read) and corrupt == 0
    assert len(tapped) == len(read), "the packet tap still gets every packet"
    expected = [reference[t] for t in pts]
    if kind == "cpu":
        assert np.array_equal(letterboxed("cpu", pictures), letterboxed("cpu", expected))
    else:
        assert_same_pixels(letterboxed("cpu", expected), letterboxed("nvdec", pictures))


@pytest.mark.parametrize("kind", DECODERS)
def test_a_connection_cut_off_hands_out_the_pictures_its_decoder_held(
    kind: str, tmp_path: Path
) -> None:
    """A live connection that ends on an error (reset, stalled) left in the decoder the
    pictures it holds back for their turn (B-frames reorder them): their packets read,
    they were lost uncounted at every such end. They come out first now, as at the end of
    a stream: every packet read is a picture (FFmpeg's, pixel for pixel), then the error."""
    whole = write_video(tmp_path / "c.ts", frames=40, width=64, height=48, gop=10)
    reference = {round(p.pts_seconds, 6): p for p in decode("cpu", whole)[0]}
    decoder = open_decoder(kind, whole, low_delay=True)

    class CutOff:
        """The opened container, whose reading the peer resets after 23 packets (as a
        socket read fails: an OSError, which PyAV lets through)."""

        def __init__(self, container: Any) -> None:
            self.container = container

        def demux(self, *streams: Any) -> Iterator[av.Packet]:
            yield from itertools.islice(self.container.demux(*streams), 23)
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

        def __getattr__(self, name: str) -> Any:
            return getattr(self.container, name)

    decoder.demuxer.container = CutOff(decoder.demuxer.container)
    pictures: list[Picture] = []
    try:
        with pytest.raises(SourceUnavailable, match="Connection reset by peer"):
            pictures.extend(decoder.pictures())
    finally:
        decoder.close()
    pts = [round(p.pts_seconds, 6) for p in pictures]
    assert len(pictures) == 23 and pts == sorted(pts)
    expected = [reference[t] for t in pts]
    if kind == "cpu":
        assert np.array_equal(letterboxed("cpu", pictures), letterboxed("cpu", expected))
    else:
        assert_same_pixels(letterboxed("cpu", expected), letterboxed("nvdec", pictures))


def test_a_file_starts_wherever_it_starts_and_mjpeg_anywhere(tmp_path: Path) -> None:
    """Only live input waits for a key frame: a file (read as files are) cut between key
    frames decodes what FFmpeg decodes; and a live codec whose every picture decodes alone
    (MJPEG, raw video: FFmpeg flags each of its packets a key frame) starts at once."""
    whole = write_video(tmp_path / "c.ts", frames=30, width=64, height=48, gop=10, b_frames=0)
    joined = joined_between_key_frames(whole, tmp_path / "joined.ts", after=5)
    pictures, _ = decode("cpu", joined)
    assert [p.pts_seconds for p in pictures] == reference_pts(joined)
    mjpeg = write_video(tmp_path / "m.mkv", frames=12, width=64, height=48, codec="mjpeg",
                        pix_fmt="yuvj420p")  # fmt: skip
    decoder = open_decoder("cpu", mjpeg, low_delay=True)
    try:
        assert len(list(decoder.pictures())) == 12 and decoder.packets_skipped == 0
    finally:
        decoder.close()


def test_segmented_input_comes_in_bursts_and_is_never_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HLS is read a segment at a time, its packets in bursts whose first is as old as the
    segment is long: what the limit would take for a backlog. The same clip and reader that
    skip as MPEG-TS (the segments' own format) skip nothing as an HLS playlist."""
    options = {"hls_time": "2", "hls_playlist_type": "event"}
    playlist = write_video(
        tmp_path / "live.m3u8", frames=150, width=64, height=48, gop=10, options=options
    )
    plain = write_video(tmp_path / "live.ts", frames=150, width=64, height=48, gop=10)
    skipped = {}
    for path in (playlist, plain):
        SlowReader(monkeypatch, decode_seconds=0.06)
        decoder = open_decoder("cpu", path, low_delay=True, max_behind_seconds=1.0)
        try:
            assert len(list(decoder.pictures())) + decoder.packets_skipped == 150
            skipped[path.suffix] = decoder.packets_skipped, decoder.demuxer.container.format.name
        finally:
            decoder.close()
    assert skipped == {".m3u8": (0, "hls"), ".ts": (skipped[".ts"][0], "mpegts")}
    assert skipped[".ts"][0] > 0
