"""Each detector family end to end: real names, shapes and dtypes, known outputs, odd frames.

Every model here is an ONNX graph with the interface of that family's real
export (output names, shapes, dtypes, extra inputs, metadata) whose outputs
are constants written from boxes chosen in the pixels of two frames of odd
sizes (641x479 and 480x848), through the geometry the family's
preprocessing gives them (letterbox or stretch). ``Detector.detect`` must
recognise the family from the model alone and give those boxes back.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_cli
from onnx_models import family_model
from torch.profiler import ProfilerActivity, profile

from vstream import Detector, Frame, ModelError, PixelFormat, assets
from vstream.cli.info import info_command
from vstream.postprocess.formats import OutputInfo, grid_cells, recognise
from vstream.preprocess import Letterboxer, LetterboxGeometry

SIZES = ((641, 479), (480, 848))
"""(width, height) of the two frames of every batch."""

TRUTH = (
    ((100.5, 50.25, 300.75, 400.0), 2, 0.9),
    ((10.0, 600.0, 200.0, 840.0), 1, 0.7),
)
"""Per frame: the one box (x1, y1, x2, y2 in frame pixels), its class and score."""

NAMES = {0: "person", 1: "bicycle", 2: "car"}
NC = len(NAMES)


def frames() -> list[Frame]:
    return [
        Frame(torch.zeros((h, w, 3), dtype=torch.uint8), PixelFormat.RGB24, w, h) for w, h in SIZES
    ]


def geometries(imgsz: int, mode: str) -> list[LetterboxGeometry]:
    return [LetterboxGeometry.fit(w, h, imgsz, imgsz, mode) for w, h in SIZES]  # type: ignore[arg-type]


def input_boxes(imgsz: int, mode: str) -> list[tuple[float, float, float, float]]:
    """The true boxes in model input pixels (xyxy), as the model would see them."""
    boxes = []
    for g, ((x1, y1, x2, y2), _, _) in zip(geometries(imgsz, mode), TRUTH, strict=True):
        boxes.append(
            (
                x1 * g.gain_x + g.box_pad_x,
                y1 * g.gain_y + g.box_pad_y,
                x2 * g.gain_x + g.box_pad_x,
                y2 * g.gain_y + g.box_pad_y,
            )
        )
    return boxes


def cxcywh(box: tuple[float, float, float, float]) -> list[float]:
    x1, y1, x2, y2 = box
    return [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def check(model: Path, family: str, **options) -> Detector:
    detector = Detector(model, device="cpu", batch_size=2, **options)
    assert detector.output_format.value == family, detector.recognition.reasons
    results = detector.detect(frames())
    for result, (box, class_id, score) in zip(results, TRUTH, strict=True):
        (det,) = result.detections
        assert det.class_id == class_id
        assert det.label == NAMES[class_id]
        assert det.score == pytest.approx(score, abs=1e-5)
        assert det.bbox == pytest.approx(box, abs=1e-3)
    return detector


ULTRALYTICS = {"names": str(NAMES), "stride": "32", "task": "detect"}


def test_yolov8(tmp_path: Path) -> None:
    raw = np.zeros((2, 4 + NC, 84), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(64, "letterbox"), TRUTH, strict=True)
    ):
        raw[frame, :4, 5] = cxcywh(box)
        raw[frame, 4 + cls, 5] = score
        raw[frame, :4, 9] = cxcywh(box)
        raw[frame, 4 + cls, 9] = 0.2  # below conf
    check(
        family_model(tmp_path / "m.onnx", {"output0": raw}, imgsz=(64, 64), metadata=ULTRALYTICS),
        "yolov8",
    )


def test_yolov5_by_its_three_anchors_per_cell(tmp_path: Path) -> None:
    rows = 3 * grid_cells((64, 64))
    raw = np.zeros((2, rows, 5 + NC), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(64, "letterbox"), TRUTH, strict=True)
    ):
        raw[frame, 7, :5] = [*cxcywh(box), 0.5]
        raw[frame, 7, 5 + cls] = score / 0.5  # objectness x class score
    model = family_model(tmp_path / "m.onnx", {"output0": raw}, imgsz=(64, 64))
    detector = check(model, "yolov5", class_names=list(NAMES.values()))
    assert "3 anchors x 84 cells" in detector.recognition.reasons[0]


def test_yolox_raw_grids_are_decoded(tmp_path: Path) -> None:
    """YOLOX's default export: (tx, ty, tw, th) per cell, sigmoid objectness and classes."""
    raw = np.zeros((2, grid_cells((64, 64)), 5 + NC), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(64, "letterbox"), TRUTH, strict=True)
    ):
        cx, cy, w, h = cxcywh(box)
        row = 64 + 5  # stride 16 level (after 8 x 8 cells of stride 8): cell (1, 1)
        stride, cell_x, cell_y = 16, 1, 1
        raw[frame, row, :5] = [cx / stride - cell_x, cy / stride - cell_y, 0, 0, 1.0]
        raw[frame, row, 2:4] = [math.log(w / stride), math.log(h / stride)]
        raw[frame, row, 5 + cls] = score
    model = family_model(tmp_path / "yolox.onnx", {"output": raw}, imgsz=(64, 64))
    detector = check(model, "yolox", class_names=list(NAMES.values()))
    assert detector.preprocessing.input_range == 255
    assert detector.letterboxer.input[0, :, 0, 0].tolist() == [114.0] * 3  # the grey, in 0..255


