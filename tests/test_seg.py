"""A segmentation model through the detector, the records, the drawing, cadence and zones.

The model is an ONNX graph with Ultralytics' segmentation layout whose outputs
are constants: one box whose mask (one prototype, positive on the left half of
the input) is known pixel by pixel. Ultralytics' own masks on video are
compared in tests/test_seg_parity.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from onnx_models import family_model

from vstream import Detector, Frame, PixelFormat
from vstream.analytics import AnalyticsConfig, StreamAnalytics, ZoneConfig
from vstream.annotate import Annotator
from vstream.masks import Mask, TrackMasks
from vstream.results import MASKS, PREDICTED, Detections, FrameResult

SIZE = 64
BOX = (20.0, 12.0, 40.0, 36.0)
"""x1, y1, x2, y2 of the one object, in the 64 x 64 frame (the input: no letterbox)."""


def seg_model(path: Path, end_to_end: bool = False) -> Path:
    """Two classes, one mask coefficient (5.0: as a class score it would win), prototypes
    ``[1, 1, 16, 16]`` at +1 on columns 0..7 and -1 on 8..15; YOLOv8's layout
    ``[B, 4+nc+nm, N]`` or, ``end_to_end``, YOLO26's ``[B, 300, 6+nm]``."""
    x1, y1, x2, y2 = BOX
    if end_to_end:
        rows = np.zeros((1, 300, 6 + 1), np.float32)
        rows[0, 0] = [x1, y1, x2, y2, 0.9, 1, 5.0]
    else:
        rows = np.zeros((1, 4 + 2 + 1, 84), np.float32)
        rows[0, :4, 7] = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
        rows[0, 4 + 1, 7] = 0.9
        rows[0, 6, 7] = 5.0
    protos = np.where(np.arange(16) < 8, 1.0, -1.0).astype(np.float32)
    protos = np.broadcast_to(protos, (1, 1, 16, 16)).copy()
    metadata = {"names": str({0: "a", 1: "b"}), "task": "segment", "stride": "32"}
    if end_to_end:
        metadata["end2end"] = "True"
    outputs = {"output0": rows, "output1": protos}
    return family_model(path, outputs, imgsz=(SIZE, SIZE), metadata=metadata)


def frame() -> Frame:
    data = torch.full((SIZE, SIZE, 3), 90, dtype=torch.uint8)
    return Frame(data, PixelFormat.RGB24, SIZE, SIZE, stream_id="cam")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seg_model(tmp_path_factory.mktemp("seg") / "seg.onnx")


@pytest.mark.parametrize("end_to_end", [False, True], ids=["yolov8", "end2end"])
def test_the_mask_is_the_box_where_the_logits_are_positive(
    tmp_path: Path, end_to_end: bool
) -> None:
    """Columns 20..39 of the box; frame column x samples prototype column (x + 0.5) / 4 - 0.5,
    positive up to x = 31 (7.375: 0.625 - 0.375 > 0), negative from x = 32."""
    detector = Detector(seg_model(tmp_path / "m.onnx", end_to_end), device="cpu")
    assert detector.output_format.value == ("end2end" if end_to_end else "yolov8")
    (result,) = detector.detect([frame()])
    (detection,) = result.detections
    assert (detection.class_id, detection.label) == (1, "b")
    assert detection.score == pytest.approx(0.9)
    (mask,) = result.detections.data[MASKS]
    assert (mask.x, mask.y, mask.width, mask.height) == (20, 12, 20, 24)
    expected = np.zeros((24, 20), bool)
    expected[:, : 32 - 20] = True
    assert (mask.window() == expected).all()
    (record,) = result.to_record()["detections"]
    assert record["area"] == 12 * 24 and set(record["mask"]) == {"size", "counts"}
    assert record["mask"]["size"] == [SIZE, SIZE]


def test_polygons_when_the_config_says_so(model: Path) -> None:
    (result,) = Detector(model, device="cpu", mask_format="polygon").detect([frame()])
    (record,) = result.to_record()["detections"]
    assert "mask" not in record and record["area"] == 12 * 24
    (ring,) = record["polygon"]
    xs, ys = ring[0::2], ring[1::2]
    assert (min(xs), max(xs), min(ys), max(ys)) == (20, 31, 12, 35)  # boundary pixel centres


def _frame_result(detections: Detections) -> FrameResult:
    return FrameResult("cam", 0, 0.0, SIZE, SIZE, detections)


