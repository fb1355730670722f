"""Letterbox geometry and box mapping follow the Ultralytics convention."""

from __future__ import annotations

import pytest
import torch

from vstream.config import PostprocessOptions
from vstream.frame import Frame, PixelFormat
from vstream.postprocess import OutputFormat, Postprocessor
from vstream.preprocess import PAD_VALUE, Letterboxer, LetterboxGeometry

# (source w, h, imgsz) -> (resized w, h, left, top, box pad x, box pad y), worked out by hand:
# gain = min(imgsz / h, imgsz / w); resized = round-half-even(size * gain); the total padding
# is split with the smaller half first (Ultralytics' round(d/2 - 0.1), round(d/2 + 0.1)).
CASES = {
    (854, 480, 640): (640, 360, 0, 140, 0, 140),
    (854, 480, 320): (320, 180, 0, 70, 0, 70),
    (480, 848, 640): (362, 640, 139, 0, 139, 0),
    (480, 848, 320): (181, 320, 69, 0, 69, 0),
    (1920, 1080, 640): (640, 360, 0, 140, 0, 140),
    (1920, 1080, 320): (320, 180, 0, 70, 0, 70),
    (641, 479, 640): (640, 478, 0, 81, 0, 81),
    (100, 100, 320): (320, 320, 0, 0, 0, 0),
}


@pytest.mark.parametrize(("case", "expected"), CASES.items(), ids=lambda v: str(v))
def test_geometry_matches_ultralytics(case: tuple[int, int, int], expected: tuple) -> None:
    w, h, size = case
    g = LetterboxGeometry.fit(w, h, size, size)
    assert g.gain == pytest.approx(min(size / h, size / w))
    got = (g.resized_width, g.resized_height, g.left, g.top, g.box_pad_x, g.box_pad_y)
    assert got == expected


def test_geometry_rejects_empty_sizes() -> None:
    with pytest.raises(ValueError, match="0x480"):
        LetterboxGeometry.fit(0, 480, 640, 640)


@pytest.mark.parametrize(("w", "h", "size"), [(854, 480, 640), (480, 848, 320), (1920, 1080, 320)])
def test_letterbox_pixels_land_in_the_window(w: int, h: int, size: int) -> None:
    buffer = torch.zeros((2, 3, size, size))
    letterboxer = Letterboxer(buffer)
    white = Frame(torch.full((h, w, 3), 255, dtype=torch.uint8), PixelFormat.RGB24, w, h)
    g = letterboxer.load(1, white)
    window = buffer[1, :, g.top : g.top + g.resized_height, g.left : g.left + g.resized_width]
    assert torch.allclose(window, torch.ones_like(window))
    outside = buffer[1].clone()
    outside[:, g.top : g.top + g.resized_height, g.left : g.left + g.resized_width] = (
        PAD_VALUE / 255
    )
    assert torch.allclose(outside, torch.full_like(outside, PAD_VALUE / 255))
    assert torch.count_nonzero(buffer[0]) == 0, "only the requested slot is written"


def test_letterbox_resizes_like_bilinear_interpolation() -> None:
    """On the CPU the resize runs on uint8: whole levels, within one of float bilinear."""
    torch.manual_seed(0)
    image = torch.randint(0, 256, (90, 160, 3), dtype=torch.uint8)
    buffer = torch.empty((1, 3, 64, 64))
    g = Letterboxer(buffer).load(0, Frame(image, PixelFormat.RGB24, 160, 90))
    reference = (
        torch.nn.functional.interpolate(
            image.permute(2, 0, 1)[None].float(),
            size=(36, 64),
            mode="bilinear",
            align_corners=False,
        )[0]
        / 255
    )
    assert (g.resized_width, g.resized_height, g.top) == (64, 36, 14)
    window = buffer[0, :, 14:50, :]
    assert torch.allclose(window, reference, atol=1.001 / 255)
    levels = window * 255
    assert torch.allclose(levels, levels.round(), atol=1e-4)


def test_padding_is_repainted_when_a_slot_changes_size() -> None:
    buffer = torch.empty((1, 3, 64, 64))
    letterboxer = Letterboxer(buffer)
    letterboxer.load(
        0, Frame(torch.zeros((64, 64, 3), dtype=torch.uint8), PixelFormat.RGB24, 64, 64)
    )
    assert torch.count_nonzero(buffer) == 0
    letterboxer.load(
        0, Frame(torch.zeros((32, 64, 3), dtype=torch.uint8), PixelFormat.RGB24, 64, 32)
    )
    assert torch.allclose(buffer[0, :, :16], torch.full((3, 16, 64), PAD_VALUE / 255))