@pytest.mark.parametrize("description", ["Ultralytics YOLOv10n model", "Ultralytics YOLO26n model"])
def test_nms_free_end2end(tmp_path: Path, description: str) -> None:
    raw = np.zeros((2, 300, 6), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(320, "letterbox"), TRUTH, strict=True)
    ):
        raw[frame, 0] = [*box, score, cls]
        raw[frame, 1] = [*box, score - 0.01, cls]  # a duplicate NMS would remove: kept
    metadata = {**ULTRALYTICS, "description": description, "end2end": "True"}
    detector = Detector(
        family_model(tmp_path / "m.onnx", {"output0": raw}, metadata=metadata),
        device="cpu",
        batch_size=2,
    )
    assert detector.output_format.value == "end2end"
    assert "end2end=True" in detector.recognition.reasons[0]
    results = detector.detect(frames())
    assert [len(r.detections) for r in results] == [2, 2]
    for result, (box, _, _) in zip(results, TRUTH, strict=True):
        assert result.detections[0].bbox == pytest.approx(box, abs=1e-3)


def test_ultralytics_rtdetr_queries_stretched(tmp_path: Path) -> None:
    """Ultralytics RT-DETR up to 8.3: [B, 300, 4+nc], normalised cxcywh, stretched input."""
    raw = np.zeros((2, 300, 4 + NC), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(320, "stretch"), TRUTH, strict=True)
    ):
        raw[frame, 3, :4] = np.array(cxcywh(box)) / 320
        raw[frame, 3, 4 + cls] = score
    metadata = {**ULTRALYTICS, "description": "Ultralytics rtdetr-l model"}
    detector = check(
        family_model(tmp_path / "m.onnx", {"output0": raw}, metadata=metadata), "rtdetr"
    )
    assert detector.preprocessing.resize_mode == "stretch"


def test_ultralytics_rtdetr_topk_rows(tmp_path: Path) -> None:
    """Ultralytics RT-DETR from 8.4: [B, 300, 6] top-k rows, normalised cxcywh, score, class."""
    raw = np.zeros((2, 300, 6), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(320, "stretch"), TRUTH, strict=True)
    ):
        raw[frame, 0] = [*(np.array(cxcywh(box)) / 320), score, cls]
    metadata = {**ULTRALYTICS, "head": "RTDETRDecoder", "description": "Ultralytics rtdetr-l"}
    check(family_model(tmp_path / "m.onnx", {"output0": raw}, metadata=metadata), "rtdetr_topk")


