"""Decoder choice, and the NVDEC adapter against a fake PyNvVideoCodec on a fake GPU.

The fake reuses its output surfaces on every Decode call and frees them when
the decoder goes, as the library does, so a frame that still pointed into the
decoder's memory would show another frame's pixels or freed memory here. Its
frames are CUDA memory of ``cuda:0`` (:mod:`fakes.fake_cuda`), and vstream
imports it through its own ``import PyNvVideoCodec``, which can fail as the
library's does.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from fakes import fake_pynvvideocodec as fake
from fakes.fake_cuda import FakeEvent, FakeGpu
from helpers import write_10bit, write_video

from vstream import decoders
from vstream.decoders import DecoderKind, open_decoder, resolve_decoder
from vstream.decoders import nvdec as nvdec_module
from vstream.decoders.nvdec import (
    PROBE_CLIP,
    DecoderCache,
    FrameRing,
    NvdecDecoder,
    NvdecUnsupported,
    load_pynvvideocodec,
    probe,
)
from vstream.errors import SourceError, TransientError
from vstream.frame import PixelFormat

STREAM_HANDLE = 0x7F00_1234
"""A CUDA stream handle, as the pipeline's stream would give."""
CUDA = torch.device("cuda")
"""The device as a config writes it: no index, while the frames NVDEC exports are on cuda:0."""


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake cuda:0, the fake imported as PyNvVideoCodec; no probe, capability answer or
    parked decoder (``DECODERS``) outlives a test."""
    FakeGpu().install(monkeypatch)
    fake.install(monkeypatch)
    fake.reset()
    decoders.reset_probe()
    nvdec_module._caps.clear()
    nvdec_module.DECODERS.clear()
    yield
    decoders.reset_probe()
    nvdec_module._caps.clear()
    nvdec_module.DECODERS.clear()


def reference(path: Path, fmt: str) -> list[tuple[float, np.ndarray]]:
    with av.open(str(path)) as container:
        return [
            (float(f.pts * f.time_base), f.to_ndarray(format=fmt))
            for f in container.decode(video=0)
        ]


def nvdec(path: Path, cache: DecoderCache | None = None, **kwargs: object) -> NvdecDecoder:
    return NvdecDecoder(str(path), device=CUDA, cuda_stream=STREAM_HANDLE, cache=cache, **kwargs)


def in_any(tensor: torch.Tensor, buffers: list[torch.Tensor]) -> bool:
    start = tensor.untyped_storage().data_ptr()
    return any(
        b.untyped_storage().data_ptr() <= start < b.untyped_storage().data_ptr() + b.nbytes
        for b in buffers
    )


def test_the_fake_reuses_and_frees_its_surfaces_like_the_library(tmp_path: Path) -> None:
    """What made the old adapter wrong: a surface from one Decode call is the next call's."""
    path = write_video(tmp_path / "clip.mp4", frames=12, width=64, height=48)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        bsf = av.bitstream.BitStreamFilterContext("h264_mp4toannexb", stream)
        packets = [bytes(p) for raw in container.demux(stream) for p in bsf.filter(raw)]
    decoder = fake.CreateDecoder(codec=fake.cudaVideoCodec.H264, usedevicememory=True)
    adopted: list[tuple[torch.Tensor, torch.Tensor]] = []
    for data in packets:
        holder = np.frombuffer(data, np.uint8)
        packet = fake.PacketData()
        packet.bsl, packet.bsl_data = len(data), holder.ctypes.data
        for frame in decoder.Decode(packet):
            surface = torch.from_dlpack(frame)
            adopted.append((surface, surface.clone()))
    assert len(adopted) >= 4
    overwritten = [not torch.equal(s, snapshot) for s, snapshot in adopted[:-1]]
    assert any(overwritten), "later Decode calls reused earlier frames' memory"
    del decoder
    gc.collect()
    assert fake.sessions[-1].released
    assert torch.all(adopted[-1][0] == fake.FREED), "freed with the decoder"


