"""Decoding of the three detector output formats, on hand-built tensors and tiny ONNX graphs."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from onnx_models import constant_output_model
from torch.utils._python_dispatch import TorchDispatchMode

from vstream import Detector, Frame, ModelError, PixelFormat
from vstream.config import PostprocessOptions
from vstream.postprocess import OutputFormat, Postprocessor, recognise
from vstream.postprocess.formats import OutputInfo
from vstream.postprocess.tasks import recognise_model
from vstream.preprocess import LetterboxGeometry
from vstream.transfer import transfers

CPU = torch.device("cpu")
SQUARE = LetterboxGeometry.fit(320, 320, 320, 320)  # identity mapping: input pixels = frame pixels


def yolov8_output(
    boxes: list[tuple[float, float, float, float, int, float]], nc: int, n: int
) -> torch.Tensor:
    """``[1, 4+nc, n]`` with the given (cx, cy, w, h, class, score) in the first anchors."""
    out = torch.zeros((1, 4 + nc, n))
    for anchor, (cx, cy, w, h, cls, score) in enumerate(boxes):
        out[0, :4, anchor] = torch.tensor([cx, cy, w, h])
        out[0, 4 + cls, anchor] = score
    return out


def post(fmt: OutputFormat, **config) -> Postprocessor:
    return Postprocessor(fmt, PostprocessOptions(**config), CPU)


@pytest.mark.parametrize(
    ("shape", "fmt"),
    [
        ((1, 84, 8400), OutputFormat.YOLOV8),
        ((4, 6, 2100), OutputFormat.YOLOV8),
        ((1, 25200, 85), OutputFormat.YOLOV5),
        ((1, 25200, 6), OutputFormat.YOLOV5),
        ((1, 300, 6), OutputFormat.END_TO_END),
        ((2, 100, 6), OutputFormat.END_TO_END),
    ],
)
def test_format_is_detected_from_shape(shape, fmt) -> None:
    assert recognise([OutputInfo("output0", shape)], (640, 640)).format is fmt


@pytest.mark.parametrize("shape", [(1, 8400), (1, 4, 4), (1, 2, 3, 4), (1, 3, 5)])
def test_unfit_shapes_are_refused_with_the_shape(shape) -> None:
    with pytest.raises(ModelError, match=r"\[" + ", ".join(map(str, shape)) + r"\]"):
        recognise([OutputInfo("output0", shape)], (640, 640))


def test_yolov8_nms_threshold_and_classes() -> None:
    out = yolov8_output(
        [
            (100, 100, 40, 40, 0, 0.9),
            (102, 100, 40, 40, 0, 0.8),  # overlaps the first, same class: suppressed
            (102, 100, 40, 40, 1, 0.7),  # same place, other class: kept
            (250, 250, 20, 20, 2, 0.2),  # below conf
        ],
        nc=3,
        n=16,
    )
    dets = post(OutputFormat.YOLOV8, conf=0.25, iou=0.45)(out, [SQUARE])
    assert dets[:, 0].tolist() == [0, 0]
    assert dets[:, 5].tolist() == pytest.approx([0.9, 0.7])
    assert dets[:, 6].tolist() == [0, 1]
    assert dets[0, 1:5].tolist() == pytest.approx([80, 80, 120, 120])
    only_class_1 = post(OutputFormat.YOLOV8, classes=(1,))(out, [SQUARE])
    assert only_class_1[:, 6].tolist() == [1]
    loose_iou = post(OutputFormat.YOLOV8, iou=0.99)(out, [SQUARE])
    assert len(loose_iou) == 3


def test_max_det_keeps_the_best_per_frame() -> None:
    boxes = [(20 + 30 * i, 50, 10, 10, 0, 0.3 + 0.05 * i) for i in range(8)]
    out = yolov8_output(boxes, nc=1, n=8).repeat(2, 1, 1)
    dets = post(OutputFormat.YOLOV8, max_det=3)(out, [SQUARE, SQUARE])
    assert dets[:, 0].tolist() == [0, 0, 0, 1, 1, 1]
    assert dets[:3, 5].tolist() == pytest.approx([0.65, 0.6, 0.55])


def test_yolov5_multiplies_objectness() -> None:
    out = torch.zeros((1, 10, 5 + 2))
    out[0, 0] = torch.tensor([50, 60, 20, 10, 0.5, 0.9, 0.1])  # 0.45
    out[0, 1] = torch.tensor([150, 160, 20, 10, 0.2, 0.1, 0.9])  # 0.18 < conf
    dets = post(OutputFormat.YOLOV5)(out, [SQUARE])
    assert dets.tolist() == [pytest.approx([0, 40, 55, 60, 65, 0.45, 0])]


def test_end_to_end_skips_nms_and_filters() -> None:
    out = torch.zeros((1, 5, 6))
    out[0, 0] = torch.tensor([10, 10, 50, 50, 0.8, 3])
    out[0, 1] = torch.tensor([12, 10, 52, 50, 0.7, 3])  # overlapping: the model already did NMS
    out[0, 2] = torch.tensor([100, 100, 150, 150, 0.1, 1])
    dets = post(OutputFormat.END_TO_END)(out, [SQUARE])
    assert dets[:, 5].tolist() == pytest.approx([0.8, 0.7])
    assert dets[:, 6].tolist() == [3, 3]
    assert dets[1, 1:5].tolist() == pytest.approx([12, 10, 52, 50])


def test_each_frame_of_a_batch_uses_its_own_geometry() -> None:
    wide = LetterboxGeometry.fit(640, 320, 320, 320)  # gain 0.5, 80 rows of padding on top
    out = yolov8_output([(160, 160, 20, 20, 0, 0.9)], nc=1, n=4).repeat(2, 1, 1)
    dets = post(OutputFormat.YOLOV8)(out, [SQUARE, wide])
    assert dets[0].tolist() == pytest.approx([0, 150, 150, 170, 170, 0.9, 0])
    assert dets[1].tolist() == pytest.approx([1, 300, 140, 340, 180, 0.9, 0])


def test_only_the_frames_in_the_batch_are_decoded() -> None:
    out = yolov8_output([(160, 160, 20, 20, 0, 0.9)], nc=1, n=4).repeat(4, 1, 1)
    assert post(OutputFormat.YOLOV8)(out, [SQUARE]).shape == (1, 7)


def test_the_class_filter_matches_isin_for_every_class_id() -> None:
    """The lookup table that replaced ``isin`` (no host wait) keeps exactly the listed ids."""
    out = torch.zeros((1, 8, 6))
    for row, class_id in enumerate([-1, 0, 1, 2, 3, 7, 99, 2]):
        out[0, row] = torch.tensor([10.0 * row, 0, 10.0 * row + 5, 5, 0.9 - 0.01 * row, class_id])
    dets = post(OutputFormat.END_TO_END, classes=[2, 7])(out, [SQUARE])
    assert dets[:, 6].tolist() == [2, 7, 2], "ids outside the table (-1, 99) are dropped too"
    v8 = yolov8_output([(50, 50, 10, 10, c, 0.9 - 0.1 * c) for c in range(4)], nc=4, n=8)
    assert post(OutputFormat.YOLOV8, classes=[1, 3, 500])(v8, [SQUARE])[:, 6].tolist() == [1, 3]


def test_the_best_max_candidates_per_frame_reach_nms() -> None:
    """``max_candidates`` below the anchor count: a per-frame top-k, not a host-sized mask."""
    boxes = [(20 + 40 * i, 50, 10, 10, 0, 0.3 + 0.05 * i) for i in range(6)]
    out = yolov8_output(boxes, nc=1, n=16).repeat(2, 1, 1)
    out[1, 4, :] = 0  # the second frame has nothing above conf
    dets = post(OutputFormat.YOLOV8, max_candidates=3)(out, [SQUARE, SQUARE])
    assert dets[:, 0].tolist() == [0, 0, 0]
    assert dets[:, 5].tolist() == pytest.approx([0.55, 0.5, 0.45])


SYNCING_OPS = {
    "aten::nonzero",
    "aten::masked_select",
    "aten::_local_scalar_dense",
    "aten::is_nonzero",
    "aten::bincount",
    "aten::isin",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
    "aten::repeat_interleave",
    "aten::equal",
    "torchvision::nms",
}
"""Ops whose output size or value the host must read on CUDA, i.e. an implicit host wait."""


class HostWaitOps(TorchDispatchMode):
    """Records every op that would make the host wait for a CUDA stream, on any device.

    What torch's CUDA kernels do (``cuda.set_sync_debug_mode`` flags the same
    ops): ``nonzero`` and boolean-mask indexing size their output on the host,
    ``.item()`` is ``_local_scalar_dense``, CUDA ``bincount`` reads the maximum,
    ``isin`` sorts and makes unique, and torchvision's CUDA NMS selects its
    result with a mask. Here on the CPU the same ops are dispatched, so the
    count is the count a GPU would see.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        boolean_index = name.startswith("aten::index") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool
            for i in (args[1] if len(args) > 1 and isinstance(args[1], list | tuple) else ())
        )
        if name in SYNCING_OPS or boolean_index:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    ("fmt", "max_det", "expected"),
    [
        (OutputFormat.YOLOV8, 300, {"candidates": 1, "nms": 1}),
        (OutputFormat.YOLOV8, 2, {"candidates": 1, "nms": 1, "max_det": 1}),
        (OutputFormat.END_TO_END, 300, {"candidates": 1}),
    ],
)
def test_postprocessing_waits_for_the_device_only_where_it_says_and_counts_it(
    fmt: OutputFormat, max_det: int, expected: dict[str, int]
) -> None:
    if fmt is OutputFormat.END_TO_END:
        out = torch.zeros((2, 20, 6))
        out[:, :4] = torch.tensor([[10, 10, 50, 50, 0.8, 1]] * 4)
    else:
        boxes = [(20 + 40 * i, 50, 10, 10, i % 2, 0.5 + 0.05 * i) for i in range(5)]
        out = yolov8_output(boxes, nc=2, n=64).repeat(2, 1, 1)
    postprocessor = post(fmt, max_det=max_det, classes=[0, 1], max_candidates=32)
    geometries = [SQUARE, LetterboxGeometry.fit(640, 320, 320, 320)]
    before = dict(transfers.implicit_syncs)
    with HostWaitOps() as recorder:
        dets = postprocessor(out, geometries)
    counted = {
        k: transfers.implicit_syncs[k] - before.get(k, 0)
        for k in transfers.implicit_syncs
        if transfers.implicit_syncs[k] != before.get(k, 0)
    }
    assert counted == expected
    assert len(recorder.ops) == sum(expected.values()), recorder.ops
    assert len(dets) > 0