TWO = {0: "person", 1: "car"}


def two_class_rtdetr(tmp_path: Path, **metadata: str) -> Path:
    """Ultralytics 8.4's RT-DETR export of a two-class model: [B, 300, 6] top-k rows, the
    class in the last column (1.0 for frame 0's box), exactly as wide as 8.3's 4 + 2."""
    raw = np.zeros((2, 300, 6), np.float32)
    for frame, (box, (_, _, score)) in enumerate(
        zip(input_boxes(320, "stretch"), TRUTH, strict=True)
    ):
        raw[frame, 0] = [*(np.array(cxcywh(box)) / 320), score, 1 - frame]
    base = {"names": str(TWO), "stride": "32", "head": "RTDETRDecoder", "end2end": "False"}
    return family_model(tmp_path / "m.onnx", {"output0": raw}, metadata={**base, **metadata})


def test_two_class_rtdetr_topk_told_from_the_raw_layout_by_the_version(tmp_path: Path) -> None:
    """Read as 4 + 2 class scores, the class column became a score: boxes at 1.0."""
    model = two_class_rtdetr(tmp_path, version="8.4.190")
    detector = Detector(model, device="cpu", batch_size=2)
    assert detector.output_format.value == "rtdetr_topk", detector.recognition.reasons
    assert "Ultralytics 8.4.190" in detector.recognition.reasons[0]
    for result, (box, _, score), class_id in zip(
        detector.detect(frames()), TRUTH, (1, 0), strict=True
    ):
        (det,) = result.detections
        assert (det.class_id, det.label) == (class_id, TWO[class_id])
        assert det.score == pytest.approx(score, abs=1e-5)
        assert det.bbox == pytest.approx(box, abs=1e-3)
    old = Detector(two_class_rtdetr(tmp_path, version="8.3.40"), device="cpu")
    assert old.output_format.value == "rtdetr"


def test_two_class_rtdetr_without_a_version_is_refused_naming_format(tmp_path: Path) -> None:
    model = two_class_rtdetr(tmp_path)
    with pytest.raises(ModelError, match="--format rtdetr or --format rtdetr_topk") as error:
        Detector(model, device="cpu")
    assert "\n" not in str(error.value) and "[B, 300, 6]" in str(error.value)
    forced = Detector(model, device="cpu", format="rtdetr_topk")
    assert [r.detections.class_id.tolist() for r in forced.detect(frames()[:1])] == [[1]]


def test_a_partial_batch_leaves_no_garbage_for_a_batch_mixing_model(tmp_path: Path) -> None:
    """The fake model adds 0 * sum(whole batch): NaN in the unused slot would wipe frame 0.

    The freed NaN tensors make the allocator hand their memory to the model
    input, as a busy process's heap does (before, 9 runs in 10 lost the box)."""
    model = two_class_rtdetr(tmp_path)
    for _ in range(3):
        for _ in range(3):
            del_me = torch.full((2, 3, 320, 320), float("nan"))
            del del_me
        detector = Detector(model, device="cpu", format="rtdetr_topk")
        assert [r.detections.class_id.tolist() for r in detector.detect(frames()[:1])] == [[1]]


def test_rf_detr_boxes_and_logits_with_imagenet_normalisation(tmp_path: Path) -> None:
    dets = np.zeros((2, 300, 4), np.float32)
    labels = np.full((2, 300, NC), -10.0, np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(320, "stretch"), TRUTH, strict=True)
    ):
        dets[frame, 42] = np.array(cxcywh(box)) / 320
        labels[frame, 42, cls] = logit(score)
    model = family_model(tmp_path / "rfdetr.onnx", {"dets": dets, "labels": labels})
    detector = check(model, "detr", class_names=list(NAMES.values()))
    assert detector.preprocessing.mean == pytest.approx((0.485, 0.456, 0.406))
    black = (0 - 0.485) / 0.229  # stretched: a frame pixel, no grey bar
    assert detector.letterboxer.input[0, 0, 0, 0].item() == pytest.approx(black, abs=1e-3)


