"""The postprocess in fixed shapes (CUDA's, no host wait but its copy) against the exact path.

Oracles: torchvision's own ``batched_nms`` (the NMS every reference runs),
the exact path (:class:`Postprocessor`), and Ultralytics' answers stored
beside the parity videos, on a model whose scores look like real ones
(``demo_tempered.onnx``, 0.25-0.9). The fixed path runs here on the CPU,
as the detector runs it on CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

from vstream import Detector
from vstream.bench.overhead import DispatchCounter
from vstream.config import PostprocessOptions
from vstream.parity import agreement, references
from vstream.postprocess import OutputFormat, Postprocessor
from vstream.postprocess.decode import MIN_ROWS, MIN_WINDOW, NMS_ROUNDS, FixedShapes
from vstream.preprocess import LetterboxGeometry
from vstream.sources import VideoFileSource

CPU = torch.device("cpu")
GEOMETRIES = [
    LetterboxGeometry.fit(1920, 1080, 320, 320),
    LetterboxGeometry.fit(640, 480, 320, 320),
    LetterboxGeometry.fit(320, 320, 320, 320),
]


def clustered_yolov8(frames: int, objects: int, seed: int, classes: int = 3) -> torch.Tensor:
    """``[frames, 4 + classes, 2100]`` as a detector writes it: each object seen by a cluster
    of anchors (jittered boxes, scores 0.25-0.9), and low scores everywhere else."""
    rng = np.random.default_rng(seed)
    out = np.zeros((frames, 4 + classes, 2100), np.float32)
    out[:, 4:] = rng.uniform(0, 0.2, (frames, classes, 2100))
    out[:, 0:2] = rng.uniform(0, 320, (frames, 2, 2100))
    out[:, 2:4] = rng.uniform(4, 60, (frames, 2, 2100))
    for f in range(frames):
        anchors = iter(rng.permutation(2100))
        for _ in range(objects):
            centre, size = rng.uniform(20, 300, 2), rng.uniform(10, 80, 2)
            cls = rng.integers(classes)
            for _ in range(rng.integers(1, 12)):
                a = next(anchors)
                out[f, 0:2, a] = centre + rng.normal(0, 0.08, 2) * size
                out[f, 2:4, a] = size * rng.uniform(0.8, 1.2, 2)
                out[f, 4 + cls, a] = rng.uniform(0.25, 0.9)
    return torch.from_numpy(out)


def fixed_rows(fixed: FixedShapes, output: torch.Tensor) -> np.ndarray | None:
    return fixed.unpack(fixed(output, GEOMETRIES[: len(output)]).numpy())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_det", [300, 5])
def test_the_fixed_path_equals_the_exact_one(seed: int, max_det: int) -> None:
    exact = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(max_det=max_det), CPU)
    fixed = FixedShapes(exact)
    fixed.window = fixed.rows = 512  # every candidate and kept box fits: none is sent back
    output = clustered_yolov8(3, objects=12 + 4 * seed, seed=seed)
    rows = fixed_rows(fixed, output)
    assert rows is not None, "settled and within the window"
    expected = exact(output, GEOMETRIES).numpy()
    assert len(expected) > 0
    np.testing.assert_array_equal(rows, expected)


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_boxes_are_torchvisions(seed: int) -> None:
    """Per frame, the boxes kept are those ``torchvision.ops.batched_nms`` keeps, in its order."""
    config = PostprocessOptions(conf=0.25, iou=0.45)
    fixed = FixedShapes(Postprocessor(OutputFormat.YOLOV8, config, CPU))
    fixed.window = fixed.rows = 512
    square = [GEOMETRIES[2]] * 2
    output = clustered_yolov8(2, objects=20, seed=100 + seed)
    rows = fixed.unpack(fixed(output, square).numpy())
    assert rows is not None
    for frame in range(2):
        rows_out = output[frame].T
        score, cls = rows_out[:, 4:].max(dim=1)
        above = score > config.conf
        xywh = rows_out[above, :4]
        boxes = torch.cat([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], dim=1)
        kept = torchvision.ops.batched_nms(boxes, score[above], cls[above], config.iou)
        ours = rows[rows[:, 0] == frame]
        np.testing.assert_allclose(ours[:, 1:5], boxes[kept].clamp(0, 320).numpy(), atol=1e-4)
        np.testing.assert_array_equal(ours[:, 6], cls[above][kept].numpy())


def test_a_frame_beyond_the_window_is_sent_back_and_the_window_grows() -> None:
    exact = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), CPU)
    fixed = FixedShapes(exact)
    output = clustered_yolov8(2, objects=40, seed=7)
    candidates = int((output[:, 4:].max(dim=1).values > 0.25).sum(dim=1).max())
    assert candidates > MIN_WINDOW == fixed.window
    assert fixed_rows(fixed, output) is None, "more candidates than the window: not exact"
    assert fixed.window >= candidates and fixed.window & (fixed.window - 1) == 0
    # The first look saw only the window's boxes: the rows may need one more batch to fit.
    rows = fixed_rows(fixed, output)
    rows = rows if rows is not None else fixed_rows(fixed, output)
    np.testing.assert_array_equal(rows, exact(output, GEOMETRIES[:2]).numpy())


def test_a_frame_keeping_more_than_the_rows_copied_is_sent_back() -> None:
    exact = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), CPU)
    fixed = FixedShapes(exact)
    fixed.window = 512
    output = clustered_yolov8(1, objects=30, seed=11)
    kept = len(exact(output, GEOMETRIES[:1]))
    assert kept > MIN_ROWS == fixed.rows
    assert fixed_rows(fixed, output) is None
    assert fixed.rows >= kept
    rows = fixed_rows(fixed, output)
    np.testing.assert_array_equal(rows, exact(output, GEOMETRIES[:1]).numpy())
    assert fixed(output, GEOMETRIES[:1]).shape == (1, 1 + fixed.rows, 6), "rows, not max_det"


def test_a_chain_longer_than_the_rounds_is_sent_back() -> None:
    """Boxes in a row, each overlapping the next: greedy NMS keeps every other one, which
    takes as many rounds as the chain is long to settle."""
    boxes = [(30 + 12 * i, 100, 20, 20, 0, 0.9 - 0.05 * i) for i in range(NMS_ROUNDS + 3)]
    output = torch.zeros((1, 5, 2100))
    for anchor, (cx, cy, w, h, _, score) in enumerate(boxes):
        output[0, :, anchor] = torch.tensor([cx, cy, w, h, score])
    config = PostprocessOptions(iou=0.2)
    fixed = FixedShapes(Postprocessor(OutputFormat.YOLOV8, config, CPU))
    assert fixed_rows(fixed, output) is None
    short = output.clone()
    short[0, 4, NMS_ROUNDS - 1 :] = 0
    rows = fixed_rows(fixed, short)
    assert rows is not None
    every_other = [0.9 - 0.05 * i for i in range(0, NMS_ROUNDS - 1, 2)]
    assert rows[:, 5].tolist() == pytest.approx(every_other)  # the first, the third ...


def test_the_fixed_path_dispatches_no_host_wait() -> None:
    fixed = FixedShapes(Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), CPU))
    output = clustered_yolov8(3, objects=10, seed=3)
    with DispatchCounter() as counter:
        fixed(output, GEOMETRIES)
    assert counter.waits == 0, counter.ops
    with DispatchCounter() as exact_counter:
        fixed.post(output, GEOMETRIES)
    assert exact_counter.waits >= 2, "the exact path's nonzero and NMS would wait"


@pytest.mark.parametrize("fmt", [OutputFormat.YOLOV5, OutputFormat.YOLOX])
def test_other_nms_families_decode_alike_on_both_paths(fmt: OutputFormat) -> None:
    """Objectness times class scores (YOLOv5), and YOLOX's raw grid offsets and log sizes."""
    rng = np.random.default_rng(int(fmt is OutputFormat.YOLOX))
    rows = 2100 if fmt is OutputFormat.YOLOX else 6300
    output = np.zeros((2, rows, 5 + 3), np.float32)
    if fmt is OutputFormat.YOLOX:
        output[..., 0:2] = rng.uniform(-0.5, 0.5, (2, rows, 2))
        output[..., 2:4] = rng.uniform(0.0, 1.5, (2, rows, 2))
    else:
        output[..., 0:2] = rng.uniform(0, 320, (2, rows, 2))
        output[..., 2:4] = rng.uniform(8, 60, (2, rows, 2))
    objects = rng.uniform(0, 1, (2, rows)) < 0.03  # a few confident objects among the rows
    output[..., 4] = np.where(objects, rng.uniform(0.5, 1, (2, rows)), 0.01)
    output[..., 5:] = rng.uniform(0, 1, (2, rows, 3))
    exact = Postprocessor(fmt, PostprocessOptions(), CPU, (320, 320))
    fixed = FixedShapes(exact)
    fixed.window = fixed.rows = 1024
    tensor = torch.from_numpy(output)
    expected = exact(tensor, GEOMETRIES[:2]).numpy()
    assert len(expected) > 10
    np.testing.assert_array_equal(fixed_rows(fixed, tensor), expected)


