"""Keypoints and oriented boxes: the same answers as Ultralytics' ``predict``, and what they feed.

The pose and OBB models are the parity detector grown into Ultralytics' layouts
(``onnx_models.task_model``: keypoints and angles computed from each row), built
here from the committed parity model; ``tools/parity/tasks.py`` stored
Ultralytics' answers for the very same files (their SHA-256 is checked) under
``tests/data/tasks/``. Ultralytics is never imported here.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx_models import TASK_KEYPOINTS, constant_output_model, task_model

from vstream import Detector, Frame, ModelError, PixelFormat, detect
from vstream.analytics import AnalyticsConfig, StreamAnalytics
from vstream.analytics.geometry import rotated_iou_matrix
from vstream.analytics.shapes import ShapeMemory, keypoint_indices
from vstream.assets import ASSETS_DIR, COLOUR_MODEL
from vstream.cli import main
from vstream.config import PipelineConfig, PostprocessOptions
from vstream.engine.pipeline import Pipeline
from vstream.parity import MATCH_IOU, REQUIRED, agreement, keypoint_distances
from vstream.postprocess import OutputFormat, Postprocessor
from vstream.postprocess.formats import OutputInfo, class_count
from vstream.postprocess.nms import probabilistic_iou, rotated_nms
from vstream.postprocess.tasks import Task, TaskSpec, recognise_model
from vstream.preprocess import LetterboxGeometry
from vstream.results import KEYPOINTS, OBB, rotated_corners

DATA = Path(__file__).parent / "data" / "tasks"
PARITY = ASSETS_DIR / "parity"
SOURCE = PARITY / "demo_tempered.onnx"


def fixture(task: str) -> dict:
    (path,) = DATA.glob(f"*.{task}.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="session")
def task_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pose and OBB models, built as the references were (the same bytes)."""
    folder = tmp_path_factory.mktemp("task_models")
    models = {task: task_model(SOURCE, folder / f"{task}.onnx", task) for task in ("pose", "obb")}
    for task, path in models.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == fixture(task)["model_sha256"]
    return models


def run(model: Path, reference: dict, **options: object) -> list[list[dict]]:
    """vstream on the reference's video with its arguments: each frame's detection records."""
    args = reference["arguments"]
    results = detect(
        PARITY / reference["video"],
        model=model,
        imgsz=args["imgsz"],
        conf=args["conf"],
        iou=args["iou"],
        max_det=args["max_det"],
        device="cpu",
        **options,
    )
    return [result.detections.records() for result in results]


def test_keypoints_are_ultralytics_keypoints(task_models: dict[str, Path]) -> None:
    reference = fixture("pose")
    theirs = [frame["detections"] for frame in reference["frames"]]
    ours = run(task_models["pose"], reference)
    score = agreement(ours, theirs)
    assert score.reference > 300 and score.recall >= REQUIRED, str(score)
    assert score.precision >= REQUIRED, str(score)
    distances = keypoint_distances(ours, theirs)
    assert len(distances) > 400, "enough visible keypoints to measure"
    assert distances.mean() <= 1.0 and np.quantile(distances, 0.99) <= 1.0, distances.max()
    # What the records hold: every object's keypoints, named by the metadata.
    assert all(len(d["keypoints"]) == len(TASK_KEYPOINTS) for frame in ours for d in frame)
    assert Detector(task_models["pose"], device="cpu").keypoint_names == TASK_KEYPOINTS


def test_oriented_boxes_are_ultralytics_oriented_boxes(task_models: dict[str, Path]) -> None:
    reference = fixture("obb")
    theirs = [frame["detections"] for frame in reference["frames"]]
    # A secondary model reads each object's crop, cut by the box around the rotated box.
    ours = run(task_models["obb"], reference, secondary=[COLOUR_MODEL])
    score = agreement(ours, theirs, MATCH_IOU, key="obb")
    assert score.reference > 300, str(score)
    assert score.recall >= REQUIRED and score.precision >= REQUIRED, str(score)
    for frame in ours:
        for d in frame:  # the corners are the box's, and the bbox holds them
            corners = np.asarray(d["corners"])
            assert np.allclose(corners, rotated_corners(np.array(d["obb"]))[0], atol=0.02)
            x1, y1, x2, y2 = d["bbox"]
            assert x1 <= x2 and y1 <= y2
            assert d["attributes"]["colour"]["fresh"] is True