def detr_outputs(columns: int) -> tuple[np.ndarray, np.ndarray]:
    """transformers' ``pred_boxes`` (every query somewhere in the frame) and ``logits``, all
    zero: the tests write the queries that should become boxes."""
    boxes = np.tile(np.array([0.5, 0.5, 0.2, 0.2], np.float32), (2, 300, 1))
    return boxes, np.zeros((2, 300, columns), np.float32)


def test_detr_softmax_with_its_no_object_class_recognised_from_the_logits_width(
    tmp_path: Path,
) -> None:
    """transformers' DETR: softmax over nc + 1 columns, the last "no object", dropped.

    Read as sigmoids, every query became a box scoring about 1.0, mostly of the
    no-object class."""
    boxes, logits = detr_outputs(NC + 1)
    logits[..., NC] = 6.0  # every query: no object (a real class at 0.0025)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(320, "stretch"), TRUTH, strict=True)
    ):
        boxes[frame, 7] = np.array(cxcywh(box)) / 320
        logits[frame, 7, NC] = 0.0  # the others at 0: p = e^L / (e^L + NC)
        logits[frame, 7, cls] = math.log(score * NC / (1 - score))
    model = family_model(tmp_path / "detr.onnx", {"logits": logits, "pred_boxes": boxes})
    detector = check(model, "detr", class_names=list(NAMES.values()))
    assert detector.recognition.no_object
    assert "DETR's no-object class" in detector.recognition.reasons[-1]
    # Another name (RF-DETR's labels, often N + 1 sigmoid columns): sigmoid unless set.
    renamed = family_model(tmp_path / "rf.onnx", {"labels": logits, "dets": boxes})
    assert not Detector(renamed, device="cpu").recognition.no_object
    check(renamed, "detr", class_names=list(NAMES.values()), scores="softmax")


def test_detr_sigmoid_scores_take_the_best_of_queries_x_classes(tmp_path: Path) -> None:
    """transformers' RT-DETR, D-FINE (and RF-DETR's own export): the top-k over queries x
    classes, so one query gives a box for each class above conf; max_det bounds it, after
    the class filter."""
    boxes, logits = detr_outputs(NC)
    logits[:] = -10.0
    box = input_boxes(320, "stretch")[0]
    boxes[0, 42] = np.array(cxcywh(box)) / 320
    logits[0, 42, 2], logits[0, 42, 0] = logit(0.9), logit(0.6)
    model = family_model(tmp_path / "rtdetr.onnx", {"logits": logits, "pred_boxes": boxes})

    def found(**options) -> list[tuple[int, float]]:
        detector = Detector(model, device="cpu", class_names=list(NAMES.values()), **options)
        assert not detector.recognition.no_object
        (result,) = detector.detect(frames()[:1])
        assert all(d.bbox == pytest.approx(TRUTH[0][0], abs=1e-3) for d in result.detections)
        return [(d.class_id, round(d.score, 4)) for d in result.detections]

    assert found() == [(2, 0.9), (0, 0.6)]
    assert found(max_det=1) == [(2, 0.9)]
    assert found(max_det=1, classes=[0]) == [(0, 0.6)]


def test_scores_is_refused_for_families_without_logits(tmp_path: Path) -> None:
    raw = np.zeros((1, 300, 6), np.float32)
    model = family_model(tmp_path / "m.onnx", {"output0": raw}, metadata=ULTRALYTICS)
    with pytest.raises(ModelError, match=r"model.scores \(softmax\) is for the detr format"):
        Detector(model, device="cpu", scores="softmax")


