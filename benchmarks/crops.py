"""Secondary crops against the crops users train on, on real detector boxes.

Users train their secondary classifiers on whole-pixel cuts of the detector's
boxes: supervision's ``crop_image`` rounds the box (``np.round``), then the
cut is resized with OpenCV (``cv2.resize``, ``INTER_LINEAR``) from FFmpeg's
RGB of the frame. That is the reference here. For every ``--every``-th frame
of each video, decoded on the CPU, the detector's boxes are cropped to 32x32
by vstream (:func:`vstream.cascade.crops.crop_frame`) with each ``round``
rule, from the CPU decoder's RGB frame and from the same picture as an NV12
tensor (what NVDEC hands out), and compared with the reference crop:

- mean absolute difference, in grey levels (0..255);
- a spatially sensitive classifier (a seeded random linear map of the whole
  crop to 10 labels, scores spread by a softmax): how often its label is the
  reference crop's, and the mean difference of its best score;
- two embeddings: the demo appearance model (``vstream/assets/appearance.onnx``,
  colour and coarse shape) and a spatially sensitive one (a seeded random
  projection of the whole centred crop to 64 values): the share of objects
  whose vector keeps a cosine of at least 0.99 with the reference crop's.

Videos: the demo sample with the demo detector, and the parity videos with
the tempered detector (scores as a trained model's). ``--write-boxes PATH``
also writes the boxes of the demo sample's first frames, for
``tests/test_secondary_model.py``.

Then the cost: 20 crops (boxes 40 to 160 px) of a 1280x720 frame, RGB24
(the CPU decoder's) and NV12 (a tensor frame, as NVDEC's on a GPU, here on
the CPU), one thread, median of the repeats, for each rule.

    .venv/bin/python benchmarks/crops.py [--every 10] [--write-boxes tests/data/crop_boxes.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import torch

from vstream.assets import APPEARANCE_MODEL, DEMO_MODEL, SAMPLE_VIDEO
from vstream.cascade.crops import crop_frame
from vstream.detector import Detector
from vstream.frame import Frame, PixelFormat
from vstream.parity import PARITY_DIR
from vstream.preprocess.resample import Resampler
from vstream.sources import VideoFileSource

SIZE = (32, 32)
RULES = ("subpixel", "nearest")
BOX_FRAMES = 3
"""Frames of the demo sample whose boxes ``--write-boxes`` writes."""


def reference(rgb: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """supervision's ``crop_image`` of each box, resized by ``cv2.resize``: ``(K, 3, h, w)``."""
    crops = []
    for box in boxes:
        x1, y1, x2, y2 = np.round(box).astype(int)
        cut = rgb[max(y1, 0) : y2, max(x1, 0) : x2]
        crops.append(cv2.resize(cut, SIZE[::-1], interpolation=cv2.INTER_LINEAR))
    return np.stack(crops).transpose(0, 3, 1, 2).astype(np.float32)


def detections(video: Path, model: Path, every: int) -> list[tuple[Frame, np.ndarray]]:
    """Every ``every``-th frame of ``video`` (the CPU decoder's) with the detector's boxes."""
    detector = Detector(model, device="cpu", conf=0.25)
    found = []
    with VideoFileSource(video) as source:
        for frame in itertools.islice(source, 0, None, every):
            (result,) = detector.detect([frame])
            if len(result.detections):
                found.append((frame, result.detections.xyxy.astype(np.float32)))
    return found


def as_nv12(frame: Frame) -> Frame:
    """The same picture as an NV12 tensor frame, as NVDEC hands it out."""
    data = torch.from_numpy(frame.picture.frame.to_ndarray(format="nv12"))  # type: ignore[union-attr]
    return Frame(data, PixelFormat.NV12, frame.width, frame.height, colour=frame.colour)