def test_fast_nms_drops_what_any_better_box_overlaps() -> None:
    """Fast NMS, as the reference runs it for oriented boxes: a box suppressed by a better
    one still suppresses the next (greedy NMS would keep C below)."""
    a = [0.0, 0.0, 10.0, 10.0, 0.0]
    b = [3.0, 0.0, 10.0, 10.0, 0.0]  # overlaps A
    c = [6.0, 0.0, 10.0, 10.0, 0.0]  # overlaps B, not A
    rotated = torch.tensor([a, b, c])
    iou = probabilistic_iou(rotated, rotated)
    assert iou[0, 1] > 0.5 and iou[1, 2] > 0.5 and iou[0, 2] < 0.5, iou
    kept = rotated_nms(rotated, torch.tensor([0.9, 0.8, 0.7]), torch.zeros(3), 0.5)
    assert kept.tolist() == [0]
    groups = torch.tensor([0, 0, 1])  # C alone in its class: nothing better overlaps it
    assert rotated_nms(rotated, torch.tensor([0.9, 0.8, 0.7]), groups, 0.5).tolist() == [0, 2]


def test_probabilistic_iou_of_rotated_boxes() -> None:
    """The Bhattacharyya-Hellinger similarity of the boxes' Gaussians: 1 for the same box,
    unchanged by a quarter turn with width and height swapped, falling with distance, and
    for a square turned 45 degrees, the value of the paper's closed form."""
    box = torch.tensor([[50.0, 40.0, 30.0, 10.0, 0.3]])
    turned = torch.tensor([[50.0, 40.0, 10.0, 30.0, 0.3 + math.pi / 2]])
    assert probabilistic_iou(box, box).item() == pytest.approx(1.0, abs=1e-3)
    assert probabilistic_iou(box, turned).item() == pytest.approx(1.0, abs=1e-3)
    far = torch.tensor([[500.0, 40.0, 30.0, 10.0, 0.3]])
    assert probabilistic_iou(box, far).item() == pytest.approx(0.0, abs=1e-3)
    # Two w x h boxes, centres dx apart along x, no rotation: B = dx^2 / (8 w^2 / 12 * ... )
    w, h, dx = 12.0, 6.0, 4.0
    a = torch.tensor([[0.0, 0.0, w, h, 0.0]])
    b = torch.tensor([[dx, 0.0, w, h, 0.0]])
    bhattacharyya = dx**2 / 8 / (w**2 / 12)
    expected = 1 - math.sqrt(1 - math.exp(-bhattacharyya))
    assert probabilistic_iou(a, b).item() == pytest.approx(expected, abs=1e-4)


def test_rotated_iou_is_the_overlap_of_the_areas() -> None:
    square = np.array([[0.0, 0.0, 10.0, 10.0, 0.0]])
    turned = np.array([[0.0, 0.0, 10.0, 10.0, math.pi / 4]])
    assert rotated_iou_matrix(square, turned)[0, 0] == pytest.approx(math.sqrt(2) / 2, abs=1e-6)
    shifted = np.array([[5.0, 0.0, 10.0, 10.0, 0.0]])
    assert rotated_iou_matrix(square, shifted)[0, 0] == pytest.approx(1 / 3)


# The end-to-end layouts (YOLO26 with nms=False): Ultralytics' own exports, untrained, give
# [B, 300, 6 + 17 x 3] (x1 y1 x2 y2 score class keypoints) and [B, 300, 7] (cx cy w h score
# class angle), metadata end2end=True (tools/families/export.py exports and checks them).
E2E_METADATA = {"names": "{0: 'person', 1: 'car'}", "imgsz": "[320, 320]", "end2end": "True"}


