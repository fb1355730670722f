"""Tracking on a video with ground truth (MOTA, IDF1, line counts) and the tracker's cost per frame.

``accuracy``: the model runs through :class:`vstream.Engine` with tracking on
and the ground truth's counting line, as ``vstream run --track --line`` runs
it (the detector keeps low scores for ByteTrack's second stage, the records
are cut back to ``--conf``), with vstream's default tracking settings. The
records it writes (detections with ``track_id``, crossing events) are scored
by :mod:`vstream.evaluation_tracks` against the ground truth's identities and
crossings, as ``vstream eval`` does.

``ultralytics``: the same ONNX model, video, score threshold and NMS IoU through
Ultralytics (``pip install -e '.[bench]'``, offline): ``model.track(...,
tracker="bytetrack.yaml")`` scored the same way, and its ``ObjectCounter``
on the same line, beside vstream's figures. Ultralytics is AGPL-3.0: it is
only ever run here, as a separate measurement, never imported by vstream.

By default both run the demo model on the demo video; ``--parity`` runs them
on a YOLOv8n trained by Ultralytics (a real model's spread of scores; made by
``tools/parity/train.py``, never committed) and the parity tracking clip
(854x480, 90 frames).

``cost``: 50 synthetic objects drift across a 1920x1080 frame, leaving and
being replaced, with box noise, a few misses and low scores. The time of
:meth:`ByteTracker.update` alone, and of :meth:`StreamAnalytics.update` with
two lines and a zone, is measured per frame (CPU time of this process, so
other jobs on the machine matter less; wall time is printed too).

``together``: ``--streams`` such scenes (``--objects`` each, give or take two), each
frame of every stream stepped by its own tracker alone, then by
:func:`vstream.tracking.update_together` as a pipeline's batch does, alternated
``--rounds`` times in one process: CPU ms per stream-frame of each, and whether
their track ids agreed on every frame.

Run from the repository root::

    .venv/bin/python benchmarks/tracking.py [accuracy|ultralytics|cost|together|all] \\
        [--parity] [--frames 5000] [--objects 50] [--streams 32]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from vstream.analytics import AnalyticsConfig, LineConfig, StreamAnalytics, ZoneConfig
from vstream.evaluation_tracks import evaluate_line_counts, evaluate_tracks
from vstream.tracking import ByteTracker

NMS_IOU = 0.45
"""NMS IoU on both sides (vstream's default; Ultralytics' own is 0.7)."""


PARITY_DIR = Path(__file__).resolve().parents[1] / "vstream" / "assets" / "parity"
PARITY_MODEL = Path(__file__).resolve().parent / "generated" / "yolov8n_shapes.onnx"
"""YOLOv8n trained by Ultralytics' trainer (``tools/parity/train.py``, ~17 min), never committed."""
PARITY_CLIP = "landscape_854x480"
"""The parity clip made for tracking: 5 objects passing each other, 3 crossings of ``gate``."""


def tracked_records(
    model: Path, video: Path, ground_truth: dict, conf: float, threads: int
) -> list[dict]:
    """What ``vstream run --track --line ...`` writes for ``video``: one record per frame."""
    import tempfile
    import threading

    from vstream import Engine, VstreamConfig

    lines = [
        {"name": line["name"], "start": line["start"], "end": line["end"]}
        for line in ground_truth.get("lines", [])
    ]
    with tempfile.TemporaryDirectory(prefix="tracking-") as tmp:
        output = Path(tmp) / "records.jsonl"
        pipeline = {
            "name": "tracking",
            "model": {"path": str(model), "intra_op_threads": threads},
            "postprocess": {"conf": conf, "iou": NMS_IOU},
            "runtime": {"device": "cpu"},
            "analytics": {"tracking": {}, "lines": lines},
            "sources": [{"id": video.stem, "uri": str(video)}],
            "sinks": [{"type": "jsonl", "path": str(output)}],
        }
        with Engine(VstreamConfig.model_validate({"pipelines": [pipeline]})) as engine:
            engine.wait(threading.Event(), until_files_done=True)
        return [json.loads(line) for line in output.read_text().splitlines()]


def accuracy(
    model: Path,
    video: Path,
    ground_truth_path: Path,
    conf: float,
    threads: int,
    output: Path | None,
) -> None:
    from vstream import evaluate

    ground_truth = json.loads(ground_truth_path.read_text())
    records = tracked_records(model, video, ground_truth, conf, threads)
    print(f"vstream {video.name}: {len(records)} frames, {model.name}, conf {conf}")
    print(f"detection   {evaluate(records, ground_truth)}")
    print(f"tracking    {evaluate_tracks(records, ground_truth)}")
    for count in evaluate_line_counts(records, ground_truth):
        print(f"counting    {count}")
    if output is not None:
        output.write_text("".join(json.dumps(record) + "\n" for record in records))
        print(f"wrote {output} (score it with: vstream eval {output} {ground_truth_path})")