@pytest.mark.parametrize(("name", "codec"), [("clip.mp4", "libx264"), ("clip.mkv", "libx265")])
def test_frames_are_vstreams_own_and_survive_reuse_and_close(
    tmp_path: Path, name: str, codec: str
) -> None:
    path = write_video(tmp_path / name, frames=24, width=192, height=108, codec=codec)
    decoder = nvdec(path)
    pictures = list(decoder.pictures())  # all held, as queues and batches hold frames
    ring = decoder.ring
    session = fake.sessions[-1]
    decoder.close()
    del decoder
    gc.collect()
    assert session.released, "not cached: the decoder and its surfaces are gone"
    expected = reference(path, "nv12")
    assert len(pictures) == len(expected) == session.frames == 24
    for picture, (pts, pixels) in zip(pictures, expected, strict=True):
        assert picture.pixel_format is PixelFormat.NV12
        assert (picture.width, picture.height) == (192, 108)
        assert picture.pts_seconds == pytest.approx(pts)
        assert np.array_equal(picture.data.cpu().numpy(), pixels), "intact after reuse and free"
        assert ring is not None and ring.owns(picture.data)
        assert not in_any(picture.data, session.surfaces)
    # Packets reached NVDEC as Annex B, and the stream ended with an empty packet.
    assert session.ends == 1 and len(session.packets) == 24
    assert ring.grown == 24 - ring.depth, "every frame still referenced: none overwritten"


def packet_pts(path: Path) -> list[int]:
    """The time stamps of the stream's packets in the order PyAV reads them."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [p.pts for p in container.demux(stream) if p.size]


@pytest.mark.parametrize(("name", "codec"), [("camera.mp4", "libx264"), ("camera.mkv", "libx265")])
def test_live_nvdec_hands_each_picture_out_of_its_own_packet_s_decode(
    tmp_path: Path, name: str, codec: str
) -> None:
    """Live input: every packet marked a whole picture and no display queue, so a camera's
    picture (no B-frames) leaves NVDEC in the ``Decode`` call of its own packet. A file's
    keeps the library's default: two packets later (the parser's end of picture, then a
    display queue of one), which overlaps decoding with handing out."""
    path = write_video(tmp_path / name, frames=12, width=64, height=48, codec=codec, b_frames=0)
    read = packet_pts(path)
    assert len(read) == 12
    live = nvdec(path, low_delay=True)
    assert len(list(live.pictures())) == 12
    live.close()
    session = fake.sessions[-1]
    assert session.kwargs["latency"] is fake.DisplayDecodeLatencyType.LOW
    assert session.flags == [fake.VideoPacketFlag.ENDOFPICTURE] * 12
    assert session.returned == [[pts] for pts in read] + [[]]  # the end of stream: nothing left

    file = nvdec(path)
    assert len(list(file.pictures())) == 12
    file.close()
    session = fake.sessions[-1]
    assert session.kwargs["latency"] is fake.DisplayDecodeLatencyType.NATIVE
    assert session.flags == [0] * 12
    assert session.returned == [[], [], *[[pts] for pts in read[:-2]], read[-2:]]


def test_live_nvdec_keeps_b_frames_in_presentation_order(tmp_path: Path) -> None:
    path = write_video(tmp_path / "b.mp4", frames=24, width=64, height=48)
    assert packet_pts(path) != sorted(packet_pts(path)), "the clip has B-frames"
    decoder = nvdec(path, low_delay=True)
    pictures = list(decoder.pictures())
    decoder.close()
    expected = reference(path, "nv12")
    assert len(pictures) == len(expected) == 24
    for picture, (pts, pixels) in zip(pictures, expected, strict=True):
        assert picture.pts_seconds == pytest.approx(pts)
        assert np.array_equal(picture.data.cpu().numpy(), pixels)


def test_a_parked_decoder_is_reused_only_for_input_of_its_kind(tmp_path: Path) -> None:
    """A live stream's decoder has no display queue: a file must not get it, nor a camera
    a file's."""
    path = write_video(tmp_path / "clip.mp4", frames=4, width=64, height=48)
    cache = DecoderCache()
    for low_delay in (True, False, True, False):
        decoder = nvdec(path, cache=cache, low_delay=low_delay)
        list(decoder.pictures())
        decoder.close()
    assert cache.reused == 2 and len(fake.sessions) == 2
    assert [s.kwargs["latency"].name for s in fake.sessions] == ["LOW", "NATIVE"]


