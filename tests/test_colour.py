"""NV12 / I420 -> RGB on the device matches FFmpeg's own conversion (through PyAV)."""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch

from vstream.frame import ColourMatrix, ColourSpace, Frame, PixelFormat
from vstream.preprocess.colour import to_rgb_planar
from vstream.sources import SourceOptions, VideoFileSource

SPACES = [
    ("itu601", "MPEG", ColourSpace(ColourMatrix.BT601, full_range=False)),
    ("itu601", "JPEG", ColourSpace(ColourMatrix.BT601, full_range=True)),
    ("itu709", "MPEG", ColourSpace(ColourMatrix.BT709, full_range=False)),
    ("itu709", "JPEG", ColourSpace(ColourMatrix.BT709, full_range=True)),
]


def _test_image(height: int = 120, width: int = 160) -> np.ndarray:
    """Smooth colour ramps covering most of the RGB cube."""
    yy, xx = np.mgrid[0:height, 0:width]
    return np.stack(
        [xx * 255 // width, yy * 255 // height, (xx + yy) * 255 // (width + height)], axis=-1
    ).astype(np.uint8)


def _ours(yuv: av.VideoFrame, pixel_format: PixelFormat, colour: ColourSpace) -> np.ndarray:
    planes = (
        yuv.to_ndarray()
        if pixel_format is PixelFormat.YUV420P
        else (yuv.reformat(format="nv12").to_ndarray())
    )
    frame = Frame(torch.from_numpy(planes), pixel_format, yuv.width, yuv.height, colour=colour)
    return to_rgb_planar(frame)[0].permute(1, 2, 0).numpy()


@pytest.mark.parametrize("pixel_format", [PixelFormat.NV12, PixelFormat.YUV420P])
@pytest.mark.parametrize(("av_space", "av_range", "colour"), SPACES, ids=lambda v: str(v))
def test_matches_pyav_reference(pixel_format, av_space, av_range, colour) -> None:
    source = av.VideoFrame.from_ndarray(_test_image(), format="rgb24")
    yuv = source.reformat(format="yuv420p", dst_colorspace=av_space, dst_color_range=av_range)
    reference = (
        yuv.reformat(format="rgb24", src_colorspace=av_space, src_color_range=av_range)
        .to_ndarray()
        .astype(np.float32)
    )
    error = np.abs(_ours(yuv, pixel_format, colour) - reference)
    assert error.mean() < 1.5
    assert error.max() <= 4.0


def test_wrong_matrix_is_detectably_wrong() -> None:
    """The tolerance above is tight enough to tell BT.601 from BT.709."""
    source = av.VideoFrame.from_ndarray(_test_image(), format="rgb24")
    yuv = source.reformat(format="yuv420p", dst_colorspace="itu709", dst_color_range="MPEG")
    reference = yuv.reformat(format="rgb24", src_colorspace="itu709", src_color_range="MPEG")
    wrong = _ours(yuv, PixelFormat.YUV420P, ColourSpace(ColourMatrix.BT601, full_range=False))
    assert np.abs(wrong - reference.to_ndarray()).max() > 10


@pytest.mark.parametrize(
    ("y", "u", "v", "colour", "rgb"),
    [
        (235, 128, 128, ColourSpace(ColourMatrix.BT601, False), (255, 255, 255)),
        (16, 128, 128, ColourSpace(ColourMatrix.BT709, False), (0, 0, 0)),
        (128, 128, 128, ColourSpace(ColourMatrix.BT709, True), (128, 128, 128)),
        # Pure red in BT.601 limited range: Y=81, Cb=90, Cr=240.
        (81, 90, 240, ColourSpace(ColourMatrix.BT601, False), (255, 0, 0)),
        # Pure blue in BT.709 full range:
        # Y=0.0722*255, Cb=128+127.5 (clipped), Cr=128-0.0722/1.5748*255.
        (18.41, 255.5, 116.31, ColourSpace(ColourMatrix.BT709, True), (0, 0, 255)),
    ],
)
def test_flat_colours(y, u, v, colour, rgb) -> None:
    h, w = 4, 6
    data = torch.empty((h * 3 // 2, w), dtype=torch.uint8)
    data[:h] = round(y)
    data[h:].view(h // 2, w // 2, 2)[..., 0] = min(round(u), 255)
    data[h:].view(h // 2, w // 2, 2)[..., 1] = round(v)
    out = to_rgb_planar(Frame(data, PixelFormat.NV12, w, h, colour=colour))
    assert out.shape == (1, 3, h, w)
    assert out[0, :, 0, 0].tolist() == pytest.approx(rgb, abs=2.5)


def test_decoded_nv12_matches_decoded_rgb(small_video) -> None:
    """The same H.264 frames through both source paths give the same pixels."""
    rgb_frames = list(VideoFileSource(small_video))
    nv12_frames = list(VideoFileSource(small_video, options=SourceOptions(pixel_format="nv12")))
    assert len(rgb_frames) == len(nv12_frames) == 30
    for a, b in zip(rgb_frames, nv12_frames, strict=True):
        assert b.pixel_format is PixelFormat.NV12
        ours = to_rgb_planar(b)[0].permute(1, 2, 0)
        assert (ours - a.data.float()).abs().mean() < 1.5


def test_frame_shape_is_validated() -> None:
    with pytest.raises(ValueError, match=r"needs data of shape \(6, 4\), got \(4, 4\)"):
        Frame(torch.zeros((4, 4), dtype=torch.uint8), PixelFormat.NV12, 4, 4)
    with pytest.raises(ValueError, match="even width and height, got 5x4"):
        Frame(torch.zeros((6, 5), dtype=torch.uint8), PixelFormat.NV12, 5, 4)
    with pytest.raises(ValueError, match="must be uint8"):
        Frame(torch.zeros((4, 4, 3)), PixelFormat.RGB24, 4, 4)