def odd_frame() -> Frame:
    return Frame(torch.zeros((479, 641, 3), dtype=torch.uint8), PixelFormat.RGB24, 641, 479)


def to_input(points: np.ndarray) -> np.ndarray:
    """Frame pixels ``(N, 2)`` as :func:`odd_frame`'s letterbox puts them in a 320 input."""
    g = LetterboxGeometry.fit(641, 479, 320, 320, "letterbox")
    return points * [g.gain_x, g.gain_y] + [g.box_pad_x, g.box_pad_y]


def test_end_to_end_pose_rows_map_to_frame_pixels(tmp_path: Path) -> None:
    rows = np.zeros((1, 300, 6 + 17 * 3), np.float32)
    rows[0, 0, :4] = to_input(np.array([[10.0, 50.0], [200.0, 400.0]])).ravel()
    rows[0, 0, 4:6] = [0.9, 1]
    points = np.stack([np.linspace(-20, 180, 17), np.linspace(60, 500, 17)], axis=1)
    scores = np.linspace(0, 1, 17)[:, None]
    rows[0, 0, 6:] = np.concatenate([to_input(points), scores], axis=1).ravel()
    metadata = {**E2E_METADATA, "task": "pose", "kpt_shape": "[17, 3]"}
    model = constant_output_model(tmp_path / "pose.onnx", rows, metadata=metadata)
    detector = Detector(model, device="cpu", batch_size=1)
    assert detector.output_format.value == "end2end" and detector.task.task.value == "pose"
    assert detector.keypoint_names[15:] == ("left_ankle", "right_ankle")
    (result,) = detector.detect([odd_frame()])
    (found,) = result.detections.records()
    assert found["bbox"] == pytest.approx([10, 50, 200, 400], abs=0.01)
    kpts = np.asarray(found["keypoints"])
    inside = np.clip(points, 0, [641, 479])  # clipped to the frame, as boxes are
    assert np.allclose(kpts[:, :2], inside, atol=0.01)
    assert kpts[:, 2] == pytest.approx(scores[:, 0], abs=1e-4)
    assert result.detections.data[KEYPOINTS].shape == (1, 17, 3)


def test_end_to_end_oriented_rows_map_to_frame_pixels(tmp_path: Path) -> None:
    rows = np.zeros((1, 300, 7), np.float32)
    g = LetterboxGeometry.fit(641, 479, 320, 320, "letterbox")
    centre = to_input(np.array([[300.0, 200.0]]))[0]
    rows[0, 0] = [*centre, 100 * g.gain_x, 40 * g.gain_y, 0.8, 0, 0.5]
    model = constant_output_model(
        tmp_path / "obb.onnx", rows, metadata={**E2E_METADATA, "task": "obb"}
    )
    detector = Detector(model, device="cpu", batch_size=1)
    assert detector.output_format.value == "end2end" and detector.task.task.value == "obb"
    (result,) = detector.detect([odd_frame()])
    (found,) = result.detections.records()
    assert found["obb"] == pytest.approx([300, 200, 100, 40, 0.5], abs=0.01)
    corners = np.asarray(found["corners"])
    assert found["bbox"] == pytest.approx([*corners.min(0), *corners.max(0)], abs=0.02)
    assert result.detections.data[OBB].shape == (1, 5)


LAYOUTS = json.loads(
    (Path(__file__).parent / "data" / "ultralytics_task_layouts.json").read_text()
)["models"]


@pytest.mark.parametrize(
    ("name", "family", "extra"),
    [
        ("yolov8n-pose", "yolov8", 51),
        ("yolo11n-pose", "yolov8", 51),
        ("yolo26n-pose", "yolov8", 51),
        ("yolo26n-pose-end2end", "end2end", 51),
        ("yolov8n-obb", "yolov8", 1),
        ("yolo11n-obb", "yolov8", 1),
        ("yolo26n-obb", "yolov8", 1),
        ("yolo26n-obb-end2end", "end2end", 1),
    ],
)
def test_ultralytics_pose_and_obb_layouts(name: str, family: str, extra: int) -> None:
    """Ultralytics' own exports (untrained; tools/seg/layouts.py recorded their outputs)."""
    layout = LAYOUTS[name]
    outputs = [OutputInfo(n, tuple(shape)) for n, shape in layout["outputs"]]
    task, found = recognise_model(outputs, (320, 320), layout["metadata"])
    assert task.task.value == layout["metadata"]["task"] and task.extra == extra
    assert found.format.value == family
    names = len(ast.literal_eval(layout["metadata"]["names"]))
    shape = task.detection_shape(outputs[0].shape)
    assert class_count(found.format, [shape]) in (names, None)