def test_decoding_copies_device_to_device_only(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=8, width=160, height=120)
    decoder = nvdec(path)

    def forbidden(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        raise AssertionError("the NVDEC path moved a frame to the host")

    with pytest.MonkeyPatch.context() as patches:
        for name in ("cpu", "numpy", "to", "tolist"):
            patches.setattr(torch.Tensor, name, forbidden)
        pictures = list(decoder.pictures())
    assert len(pictures) == 8 and all(p.data.device == torch.device("cuda", 0) for p in pictures)
    decoder.close()


def test_a_decoder_on_a_stream_of_its_own_is_ordered_against_the_reader_s(
    tmp_path: Path,
) -> None:
    """Taken on the legacy default stream, NVDEC decodes on a stream of its own (on stream 0
    PyNvVideoCodec synchronises after every frame). Then before every ``Decode`` its stream
    waits for what the reader's stream queued (the ring's buffers are read there), and the
    reader's stream waits for the copies after each packet that gave pictures; taken on the
    decoder's stream, nothing needs ordering."""
    path = write_video(tmp_path / "clip.mp4", frames=6, width=160, height=120)
    reader = torch.cuda.current_stream()
    assert reader.cuda_stream == 0
    decoder = NvdecDecoder(str(path), device=CUDA, cuda_stream=None)
    pictures = list(decoder.pictures())
    decoder.close()
    own = reader.gpu.made[-1]
    assert fake.sessions[-1].kwargs["cudastream"] == own.cuda_stream != 0
    assert len(pictures) == 6
    decodes = len(fake.sessions[-1].packets) + fake.sessions[-1].ends  # Decode calls
    assert own.waited_for == [reader] * decodes
    assert 1 <= len(reader.waited_for) <= decodes
    assert all(isinstance(e, FakeEvent) and e.stream == own for e in reader.waited_for)

    # Each frame's capsule was asked for on the decoder's stream, as torch would ask it.
    assert fake.sessions[-1].streams_asked == [own.cuda_stream] * 6

    shared = torch.cuda.ExternalStream(STREAM_HANDLE)
    with torch.cuda.stream(shared):
        decoder = nvdec(path)
        assert len(list(decoder.pictures())) == 6
        decoder.close()
    assert shared.waited_for == [] and decoder._stream.waited_for == []


def test_the_ring_reuses_only_buffers_no_frame_refers_to() -> None:
    ring = FrameRing((6, 4), torch.uint8, torch.device("cpu"), depth=2)
    a, b = ring.take(), ring.take()
    assert a.data_ptr() != b.data_ptr() and len(ring.buffers) == 2
    a.fill_(1)
    c = ring.take()  # a and b are alive: a third buffer, never an overwrite
    assert len(ring.buffers) == 3 and ring.grown == 1
    view_of_b = b[2:]  # a view keeps its buffer referenced as well
    b_ptr = b.data_ptr()
    del b
    d = ring.take()
    assert d.data_ptr() != b_ptr and len(ring.buffers) == 4
    del view_of_b, c, d
    e = ring.take()
    assert len(ring.buffers) == 4, "a released buffer is reused"
    assert e.data_ptr() != a.data_ptr() and torch.all(a == 1)


def test_pixels_and_time_stamps_match_the_reference(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=20, width=160, height=120)
    pictures = list(nvdec(path).pictures())
    expected = reference(path, "nv12")
    assert [p.pts_seconds for p in pictures] == pytest.approx([pts for pts, _ in expected])
    for picture, (_, pixels) in zip(pictures, expected, strict=True):
        assert np.array_equal(picture.data.cpu().numpy(), pixels)


def test_decoder_shares_the_pipeline_stream_and_primary_context(tmp_path: Path) -> None:
    nvdec(write_video(tmp_path / "clip.mp4", frames=3)).close()
    kwargs = fake.sessions[-1].kwargs
    assert kwargs["cudastream"] == STREAM_HANDLE
    assert kwargs["cudacontext"] == 0  # the device's primary context, torch's own
    assert kwargs["usedevicememory"] is True
    assert kwargs["gpuid"] == 0, "cuda is the current device, 0 here"
    assert kwargs["codec"] is fake.cudaVideoCodec.H264
    assert kwargs["outputColorType"] is fake.OutputColorType.NATIVE


def test_rgb_output_when_asked(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=5, width=160, height=120)
    pictures = list(nvdec(path, pixel_format=PixelFormat.RGB24).pictures())
    assert fake.sessions[-1].kwargs["outputColorType"] is fake.OutputColorType.RGB
    assert [(p.pixel_format, p.width, p.height) for p in pictures] == [
        (PixelFormat.RGB24, 160, 120)
    ] * 5
    expected = reference(path, "rgb24")
    for picture, (_, pixels) in zip(pictures, expected, strict=True):
        assert np.array_equal(picture.data.cpu().numpy(), pixels)


def test_a_decoder_is_reused_across_passes_and_reconfigured_for_a_new_size(
    tmp_path: Path,
) -> None:
    cache = DecoderCache(capacity=2)
    first = write_video(tmp_path / "a.mp4", frames=10, width=160, height=120)
    smaller = write_video(tmp_path / "b.mp4", frames=6, width=96, height=64)
    larger = write_video(tmp_path / "c.mp4", frames=4, width=320, height=240)
    held = []
    for path in (first, first, smaller):  # a loop, then a reconnect to a smaller stream
        decoder = nvdec(path, cache=cache)
        held.append((path, list(decoder.pictures())))
        decoder.close()
    assert len(fake.sessions) == 1 and cache.reused == 2
    assert fake.sessions[0].reconfigured == [(96, 64)]
    decoder = nvdec(larger, cache=cache)  # beyond what the parked decoder was made for
    held.append((larger, list(decoder.pictures())))
    decoder.close()
    gc.collect()
    assert len(fake.sessions) == 2 and fake.sessions[0].released
    for path, pictures in held:  # every pass's frames intact, whatever came after
        expected = reference(path, "nv12")
        assert len(pictures) == len(expected)
        for picture, (_, pixels) in zip(pictures, expected, strict=True):
            assert np.array_equal(picture.data.cpu().numpy(), pixels)


def test_a_pass_cut_short_is_flushed_before_its_decoder_is_reused(tmp_path: Path) -> None:
    cache = DecoderCache()
    path = write_video(tmp_path / "clip.mp4", frames=30, width=160, height=120)
    decoder = nvdec(path, cache=cache)
    cut = [p for _, p in zip(range(5), decoder.pictures(), strict=False)]
    decoder.close()  # a reconnect: mid-stream
    assert fake.sessions[-1].ends == 1, "flushed with an end-of-stream packet"
    again = nvdec(path, cache=cache)
    pictures = list(again.pictures())
    again.close()
    assert len(fake.sessions) == 1
    expected = reference(path, "nv12")
    assert len(pictures) == 30, "nothing left over from the pass that was cut"
    for picture, (_, pixels) in zip(cut + pictures, expected[:5] + expected, strict=True):
        assert np.array_equal(picture.data.cpu().numpy(), pixels)


def test_a_decoder_failure_fails_the_stream_once_and_is_never_retried_or_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVDEC's parser conceals damaged data; an exception from Decode is a driver/CUDA failure."""
    monkeypatch.setattr(fake.Decoder, "fail_on_packets", frozenset({12}))
    cache = DecoderCache()
    path = write_video(tmp_path / "clip.mp4", frames=30, width=160, height=120)
    decoder = nvdec(path, cache=cache)
    pictures = []
    with pytest.raises(SourceError, match="NVDEC failed: RuntimeError") as failure:
        pictures.extend(decoder.pictures())
    decoder.close()
    assert not isinstance(failure.value, TransientError)
    assert 0 < len(pictures) < 12
    assert len(cache) == 0, "a failed decoder is dropped, not parked"


def test_unsupported_codec_is_a_clear_error(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mkv", frames=3, codec="ffv1")
    with pytest.raises(NvdecUnsupported, match="NVDEC cannot decode ffv1"):
        nvdec(path)


def test_10bit_video_and_codecs_this_gpu_lacks_are_refused_before_any_frame(
    tmp_path: Path,
) -> None:
    with pytest.raises(NvdecUnsupported, match="yuv420p10le video: NVDEC decodes 8-bit 4:2:0"):
        nvdec(write_10bit(tmp_path / "ten.mkv"))
    fake.unsupported.add(fake.cudaVideoCodec.HEVC)
    hevc = write_video(tmp_path / "hevc.mkv", frames=3, codec="libx265")
    with pytest.raises(NvdecUnsupported, match="this GPU's NVDEC has no hevc decoder"):
        nvdec(hevc)
    assert fake.sessions == [], "refused before a decoder was made"


def test_p016_frames_that_arrive_anyway_are_cut_to_8_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvdec_module, "NVDEC_PIXEL_FORMATS", frozenset({"yuv420p10le"}))
    path = write_10bit(tmp_path / "ten.mkv")
    pictures = list(nvdec(path).pictures())
    assert len(pictures) == 6
    with av.open(str(path)) as container:
        tens = [f.to_ndarray(format="yuv420p10le") for f in container.decode(video=0)]
    for picture, planar in zip(pictures, tens, strict=True):
        assert picture.data.dtype == torch.uint8 and picture.pixel_format is PixelFormat.NV12
        luma = picture.data[:120].cpu().numpy().astype(int)
        assert np.array_equal(luma, planar[:120] >> 2), "the 8 high bits of each sample"
        u = planar[120:150].reshape(60, 80) >> 2
        assert np.array_equal(picture.data[120:].cpu().numpy().reshape(60, 80, 2)[..., 0], u)


def test_missing_pynvvideocodec_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)
    with pytest.raises(SourceError, match=r"pip install 'vstream\[gpu\]'"):
        load_pynvvideocodec()