def test_dfine_labels_boxes_scores_with_orig_target_sizes_bound_once(tmp_path: Path) -> None:
    """D-FINE / DEIM / RT-DETR (lyuwenyu): boxes scaled in the graph by orig_target_sizes."""
    labels = np.zeros((2, 300), np.int64)
    boxes = np.zeros((2, 300, 4), np.float32)
    scores = np.zeros((2, 300), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(640, "stretch"), TRUTH, strict=True)
    ):
        labels[frame, 0], scores[frame, 0] = cls, score
        boxes[frame, 0] = np.array(box) / 640  # the graph multiplies by the bound (640, 640)
    model = family_model(
        tmp_path / "dfine.onnx",
        {"labels": labels, "boxes": boxes, "scores": scores},
        imgsz=(640, 640),
        sized="boxes",
    )
    detector = check(model, "detr_sized", class_names=list(NAMES.values()))
    assert [i.name for i in detector.model.spec.size_inputs] == ["orig_target_sizes"]


def test_yolo_nas_boxes_and_scores(tmp_path: Path) -> None:
    rows = grid_cells((64, 64))
    boxes = np.zeros((2, rows, 4), np.float32)
    scores = np.zeros((2, rows, NC), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(64, "letterbox"), TRUTH, strict=True)
    ):
        boxes[frame, 11] = box
        scores[frame, 11, cls] = score
        boxes[frame, 12] = box  # the same box a little lower: NMS removes it
        scores[frame, 12, cls] = score - 0.1
    model = family_model(
        tmp_path / "nas.onnx",
        {"pre_nms_bboxes_xyxy": boxes, "pre_nms_scores": scores},
        imgsz=(64, 64),
    )
    check(model, "yolo_nas", class_names=list(NAMES.values()))


def test_format_overrides_the_guess(tmp_path: Path) -> None:
    """An RT-DETR stripped of its metadata reads as YOLOv5; --format rtdetr reads it right."""
    raw = np.zeros((2, 300, 4 + NC), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(320, "stretch"), TRUTH, strict=True)
    ):
        raw[frame, 3, :4] = np.array(cxcywh(box)) / 320
        raw[frame, 3, 4 + cls] = score
    model = family_model(tmp_path / "m.onnx", {"output0": raw})
    names = list(NAMES.values())
    assert Detector(model, device="cpu").output_format.value == "yolov5"
    check(model, "rtdetr", format="rtdetr", class_names=names)


def test_stretch_and_normalisation_from_the_config(tmp_path: Path) -> None:
    """resize_mode, input_range, mean and std in the config override the family's."""
    raw = np.zeros((2, 300, 6), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(320, "stretch"), TRUTH, strict=True)
    ):
        raw[frame, 0] = [*box, score, cls]
    model = family_model(tmp_path / "m.onnx", {"output0": raw}, metadata=ULTRALYTICS)
    detector = check(
        model, "end2end", resize_mode="stretch", input_range=255, mean=(10, 20, 30), std=(2, 2, 2)
    )
    # A black pixel, stretched (no grey bars): (0 * 255 - mean) / std.
    assert detector.letterboxer.input[0, :, 0, 0].tolist() == pytest.approx([-5, -10, -15])
    assert "resize_mode stretch from the config" in detector.preprocessing_reasons