def test_a_dense_pose_model_is_refused_plainly_when_names_do_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's first report: 1 class name for 52 "classes" (the keypoints counted)."""
    rows = np.zeros((1, 4 + 1 + 17 * 3, 2100), np.float32)
    metadata = {"names": "{0: 'person'}", "task": "pose", "kpt_shape": "[17, 3]"}
    model = constant_output_model(tmp_path / "pose.onnx", rows, metadata=metadata)
    detector = Detector(model, device="cpu", batch_size=1)
    assert detector.class_names == {0: "person"} and detector.task.keypoints == (17, 3)
    assert main(["info", str(model)]) == 0
    printed = capsys.readouterr().out
    assert "task:     pose" in printed and "keypoints: 17: nose, left_eye," in printed
    wrong = {**metadata, "names": "{0: 'a', 1: 'b'}"}
    with pytest.raises(Exception, match="2 class names for a model with 1 classes"):
        Detector(constant_output_model(tmp_path / "bad.onnx", rows, metadata=wrong), device="cpu")


def test_predicted_frames_carry_keypoints_moved_with_their_boxes(
    task_models: dict[str, Path],
) -> None:
    """Under ``detect_every`` the frames between detections carry each track's last keypoints,
    moved with its predicted box and marked predicted: nearer the reference's keypoints of
    that very frame than the last detected ones left where they were."""
    reference = fixture("pose")
    theirs = [frame["detections"] for frame in reference["frames"]]
    ours = run(task_models["pose"], reference, detect_every=3)
    predicted = [[d for d in frame if d.get("predicted")] for frame in ours]
    carried = sum(len(frame) for frame in predicted)
    assert carried > 100 and all("keypoints" in d for frame in predicted for d in frame)
    moved = keypoint_distances(predicted, theirs, min_iou=0.5)
    # The same keypoints, not moved: each track's last detected ones.
    last: dict[int, list] = {}
    still = []
    for frame in ours:
        still.append([{**d, "keypoints": last.get(d["track_id"])} for d in frame
                      if d.get("predicted") and d["track_id"] in last])  # fmt: skip
        last.update(
            {
                d["track_id"]: d["keypoints"]
                for d in frame
                if "track_id" in d and "predicted" not in d
            }
        )
    unmoved = keypoint_distances(still, theirs, min_iou=0.5)
    assert len(moved) > 200 and moved.mean() < 0.6 * unmoved.mean(), (moved.mean(), unmoved.mean())


def test_anchor_keypoints_put_the_ankles_on_the_line() -> None:
    """A person whose box ends below the line all along crosses it by the ankles' midpoint."""
    config = AnalyticsConfig.model_validate(
        {
            "lines": [{"name": "gate", "start": [0, 100], "end": [400, 100]}],
            "anchor_keypoints": ["left_ankle", "right_ankle"],
            "min_seconds_on_side": 0.0,
        }
    )
    names = ("head", "left_ankle", "right_ankle")
    by_box = StreamAnalytics(config.model_copy(update={"anchor_keypoints": None}))
    by_ankles = StreamAnalytics(config, keypoint_names=names)
    assert by_ankles.anchor_keypoints == (1, 2)
    counts = {}
    for analytics in (by_box, by_ankles):
        for step in range(30):
            y = 40 + 4 * step  # the ankles walk from y 40 to 156, the box's bottom stays below
            box = np.array([[100.0, 0.0, 140.0, 200.0]])
            kpts = np.array([[[120, 10, 0.9], [110, y, 0.9], [130, y + 2, 0.8]]])
            if step == 10:
                kpts[0, 1, 2] = 0.1  # one ankle hidden: the other stands in
            ids = analytics.track(box, np.array([0.9]), np.array([0]), step / 25)
            update = analytics.observe(ids, box, step / 25, (400, 300), keypoints=kpts)
        counts[analytics is by_ankles] = update.line_counts["gate"]
    assert counts[False] == {"in": 0, "out": 0}
    assert counts[True] == {"in": 1, "out": 0}
    with pytest.raises(ValueError, match="no keypoint 'nose'; its keypoints are head"):
        keypoint_indices(["nose"], names)
    assert keypoint_indices(["2", "head"], names) == (2, 0)