def test_a_pynvvideocodec_whose_import_raises_runtimeerror_means_the_cpu_decoder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """2.2.4 loads libnvidia-encode at import and raises RuntimeError without it (issue 20)."""
    importer = fake.install(monkeypatch, error=fake.DRIVER_WITHOUT_VIDEO)
    with pytest.raises(SourceError) as failed:
        load_pynvvideocodec()
    assert str(failed.value) == (
        "PyNvVideoCodec cannot be imported: Failed to load NVENC library: libnvidia-encode.so.1: "
        "cannot open shared object file: No such file or directory"
    )
    caplog.set_level(logging.INFO, logger="vstream.decoders")
    path = write_video(tmp_path / "clip.mp4", frames=4, width=160, height=120)
    imports = importer.imports
    for _ in range(3):  # three streams, or one reconnecting
        decoder = open_decoder(str(path), device=CUDA)
        assert decoder.name == "cpu" and len(list(decoder.pictures())) == 4
        decoder.close()
    assert importer.imports == imports + 1, "probed once, the answer kept"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "vstream.decoders"]
    assert line.startswith("decoder: cpu (NVDEC unavailable: PyNvVideoCodec cannot be imported")
    with pytest.raises(SourceError, match="nvdec decoder does not work here: PyNvVideoCodec"):
        resolve_decoder("nvdec", CUDA)