def ultralytics_tracking(model: Path, video: Path, ground_truth_path: Path, conf: float) -> None:
    """Ultralytics' ByteTrack and ObjectCounter on the same model, video and thresholds."""
    import os

    os.environ.setdefault("YOLO_OFFLINE", "1")
    import av
    from ultralytics import YOLO, settings, solutions

    from vstream import evaluate

    settings.update({"sync": False})
    ground_truth = json.loads(ground_truth_path.read_text())
    imgsz = 320
    # rect=False: square inputs, as vstream feeds the model (and what its fixed input takes).
    common = {"conf": conf, "iou": NMS_IOU, "imgsz": imgsz, "device": "cpu"}
    yolo = YOLO(str(model), task="detect")
    records = []
    started = time.perf_counter()
    tracked = yolo.track(
        source=str(video), tracker="bytetrack.yaml", stream=True, rect=False, verbose=False,
        **common,
    )  # fmt: skip
    for index, result in enumerate(tracked):
        boxes = result.boxes
        ids = boxes.id.int().tolist() if boxes.id is not None else [None] * len(boxes)
        detections = []
        for xyxy, score, cls, track_id in zip(
            boxes.xyxy.tolist(), boxes.conf.tolist(), boxes.cls.int().tolist(), ids, strict=True
        ):
            detection = {"bbox": xyxy, "score": score, "class_id": cls}
            if track_id is not None:
                detection["track_id"] = track_id
            detections.append(detection)
        records.append({"frame": index, "detections": detections})
    seconds = time.perf_counter() - started
    print(f"ultralytics {video.name}: {len(records)} frames in {seconds:.1f} s, conf {conf}")
    print(f"detection   {evaluate(records, ground_truth)}")
    print(f"tracking    {evaluate_tracks(records, ground_truth)}")
    for line in ground_truth.get("lines", []):
        counter = solutions.ObjectCounter(
            model=str(model), region=[tuple(line["start"]), tuple(line["end"])],
            tracker="bytetrack.yaml", show=False, verbose=False, **common,
        )  # fmt: skip
        counter.track_add_args["rect"] = False
        with av.open(str(video)) as container:
            for frame in container.decode(video=0):
                # Rows of an odd width are padded: Ultralytics' annotator wants them packed.
                counter(np.ascontiguousarray(frame.to_ndarray(format="bgr24")))
        truth = {"in": 0, "out": 0}
        for crossing in line["crossings"]:
            truth[crossing["direction"]] += 1
        counted = {"in": counter.in_count, "out": counter.out_count}
        # Its IN/OUT follow the movement's axis, not our line's sides: compare both ways
        # and keep the kinder one.
        error = min(
            abs(counted["in"] - truth["in"]) + abs(counted["out"] - truth["out"]),
            abs(counted["out"] - truth["in"]) + abs(counted["in"] - truth["out"]),
        )
        print(
            f"counting    ObjectCounter line {line['name']}: in {counted['in']}, "
            f"out {counted['out']} (truth in {truth['in']}, out {truth['out']}); "
            f"error {error} crossings"
        )


def synthetic_frames(frames: int, objects: int, seed: int = 0) -> list[tuple]:
    """``(boxes, scores, class_ids, pts)`` per frame for ``objects`` drifting objects."""
    rng = np.random.default_rng(seed)
    width, height, fps = 1920.0, 1080.0, 30.0

    def spawn() -> np.ndarray:
        return np.array(
            [
                rng.uniform(0, width),
                rng.uniform(0, height),
                *rng.normal(0, 80, 2),
                *rng.uniform(30, 120, 2),
            ]
        )

    state = np.stack([spawn() for _ in range(objects)])
    out = []
    for i in range(frames):
        state[:, :2] += state[:, 2:4] / fps
        gone = (
            (state[:, 0] < 0) | (state[:, 0] > width) | (state[:, 1] < 0) | (state[:, 1] > height)
        )
        for k in np.flatnonzero(gone):
            state[k] = spawn()
        seen = rng.random(objects) > 0.05
        cx, cy, w, h = state[seen, 0], state[seen, 1], state[seen, 4], state[seen, 5]
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        boxes += rng.normal(0, 2.0, boxes.shape)
        scores = np.where(rng.random(len(boxes)) < 0.1, 0.3, rng.uniform(0.6, 0.95, len(boxes)))
        out.append((boxes, scores, rng.integers(0, 3, len(boxes)), i / fps))
    return out