def test_end_to_end_models_take_the_best_max_det_rows() -> None:
    config = PostprocessOptions(max_det=3)
    exact = Postprocessor(OutputFormat.END_TO_END, config, CPU)
    fixed = FixedShapes(exact)
    rng = np.random.default_rng(0)
    output = torch.from_numpy(rng.uniform(0, 300, (2, 100, 6)).astype(np.float32))
    output[..., 4] = torch.from_numpy(rng.uniform(0, 1, (2, 100)).astype(np.float32))
    output[..., 5] = torch.from_numpy(rng.integers(0, 5, (2, 100)).astype(np.float32))
    np.testing.assert_array_equal(fixed_rows(fixed, output), exact(output, GEOMETRIES[:2]).numpy())


def test_a_real_model_finds_the_references_boxes_on_the_fixed_path() -> None:
    """Ultralytics' answers on a parity video, with the tempered demo model (real-looking
    scores): the fixed path keeps exactly the exact path's boxes, frame by frame."""
    reference = references()[0]
    detector = Detector(reference.model, device="cpu", batch_size=4, **reference.options())
    with VideoFileSource(reference.video) as source:
        frames = list(source)
    exact, fixed = [], []
    shapes = FixedShapes(detector.postprocessor)
    for first in range(0, len(frames), 4):
        batch = frames[first : first + 4]
        raw = detector.infer(0, len(detector.preprocess_batch(0, batch)))
        geometries = [detector.letterboxer._slot_geometry[i] for i in range(len(batch))]
        exact += detector.postprocess(raw, geometries, batch)
        detector.fixed_shapes = shapes
        fixed += detector.postprocess(raw, geometries, batch)
        detector.fixed_shapes = None
    assert [r.to_record() for r in fixed] == [r.to_record() for r in exact]
    boxes = [
        [
            {"bbox": b, "class_id": c}
            for b, c in zip(r.detections.xyxy.tolist(), r.detections.class_id.tolist(), strict=True)
        ]
        for r in fixed
    ]
    scores = [s for r in fixed for s in r.detections.confidence.tolist()]
    assert min(scores) < 0.5 < max(scores), "scores like a real model's"
    assert agreement(boxes, reference.frames).recall >= 0.99


