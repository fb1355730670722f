"""Secondary models: crops against OpenCV, IO binding by address, chunks, softmax, sigmoid, L2.

Reference crops are OpenCV's ``cv2.resize`` of the same RGB picture cut with numpy
slicing: an oracle this code does not share (it cuts with torchvision's roi_align).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from secondary_models import flatten_model, linear_model

from vstream.cascade.crops import crop_frame, crop_rgb
from vstream.cascade.model import SecondaryModel
from vstream.config.secondary import SecondaryConfig
from vstream.frame import ColourSpace, Frame, PixelFormat
from vstream.preprocess.colour import to_rgb_planar

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
    """OpenCV's resize of the box cut out of ``picture`` (integer boxes), ``(h, w, 3)``."""
    x1, y1, x2, y2 = (int(v) for v in box)
    cut = picture[y1:y2, x1:x2].astype(np.float32)
    return cv2.resize(cut, (size[1], size[0]), interpolation=method)


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
    """Only the rectangle around the boxes is made RGB; the crops are the whole frame's."""
    frame = rgb_frame() if layout == "rgb24" else yuv_frames()[layout]
    whole = to_rgb_planar(frame)
    edge = np.array([[150.2, 3.0, 159.9, 30.0], [31.0, 41.0, 39.0, 47.5]], np.float32)
    for boxes in (BOXES[2:3], BOXES[3:], edge, BOXES[[3]]):
        for resize in ("linear", "area"):
            expected = crop_rgb(whole, torch.from_numpy(boxes), (12, 20), crop=crop, resize=resize)
            got = crop_frame(frame, boxes, (12, 20), crop=crop, resize=resize)
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
    crop = reference(PICTURE, BOXES[0], (8, 8), cv2.INTER_LINEAR) / 255
    expected = (crop - np.array([0.5, 0.25, 0.0])) / np.array([0.5, 0.25, 2.0])
    np.testing.assert_allclose(seen, expected, atol=1e-4)


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


def test_chunks_give_what_one_batch_gives(tmp_path: Path) -> None:
    path = linear_model(tmp_path / "c.onnx", RNG.normal(size=(3, 4)) * 5, imgsz=(16, 16))
    boxes = np.tile(BOXES, (5, 1)) + RNG.uniform(-3, 3, (25, 4)).astype(np.float32)
    boxes = np.clip(boxes, 0, [160, 120, 160, 120]).astype(np.float32)
    small = SecondaryModel(config(path, max_batch=3)).run(rgb_frame(), boxes)
    whole = SecondaryModel(config(path, max_batch=32)).run(rgb_frame(), boxes)
    np.testing.assert_allclose(small.probabilities, whole.probabilities, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(small.label_ids, whole.label_ids)


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
    """Reference crops of fractional boxes: roi_align is checked against OpenCV above on
    integer boxes; here the model's arithmetic is what is tested."""
    got = crop_rgb(rgb_tensor(PICTURE), torch.from_numpy(boxes), size)
    return [crop.permute(1, 2, 0).numpy() for crop in got]


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