def test_postprocessing_from_several_threads_at_once_gives_each_its_own_boxes() -> None:
    """Concurrent runs (several model runs in flight) postprocess at the same time."""
    postprocessor = post(OutputFormat.YOLOV8)
    wide = LetterboxGeometry.fit(640, 320, 320, 320)
    jobs = [
        (yolov8_output([(60 + 10 * i, 160, 20, 20, 0, 0.9)], nc=1, n=8), [SQUARE, wide][i % 2])
        for i in range(8)
    ]
    expected = [postprocessor(out, [g]) for out, g in jobs]
    got: list[list[torch.Tensor]] = [[] for _ in jobs]
    start = threading.Barrier(len(jobs))

    def work(i: int) -> None:
        start.wait()
        for _ in range(50):
            got[i].append(postprocessor(jobs[i][0], [jobs[i][1]]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for mine, want in zip(got, expected, strict=True):
        assert len(mine) == 50 and all(torch.equal(m, want) for m in mine)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match=r"must be in \[0, 1\], got 1.5"):
        PostprocessOptions(conf=1.5)
    with pytest.raises(ValueError, match=r"must be in \[1, 10000\], got 0"):
        PostprocessOptions(max_det=0)


# The same decoding through real ONNX models built for the test.

NAMES = "{0: 'cat', 1: 'dog'}"
BLACK = Frame(torch.zeros((160, 320, 3), dtype=torch.uint8), PixelFormat.RGB24, 320, 160)


def _detect(path: Path, **kwargs) -> list:
    return Detector(path, device="cpu", **kwargs).detect([BLACK])[0].detections


def test_yolov8_onnx_model(tmp_path: Path) -> None:
    raw = yolov8_output([(100, 200, 40, 20, 1, 0.8)], nc=2, n=20).numpy()
    model = constant_output_model(tmp_path / "v8.onnx", raw, metadata={"names": NAMES})
    (det,) = _detect(model)
    assert (det.label, det.class_id) == ("dog", 1)
    assert det.score == pytest.approx(0.8)
    # 320x160 frame at 320: no scaling, 80 rows of padding on top.
    assert det.bbox == pytest.approx((80, 110, 120, 130))


def test_yolov5_onnx_model(tmp_path: Path) -> None:
    raw = np.zeros((1, 30, 7), np.float32)
    raw[0, 3] = [100, 200, 40, 20, 0.9, 0.1, 0.9]
    model = constant_output_model(tmp_path / "v5.onnx", raw, metadata={"names": NAMES})
    (det,) = _detect(model)
    assert (det.label, det.score) == ("dog", pytest.approx(0.81))
    assert det.bbox == pytest.approx((80, 110, 120, 130))


def test_end_to_end_onnx_model_with_config_names(tmp_path: Path) -> None:
    raw = np.zeros((1, 300, 6), np.float32)
    raw[0, 0] = [80, 100, 120, 120, 0.95, 2]
    model = constant_output_model(tmp_path / "e2e.onnx", raw)
    (det,) = _detect(model, class_names=["a", "b", "c"])
    assert (det.label, det.class_id) == ("c", 2)
    assert det.bbox == pytest.approx((80, 20, 120, 40))


def test_format_override_reads_an_ambiguous_output_as_yolov5(tmp_path: Path) -> None:
    raw = np.zeros((1, 300, 6), np.float32)
    raw[0, 0] = [100, 200, 40, 20, 0.9, 0.9]  # one-class YOLOv5 row
    model = constant_output_model(tmp_path / "v5one.onnx", raw)
    (det,) = _detect(model, format="yolov5")
    assert det.bbox == pytest.approx((80, 110, 120, 130))
    assert det.score == pytest.approx(0.81)


def test_class_names_must_fit_the_output(tmp_path: Path) -> None:
    raw = yolov8_output([], nc=2, n=20).numpy()
    model = constant_output_model(tmp_path / "v8.onnx", raw, metadata={"names": "['a', 'b', 'c']"})
    with pytest.raises(ModelError, match="3 class names for a model with 2 classes"):
        Detector(model, device="cpu")


def test_model_output_that_fits_no_format_is_refused(tmp_path: Path) -> None:
    model = constant_output_model(tmp_path / "bad.onnx", np.zeros((1, 4, 4), np.float32))
    with pytest.raises(ModelError, match=r"cannot tell the detector output format.*\[1, 4, 4\]"):
        Detector(model, device="cpu")


def torchvision_kept(output: torch.Tensor, conf: float, iou: float) -> list[set[int]]:
    """Per frame of a yolov8 ``output``, the anchors kept by ``torchvision.ops.nms`` run on
    each class of that frame alone, in float32: the oracle of per-frame, per-class NMS."""
    kept = []
    for rows in output.transpose(1, 2):
        score, cls = rows[:, 4:].max(dim=1)
        boxes = torch.cat([rows[:, :2] - rows[:, 2:4] / 2, rows[:, :2] + rows[:, 2:4] / 2], 1)
        frame: set[int] = set()
        for c in cls[score > conf].unique():
            anchors = ((score > conf) & (cls == c)).nonzero()[:, 0]
            frame |= set(anchors[torchvision.ops.nms(boxes[anchors], score[anchors], iou)].tolist())
        kept.append(frame)
    return kept


def kept_anchors(post: Postprocessor, output: torch.Tensor, size: int) -> list[set[int]]:
    """Per frame, the anchors (rows of the model output) the postprocessor keeps."""
    geometry = LetterboxGeometry.fit(size, size, size, size)
    detections, rows = post.decode(output, [geometry] * len(output))
    frame = detections[:, 0].long()
    return [set(rows[frame == f].tolist()) for f in range(len(output))]


def test_boxes_reaching_past_the_input_suppress_only_their_own_frame_and_class() -> None:
    """A box past the input's top-left (negative coordinates) shifted by its group's offset
    landed on the previous group's bottom-right box and suppressed it: another class of its
    frame, or the last class of the frame before."""
    far = (600, 600, 80, 80)  # 560..640: the input's bottom-right corner
    past = (-30, -30, 80, 80)  # -70..10: mostly above and left of the input
    frames = torch.cat(
        [
            yolov8_output([(*far, 1, 0.8)], nc=2, n=8),
            yolov8_output([(*past, 0, 0.9)], nc=2, n=8),  # frame 1, class 0: after frame 0's 1
            yolov8_output([(*far, 0, 0.8), (*past, 1, 0.9)], nc=2, n=8),  # one frame, 2 classes
        ]
    )
    config = PostprocessOptions()
    post = Postprocessor(OutputFormat.YOLOV8, config, CPU, (640, 640))
    assert kept_anchors(post, frames, 640) == [{0}, {0}, {0, 1}]
    assert kept_anchors(post, frames, 640) == torchvision_kept(frames, config.conf, config.iou)


def test_a_frame_keeps_the_same_boxes_wherever_it_sits_in_the_batch() -> None:
    """32 copies of one frame of small, crowded boxes of the last classes at 1280: the offsets
    that kept groups apart grew with the frame's place (float32 steps of a quarter pixel at
    frame 31), so later copies kept other boxes. Every copy must keep what per-class NMS of
    that frame alone keeps."""
    rng = np.random.default_rng(0)
    size, classes, anchors = 1280, 80, 2000
    frame = np.zeros((1, 4 + classes, anchors), np.float32)
    centres = rng.uniform(0, size, (anchors // 20, 2)).repeat(20, axis=0)
    frame[0, 0:2] = (centres + rng.normal(0, 1.5, (anchors, 2))).T
    frame[0, 2:4] = rng.uniform(6, 10, (2, anchors))
    frame[0, 4 + rng.integers(classes - 4, classes, anchors), np.arange(anchors)] = rng.uniform(
        0.1, 1.0, anchors
    )
    batch = torch.from_numpy(frame).repeat(32, 1, 1)
    config = PostprocessOptions(max_det=anchors)
    post = Postprocessor(OutputFormat.YOLOV8, config, CPU, (size, size))
    (expected,) = torchvision_kept(batch[:1], config.conf, config.iou)
    kept = kept_anchors(post, batch, size)
    assert [f for f, found in enumerate(kept) if found != kept[0]] == []
    assert kept[0] == expected


def test_a_transposed_yolov8_output_is_refused_by_name(tmp_path: Path) -> None:
    """``[B, N, 4+nc]`` (anchors first) read as YOLOv8 was transposed again and found nothing;
    with the class names it fell to a class count error that did not say why."""
    v8 = yolov8_output([(32, 32, 20, 10, 0, 0.9)], nc=3, n=84).numpy()  # 84 cells at 64x64
    transposed = np.ascontiguousarray(v8.transpose(0, 2, 1))
    forced = constant_output_model(tmp_path / "forced.onnx", transposed, imgsz=(64, 64))
    with pytest.raises(ModelError, match=r"\[1, 84, 7\] .*more rows \(84\) than columns \(7\)"):
        Detector(forced, device="cpu", format="yolov8")
    names = {"names": str({0: "a", 1: "b", 2: "c"})}
    named = constant_output_model(tmp_path / "n.onnx", transposed, imgsz=(64, 64), metadata=names)
    with pytest.raises(ModelError, match=r"\[1, 84, 7\] holds 4\+3 values .* YOLOv8 .*transposed"):
        Detector(named, device="cpu")
    (found,) = Detector(
        constant_output_model(tmp_path / "v8.onnx", v8, imgsz=(64, 64)), device="cpu"
    ).detect([Frame(torch.zeros((64, 64, 3), dtype=torch.uint8), PixelFormat.RGB24, 64, 64)])
    assert found.detections.xyxy.tolist() == [pytest.approx([22, 27, 42, 37])]


@pytest.mark.parametrize(
    ("shape", "columns"),
    [
        ((100, 7), "batch, x1, y1, x2, y2, class, score: YOLOv7's --end2end"),
        ((100, 6), "x1, y1, x2, y2, score, class"),
    ],
)
def test_a_detection_list_without_a_batch_axis_is_named_not_called_a_classifier(
    shape: tuple[int, int], columns: str
) -> None:
    """NMS exported inside the model (YOLOv7's ``--end2end``) leaves ``[N, 7]`` or ``[N, 6]``
    rows: they were refused as "class scores" of a classification model."""
    with pytest.raises(ModelError) as error:
        recognise_model([OutputInfo("output", shape)], (640, 640))
    message = str(error.value)
    assert f"output {list(shape)}: detections after NMS inside the model ({columns})" in message
    assert "[B, K, 6]" in message and "\n" not in message
    with pytest.raises(ModelError, match=r"\[1, 1000\] of class scores: a classification model"):
        recognise_model([OutputInfo("output", (1, 1000))], (224, 224))


def test_a_box_far_off_in_one_frame_leaves_the_other_frames_suppressed_as_alone() -> None:
    """An overflowing head's box at 1e30 in frame 0 made every offset 1e30 wide: in float32
    the next frame's boxes all collapsed onto one point, and overlapped boxes stopped
    suppressing each other."""
    frames = torch.cat(
        [
            yolov8_output([(1e30, 1e30, 10, 10, 0, 0.9)], nc=2, n=8),
            yolov8_output([(100, 100, 20, 20, 0, 0.9), (102, 100, 20, 20, 0, 0.8)], nc=2, n=8),
        ]
    )
    config = PostprocessOptions()
    post = Postprocessor(OutputFormat.YOLOV8, config, CPU)
    assert kept_anchors(post, frames, 320) == [{0}, {0}]
    assert kept_anchors(post, frames, 320) == torchvision_kept(frames, config.conf, config.iou)