def test_boxes_and_scores_that_are_not_finite_are_no_detections() -> None:
    """An fp16 model's overflow: a box at infinity came out clipped to a line along the frame's
    edge (``[320, 90, 320, 110]``, score 0.9), an infinite score as a detection scored inf.
    Both paths drop them, and only them."""
    output = clustered_yolov8(2, objects=10, seed=3)
    clean = output.clone()
    above = output[0, 4:].max(dim=0).values > 0.25
    broken = above.nonzero()[:3, 0]
    output[0, 0, broken[0]] = torch.inf
    output[0, 3, broken[1]] = torch.nan
    output[0, 4, broken[2]] = torch.inf
    for broken_anchor in broken:
        clean[0, 4:, broken_anchor] = 0.0  # what is left: the other boxes, all of them
    exact = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), CPU)
    fixed = FixedShapes(exact)
    fixed.window = fixed.rows = 512
    expected = exact(clean, GEOMETRIES[:2]).numpy()
    found = exact(output, GEOMETRIES[:2]).numpy()
    assert np.isfinite(found).all()
    np.testing.assert_array_equal(found, expected)
    rows = fixed_rows(fixed, output)
    assert rows is not None
    np.testing.assert_array_equal(rows, expected)


def test_both_paths_keep_a_box_past_the_input_from_suppressing_another_frames() -> None:
    """Frame 1's box reaches past the input's top-left (-40..4); the exact path's offsets used
    to move it onto frame 0's box of the last class, at the bottom-right (280..320), which
    it then suppressed. The fixed path, per frame without offsets, always kept both."""
    output = torch.zeros((2, 4 + 3, 2100))
    output[0, :4, 0] = torch.tensor([300.0, 300.0, 40.0, 40.0])
    output[0, 4 + 2, 0] = 0.8
    output[1, :4, 0] = torch.tensor([-18.0, -18.0, 44.0, 44.0])
    output[1, 4 + 0, 0] = 0.9
    exact = Postprocessor(OutputFormat.YOLOV8, PostprocessOptions(), CPU)
    square = [GEOMETRIES[2]] * 2
    expected = [[0, 280, 280, 320, 320, 0.8, 2], [1, 0, 0, 4, 4, 0.9, 0]]
    np.testing.assert_allclose(exact(output, square).numpy(), expected, rtol=1e-6)
    fixed = FixedShapes(exact)
    np.testing.assert_allclose(fixed.unpack(fixed(output, square).numpy()), expected, rtol=1e-6)