def test_mean_and_std_from_the_metadata(tmp_path: Path) -> None:
    raw = np.zeros((2, 300, 6), np.float32)
    metadata = {**ULTRALYTICS, "mean": "[0.5, 0.5, 0.5]", "std": "[0.25, 0.25, 0.25]"}
    model = family_model(tmp_path / "m.onnx", {"output0": raw}, metadata=metadata)
    detector = Detector(model, device="cpu")
    assert detector.preprocessing.mean == (0.5, 0.5, 0.5)
    assert any("from the model metadata" in r for r in detector.preprocessing_reasons)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"mean": "abc"}, "m.onnx: metadata mean='abc' is not three numbers"),
        ({"std": "[0.2, 0.2]"}, "m.onnx: metadata std='[0.2, 0.2]' is not three numbers"),
        ({"std": "[0.2, 0, 0.2]"}, "metadata std='[0.2, 0, 0.2]': each value must be in (0, "),
        ({"mean": "[1e999, 0, 0]"}, "each value must be a finite number, got inf"),
    ],
    ids=["not-a-list", "two-values", "zero-std", "infinite-mean"],
)
def test_mean_or_std_in_the_metadata_that_is_no_normalisation_is_one_line(
    tmp_path: Path, metadata: dict[str, str], message: str
) -> None:
    """Read as the family's default, a typo in a model's metadata normalised every frame
    with other values than the model was trained on, without a word; ``vstream validate``
    reads the metadata as a run does (the same check, at the same place)."""
    raw = np.zeros((2, 300, 6), np.float32)
    model = family_model(
        tmp_path / "m.onnx", {"output0": raw}, metadata={**ULTRALYTICS, **metadata}
    )
    with pytest.raises(ModelError) as error:
        Detector(model, device="cpu")
    assert message in str(error.value) and "\n" not in str(error.value)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"pipelines:\n  - name: p\n    model: {{path: {model}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n    sinks: [{{type: stdout}}]\n"
    )
    done = run_cli("validate", config)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image_mean": "abc"}, "image_mean abc is not three numbers"),
        ({"image_std": [0.2, -0.2, 0.2]}, "image_std [0.2, -0.2, 0.2]: each value must be in (0, "),
        ({"image_std": 0}, "image_std 0: each value must be in (0, 1000], got 0"),
    ],
    ids=["not-numbers", "negative-std", "zero-std"],
)
def test_a_processor_files_mean_or_std_that_is_no_normalisation_is_one_line(
    tmp_path: Path, values: dict, message: str
) -> None:
    """transformers takes one number or three; anything else was read as the family's
    default (ImageNet's for detr) without a word, and a negative std flipped the image."""
    processor = {**RTDETR_PROCESSOR, "do_normalize": True, **values}
    model = hugging_face_folder(tmp_path / "rtdetr", processor)
    with pytest.raises(ModelError) as error:
        Detector(model, device="cpu")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(tmp_path / "rtdetr" / "preprocessor_config.json") in str(error.value)


def test_one_number_for_a_processor_files_mean_is_every_channels(tmp_path: Path) -> None:
    processor = {**RTDETR_PROCESSOR, "do_normalize": True, "image_mean": 0.5, "image_std": 0.25}
    detector = Detector(hugging_face_folder(tmp_path / "rtdetr", processor), device="cpu")
    assert (detector.preprocessing.mean, detector.preprocessing.std) == ((0.5,) * 3, (0.25,) * 3)


RTDETR_PROCESSOR = {
    "image_processor_type": "RTDetrImageProcessor",
    "do_resize": True,
    "size": {"height": 384, "width": 448},
    "resample": 2,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": False,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
    "do_pad": False,
}


def hugging_face_folder(folder: Path, processor: dict | str, *, columns: int = NC) -> Path:
    """A transformers detector as Optimum exports it (``logits``, ``pred_boxes``, any input
    size) beside its config.json (id2label) and preprocessor_config.json."""
    folder.mkdir()
    boxes, logits = detr_outputs(columns)
    model = family_model(
        folder / "model.onnx", {"logits": logits, "pred_boxes": boxes}, imgsz=("h", "w")
    )
    config = {"model_type": "rt_detr", "id2label": {str(k): v for k, v in NAMES.items()}}
    (folder / "config.json").write_text(json.dumps(config))
    text = processor if isinstance(processor, str) else json.dumps(processor)
    (folder / "preprocessor_config.json").write_text(text)
    return model


