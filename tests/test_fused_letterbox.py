"""The CPU path: decoded pictures scaled by FFmpeg straight to the letterbox, nothing allocated.

The reference is the letterbox of the same picture converted to RGB at full
size and resized with torch: the fused path must land every pixel in the
same place (same geometry, same padding, same object positions) with values
within a small tolerance (the two resampling filters differ at sharp edges).
"""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from helpers import write_video
from torch.profiler import ProfilerActivity, profile

from vstream.cores import auto_decoder_threads as auto_threads
from vstream.decoders.cpu import PyAVDecoder, PyAVPicture
from vstream.frame import Frame, PixelFormat
from vstream.preprocess import PAD_VALUE, Letterboxer
from vstream.sources import VideoFileSource

SIZES = [(641, 479), (854, 480), (480, 848), (1920, 1080)]
YELLOW = (250, 250, 20)


def scene(width: int, height: int) -> np.ndarray:
    """Smooth colour gradients with one yellow rectangle whose position is known."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack(
        [
            128 + 100 * np.sin(xx / width * 9.4),
            40 + 180 * yy / height,
            160 + 60 * np.cos((xx + yy) / (width + height) * 12.6),  # never yellow
        ],
        axis=-1,
    )
    x0, y0, x1, y1 = rectangle(width, height)
    image[y0:y1, x0:x1] = YELLOW
    return image.clip(0, 255).astype(np.uint8)


def rectangle(width: int, height: int) -> tuple[int, int, int, int]:
    """The yellow rectangle's columns and rows, on even pixels: its 4:2:0 chroma stays sharp."""
    x0, y0 = int(width * 0.3) // 2 * 2, int(height * 0.4) // 2 * 2
    return x0, y0, x0 + width // 6 // 2 * 2, y0 + height // 5 // 2 * 2


def decoded(width: int, height: int) -> av.VideoFrame:
    """The scene as a decoder hands it out: 4:2:0 YUV in FFmpeg's memory."""
    return av.VideoFrame.from_ndarray(scene(width, height), format="rgb24").reformat(
        format="yuv420p"
    )


def fused_frame(picture: av.VideoFrame, index: int = 0) -> Frame:
    return Frame(
        None, PixelFormat.RGB24, picture.width, picture.height, index=index,
        picture=PyAVPicture(picture),
    )  # fmt: skip


def yellow_extent(image: torch.Tensor) -> tuple[int, int, int, int]:
    """First and last row and column of the yellow rectangle in a ``(3, H, W)`` input."""
    mask = (image[0] > 0.8) & (image[1] > 0.8) & (image[2] < 0.3)
    rows = torch.nonzero(mask.any(dim=1)).flatten()
    cols = torch.nonzero(mask.any(dim=0)).flatten()
    assert len(rows) and len(cols), "the rectangle is visible"
    return int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])


def expected_extent(width: int, height: int, geometry) -> tuple[float, float, float, float]:
    """Where the scene's rectangle lands in the input, from the letterbox geometry alone."""
    x0, y0, x1, y1 = rectangle(width, height)
    g = geometry
    return (
        g.top + y0 * g.gain, g.top + y1 * g.gain - 1,
        g.left + x0 * g.gain, g.left + x1 * g.gain - 1,
    )  # fmt: skip


@pytest.mark.parametrize("size", [320, 640])
@pytest.mark.parametrize(("width", "height"), SIZES, ids=lambda v: str(v))
def test_the_fused_letterbox_equals_the_reference(width: int, height: int, size: int) -> None:
    picture = decoded(width, height)
    fused, reference = torch.zeros((2, 1, 3, size, size))
    geometry = Letterboxer(fused).load(0, fused_frame(picture))
    rgb = torch.from_numpy(picture.to_ndarray(format="rgb24"))
    assert Letterboxer(reference).load(0, Frame(rgb, PixelFormat.RGB24, width, height)) == geometry

    window = (
        slice(None),
        slice(geometry.top, geometry.top + geometry.resized_height),
        slice(geometry.left, geometry.left + geometry.resized_width),
    )
    pad = torch.full((3, size, size), PAD_VALUE / 255)
    pad[window] = 0
    outside_fused, outside_reference = fused[0].clone(), reference[0].clone()
    outside_fused[window] = outside_reference[window] = 0
    assert torch.equal(outside_fused, pad), "padding exactly where the geometry puts it"
    assert torch.equal(outside_fused, outside_reference)
    difference = (fused[0][window] - reference[0][window]).abs() * 255
    assert difference.mean() < 1.5, "within 1.5 grey levels on average"
    # The filters differ only at sharp edges; the object sits where the geometry puts it
    # (within 2 px: at odd sizes the picture's own 4:2:0 chroma blurs its edges by a row).
    assert yellow_extent(fused[0]) == pytest.approx(yellow_extent(reference[0]), abs=1)
    expected = expected_extent(width, height, geometry)
    assert yellow_extent(fused[0]) == pytest.approx(expected, abs=2)