def test_shapes_are_kept_only_for_live_tracks() -> None:
    memory = ShapeMemory()

    def unasked() -> set[int]:
        raise AssertionError("a model without shapes has no need of the live tracks")

    memory.remember(np.array([1, 2]), np.zeros((2, 4)), {}, live=unasked)
    box = np.array([[0.0, 0.0, 10.0, 20.0], [50.0, 50.0, 60.0, 60.0]])
    points = np.array([[[5.0, 20.0, 0.9]], [[55.0, 55.0, 0.9]]], np.float32)
    memory.remember(np.array([1, 2]), box, {KEYPOINTS: points}, live=lambda: {1, 2})
    moved = memory.carry(np.array([1]), np.array([[10.0, 0.0, 30.0, 20.0]]))
    assert moved[KEYPOINTS][0, 0].tolist() == pytest.approx([20.0, 20.0, 0.9])  # x doubled
    memory.remember(np.array([1]), box[:1], {KEYPOINTS: points[:1]}, live=lambda: {1})
    assert len(memory) == 1, "a forgotten track's shapes go with it"


def test_a_keypoint_the_model_lacks_fails_the_pipeline_at_start(tmp_path: Path) -> None:
    rows = np.zeros((1, 300, 6 + 17 * 3), np.float32)
    metadata = {**E2E_METADATA, "task": "pose", "kpt_shape": "[17, 3]"}
    model = constant_output_model(tmp_path / "pose.onnx", rows, metadata=metadata)
    config = PipelineConfig.model_validate(
        {
            "name": "people",
            "model": {"path": str(model)},
            "runtime": {"device": "cpu"},
            "analytics": {"anchor_keypoints": ["left_ankle", "left_toe"]},
            "sinks": [{"type": "stdout"}],
        }
    )
    with pytest.raises(ModelError) as error:
        Pipeline.from_config(config)
    assert str(error.value).startswith(
        "pipeline people: analytics.anchor_keypoints: the model has no keypoint 'left_toe'; "
        "its keypoints are nose, left_eye,"
    )


def _painted(image: torch.Tensor) -> np.ndarray:
    return (image.numpy() != 0).any(axis=2)


def _near(a: np.ndarray, b: np.ndarray, pixels: int) -> float:
    """Share of ``a``'s pixels within ``pixels`` of one of ``b``'s."""
    import cv2

    grown = cv2.dilate(b.astype(np.uint8), np.ones((2 * pixels + 1,) * 2, np.uint8)) > 0
    return float((a & grown).sum() / max(1, a.sum()))