def _with_masks(masks: list[Mask], boxes: list[tuple], tracks: list[int]) -> Detections:
    column = np.empty(len(masks), dtype=object)
    column[:] = masks
    return Detections(
        np.array(boxes, np.float32),
        np.full(len(boxes), 0.9, np.float32),
        np.zeros(len(boxes), np.int64),
        np.array(tracks),
        data={MASKS: column},
    )


def square(x: int, y: int, side: int, size: int = SIZE) -> Mask:
    return Mask(x, y, side, side, np.packbits(np.ones(side * side, bool)), size, size)


def test_masks_are_blended_in_the_box_colour_only_where_set() -> None:
    """A window's unset pixels leave the picture alone, even under another object's mask."""
    ring = np.ones((10, 10), bool)
    ring[3:7, 3:7] = False
    holed = Mask(10, 10, 10, 10, np.packbits(ring.reshape(-1)), SIZE, SIZE)
    inner = square(13, 13, 4)  # fills the hole, drawn after the holed window
    detections = _with_masks([holed, inner], [(10, 10, 20, 20), (40, 40, 50, 50)], [1, 2])
    annotator = Annotator(show_labels=False, show_status=False, mask_alpha=0.5)
    plain = Annotator(show_labels=False, show_status=False, mask_alpha=0.0)
    image = annotator.draw(frame().data.clone(), _frame_result(detections))
    boxes_only = plain.draw(frame().data.clone(), _frame_result(detections))
    colour = torch.tensor(annotator._scene(image.device, SIZE, SIZE).colours[0].tolist())
    blended = ((torch.tensor([90, 90, 90]) * 128 + colour * 128) >> 8).to(torch.uint8)
    assert (image[12, 12] == blended).all()  # the ring, inside its box outline
    assert (image[15, 15] == blended).all()  # the hole, filled by the other mask
    assert (image[30, 30] == 90).all()  # outside every window
    assert (image[:5] == boxes_only[:5]).all()  # above the objects nothing changes


def test_predicted_boxes_carry_the_last_mask_moved_with_the_box() -> None:
    masks = TrackMasks()
    detected = _with_masks([square(10, 10, 8)], [(10, 10, 18, 18)], [3])
    assert masks.carry(detected) is detected
    predicted = Detections(
        np.array([(14.4, 8.0, 22.4, 16.0), (40, 40, 50, 50)], np.float32),
        np.array([0.9, 0.8], np.float32),
        np.zeros(2, np.int64),
        np.array([3, 4]),
        data={PREDICTED: np.ones(2, bool)},
    )
    carried = masks.carry(predicted)
    moved, none = carried.data[MASKS]
    assert (moved.x, moved.y, moved.area) == (14, 8, 64) and none is None
    record = _frame_result(carried).to_record()["detections"][0]
    assert record["predicted"] is True and record["area"] == 64 and "mask" in record


class OneTrack:
    """The tracker's side of the zones' work: track 1 is live, of class 0."""

    def track_classes(self, track_ids: np.ndarray) -> np.ndarray:
        return np.zeros(len(track_ids), np.int64)

    def live_track_ids(self) -> frozenset[int]:
        return frozenset({1})


@pytest.mark.parametrize(("min_overlap", "inside"), [(0.7, 1), (0.8, 0)])
def test_a_zone_counts_by_mask_overlap_where_asked(min_overlap: float, inside: int) -> None:
    """3/4 of the mask is inside the zone; the anchor (bottom centre) is not."""
    zone = [[0, 0], [SIZE, 0], [SIZE, 16], [0, 16]]
    by_mask = ZoneConfig(name="z", points=zone, count_by="mask", min_overlap=min_overlap)
    by_anchor = ZoneConfig(name="y", points=zone)
    config = AnalyticsConfig(zones=[by_mask, by_anchor], min_seconds_on_side=0.0)
    analytics = StreamAnalytics(config, ["a"], tracker=OneTrack())  # type: ignore[arg-type]
    mask = square(20, 4, 16)  # rows 4..19: 12 of 16 inside (y < 16)
    update = analytics.observe(
        np.array([1]), np.array([[20.0, 4.0, 36.0, 30.0]]), 0.0, (SIZE, SIZE), masks=[mask]
    )
    assert update.zone_occupancy == {"z": inside, "y": 0}
    without = analytics.observe(np.array([1]), np.array([[20.0, 4.0, 36.0, 30.0]]), 0.1)
    assert without.zone_occupancy == {"z": 0, "y": 0}, "no mask: placed by the anchor"
