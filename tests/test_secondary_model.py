"""Secondary models: crops against OpenCV, IO binding by address, chunks, softmax, sigmoid, L2.

Reference crops are what a training script makes: the box cut on whole pixels
(rounded as supervision's ``crop_image`` does, or truncated by ``int()`` as
Ultralytics' ``save_one_box`` does), with numpy slicing, resized by OpenCV's
``cv2.resize``, from FFmpeg's RGB of the frame. The boxes are a detector's,
with fractional edges (``tests/data/crop_boxes.json``, written by
``benchmarks/crops.py`` from the demo detector on the demo sample).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from fakes.fake_cuda import FakeGpu, host, on_cuda
from helpers import as_tensor_frame
from secondary_models import batch_of_one_model, flatten_model, linear_model

from vstream.assets import ASSETS_DIR
from vstream.cascade import model as cascade_model
from vstream.cascade.crops import crop_frame, crop_rgb, whole_pixel_boxes
from vstream.cascade.model import SecondaryModel
from vstream.config.secondary import SecondaryConfig
from vstream.frame import ColourSpace, Frame, PixelFormat
from vstream.preprocess.colour import to_rgb_planar
from vstream.sources import VideoFileSource

BOXES_FILE = Path(__file__).parent / "data" / "crop_boxes.json"

RNG = np.random.default_rng(7)
PICTURE = RNG.integers(0, 256, (120, 160, 3), dtype=np.uint8)
BOXES = np.array(
    [
        [20, 30, 84, 94],  # 64x64: shrunk 4x (8x8) or 4x (16x16)
        [0, 0, 160, 120],  # the whole frame
        [100.5, 10.25, 151.0, 50.75],  # fractional
        [40, 60, 56, 76],  # 16x16: kept (16x16) or shrunk
        [5, 70, 37, 118],
    ],
    dtype=np.float32,
)


def rgb_frame(picture: np.ndarray = PICTURE) -> Frame:
    h, w = picture.shape[:2]
    return Frame(torch.from_numpy(picture.copy()), PixelFormat.RGB24, w, h)


def rgb_tensor(picture: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(picture).permute(2, 0, 1)[None].float()


def reference(picture: np.ndarray, box, size: tuple[int, int], method: int) -> np.ndarray:
    """OpenCV's resize of the box cut out of ``picture`` (integer boxes), ``(h, w, 3)``, in
    float (for ``round: subpixel``'s float samples)."""
    x1, y1, x2, y2 = (int(v) for v in box)
    cut = picture[y1:y2, x1:x2].astype(np.float32)
    return cv2.resize(cut, (size[1], size[0]), interpolation=method)


def training_crop(
    picture: np.ndarray, box, size: tuple[int, int], rounding: str, method: int = cv2.INTER_LINEAR
) -> np.ndarray:
    """A training script's crop, ``(3, h, w)`` float: the box on whole pixels (``np.round``
    as supervision's ``crop_image``, or ``int()`` as Ultralytics' ``save_one_box``), clipped
    to the picture, cut, and resized by ``cv2.resize`` in uint8."""
    height, width = picture.shape[:2]
    edges = np.round(box).astype(int) if rounding == "nearest" else [int(v) for v in box]
    x1, y1, x2, y2 = np.clip(edges, 0, [width, height, width, height])
    resized = cv2.resize(picture[y1:y2, x1:x2], (size[1], size[0]), interpolation=method)
    return resized.transpose(2, 0, 1).astype(np.float32)


def square(box) -> list[float]:
    """The square around the box's centre, its side the longer side (Ultralytics' square)."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    half = max(box[2] - box[0], box[3] - box[1]) / 2
    return [cx - half, cy - half, cx + half, cy + half]


def config(path: Path, **options: object) -> SecondaryConfig:
    return SecondaryConfig.model_validate({"name": "attr", "path": str(path), **options})


@pytest.mark.parametrize(
    ("box", "size", "method", "resize"),
    [
        ([20, 30, 84, 94], (16, 16), cv2.INTER_LINEAR, "linear"),
        ([20, 30, 70, 61], (24, 32), cv2.INTER_LINEAR, "linear"),  # ratios 1.5625 x 1.29
        ([0, 0, 160, 120], (30, 40), cv2.INTER_LINEAR, "linear"),
        ([20, 30, 84, 94], (16, 16), cv2.INTER_AREA, "area"),  # whole ratio: same numbers
        ([0, 0, 160, 120], (40, 80), cv2.INTER_AREA, "area"),
    ],
)
def test_crops_equal_opencv_resize_of_the_cut_box(box, size, method, resize) -> None:
    crops = crop_rgb(
        rgb_tensor(PICTURE), torch.tensor([box], dtype=torch.float32), size, resize=resize
    )
    got = crops[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(got, reference(PICTURE, box, size, method), atol=2e-3)


def test_an_enlarged_crop_equals_opencv_inside_its_border() -> None:
    """Enlarged, only the outer ring differs: roi_align blends in the frame's neighbours
    where OpenCV repeats the cut's border (documented in vstream.cascade.crops)."""
    box = [20, 30, 36, 46]
    got = crop_rgb(rgb_tensor(PICTURE), torch.tensor([box], dtype=torch.float32), (40, 40))
    expected = reference(PICTURE, box, (40, 40), cv2.INTER_LINEAR)
    inner = (slice(2, -2), slice(2, -2))
    np.testing.assert_allclose(got[0].permute(1, 2, 0).numpy()[inner], expected[inner], atol=2e-3)


def test_a_square_crop_is_the_square_around_the_box() -> None:
    box = torch.tensor([[40.0, 50.0, 80.0, 70.0]])  # 40x20 -> the square 40..80, 40..80
    got = crop_rgb(rgb_tensor(PICTURE), box, (20, 20), crop="square")
    expected = reference(PICTURE, [40, 40, 80, 80], (20, 20), cv2.INTER_LINEAR)
    np.testing.assert_allclose(got[0].permute(1, 2, 0).numpy(), expected, atol=2e-3)


@pytest.fixture(scope="module")
def detected() -> list[tuple[Frame, np.ndarray]]:
    """Frames of the demo sample (the CPU decoder's) with the demo detector's boxes on them,
    plus a box whose edges fall on half pixels and one that hangs off the frame."""
    written = json.loads(BOXES_FILE.read_text())
    wanted = {int(index): np.array(boxes, np.float32) for index, boxes in written["boxes"].items()}
    awkward = np.array([[10.5, 20.5, 41.5, 50.5], [-3.2, 300.7, 40.4, 365.0]], np.float32)
    with VideoFileSource(ASSETS_DIR / written["video"]) as source:
        frames = [f for f in itertools.islice(source, max(wanted) + 1) if f.index in wanted]
    return [(frame, np.concatenate([wanted[frame.index], awkward])) for frame in frames]


@pytest.mark.parametrize("rounding", ["nearest", "floor"])
@pytest.mark.parametrize("crop", ["stretch", "square"])
@pytest.mark.parametrize(
    ("resize", "method"), [("linear", cv2.INTER_LINEAR), ("area", cv2.INTER_AREA)]
)
def test_crops_are_opencvs_resize_of_the_whole_pixel_cut(
    detected: list[tuple[Frame, np.ndarray]], rounding: str, crop: str, resize: str, method: int
) -> None:
    """On the CPU decoder's frames, every crop is exactly the training script's."""
    for frame, boxes in detected:
        rgb = frame.data.numpy()
        got = crop_frame(frame, boxes, (24, 32), crop=crop, resize=resize, rounding=rounding)
        cuts = [square(box) if crop == "square" else box for box in boxes.tolist()]
        expected = np.stack([training_crop(rgb, cut, (24, 32), rounding, method) for cut in cuts])
        assert np.array_equal(got.numpy(), expected)


@pytest.mark.parametrize("layout", [PixelFormat.NV12, PixelFormat.YUV420P])
def test_yuv_crops_are_within_a_grey_level_of_opencvs(
    detected: list[tuple[Frame, np.ndarray]], layout: PixelFormat
) -> None:
    """NV12 as NVDEC hands it, and I420: the letterbox's fixed-point path to FFmpeg's RGB and
    OpenCV's resize, on the device the frame is on."""
    for frame, boxes in detected:
        rgb = frame.data.numpy()
        expected = np.stack([training_crop(rgb, box, (24, 32), "nearest") for box in boxes])
        got = crop_frame(as_tensor_frame(frame, layout), boxes, (24, 32)).numpy()
        assert np.abs(got - expected).max() <= 1
        assert np.abs(got - expected).mean() < 0.01


def test_a_cpu_decoders_yuv_picture_is_cut_from_ffmpegs_rgb_exactly(
    detected: list[tuple[Frame, np.ndarray]],
) -> None:
    """A picture the CPU decoder left as NV12 in FFmpeg's memory: FFmpeg's RGB, OpenCV's resize."""
    frame, boxes = detected[0]
    nv12 = Frame(
        None, PixelFormat.NV12, frame.width, frame.height, colour=frame.colour,
        picture=frame.picture,
    )  # fmt: skip
    expected = np.stack([training_crop(frame.data.numpy(), b, (24, 32), "nearest") for b in boxes])
    assert np.array_equal(crop_frame(nv12, boxes, (24, 32)).numpy(), expected)


def test_crops_of_a_frame_on_a_gpu_are_the_same(
    detected: list[tuple[Frame, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a (fake) GPU, NV12 and RGB frames give the host's crops, on the frame's device."""
    frame, boxes = detected[0]
    on_host = {
        layout: crop_frame(as_tensor_frame(frame, layout), boxes, (24, 32))
        for layout in (PixelFormat.NV12, PixelFormat.RGB24)
    }
    FakeGpu().install(monkeypatch)
    for layout, expected in on_host.items():
        tensor = as_tensor_frame(frame, layout)
        cuda = Frame(on_cuda(tensor.data), layout, frame.width, frame.height, colour=frame.colour)
        got = crop_frame(cuda, boxes, (24, 32))
        assert got.device == cuda.device
        assert torch.equal(host(got), expected)


def test_whole_pixel_boxes_round_truncate_and_clip() -> None:
    boxes = np.array(
        [
            [0.5, 1.5, 2.5, 3.49],  # half pixels to even, as np.round
            [10.9, 20.1, 30.9, 40.1],
            [-3.2, -0.4, 170.0, 130.0],  # off the frame: clipped
            [50.2, 60.2, 50.4, 60.4],  # thinner than a pixel: one pixel
            [170.0, 130.0, 180.0, 140.0],  # beyond the frame: its last pixel
        ],
        np.float32,
    )
    assert whole_pixel_boxes(boxes, "nearest", 160, 120).tolist() == [
        [0, 2, 2, 3], [11, 20, 31, 40], [0, 0, 160, 120], [50, 60, 51, 61], [159, 119, 160, 120],
    ]  # fmt: skip
    assert whole_pixel_boxes(boxes, "floor", 160, 120).tolist() == [
        [0, 1, 2, 3], [10, 20, 30, 40], [0, 0, 160, 120], [50, 60, 51, 61], [159, 119, 160, 120],
    ]  # fmt: skip


def yuv_frames(picture: np.ndarray = PICTURE) -> dict[str, Frame]:
    """The picture as NV12 and I420 frames (BT.601 limited range, what cameras send)."""
    h, w = picture.shape[:2]
    i420 = cv2.cvtColor(picture, cv2.COLOR_RGB2YUV_I420)
    u = i420[h : h + h // 4].reshape(h // 2, w // 2)
    v = i420[h + h // 4 :].reshape(h // 2, w // 2)
    nv12 = np.concatenate([i420[:h], np.stack([u, v], axis=-1).reshape(h // 2, w)])
    return {
        "nv12": Frame(torch.from_numpy(nv12), PixelFormat.NV12, w, h, colour=ColourSpace()),
        "yuv420p": Frame(torch.from_numpy(i420), PixelFormat.YUV420P, w, h, colour=ColourSpace()),
    }


@pytest.mark.parametrize("layout", ["rgb24", "nv12", "yuv420p"])
@pytest.mark.parametrize("crop", ["stretch", "square"])
def test_crops_from_the_boxes_region_equal_crops_from_the_whole_frame(
    layout: str, crop: str
) -> None:
    """``round: subpixel``: only the rectangle around the boxes is made RGB; the crops are
    the whole frame's."""
    frame = rgb_frame() if layout == "rgb24" else yuv_frames()[layout]
    whole = to_rgb_planar(frame)
    edge = np.array([[150.2, 3.0, 159.9, 30.0], [31.0, 41.0, 39.0, 47.5]], np.float32)
    for boxes in (BOXES[2:3], BOXES[3:], edge, BOXES[[3]]):
        for resize in ("linear", "area"):
            expected = crop_rgb(whole, torch.from_numpy(boxes), (12, 20), crop=crop, resize=resize)
            got = crop_frame(frame, boxes, (12, 20), crop=crop, resize=resize, rounding="subpixel")
            torch.testing.assert_close(got, expected, atol=1e-2, rtol=0)  # float coordinates


def test_the_model_sees_the_normalised_crop(tmp_path: Path) -> None:
    """A model whose output is its input: what it saw is the crop, less mean, over std."""
    path = flatten_model(
        tmp_path / "seen.onnx",
        imgsz=(8, 8),
        metadata={
            "mean": "[0.5, 0.25, 0.0]",
            "std": "[0.5, 0.25, 2.0]",
            "outputs": "probabilities",
        },
    )
    model = SecondaryModel(config(path))
    out = model.run(rgb_frame(), BOXES[:1])
    seen = out.probabilities.reshape(1, 3, 8, 8)[0].transpose(1, 2, 0)
    crop = training_crop(PICTURE, BOXES[0], (8, 8), "nearest").transpose(1, 2, 0) / 255
    expected = (crop - np.array([0.5, 0.25, 0.0])) / np.array([0.5, 0.25, 2.0])
    np.testing.assert_allclose(seen, expected, atol=1e-4)


@pytest.mark.parametrize("options", [{"crop": {"round": "floor"}}, {}])
def test_the_model_cuts_by_its_round_rule(tmp_path: Path, options: dict) -> None:
    """The option, else the metadata's ``crop_round`` (here: nearest), decides the pixels."""
    path = flatten_model(
        tmp_path / "seen.onnx",
        imgsz=(8, 8),
        metadata={"outputs": "probabilities", "input_range": "255", "crop_round": "nearest"},
    )
    box = [10.6, 20.6, 41.6, 50.6]  # floor: 10..41, nearest: 11..42
    seen = SecondaryModel(config(path, **options)).run(rgb_frame(), np.array([box]))
    rounding = options.get("crop", {}).get("round", "nearest")
    expected = training_crop(PICTURE, box, (8, 8), rounding)
    other = training_crop(PICTURE, box, (8, 8), "nearest" if rounding == "floor" else "floor")
    got = seen.probabilities.reshape(3, 8, 8)
    np.testing.assert_allclose(got, expected, atol=1e-3)
    assert not np.allclose(got, other, atol=1e-3)


def test_a_yuv_frame_is_cropped_like_opencvs_rgb(tmp_path: Path) -> None:
    """An NV12 frame (what NVDEC gives) through the preprocessing's own colour conversion,
    against OpenCV's BT.601 limited-range NV12 -> RGB, then its resize: a few levels apart."""
    frame = yuv_frames()["nv12"]
    path = flatten_model(
        tmp_path / "seen.onnx",
        imgsz=(8, 8),
        metadata={"outputs": "probabilities", "input_range": "255"},
    )
    seen = SecondaryModel(config(path)).run(frame, BOXES[:1]).probabilities
    opencv_rgb = cv2.cvtColor(frame.data.numpy(), cv2.COLOR_YUV2RGB_NV12)
    expected = reference(opencv_rgb, BOXES[0], (8, 8), cv2.INTER_LINEAR)
    got = seen.reshape(3, 8, 8).transpose(1, 2, 0)
    assert np.abs(got - expected).mean() < 2.0 and np.abs(got - expected).max() < 8.0


def test_softmax_gives_the_best_label_and_its_probability(tmp_path: Path) -> None:
    """Identity weights: the logits are each crop's mean R, G, B (0..1)."""
    path = linear_model(
        tmp_path / "c.onnx",
        np.eye(3) * 10,
        imgsz=(16, 16),
        metadata={"labels": '["red", "green", "blue"]'},
    )
    model = SecondaryModel(config(path))
    out = model.run(rgb_frame(), BOXES)
    means = np.stack([crop.mean(axis=(0, 1)) / 255 * 10 for crop in _crops(BOXES, (16, 16))])
    softmax = np.exp(means) / np.exp(means).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out.probabilities, softmax, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out.label_ids, softmax.argmax(axis=1))
    np.testing.assert_allclose(out.scores, softmax.max(axis=1), rtol=1e-4)
    assert model.labels == ("red", "green", "blue") and out.embeddings is None


def test_multi_label_gives_one_sigmoid_per_label(tmp_path: Path) -> None:
    weights = np.eye(3) * 8 - 2
    path = linear_model(tmp_path / "c.onnx", weights, imgsz=(16, 16))
    out = SecondaryModel(config(path, multi_label=True)).run(rgb_frame(), BOXES)
    logits = np.stack([crop.mean(axis=(0, 1)) / 255 @ weights for crop in _crops(BOXES, (16, 16))])
    np.testing.assert_allclose(out.probabilities, 1 / (1 + np.exp(-logits)), rtol=1e-4)


def test_embeddings_are_l2_normalised(tmp_path: Path) -> None:
    weights = RNG.normal(size=(3, 5))
    path = linear_model(tmp_path / "e.onnx", weights, imgsz=(16, 16))
    out = SecondaryModel(config(path, kind="embedding")).run(rgb_frame(), BOXES)
    raw = np.stack([crop.mean(axis=(0, 1)) / 255 @ weights for crop in _crops(BOXES, (16, 16))])
    np.testing.assert_allclose(np.linalg.norm(out.embeddings, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(
        out.embeddings, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-5
    )
    assert (out.label_ids == -1).all() and out.probabilities is None


def test_buffers_are_bound_once_and_never_reallocated(tmp_path: Path) -> None:
    path = linear_model(tmp_path / "c.onnx", np.eye(3), imgsz=(16, 16))
    model = SecondaryModel(config(path, max_batch=4))
    inputs, outputs = model.input.data_ptr(), model.output.data_ptr()
    assert [b.size for b in model.buckets] == [1, 2, 4]
    for count in (1, 3, 11, 2):  # 11 crops: chunks of 4, 4, 3
        model.run(rgb_frame(), np.tile(BOXES, (3, 1))[:count])
        assert (model.input.data_ptr(), model.output.data_ptr()) == (inputs, outputs)
    for bucket in model.buckets:
        (bound,) = bucket.binding.get_outputs()
        assert bound.data_ptr() == outputs  # ORT writes into our buffer, every bucket
        assert bucket.input.data_ptr() == inputs


def test_a_session_per_bucket_reads_what_one_session_reads(tmp_path: Path, monkeypatch) -> None:
    """The CUDA branch (a session per bucket), taken on the CPU with real sessions."""
    path = linear_model(tmp_path / "c.onnx", RNG.normal(size=(3, 4)) * 5, imgsz=(16, 16))
    boxes = np.tile(BOXES, (3, 1)) + RNG.uniform(-3, 3, (15, 4)).astype(np.float32)
    boxes = np.clip(boxes, 0, [160, 120, 160, 120]).astype(np.float32)
    one = SecondaryModel(config(path, max_batch=4))
    monkeypatch.setattr(cascade_model, "session_per_bucket", lambda device, providers: True)
    own = SecondaryModel(config(path, max_batch=4))
    assert len({id(b.session) for b in own.buckets}) == 3
    assert own.buckets[-1].session is own.session
    assert {id(b.session) for b in one.buckets} == {id(one.session)}
    for count in (1, 3, 2, 15):
        np.testing.assert_array_equal(
            own.run(rgb_frame(), boxes[:count]).probabilities,
            one.run(rgb_frame(), boxes[:count]).probabilities,
        )


@pytest.mark.parametrize("outputs", ["logits", "probabilities"])
def test_chunks_give_what_one_batch_gives(tmp_path: Path, outputs: str) -> None:
    """With ``outputs: probabilities`` nothing new is computed from the output buffer, so each
    chunk's values must be copied out before the next chunk's run overwrites it."""
    path = linear_model(tmp_path / "c.onnx", RNG.normal(size=(3, 4)) * 5, imgsz=(16, 16))
    boxes = np.tile(BOXES, (5, 1)) + RNG.uniform(-3, 3, (25, 4)).astype(np.float32)
    boxes = np.clip(boxes, 0, [160, 120, 160, 120]).astype(np.float32)
    small = SecondaryModel(config(path, max_batch=3, outputs=outputs)).run(rgb_frame(), boxes)
    whole = SecondaryModel(config(path, max_batch=32, outputs=outputs)).run(rgb_frame(), boxes)
    np.testing.assert_allclose(small.probabilities, whole.probabilities, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(small.label_ids, whole.label_ids)


def test_a_model_whose_output_fixes_a_batch_of_one_reads_one_crop_at_a_time(
    tmp_path: Path,
) -> None:
    """Input ``[batch, ...]``, output ``[1, labels]``: ONNX Runtime refuses any other batch at
    run time, so the model is bound at its output's batch and the crops run one by one."""
    one = SecondaryModel(config(batch_of_one_model(tmp_path / "one.onnx", declared=True)))
    assert one.max_batch == 1 and [b.size for b in one.buckets] == [1]
    alone = SecondaryModel(config(linear_model(tmp_path / "c.onnx", np.eye(3))))
    np.testing.assert_allclose(
        one.run(rgb_frame(), BOXES).probabilities,
        alone.run(rgb_frame(), BOXES).probabilities,
        rtol=1e-5,
    )


def test_no_boxes_give_empty_columns(tmp_path: Path) -> None:
    path = linear_model(tmp_path / "c.onnx", np.eye(3), imgsz=(16, 16))
    out = SecondaryModel(config(path)).run(rgb_frame(), np.zeros((0, 4), np.float32))
    assert len(out) == 0 and out.probabilities.shape == (0, 3)


def test_select_reads_the_chosen_classes_of_the_least_size(tmp_path: Path) -> None:
    path = linear_model(tmp_path / "c.onnx", np.eye(3), imgsz=(16, 16))
    model = SecondaryModel(config(path, on={"classes": [2, 5], "min_size": 20}))
    boxes = np.array([[0, 0, 30, 30], [0, 0, 30, 19], [0, 0, 50, 50], [0, 0, 20, 20]], np.float32)
    selected = model.select(boxes, np.array([2, 5, 1, 5]))
    assert selected.tolist() == [True, False, False, True]


def _crops(boxes: np.ndarray, size: tuple[int, int]) -> list[np.ndarray]:
    """The training script's crops of the boxes, ``(h, w, 3)`` each: the crop is checked above;
    here the model's arithmetic is what is tested."""
    return [training_crop(PICTURE, box, size, "nearest").transpose(1, 2, 0) for box in boxes]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")
def test_gpu_crops_run_on_the_pipelines_stream_and_match_the_cpu(tmp_path: Path) -> None:
    from vstream.inference.providers import pipeline_stream
    from vstream.inference.wheels import load_onnxruntime

    if "CUDAExecutionProvider" not in load_onnxruntime().get_available_providers():
        pytest.skip("ONNX Runtime has no CUDA provider here")
    path = linear_model(tmp_path / "c.onnx", RNG.normal(size=(3, 4)) * 5, imgsz=(16, 16))
    device = torch.device("cuda", 0)
    stream = pipeline_stream(device)
    gpu = SecondaryModel(config(path, max_batch=4), device=device, cuda_stream=stream)
    cpu = SecondaryModel(config(path, max_batch=4))
    frame = Frame(torch.from_numpy(PICTURE.copy()).to(device), PixelFormat.RGB24, 160, 120)
    inputs, outputs = gpu.input.data_ptr(), gpu.output.data_ptr()
    boxes = np.tile(BOXES, (2, 1))
    on_gpu, on_cpu = gpu.run(frame, boxes), cpu.run(rgb_frame(), boxes)
    # ORT's CUDA provider multiplies in TF32 on Ampere and later: on an H100 the probabilities
    # were up to 5e-4 from the CPU's (atol 1e-4 failed there); the labels are the same.
    np.testing.assert_allclose(on_gpu.probabilities, on_cpu.probabilities, atol=2e-3)
    np.testing.assert_array_equal(on_gpu.label_ids, on_cpu.label_ids)
    assert (gpu.input.data_ptr(), gpu.output.data_ptr()) == (inputs, outputs)
    assert gpu.input.device == device and gpu.output.device == device
    (bound,) = gpu.buckets[-1].binding.get_outputs()
    assert bound.data_ptr() == outputs