def test_rotated_boxes_and_skeletons_are_drawn_where_opencv_draws_them() -> None:
    """OpenCV draws the same corners and limbs as the oracle: the strokes coincide (within a
    pixel of each other's), and a limb with an end not visible is not drawn."""
    import cv2

    from vstream.annotate import Annotator
    from vstream.results import Detections, FrameResult

    width, height = 320, 240
    rotated = np.array([[160.0, 120.0, 150.0, 60.0, 0.6]], np.float32)
    corners = rotated_corners(rotated)
    hull = np.concatenate([corners.min(1), corners.max(1)], axis=1)
    boxed = Detections(hull, [0.9], [0], data={OBB: rotated})
    annotator = Annotator(show_labels=False, show_status=False, skeleton=[(0, 1), (1, 2)])
    image = torch.zeros((height, width, 3), dtype=torch.uint8)
    annotator.draw(image, FrameResult("s", 0, 0.0, width, height, boxed))
    ours = _painted(image)
    theirs = np.zeros((height, width), np.uint8)
    cv2.polylines(theirs, [np.round(corners[0]).astype(np.int32)], True, 1, thickness=2)
    assert _near(ours, theirs > 0, 1) > 0.98 and _near(theirs > 0, ours, 1) > 0.98
    assert not ours[int(hull[0, 1]) + 1, int(hull[0, 0]) + 1], "the hull's corner stays clear"

    points = np.array([[[40, 40, 0.9], [120, 200, 0.8], [280, 60, 0.2]]], np.float32)
    posed = Detections([[30, 30, 290, 210]], [0.9], [0], data={KEYPOINTS: points})
    image = torch.zeros((height, width, 3), dtype=torch.uint8)
    annotator.draw(image, FrameResult("s", 0, 0.0, width, height, posed))
    ours = _painted(image)
    box = np.zeros((height, width), np.uint8)
    cv2.rectangle(box, (30, 30), (289, 209), 1, thickness=2)
    limbs = np.zeros((height, width), np.uint8)
    cv2.line(limbs, (40, 40), (120, 200), 1, thickness=2)
    assert _near(limbs > 0, ours, 1) > 0.98, "the limb between two visible keypoints"
    hidden = np.zeros((height, width), np.uint8)
    cv2.line(hidden, (140, 180), (260, 80), 1, thickness=1)  # inside the limb (1, 2), ends off
    assert _near(hidden > 0, ours & ~(box > 0), 0) == 0, "no limb to a keypoint not visible"


def dense_rows(rows: list[list[float]], task: TaskSpec) -> torch.Tensor:
    """A one-class YOLOv8-layout output ``[1, 4 + 1 + extra, 8]`` whose first anchors hold
    ``rows`` (``cx, cy, w, h, score``, then the task's values)."""
    output = torch.zeros((1, 5 + task.extra, 8))
    output[0, :, : len(rows)] = torch.tensor(rows).reshape(-1, 5 + task.extra).T
    return output


@pytest.mark.parametrize(
    ("task", "broken"),
    [
        (TaskSpec(Task.OBB, extra=1), [[math.nan], [math.inf]]),
        (
            TaskSpec(Task.POSE, extra=6, keypoints=(2, 3)),
            [[math.nan, 50, 0.9, 60, 60, 0.9], [40, 50, 0.9, 60, 60, -math.inf]],
        ),
        (TaskSpec(Task.POSE, extra=4, keypoints=(2, 2)), [[40, 50, math.inf, 60], [math.nan] * 4]),
    ],
    ids=["obb angle", "pose keypoints", "pose keypoints without scores"],
)
def test_rows_with_a_non_finite_angle_or_keypoint_are_no_detections(
    task: TaskSpec, broken: list[list[float]]
) -> None:
    """An fp16 head's overflow in what the task adds: a NaN angle made the whole oriented box
    NaN (``null`` in the records, and it suppressed nothing), a NaN keypoint reached the
    records. Such rows are dropped, as rows with a non-finite box are, and only they."""
    finite = [0.5] * task.extra
    boxes = [[100, 100, 40, 20, 0.9], [200, 200, 40, 20, 0.8], [260, 60, 40, 20, 0.7]]
    values = [*broken, finite]
    output = dense_rows([box + extra for box, extra in zip(boxes, values, strict=True)], task)
    post = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), torch.device("cpu"), task=task)
    found = post(output, [LetterboxGeometry.fit(320, 320, 320, 320)]).numpy()
    expected_scores = [
        box[4] for box, extra in zip(boxes, values, strict=True) if np.isfinite(extra).all()
    ]
    assert found[:, 5].tolist() == pytest.approx(expected_scores)
    assert np.isfinite(found).all()