def test_cuda_and_cuda_0_are_one_device_for_the_probe_and_the_decoder(tmp_path: Path) -> None:
    """The device written ``cuda`` takes NVDEC's frames, which come on cuda:0 (issue 20)."""
    assert decoders.nvdec_status("cuda") == decoders.nvdec_status(torch.device("cuda", 0))
    works, why = decoders.nvdec_status(CUDA)
    assert works, why
    assert len(fake.sessions) == 1, "probed once for both spellings"
    assert resolve_decoder("auto", CUDA) is DecoderKind.NVDEC
    decoder = open_decoder(str(write_video(tmp_path / "c.mp4", frames=3)), device=CUDA)
    assert decoder.name == "nvdec"
    pictures = list(decoder.pictures())
    decoder.close()
    assert len(pictures) == 3 and {p.data.device for p in pictures} == {torch.device("cuda", 0)}


def test_the_bundled_probe_clip_is_tiny_h264() -> None:
    assert PROBE_CLIP.stat().st_size < 8192
    with av.open(str(PROBE_CLIP)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == ("h264", "yuv420p")
        assert (stream.codec_context.width, stream.codec_context.height) == (96, 64)
        assert len(list(container.decode(video=0))) == 4


def test_the_probe_decodes_the_clip_and_names_what_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    result = probe(CUDA)
    assert result.available, result.reason
    assert "4 frames" in result.reason

    def no_video_capability(**kwargs: object) -> None:
        raise RuntimeError(
            "Could not dynamically load libnvcuvid.so.1\nIf using Docker please make sure ..."
        )

    monkeypatch.setattr(fake, "CreateDecoder", no_video_capability)
    result = probe(CUDA)
    assert not result.available
    assert "libnvcuvid.so.1" in result.reason and "\n" not in result.reason


def test_auto_is_cpu_without_cuda() -> None:
    assert resolve_decoder("auto", torch.device("cpu")) is DecoderKind.CPU
    with pytest.raises(SourceError, match="needs a CUDA device"):
        resolve_decoder("nvdec", torch.device("cpu"))


@pytest.mark.parametrize(("works", "expected"), [(True, "nvdec"), (False, "cpu")])
def test_auto_on_cuda_follows_the_probe_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    works: bool,
    expected: str,
) -> None:
    caplog.set_level(logging.INFO, logger="vstream.decoders")
    probes = []

    def fake_probe(device: torch.device) -> tuple[bool, str]:
        probes.append(device)
        return works, "decoded the probe clip" if works else "libnvcuvid.so.1 not found"

    monkeypatch.setattr(decoders, "_probe", fake_probe)
    choices = {resolve_decoder("auto", torch.device("cuda:0")) for _ in range(3)}
    assert choices == {DecoderKind(expected)}
    assert len(probes) == 1, "probed once"
    messages = [r.getMessage() for r in caplog.records if r.name == "vstream.decoders"]
    assert len(messages) == 1 and messages[0].startswith(f"decoder: {expected}")
    if not works:
        assert "libnvcuvid.so.1 not found" in messages[0]
        with pytest.raises(SourceError, match="nvdec decoder does not work here: libnvcuvid"):
            resolve_decoder("nvdec", torch.device("cuda:0"))


