"""ID switches with and without appearance in the tracker, and what the embedding costs per frame.

The tracker itself is measured: every frame of the video is decoded
(:class:`vstream.VideoFileSource`), detected (:class:`vstream.Detector`, the
demo model, ``conf`` down to ``tracking.low_score`` as the engine runs it with
tracking on), and every detection's crop is read by the embedding model
(:class:`vstream.cascade.SecondaryModel`, kind ``embedding``, the demo
``appearance.onnx``). The same detections then go through
:class:`vstream.tracking.ByteTracker` twice: with IoU alone, and with
``tracking.appearance`` set and the vectors given, at each
``--weights``. Records keep the detections scoring at least ``--conf``, as
the engine's do, and are scored by :mod:`vstream.evaluation_tracks` (MOTA,
IDF1, ID switches) against the ground truth's identities.

By default both the occlusion clip (``make_occlusion_clip.py``, rendered if
missing: look-alike shapes crossing and hiding one another) and the demo
``sample.mp4`` are measured; ``--sample-seeds`` adds renders of the demo
sample with other seeds (``tools/demo_assets/video.py``, written to
``benchmarks/generated/``), scenes nothing here was tuned on::

    .venv/bin/python benchmarks/appearance.py [--video V --ground-truth G] \\
        [--weights 0.3 0.5 0.7] [--sample-seeds 4 5 6] [--threads 2]

``--engine`` also runs the whole pipeline (:class:`vstream.Engine`, as
``vstream run`` does): the demo detector with tracking, and for appearance
the embedder as ``secondary: [{name: look, path: appearance.onnx, kind:
embedding}]`` with ``tracking: {appearance: look}``, the engine running it
on every detection of a frame before the tracker. Its records are scored
the same way; the wall time of the whole run is printed beside them.

The embedding's cost is the time of ``SecondaryModel.run`` on each frame's
detections (wall time on this process, so other jobs on the machine count),
beside the detector's (decode, letterbox, inference, NMS) for scale.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OCCLUSION_VIDEO = ROOT / "benchmarks" / "generated" / "occlusion.mp4"
OCCLUSION_TRUTH = ROOT / "benchmarks" / "generated" / "occlusion.json"
NMS_IOU = 0.45


@dataclass
class Detected:
    """One frame's detections and their vectors."""

    pts: float
    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    embeddings: np.ndarray


def detect_and_embed(
    video: Path, embedder: Path, low: float, threads: int
) -> tuple[list[Detected], dict[str, float]]:
    """Every frame's detections down to ``low`` and their vectors, and the time per frame."""
    from vstream import Detector, VideoFileSource
    from vstream.cascade import SecondaryModel
    from vstream.config.secondary import SecondaryConfig

    detector = Detector(
        ROOT / "vstream" / "assets" / "demo.onnx",
        device="cpu",
        conf=low,
        iou=NMS_IOU,
        intra_op_threads=threads,
    )
    look = SecondaryModel(
        SecondaryConfig(name="look", path=str(embedder), kind="embedding"),
        intra_op_threads=threads,
    )
    frames: list[Detected] = []
    detect_s = embed_s = 0.0
    objects = 0
    source = iter(VideoFileSource(video))
    while True:
        started = time.perf_counter()
        frame = next(source, None)
        if frame is None:
            break
        (result,) = detector.detect([frame])
        detected = time.perf_counter()
        detections = result.detections
        boxes = np.asarray(detections.xyxy, np.float64)
        embeddings = look.run(frame, boxes).embeddings
        embed_s += time.perf_counter() - detected
        detect_s += detected - started
        objects += len(boxes)
        frames.append(
            Detected(
                frame.pts_seconds,
                boxes,
                np.asarray(detections.confidence, np.float64),
                np.asarray(detections.class_id, np.int64),
                embeddings,
            )
        )
    count = max(len(frames), 1)
    timing = {
        "frames": len(frames),
        "objects per frame": objects / count,
        "detect ms/frame": 1e3 * detect_s / count,
        "embed ms/frame": 1e3 * embed_s / count,
        "embed ms/object": 1e3 * embed_s / max(objects, 1),
    }
    return frames, timing