class Readers:
    """The two models the crops are read by."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.weights = rng.normal(size=(3 * SIZE[0] * SIZE[1], 10)).astype(np.float32)
        self.projection = rng.normal(size=(3 * SIZE[0] * SIZE[1], 64)).astype(np.float32)
        self.appearance = ort.InferenceSession(
            str(APPEARANCE_MODEL), providers=["CPUExecutionProvider"]
        )

    def classify(self, crops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Labels and best scores of the spatially sensitive classifier."""
        flat = crops.reshape(len(crops), -1) / 255 - 0.5
        logits = flat @ self.weights / 4
        scores = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores /= scores.sum(axis=1, keepdims=True)
        return scores.argmax(axis=1), scores.max(axis=1)

    def embed(self, crops: np.ndarray) -> np.ndarray:
        """The appearance model's unit vectors."""
        name = self.appearance.get_inputs()[0].name
        (vectors,) = self.appearance.run(None, {name: (crops / 255).astype(np.float32)})
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def project(self, crops: np.ndarray) -> np.ndarray:
        """The random projection's unit vectors."""
        flat = crops.reshape(len(crops), -1) / 255
        vectors = (flat - flat.mean(axis=1, keepdims=True)) @ self.projection
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def compare(readers: Readers, ours: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    labels, scores = readers.classify(ours)
    ref_labels, ref_scores = readers.classify(ref)
    cosine = (readers.embed(ours) * readers.embed(ref)).sum(axis=1)
    projected = (readers.project(ours) * readers.project(ref)).sum(axis=1)
    return {
        "mean_abs_levels": float(np.abs(ours - ref).mean()),
        "max_abs_levels": float(np.abs(ours - ref).max()),
        "label_agreement": float((labels == ref_labels).mean()),
        "mean_score_difference": float(np.abs(scores - ref_scores).mean()),
        "appearance_099": float((cosine >= 0.99).mean()),
        "projection_099": float((projected >= 0.99).mean()),
    }


def timing(rules: tuple[str, ...], repeats: int) -> None:
    """Milliseconds for 20 crops of a 720p frame, per layout and rule."""
    rng = np.random.default_rng(0)
    width, height = 1280, 720
    corners = rng.uniform(0, [width - 170, height - 170], (20, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(40, 160, (20, 2))], 1)
    pictures = {
        PixelFormat.RGB24: rng.integers(0, 256, (height, width, 3), dtype=np.uint8),
        PixelFormat.NV12: rng.integers(0, 256, (height * 3 // 2, width), dtype=np.uint8),
    }
    for layout, picture in pictures.items():
        frame = Frame(torch.from_numpy(picture), layout, width, height)
        for rule in rules:
            resampler = Resampler()
            crop_frame(frame, boxes, SIZE, rounding=rule, resampler=resampler)  # plans made
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                crop_frame(frame, boxes, SIZE, rounding=rule, resampler=resampler)
                times.append(time.perf_counter() - start)
            print(f"{layout.value:6s} {rule:9s}: {np.median(times) * 1e3:6.1f} ms for 20 crops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=10, help="every n-th frame is read")
    parser.add_argument("--write-boxes", type=Path, help="JSON of the sample's first boxes")
    parser.add_argument("--repeats", type=int, default=9, help="timed calls per rule")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    readers, resampler = Readers(), Resampler()
    videos = [(SAMPLE_VIDEO, DEMO_MODEL)] + [
        (video, PARITY_DIR / "demo_tempered.onnx") for video in sorted(PARITY_DIR.glob("*.mp4"))
    ]
    crops: dict[str, list[np.ndarray]] = {"reference": []}
    for video, model in videos:
        found = detections(video, model, args.every)
        if video == SAMPLE_VIDEO and args.write_boxes:
            boxes = {f.index: b.astype(float).round(3).tolist() for f, b in found[:BOX_FRAMES]}
            args.write_boxes.write_text(json.dumps({"video": video.name, "boxes": boxes}) + "\n")
        for frame, boxes in found:
            rgb = frame.data.numpy()
            crops["reference"].append(reference(rgb, boxes))
            for rule in RULES:
                for layout, picture in (("rgb", frame), ("nv12", as_nv12(frame))):
                    got = crop_frame(picture, boxes, SIZE, rounding=rule, resampler=resampler)
                    crops.setdefault(f"{rule} {layout}", []).append(got.numpy())
        print(f"{video.name}: {len(found)} frames, {sum(len(b) for _, b in found)} boxes")
    ref = np.concatenate(crops.pop("reference"))
    print(f"{len(ref)} crops of {SIZE[1]}x{SIZE[0]} against supervision's crop_image + cv2.resize")
    print("round, frame     | mean |diff| levels | max | label agreement | mean score diff | "
          "cosine >= 0.99: appearance, projection")  # fmt: skip
    for name, parts in crops.items():
        got = compare(readers, np.concatenate(parts), ref)
        print(f"{name:16s} | {got['mean_abs_levels']:18.4f} | {got['max_abs_levels']:3.0f} | "
              f"{got['label_agreement']:15.3f} | {got['mean_score_difference']:15.4f} | "
              f"{got['appearance_099']:.3f}, {got['projection_099']:.3f}")  # fmt: skip

    timing(("subpixel", "nearest"), args.repeats)


if __name__ == "__main__":
    main()