def test_a_pose_batch_without_detections_gives_no_rows() -> None:
    """Keypoints of no detection were reshaped to ``(0, -1)``, which torch refuses: a pose
    model's empty scene failed the postprocess."""
    task = TaskSpec(Task.POSE, extra=6, keypoints=(2, 3))
    post = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), torch.device("cpu"), task=task)
    found = post(dense_rows([], task), [LetterboxGeometry.fit(320, 320, 320, 320)])
    assert found.shape == (0, 7 + 6)


SEG_PROTOS = OutputInfo("output1", (1, 32, 160, 160))


@pytest.mark.parametrize(
    ("outputs", "metadata", "size", "family", "shape"),
    [
        ([OutputInfo("output0", (1, 20, 38)), SEG_PROTOS], {"end2end": "True"}, 640, "end2end",
         (1, 20, 6)),
        ([OutputInfo("output0", (1, 50, 57))], {"end2end": "True", "task": "pose",
         "kpt_shape": "[17, 3]"}, 640, "end2end", (1, 50, 6)),
        ([OutputInfo("output0", (1, 5, 7))], {"end2end": "True", "task": "obb"}, 640, "end2end",
         (1, 5, 6)),
        ([OutputInfo("output0", (1, 116, 84)), OutputInfo("output1", (1, 32, 16, 16))], {}, 64,
         "yolov8", (1, 84, 84)),
        ([OutputInfo("output0", (1, 116, 8400)), SEG_PROTOS], {}, 640, "yolov8", (1, 84, 8400)),
        ([OutputInfo("output0", (1, 25200, 117)), SEG_PROTOS], {}, 640, "yolov5", (1, 25200, 85)),
    ],
    ids=["end2end seg, 20 rows", "end2end pose, 50 rows", "end2end obb, 5 rows",
         "yolov8 seg at 64 px, 84 anchors", "yolov8 seg", "yolov5 seg"],
)  # fmt: skip
def test_the_tasks_values_come_off_the_axis_that_leaves_a_layout(
    outputs: list[OutputInfo],
    metadata: dict[str, str],
    size: int,
    family: str,
    shape: tuple[int, ...],
) -> None:
    """They were taken off the shorter of the last two axes: an end-to-end export with fewer
    rows than values per row (a small max_det), or a dense head with fewer anchors than
    channels (a small input), lost them off the wrong one."""
    task, found = recognise_model(outputs, (size, size), metadata)
    assert (found.format.value, task.detection_shape(outputs[0].shape)) == (family, shape)


def test_an_output_too_small_for_the_tasks_values_is_refused_naming_both_readings() -> None:
    outputs = [OutputInfo("output0", (1, 20, 30)), SEG_PROTOS]
    with pytest.raises(ModelError) as error:
        recognise_model(outputs, (640, 640))
    message = str(error.value)
    assert "[1, 20, 30] cannot hold 32 segment values per box" in message
    assert "[B, 4+nc+32, N]" in message and "[B, K, 6+32]" in message and "\n" not in message


def test_an_end_to_end_pose_model_with_fewer_rows_than_values_is_read(tmp_path: Path) -> None:
    """max_det 50 at export: ``[1, 50, 57]``, read whole (not as 50 - 51 channels)."""
    rows = np.zeros((1, 50, 6 + 17 * 3), np.float32)
    rows[0, 0, :4] = to_input(np.array([[10.0, 50.0], [200.0, 400.0]])).ravel()
    rows[0, 0, 4:6] = [0.9, 1]
    points = np.stack([np.linspace(20, 180, 17), np.linspace(60, 400, 17)], axis=1)
    rows[0, 0, 6:] = np.concatenate([to_input(points), np.ones((17, 1))], axis=1).ravel()
    metadata = {**E2E_METADATA, "task": "pose", "kpt_shape": "[17, 3]"}
    model = constant_output_model(tmp_path / "pose.onnx", rows, metadata=metadata)
    (result,) = Detector(model, device="cpu", batch_size=1).detect([odd_frame()])
    (found,) = result.detections.records()
    assert found["bbox"] == pytest.approx([10, 50, 200, 400], abs=0.01)
    assert np.allclose(np.asarray(found["keypoints"])[:, :2], points, atol=0.01)