def test_a_stream_nvdec_cannot_decode_falls_back_alone_with_one_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(decoders, "resolve_decoder", lambda kind, device: DecoderKind.NVDEC)
    ten = write_10bit(tmp_path / "ten.mkv")
    eight = write_video(tmp_path / "eight.mp4", frames=4, width=160, height=120)
    caplog.set_level(logging.INFO, logger="vstream.decoders")
    opened = []
    for _ in range(3):  # a file looping, or a camera reconnecting
        decoder = open_decoder(str(ten), device=CUDA)
        opened.append(decoder.name)
        assert len(list(decoder.pictures())) == 6
        decoder.close()
    other = open_decoder(str(eight), device=CUDA)
    assert other.name == "nvdec"
    other.close()
    assert opened == ["cpu"] * 3
    notices = [
        r.getMessage()
        for r in caplog.records
        if "decoding this stream on the CPU" in r.getMessage()
    ]
    assert len(notices) == 1 and "yuv420p10le" in notices[0] and "ten.mkv" in notices[0]
    assert len(fake.sessions) == 1, "only the 8-bit stream made an NVDEC decoder"


def _nvdec_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoders, "resolve_decoder", lambda kind, device: DecoderKind.NVDEC)


def _pts(path: Path) -> list[float]:
    return [pts for pts, _ in reference(path, "rgb24")]