def test_frame_on_another_device_is_refused() -> None:
    buffer = torch.empty((1, 3, 64, 64), device="meta")
    frame = Frame(torch.zeros((8, 8, 3), dtype=torch.uint8), PixelFormat.RGB24, 8, 8)
    with pytest.raises(ValueError, match="model input is on meta"):
        Letterboxer(buffer).load(0, frame)


@pytest.mark.parametrize(("w", "h", "size"), [(854, 480, 640), (480, 848, 320), (1920, 1080, 640)])
def test_boxes_map_back_to_original_pixels(w: int, h: int, size: int) -> None:
    """A box drawn in original pixels, moved into input pixels by hand, comes back unchanged.

    By hand as Ultralytics' ``scale_boxes`` (8.4) undoes it: each axis scaled by the size the
    picture was rounded to, offset by the padding painted."""
    g = LetterboxGeometry.fit(w, h, size, size)
    gain = min(size / h, size / w)
    new_w, new_h = round(w * gain), round(h * gain)
    gain_x, gain_y = new_w / w, new_h / h
    pad_x = round((size - new_w) / 2 - 0.1)
    pad_y = round((size - new_h) / 2 - 0.1)
    x1, y1, x2, y2 = 0.2 * w, 0.3 * h, 0.6 * w, 0.9 * h
    cx, cy = (x1 + x2) / 2 * gain_x + pad_x, (y1 + y2) / 2 * gain_y + pad_y
    bw, bh = (x2 - x1) * gain_x, (y2 - y1) * gain_y
    raw = torch.zeros((1, 5, 3))
    raw[0, :, 0] = torch.tensor([cx, cy, bw, bh, 0.9])
    post = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), torch.device("cpu"))
    dets = post(raw, [g])
    assert dets.shape == (1, 7)
    assert dets[0, 1:5].tolist() == pytest.approx([x1, y1, x2, y2], abs=1e-3)


def test_boxes_are_clipped_to_the_frame() -> None:
    g = LetterboxGeometry.fit(854, 480, 640, 640)
    raw = torch.zeros((1, 5, 1))
    raw[0, :, 0] = torch.tensor([10.0, 140.0, 100.0, 100.0, 0.9])  # spills left and above
    dets = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), torch.device("cpu"))(raw, [g])
    x1, y1, x2, y2 = dets[0, 1:5].tolist()
    assert (x1, y1) == (0.0, 0.0)
    assert x2 == pytest.approx(60 / g.gain_x, abs=1e-3)
    assert y2 == pytest.approx(50 / g.gain_y, abs=1e-3)  # 360 rows for 480: 0.75


def test_what_is_made_per_size_is_made_once_and_the_least_recent_dropped() -> None:
    """Plans, scaling contexts and the kernel's taps: a few sizes kept, each made once."""
    from vstream.preprocess.recent import Recent

    made: list[str] = []

    def maker(key: str):
        return lambda: made.append(key) or key.upper()

    recent: Recent[str, str] = Recent(2)
    assert [recent.get(k, maker(k)) for k in "abab"] == ["A", "B", "A", "B"]
    assert made == ["a", "b"]
    recent.get("a", maker("a"))  # a used last: b is the least recent
    recent.get("c", maker("c"))
    assert sorted(recent.values()) == ["A", "C"] and len(recent) == 2
    recent.get("b", maker("b"))
    assert made == ["a", "b", "c", "b"]


def test_a_resampler_keeps_the_plans_of_its_last_sizes() -> None:
    from vstream.frame import ColourSpace
    from vstream.preprocess.resample import MAX_PLANS, Resampler

    resampler = Resampler()
    out = torch.empty(1, 3, 8, 8)
    sizes = [(16 + 2 * i, 16) for i in range(MAX_PLANS + 3)]
    held = []
    for width, height in sizes:
        picture = torch.zeros(height * 3 // 2, width, dtype=torch.uint8)
        resampler.resample([picture], PixelFormat.NV12, (width, height), ColourSpace(), out)
        held.append(resampler.scratch_bytes)
    assert held[MAX_PLANS - 1] > held[MAX_PLANS - 2]  # still growing up to the bound
    assert held[-1] == held[-2] == held[-3]  # then each new size replaces the oldest