def test_preprocessing_and_names_from_a_hugging_face_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RTDetrImageProcessor only rescales: the detr family's ImageNet mean and std (its
    default) would feed the model other values. Size and names come from the folder too."""
    model = hugging_face_folder(tmp_path / "rtdetr", RTDETR_PROCESSOR)
    detector = Detector(model, device="cpu")
    assert detector.output_format.value == "detr"
    pre = detector.preprocessing
    assert (pre.resize_mode, pre.input_range, pre.mean, pre.std) == (
        "stretch",
        1,
        (0.0, 0.0, 0.0),
        (1.0, 1.0, 1.0),
    )
    assert detector.model.input_size == (384, 448)
    assert detector.class_names == NAMES
    detector.detect(frames()[:1])
    assert detector.letterboxer.input[0, :, 0, 0].tolist() == [0.0] * 3  # black, 0..1, no mean
    # The config still wins, and info says where each value came from.
    assert Detector(model, device="cpu", mean=(0.5, 0.5, 0.5)).preprocessing.mean == (0.5,) * 3
    assert info_command(argparse.Namespace(model=model)) == 0  # in process: no start-up
    out = capsys.readouterr().out
    assert "because mean [0.0, 0.0, 0.0] from preprocessor_config.json" in out
    assert "because input_range 1 from preprocessor_config.json" in out
    assert "imgsz:    448x384 (from preprocessor_config.json)" in out
    assert "classes:  0=person, 1=bicycle, 2=car (from config.json id2label)" in out


def test_a_processor_keeping_proportions_letterboxes_and_says_so(tmp_path: Path) -> None:
    """DetrImageProcessor's default size keeps each picture's proportions: vstream feeds one
    size, letterboxed; ImageNet's mean and std as the file says; bicubic noted."""
    processor = {
        "do_resize": True,
        "size": {"shortest_edge": 800, "longest_edge": 1333},
        "resample": 3,
        "do_normalize": True,
        "image_mean": [0.5, 0.4, 0.3],
        "image_std": [0.2, 0.2, 0.2],
    }
    detector = Detector(hugging_face_folder(tmp_path / "detr", processor), device="cpu")
    pre = detector.preprocessing
    assert (pre.resize_mode, pre.mean, pre.std) == ("letterbox", (0.5, 0.4, 0.3), (0.2,) * 3)
    assert detector.model.input_size == (640, 640)
    notes = [r for r in detector.preprocessing_reasons if r.startswith("preprocessor_config")]
    assert len(notes) == 2 and "letterboxed" in notes[0] and "bicubic" in notes[1]


def test_a_broken_processor_file_is_one_line(tmp_path: Path) -> None:
    model = hugging_face_folder(tmp_path / "broken", "{not json")
    with pytest.raises(ModelError, match=r"cannot read .*preprocessor_config\.json") as error:
        Detector(model, device="cpu")
    assert "\n" not in str(error.value)


def test_unknown_layouts_fail_with_one_line_naming_shapes_and_layouts(tmp_path: Path) -> None:
    outputs = {"a": np.zeros((1, 10, 3), np.float32), "b": np.zeros((1, 7), np.float32)}
    model = family_model(tmp_path / "m.onnx", outputs)
    with pytest.raises(ModelError) as error:
        Detector(model, device="cpu")
    message = str(error.value)
    assert "\n" not in message
    assert "a [1, 10, 3], b [1, 7]" in message
    assert "yolox [B, G, 5+nc]" in message and "detr_sized" in message