def track(frames: list[Detected], conf: float, weight: float | None) -> tuple[list[dict], float]:
    """Records of the tracked frames (detections at ``conf`` or above), and the tracker's
    time per frame; ``weight`` None: IoU alone, no vectors given."""
    from vstream.tracking import ByteTracker, TrackingConfig

    if weight is None:
        tracker = ByteTracker(TrackingConfig(), conf=conf)
    else:
        config = TrackingConfig(appearance="look", appearance_weight=weight)
        tracker = ByteTracker(config, conf=conf)
    records = []
    spent = 0.0
    for index, f in enumerate(frames):
        started = time.perf_counter()
        ids = tracker.update(
            f.boxes, f.scores, f.class_ids, f.pts, None if weight is None else f.embeddings
        )
        spent += time.perf_counter() - started
        detections = []
        for box, score, cls, track_id in zip(
            f.boxes.tolist(), f.scores.tolist(), f.class_ids.tolist(), ids.tolist(), strict=True
        ):
            if score < conf:
                continue
            detection = {"bbox": box, "score": score, "class_id": cls}
            if track_id > 0:
                detection["track_id"] = track_id
            detections.append(detection)
        records.append({"frame": index, "detections": detections})
    return records, 1e3 * spent / max(len(frames), 1)


def engine_records(
    video: Path, embedder: Path, weight: float | None, conf: float, threads: int
) -> tuple[list[dict], float]:
    """What ``vstream run`` writes for ``video`` with tracking, with appearance at ``weight``
    (None: IoU alone, no embedder), and the run's wall time in seconds."""
    import tempfile
    import threading

    from vstream import Engine, VstreamConfig

    with tempfile.TemporaryDirectory(prefix="appearance-") as tmp:
        output = Path(tmp) / "records.jsonl"
        pipeline: dict = {
            "name": "appearance",
            "model": {"path": str(ROOT / "vstream/assets/demo.onnx"), "intra_op_threads": threads},
            "postprocess": {"conf": conf, "iou": NMS_IOU},
            "runtime": {"device": "cpu"},
            "analytics": {"tracking": {}},
            "sources": [{"id": video.stem, "uri": str(video)}],
            "sinks": [{"type": "jsonl", "path": str(output)}],
        }
        if weight is not None:
            pipeline["secondary"] = [{"name": "look", "path": str(embedder), "kind": "embedding"}]
            pipeline["analytics"]["tracking"] = {"appearance": "look", "appearance_weight": weight}
        started = time.perf_counter()
        with Engine(VstreamConfig.model_validate({"pipelines": [pipeline]})) as engine:
            engine.wait(threading.Event(), until_files_done=True)
        seconds = time.perf_counter() - started
        return [json.loads(line) for line in output.read_text().splitlines()], seconds


def compare_engine(
    video: Path, truth_path: Path, embedder: Path, weights: list[float], conf: float, threads: int
) -> None:
    from vstream.evaluation_tracks import evaluate_tracks

    truth = json.loads(truth_path.read_text())
    print(f"  through vstream.Engine ({video.name}):")
    print("  | pipeline | ID switches | MOTA | IDF1 | misses | false positives | tracks | "
          "run s |")  # fmt: skip
    print("  | --- | --- | --- | --- | --- | --- | --- | --- |")
    for weight in [None, *weights]:
        records, seconds = engine_records(video, embedder, weight, conf, threads)
        scores = evaluate_tracks(records, truth)
        name = "tracking" if weight is None else f"tracking + appearance {weight:g}"
        print(f"  | {name} | {scores.id_switches} | {scores.mota:.3f} | {scores.idf1:.3f} | "
              f"{scores.misses} | {scores.false_positives} | {scores.predicted_tracks} | "
              f"{seconds:.1f} |")  # fmt: skip