def test_a_codec_nvdec_refuses_at_its_first_decode_goes_on_the_cpu_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A binding without GetDecoderCaps: the refusal comes from Decode, before any picture."""
    _nvdec_chosen(monkeypatch)
    monkeypatch.delattr(fake, "GetDecoderCaps")
    fake.unsupported.add(fake.cudaVideoCodec.H264)
    path = write_video(tmp_path / "clip.mp4", frames=20, width=160, height=120)
    caplog.set_level(logging.INFO, logger="vstream.decoders")
    decoder = open_decoder(str(path), device=CUDA)
    assert decoder.name == "nvdec", "nothing said no before decoding"
    pictures = list(decoder.pictures())
    assert decoder.name == "cpu"
    decoder.close()
    assert [p.pts_seconds for p in pictures] == _pts(path), "every frame once, in order"
    for picture, (_, rgb) in zip(pictures, reference(path, "rgb24"), strict=True):
        assert np.array_equal(picture.data.cpu().numpy(), rgb)
    notices = [r.getMessage() for r in caplog.records if "on the CPU" in r.getMessage()]
    assert len(notices) == 1 and "Codec not supported on this GPU" in notices[0]
    again = open_decoder(str(path), device=CUDA)
    assert again.name == "cpu", "a loop pass or reconnection goes straight to the CPU"
    again.close()
    assert len(fake.sessions) == 1


def test_a_size_beyond_nvdec_found_by_its_parser_is_one_line_not_a_multiline_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nvdec_chosen(monkeypatch)
    monkeypatch.delattr(fake, "GetDecoderCaps")
    monkeypatch.setattr(fake, "max_size", (128, 128))
    path = write_video(tmp_path / "clip.mp4", frames=4, width=160, height=120)
    decoder = nvdec(path)
    with pytest.raises(NvdecUnsupported) as refused:
        list(decoder.pictures())
    decoder.close()
    assert "\n" not in str(refused.value)
    assert "Resolution : 160x120; Max Supported (wxh) : 128x128" in " ".join(
        str(refused.value).split()
    )


def test_a_file_nvdec_stops_following_mid_stream_continues_on_the_cpu_every_frame_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nvdec_chosen(monkeypatch)
    monkeypatch.setattr(fake.Decoder, "refuse_on_packets", frozenset({12}))
    path = write_video(tmp_path / "clip.mp4", frames=30, width=160, height=120)
    decoder = open_decoder(str(path), device=CUDA)
    pictures = list(decoder.pictures())
    decoder.close()
    kinds = [p.pixel_format for p in pictures]
    assert PixelFormat.NV12 in kinds and kinds[-1] is PixelFormat.RGB24, "began on NVDEC"
    assert [p.pts_seconds for p in pictures] == _pts(path), "every frame once, in order"


def test_a_live_stream_nvdec_stops_following_reconnects_to_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MPEG-TS declares no duration, as live input: the connection ends as a transient fault."""
    _nvdec_chosen(monkeypatch)
    monkeypatch.setattr(fake.Decoder, "refuse_on_packets", frozenset({12}))
    path = write_video(tmp_path / "live.ts", frames=30, width=160, height=120)
    decoder = open_decoder(str(path), device=CUDA)
    pictures = []
    with pytest.raises(TransientError, match=r"Reconfigure Not supported.*on the CPU"):
        pictures.extend(decoder.pictures())
    decoder.close()
    assert 0 < len(pictures) < 12
    reconnected = open_decoder(str(path), device=CUDA)
    assert reconnected.name == "cpu" and len(list(reconnected.pictures())) == 30
    reconnected.close()


def test_a_driver_failure_is_not_mistaken_for_a_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nvdec_chosen(monkeypatch)
    monkeypatch.setattr(fake.Decoder, "fail_on_packets", frozenset({3}))
    path = write_video(tmp_path / "clip.mp4", frames=10, width=160, height=120)
    decoder = open_decoder(str(path), device=CUDA)
    with pytest.raises(SourceError, match="NVDEC failed") as failure:
        list(decoder.pictures())
    decoder.close()
    assert not isinstance(failure.value, (TransientError, NvdecUnsupported))
    assert decoder.name == "nvdec"