def test_recognition_by_names_and_shapes_without_a_model() -> None:
    dfine = [
        OutputInfo("labels", (1, 300)),
        OutputInfo("boxes", (1, 300, 4)),
        OutputInfo("scores", (1, 300)),
    ]
    found = recognise(dfine, (640, 640), extra_inputs=["orig_target_sizes"])
    assert (found.format.value, found.order) == ("detr_sized", (0, 1, 2))
    rfdetr = [OutputInfo("dets", (1, 300, 4)), OutputInfo("labels", (1, 300, 91))]
    assert recognise(rfdetr, (560, 560)).format.value == "detr"
    # Four classes: both outputs are [B, N, 4]; the name says which holds the boxes.
    four = [OutputInfo("pred_logits", (1, 300, 4)), OutputInfo("pred_boxes", (1, 300, 4))]
    assert recognise(four, (640, 640)).order == (1, 0)
    nas = [
        OutputInfo("pre_nms_bboxes_xyxy", (1, 8400, 4)),
        OutputInfo("pre_nms_scores", (1, 8400, 80)),
    ]
    assert recognise(nas, (640, 640)).format.value == "yolo_nas"
    assert recognise([OutputInfo("output", (1, 8400, 85))], (640, 640)).format.value == "yolox"
    assert recognise([OutputInfo("output0", (1, 25200, 85))], (640, 640)).format.value == "yolov5"


def test_info_says_the_family_the_preprocessing_and_why(tmp_path: Path) -> None:
    labels = np.zeros((1, 300), np.int64)
    boxes = np.zeros((1, 300, 4), np.float32)
    scores = np.zeros((1, 300), np.float32)
    model = family_model(
        tmp_path / "dfine.onnx",
        {"labels": labels, "boxes": boxes, "scores": scores},
        imgsz=(640, 640),
        sized="boxes",
    )
    result = run_cli("info", model)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "format:   detr_sized (RT-DETR (lyuwenyu/PaddleDetection), D-FINE, DEIM" in out
    assert "because three outputs 'labels' [B, K], 'boxes' [B, K, 4], 'scores' [B, K]" in out
    assert "orig_target_sizes tensor(int64) [1, 2] (bound once to 640, 640)" in out
    assert "preprocess: stretch, values 0..1" in out


def test_info_refuses_an_unknown_layout_in_one_line(tmp_path: Path) -> None:
    model = family_model(tmp_path / "m.onnx", {"a": np.zeros((1, 10, 3), np.float32)})
    result = run_cli("info", model)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert "cannot tell the detector output format" in error and "a [1, 10, 3]" in error


@pytest.mark.parametrize("mode", ["letterbox", "stretch"])
def test_normalisation_and_stretch_allocate_no_tensor_per_frame(mode: str) -> None:
    """The mean and std go in place with tensors made once, as the letterbox does."""
    model_input = torch.zeros((2, 3, 64, 64))
    offset, divisor = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    letterboxer = Letterboxer(model_input, mode=mode, normalise=(offset, divisor))  # type: ignore[arg-type]
    loads = frames() * 5
    for slot, frame in enumerate(loads[:2]):  # warm-up: padding painted
        letterboxer.load(slot, frame)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        for i, frame in enumerate(loads):
            letterboxer.load(i % 2, frame)
    allocated = sum(max(0, e.cpu_memory_usage) for e in profiled.events())
    assert allocated == 0, f"{allocated} bytes of tensors allocated over {len(loads)} frames"
    black = [(0 - o) / d for o, d in zip(offset, divisor, strict=True)]
    assert model_input[1, :, 32, 32].tolist() == pytest.approx(black, abs=1e-5)


def test_yolox_decoded_in_the_graph_reads_as_yolov5(tmp_path: Path) -> None:
    """``--decode_in_inference``: YOLOX's shape with pixel boxes, YOLOv5's layout exactly."""
    raw = np.zeros((2, grid_cells((64, 64)), 5 + NC), np.float32)
    for frame, (box, (_, cls, score)) in enumerate(
        zip(input_boxes(64, "letterbox"), TRUTH, strict=True)
    ):
        raw[frame, 30, :5] = [*cxcywh(box), 1.0]
        raw[frame, 30, 5 + cls] = score
    model = family_model(tmp_path / "yolox.onnx", {"output": raw}, imgsz=(64, 64))
    names = list(NAMES.values())
    assert Detector(model, device="cpu", class_names=names).output_format.value == "yolox"
    check(model, "yolov5", format="yolov5", class_names=names)