def test_boxes_map_back_to_the_same_original_pixels_on_both_paths() -> None:
    """The geometry the fused path returns is the one boxes are mapped back with."""
    picture = decoded(854, 480)
    model_input = torch.zeros((1, 3, 320, 320))
    g = Letterboxer(model_input).load(0, fused_frame(picture))
    top, bottom, left, right = yellow_extent(model_input[0])
    # The rectangle's edges, mapped back to source pixels as boxes are.
    x1, x2 = (left - g.box_pad_x) / g.gain, (right + 1 - g.box_pad_x) / g.gain
    y1, y2 = (top - g.box_pad_y) / g.gain, (bottom + 1 - g.box_pad_y) / g.gain
    left_, top_, right_, bottom_ = rectangle(854, 480)
    assert (x1, y1, x2, y2) == pytest.approx((left_, top_, right_, bottom_), abs=1 / g.gain)


def test_letterboxing_decoded_frames_allocates_nothing_per_frame(tmp_path: Path) -> None:
    """Over many frames: no tensor memory, no Python memory kept, the same slot addresses.

    What FFmpeg allocates for each scaled picture (letterbox-sized ``uint8``)
    is outside torch and Python; the decoder's pictures come from its pool.
    """
    video = write_video(tmp_path / "clip.mp4", frames=12, width=854, height=480)
    with VideoFileSource(video) as source:
        frames = list(source)
    assert all(f.picture is not None for f in frames), "the CPU decoder leaves frames in FFmpeg"
    model_input = torch.zeros((2, 3, 320, 320))
    addresses = [slot.data_ptr() for slot in model_input]
    letterboxer = Letterboxer(model_input)
    for slot, frame in enumerate(frames[:2]):  # warm-up: scaler contexts, padding painted
        letterboxer.load(slot, frame)
    loads = list(itertools.islice(itertools.cycle(frames), 200))

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        for i, frame in enumerate(loads[:50]):
            letterboxer.load(i % 2, frame)
    allocated = sum(max(0, e.cpu_memory_usage) for e in profiled.events())
    assert allocated == 0, f"{allocated} bytes of tensors allocated over 50 frames"

    tracemalloc.start()
    try:
        for i, frame in enumerate(loads[:50]):
            letterboxer.load(i % 2, frame)
        before, _ = tracemalloc.get_traced_memory()
        for i, frame in enumerate(loads[50:]):
            letterboxer.load(i % 2, frame)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 4096, "150 more frames keep no Python memory"
    assert [slot.data_ptr() for slot in model_input] == addresses
    assert all(f._data is None for f in frames), "no frame was converted at full size"


def test_a_frame_converts_to_a_full_tensor_only_when_asked(tmp_path: Path) -> None:
    video = write_video(tmp_path / "clip.mp4", frames=3, width=160, height=96)
    reference = av.open(str(video))
    try:
        expected = next(reference.decode(video=0)).to_ndarray(format="rgb24")
    finally:
        reference.close()
    with VideoFileSource(video) as source:
        frame = next(iter(source))
    assert frame.device == torch.device("cpu") and frame._data is None
    assert np.array_equal(frame.data.numpy(), expected)
    assert frame.data is frame.data, "converted once, then kept"
    with pytest.raises(AttributeError, match="immutable"):
        frame.index = 3  # type: ignore[misc]


def test_decoder_threads_are_shared_out_among_the_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert [auto_threads(n, cores=2) for n in (1, 2, 4)] == [1, 1, 1]
    assert [auto_threads(n, cores=8) for n in (1, 2, 4)] == [4, 2, 1]
    assert [auto_threads(n, cores=64) for n in (1, 8, 16, 32, 100)] == [4, 4, 2, 1, 1]
    monkeypatch.setattr("vstream.cores.available_cores", lambda: 8)
    video = write_video(tmp_path / "clip.mp4", frames=2, width=64, height=48)
    cpu = torch.device("cpu")
    decoders = [PyAVDecoder(str(video), device=cpu) for _ in range(3)]
    try:
        # The n-th stream opened shares half the cores with the n-1 open before it.
        assert [d.threads for d in decoders] == [4, 2, 1]
        decoders.append(PyAVDecoder(str(video), device=cpu, threads=3))
        assert decoders[-1].threads == 3, "the user's number"
    finally:
        for decoder in decoders:
            decoder.close()
    again = PyAVDecoder(str(video), device=cpu)
    again.close()
    assert again.threads == 4, "closed decoders no longer count"
