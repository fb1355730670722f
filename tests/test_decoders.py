"""Decoder choice, and the NVDEC adapter against a fake PyNvVideoCodec (no GPU here)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from fakes import fake_pynvvideocodec as fake
from helpers import write_video

from vstream import decoders
from vstream.decoders import DecoderKind, resolve_decoder
from vstream.decoders.nvdec import NvdecDecoder, load_pynvvideocodec
from vstream.errors import SourceError, TransientError
from vstream.frame import PixelFormat

STREAM_HANDLE = 0x7F00_1234
"""A CUDA stream handle, as torch.cuda.current_stream().cuda_stream would give."""


def reference(path: Path, fmt: str) -> list[tuple[float, np.ndarray]]:
    with av.open(str(path)) as container:
        return [
            (float(f.pts * f.time_base), f.to_ndarray(format=fmt))
            for f in container.decode(video=0)
        ]


def nvdec(path: Path, **kwargs: object) -> NvdecDecoder:
    return NvdecDecoder(
        str(path), device=torch.device("cpu"), cuda_stream=STREAM_HANDLE, nvc=fake, **kwargs
    )


@pytest.fixture
def no_host_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every way of copying a tensor (to the host or anywhere) fail loudly."""

    def forbidden(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        raise AssertionError("the NVDEC path copied a frame")

    for name in ("cpu", "numpy", "to", "clone", "copy_", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)


@pytest.mark.parametrize(("name", "codec"), [("clip.mp4", "libx264"), ("clip.mkv", "libx265")])
def test_frames_are_the_decoders_own_memory(
    tmp_path: Path, name: str, codec: str, no_host_copies: None
) -> None:
    path = write_video(tmp_path / name, frames=24, width=192, height=108, codec=codec)
    decoder = nvdec(path)
    pictures = list(decoder.pictures())
    decoder.close()
    made = fake.created[-1]
    # Adopted through DLPack: the very memory the decoder handed out, in order, none missing.
    assert len(pictures) == len(made.frames) == 24
    for picture, surface in zip(pictures, made.frames, strict=True):
        assert picture.data.data_ptr() == surface.tensor.data_ptr()
        assert picture.pixel_format is PixelFormat.NV12
        assert (picture.width, picture.height) == (192, 108)
    # Packets reached NVDEC as Annex B, and the stream ended with an empty packet.
    assert made.ended and len(made.packets) == 24
    assert decoder.corrupt_packets == 0
    monkeypatch_free = reference(path, "nv12")
    assert [p.pts_seconds for p in pictures] == pytest.approx([pts for pts, _ in monkeypatch_free])


def test_pixels_and_time_stamps_match_the_reference(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=20, width=160, height=120)
    pictures = list(nvdec(path).pictures())
    expected = reference(path, "nv12")
    assert [p.pts_seconds for p in pictures] == pytest.approx([pts for pts, _ in expected])
    for picture, (_, pixels) in zip(pictures, expected, strict=True):
        assert np.array_equal(picture.data.numpy(), pixels)


def test_decoder_shares_torchs_stream_and_primary_context(tmp_path: Path) -> None:
    nvdec(write_video(tmp_path / "clip.mp4", frames=3)).close()
    kwargs = fake.created[-1].kwargs
    assert kwargs["cudastream"] == STREAM_HANDLE
    assert kwargs["cudacontext"] == 0  # the device's primary context, torch's own
    assert kwargs["usedevicememory"] is True
    assert kwargs["gpuid"] == 0
    assert kwargs["codec"] is fake.cudaVideoCodec.H264
    assert kwargs["outputColorType"] is fake.OutputColorType.NATIVE


def test_rgb_output_when_asked(tmp_path: Path, no_host_copies: None) -> None:
    path = write_video(tmp_path / "clip.mp4", frames=5, width=160, height=120)
    pictures = list(nvdec(path, pixel_format=PixelFormat.RGB24).pictures())
    assert fake.created[-1].kwargs["outputColorType"] is fake.OutputColorType.RGB
    assert [(p.pixel_format, p.width, p.height) for p in pictures] == [
        (PixelFormat.RGB24, 160, 120)
    ] * 5


def test_a_decoder_failure_fails_the_stream_once_and_is_never_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVDEC's parser conceals damaged data; an exception from Decode is a driver/CUDA failure."""
    monkeypatch.setattr(fake.Decoder, "fail_on_packets", frozenset({12}))
    path = write_video(tmp_path / "clip.mp4", frames=30, width=160, height=120)
    decoder = nvdec(path)
    pictures = []
    with pytest.raises(SourceError, match="NVDEC failed: RuntimeError") as failure:
        pictures.extend(decoder.pictures())
    assert not isinstance(failure.value, TransientError)
    assert 0 < len(pictures) < 12


def test_unsupported_codec_is_a_clear_error(tmp_path: Path) -> None:
    path = write_video(tmp_path / "clip.mkv", frames=3, codec="ffv1")
    with pytest.raises(SourceError, match="NVDEC cannot decode ffv1"):
        nvdec(path)


def test_missing_pynvvideocodec_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)
    with pytest.raises(SourceError, match=r"pip install 'vstream\[gpu\]'"):
        load_pynvvideocodec()


def test_auto_is_cpu_without_cuda() -> None:
    assert resolve_decoder("auto", torch.device("cpu")) is DecoderKind.CPU
    with pytest.raises(SourceError, match="needs a CUDA device"):
        resolve_decoder("nvdec", torch.device("cpu"))


@pytest.mark.parametrize(("installed", "expected"), [(True, "nvdec"), (False, "cpu")])
def test_auto_on_cuda_picks_nvdec_when_installed_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    installed: bool,
    expected: str,
) -> None:
    caplog.set_level(logging.INFO, logger="vstream.decoders")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake if installed else None)
    monkeypatch.setattr(
        decoders.importlib.util, "find_spec", lambda name: object() if installed else None
    )
    decoders._auto_choice.cache_clear()
    try:
        choices = {resolve_decoder("auto", torch.device("cuda:0")) for _ in range(3)}
    finally:
        decoders._auto_choice.cache_clear()
    assert choices == {DecoderKind(expected)}
    messages = [r.getMessage() for r in caplog.records if r.name == "vstream.decoders"]
    assert len(messages) == 1 and messages[0].startswith(f"decoder: {expected}")