def cost(frames: int, objects: int) -> None:
    data = synthetic_frames(frames, objects)
    config = AnalyticsConfig(
        lines=[
            LineConfig(name="a", start=(0, 540), end=(1920, 540)),
            LineConfig(name="b", start=(960, 0), end=(960, 1080)),
        ],
        zones=[ZoneConfig(name="z", points=[(200, 200), (900, 250), (800, 900), (300, 800)])],
    )
    for name, make, call in (
        ("ByteTracker.update", ByteTracker, lambda t, f: t.update(*f)),
        ("StreamAnalytics.update (2 lines, 1 zone)", lambda: StreamAnalytics(config), None),
    ):
        target = make()
        step = call or (lambda t, f: t.update(*f))
        for f in data[:200]:  # warm-up: tracks established, caches hot
            step(target, f)
        cpu, wall = time.process_time(), time.perf_counter()
        for f in data[200:]:
            step(target, f)
        n = len(data) - 200
        cpu_ms = 1e3 * (time.process_time() - cpu) / n
        wall_ms = 1e3 * (time.perf_counter() - wall) / n
        print(f"{name}: {cpu_ms:.3f} ms/frame CPU, {wall_ms:.3f} ms/frame wall, {objects} objects")


def together(frames: int, objects: int, streams: int, rounds: int) -> None:
    from vstream.tracking import update_together

    scenes = [synthetic_frames(frames, max(1, objects - 2 + k % 5), seed=k) for k in range(streams)]
    spent: dict[str, list[float]] = {"alone": [], "together": []}
    agreed = True
    for _ in range(rounds):
        alone = [ByteTracker() for _ in scenes]
        stepped = [ByteTracker() for _ in scenes]
        cpu = {"alone": 0.0, "together": 0.0}
        for i in range(frames):
            batch = [scene[i] for scene in scenes]
            started = time.process_time()
            ids = [tracker.update(*frame) for tracker, frame in zip(alone, batch, strict=True)]
            cpu["alone"] += time.process_time() - started
            started = time.process_time()
            ids_together = update_together(stepped, batch)
            cpu["together"] += time.process_time() - started
            agreed &= all(np.array_equal(a, b) for a, b in zip(ids, ids_together, strict=True))
        for mode, seconds in cpu.items():
            spent[mode].append(1e3 * seconds / (frames * streams))
    for mode, ms in spent.items():
        print(
            f"{streams} streams, about {objects} objects each, trackers stepped {mode}: "
            f"{min(ms):.3f} ms CPU a stream-frame (best of {rounds}; all: "
            f"{', '.join(f'{m:.3f}' for m in ms)})"
        )
    print(f"track ids the same on every frame: {agreed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "what",
        nargs="?",
        choices=["accuracy", "ultralytics", "cost", "together", "all"],
        default="all",
    )
    parser.add_argument(
        "--parity", action="store_true", help="the parity model and tracking clip (tools/parity)"
    )
    parser.add_argument("--model", type=Path, help="default: the demo model (or the parity one)")
    parser.add_argument("--video", type=Path, help="default: the sample video (or parity clip)")
    parser.add_argument("--ground-truth", type=Path, help="default: the video's")
    parser.add_argument(
        "--conf",
        type=float,
        default=0.25,
        help="score threshold (vstream's and Ultralytics' default)",
    )
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads")
    parser.add_argument("--output", type=Path, help="also write the tracked records (JSON Lines)")
    parser.add_argument("--frames", type=int, default=5000, help="synthetic frames for cost")
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--streams", type=int, default=32, help="streams for together")
    parser.add_argument("--rounds", type=int, default=3, help="alternations for together")
    args = parser.parse_args()
    if args.what in ("accuracy", "ultralytics", "all"):
        from vstream import assets

        if args.parity:
            model = args.model or PARITY_MODEL
            video = args.video or PARITY_DIR / f"{PARITY_CLIP}.mp4"
            truth = args.ground_truth or PARITY_DIR / f"{PARITY_CLIP}_ground_truth.json"
        else:
            model = args.model or assets.DEMO_MODEL
            video = args.video or assets.SAMPLE_VIDEO
            truth = args.ground_truth or assets.SAMPLE_GROUND_TRUTH
        if args.what in ("accuracy", "all"):
            accuracy(model, video, truth, args.conf, args.threads, args.output)
        if args.what == "ultralytics":
            ultralytics_tracking(model, video, truth, args.conf)
    if args.what in ("cost", "all"):
        cost(args.frames, args.objects)
    if args.what in ("together", "all"):
        together(min(args.frames, 600), args.objects, args.streams, args.rounds)


if __name__ == "__main__":
    main()