def compare(
    video: Path, truth_path: Path, embedder: Path, weights: list[float], conf: float, threads: int
) -> None:
    from vstream.config.tracking import TrackingConfig
    from vstream.evaluation_tracks import evaluate_tracks

    truth = json.loads(truth_path.read_text())
    low = TrackingConfig().low_score
    frames, timing = detect_and_embed(video, embedder, low, threads)
    if len(frames) != len(truth["frames"]):
        raise SystemExit(f"{video}: {len(frames)} frames decoded, {len(truth['frames'])} in truth")
    name = video.name if video.parent.name == "generated" else f"{video.parent.name}/{video.name}"
    print(f"\n{name}: {timing['frames']} frames, "
          f"{timing['objects per frame']:.1f} detections per frame (conf >= {low})")  # fmt: skip
    print(f"  detect {timing['detect ms/frame']:.1f} ms/frame; embed "
          f"{timing['embed ms/frame']:.2f} ms/frame "
          f"({timing['embed ms/object']:.3f} ms/object)")  # fmt: skip
    print("  | tracker | ID switches | MOTA | IDF1 | misses | false positives | tracks | "
          "track ms/frame |")  # fmt: skip
    print("  | --- | --- | --- | --- | --- | --- | --- | --- |")
    for weight in [None, *weights]:
        records, tracker_ms = track(frames, conf, weight)
        scores = evaluate_tracks(records, truth)
        name = "IoU alone" if weight is None else f"appearance, weight {weight:g}"
        print(f"  | {name} | {scores.id_switches} | {scores.mota:.3f} | {scores.idf1:.3f} | "
              f"{scores.misses} | {scores.false_positives} | {scores.predicted_tracks} | "
              f"{tracker_ms:.2f} |")  # fmt: skip


def render_sample(seed: int) -> tuple[Path, Path]:
    """The demo sample rendered with ``seed`` (kept in ``benchmarks/generated/``)."""
    out = ROOT / "benchmarks" / "generated" / f"sample_seed{seed}"
    video, truth = out / "sample.mp4", out / "sample_ground_truth.json"
    if not truth.exists():
        sys.path.insert(0, str(ROOT / "tools" / "demo_assets"))
        import video as demo_video

        out.mkdir(parents=True, exist_ok=True)
        demo_video.build_sample(out, seed)
    return video, truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--video", type=Path, help="default: the occlusion clip and sample.mp4")
    parser.add_argument("--ground-truth", type=Path, help="default: the video's")
    parser.add_argument("--embedder", type=Path, default=ROOT / "vstream/assets/appearance.onnx")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    parser.add_argument("--conf", type=float, default=0.25, help="the records' score threshold")
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads")
    parser.add_argument("--engine", action="store_true", help="also through vstream.Engine")
    parser.add_argument(
        "--sample-seeds", type=int, nargs="*", default=[], help="also renders of the sample"
    )
    args = parser.parse_args()
    if args.video is not None:
        truth = args.ground_truth or args.video.with_suffix(".json")
        runs = [(args.video, truth)]
    else:
        from vstream import assets

        if not OCCLUSION_VIDEO.exists():
            subprocess.run(
                [sys.executable, str(ROOT / "benchmarks" / "make_occlusion_clip.py")], check=True
            )
        runs = [
            (OCCLUSION_VIDEO, OCCLUSION_TRUTH),
            (assets.SAMPLE_VIDEO, assets.SAMPLE_GROUND_TRUTH),
        ]
    for seed in args.sample_seeds:
        runs.append(render_sample(seed))
    print("ByteTracker with and without appearance (benchmarks/appearance.py)")
    for video, truth in runs:
        compare(video, truth, args.embedder, args.weights, args.conf, args.threads)
        if args.engine:
            compare_engine(video, truth, args.embedder, args.weights, args.conf, args.threads)


if __name__ == "__main__":
    main()
