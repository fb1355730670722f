"""Instance masks: made on the device for kept boxes, bit-packed, written as COCO RLE or polygons.

Oracles: pycocotools' RLE (tests/data/coco_rle.json, made by tools/seg/coco_rle.py),
torch's bilinear ``F.interpolate`` for the resampling rule, OpenCV's ``fillPoly`` for the
polygons. Ultralytics' own masks on video are in tests/test_seg_parity.py.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vstream.masks import Mask, box_windows, coco_rle, packed_offsets, polygons, unpack_masks
from vstream.postprocess.masks import mask_bits

RLE_CASES = json.loads((Path(__file__).parent / "data" / "coco_rle.json").read_text())["cases"]


def _mask(case: dict, fmt: str = "rle") -> Mask:
    x, y, w, h = case["window"]
    bits = np.frombuffer(base64.b64decode(case["bits"]), np.uint8)
    return Mask(x, y, w, h, bits, *case["frame"], fmt)


@pytest.mark.parametrize("case", RLE_CASES, ids=lambda c: f"{c['frame']}-{c['window']}")
def test_rle_and_area_are_pycocotools(case: dict) -> None:
    mask = _mask(case)
    assert coco_rle(mask) == {"size": case["size"], "counts": case["counts"]}
    assert mask.area == case["area"]
    assert mask.record() == {"area": case["area"], "mask": coco_rle(mask)}


def test_polygons_fill_back_to_the_mask() -> None:
    for case in RLE_CASES:
        mask = _mask(case, "polygon")
        if mask.area < 200:
            continue
        width, height = case["frame"]
        drawn = np.zeros((height, width), np.uint8)
        rings = [np.array(p).reshape(-1, 2).round().astype(np.int32) for p in polygons(mask)]
        cv2.fillPoly(drawn, rings, 1)
        full = np.zeros((height, width), bool)
        full[mask.y : mask.y + mask.height, mask.x : mask.x + mask.width] = mask.window()
        # Outer contours only: a ring's hole is filled; the outline covers its own pixels.
        assert (drawn.astype(bool) | ~full).all()
        assert mask.record()["area"] == mask.area and "polygon" in mask.record()


def test_windows_are_the_pixels_a_box_crops() -> None:
    """Ultralytics keeps column c where x1 <= c < x2: ceil(x1) .. ceil(x2) - 1."""
    windows = box_windows(np.array([[10.0, 5.2, 20.0, 9.0], [0.0, 0.0, 0.5, 0.0]]))
    assert windows.tolist() == [[10, 6, 10, 3], [0, 0, 1, 0]]
    assert packed_offsets(windows).tolist() == [0, 4, 4]


def test_masks_are_the_bilinear_logits_above_zero_in_the_box() -> None:
    """With a stretch (no bars) the rule is F.interpolate(logits, frame size) > 0, cropped."""
    generator = torch.Generator().manual_seed(0)
    nm, mh, mw = 8, 20, 24
    protos = torch.randn((2, nm, mh, mw), generator=generator)
    coefficients = torch.randn((3, nm), generator=generator)
    frame = np.array([0, 0, 1])
    sizes = [(150, 120), (150, 120)]  # (width, height) of the two frames
    boxes = np.array([[3.3, 7.9, 60.2, 44.0], [50.0, 60.0, 150.0, 120.0], [0.0, 0.0, 31.5, 17.5]])
    windows = box_windows(boxes)
    packed = mask_bits(protos, coefficients, frame, windows, sizes, letterbox=False)
    masks = unpack_masks(packed.numpy(), windows, [sizes[0]] * 3, "rle")
    for k, (mask, (x, y, w, h)) in enumerate(zip(masks, windows.tolist(), strict=True)):
        logits = torch.einsum("c,chw->hw", coefficients[k], protos[frame[k]])
        full = F.interpolate(logits[None, None], (120, 150), mode="bilinear")[0, 0] > 0
        expected = full[y : y + h, x : x + w].numpy()
        assert (mask.x, mask.y, mask.width, mask.height) == (x, y, w, h)
        assert (mask.window() != expected).mean() < 0.002, k  # float rounding at the edge only
        assert mask.window().any() and not mask.window().all()
    assert packed.dtype == torch.uint8 and packed.numel() == packed_offsets(windows)[-1]


def test_a_moved_mask_keeps_its_bits_inside_the_frame() -> None:
    mask = Mask(5, 4, 6, 3, np.packbits(np.arange(18) % 3 == 0), 12, 10)
    moved = mask.moved(1, -2)
    assert (moved.x, moved.y, moved.width, moved.height) == (6, 2, 6, 3)
    assert moved.area == mask.area and (moved.window() == mask.window()).all()
    cut = mask.moved(4, -5)  # past the right edge (x 9..14 of 12) and the top (y -1..1)
    assert (cut.x, cut.y, cut.width, cut.height) == (9, 0, 3, 2)
    assert (cut.window() == mask.window()[1:, :3]).all()
    assert mask.moved(20, 0).area == 0 and mask.moved(20, 0).width == 0
