"""Detection cadence: throughput, CPU per frame and accuracy for detect_every 1, 2, 3 and 5,
and the motion gate's skip rate on a clip that is still half the time.

Every figure is scored against ground truth, as ``vstream eval`` scores it
(:mod:`vstream.evaluation_tracks`: MOTA, IDF1, line-count errors).

``every``: the demo video played ``--repeat`` times in a row (one clip, its
pts going on, re-encoded once into a temporary directory; the ground truth
repeated with fresh identities per pass), through :class:`vstream.Engine`
with tracking and the demo's counting line, as ``vstream run --track
--line`` runs it, once per ``detect_every``, all in this one process so the
figures are side by side. Throughput is frames over the wall time from
starting the engine (model already loaded) to the last record; CPU per frame
is this process's CPU time over the same span, divided by the frames (every
thread: decoding, the model, tracking). The machine is shared: compare the
rows of one run, not runs.

``motion``: the first half of the demo video, then its middle frame held
still for as long (the objects in it stay, still; ground truth: the
same boxes and identities), with the motion gate on at its defaults and
every frame otherwise due. It prints the detections skipped on the still
half, and the crossings found against the truth.

``live``: cameras per machine. ``N`` copies of the demo video replayed at
their own rate (``realtime: true``) under the live ``latest`` policy, as
cameras are, through one pipeline, for each ``detect_every`` and ``N`` of
``--streams``; a stream keeps up when its policy dropped at most 1 % of its
frames. The largest ``N`` where every stream keeps up is the figure. With
``--adapt M`` the streams may lower their detection rate under load
(``adapt_detect_every: M``) before they drop frames.

Run from the repository root::

    .venv/bin/python benchmarks/cadence.py [every|motion|live|all] [--repeat 5] \
        [--streams 2,4,6,8,12,16] [--live-every 1,3] [--adapt 5] [--queue-size 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from vstream import assets
from vstream.evaluation_tracks import evaluate_line_counts, evaluate_tracks

SAMPLE = Path(assets.__file__).parent / "sample.mp4"
TRUTH = Path(assets.__file__).parent / "sample_ground_truth.json"


def write_clip(path: Path, pictures: list[Any], fps: int) -> None:
    """Encode ``pictures`` (RGB arrays) as H.264 at ``fps``, every frame a key to keep it exact."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        height, width = pictures[0].shape[:2]
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "18"}
        for picture in pictures:
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def sample_pictures(video: Path = SAMPLE) -> list[Any]:
    import av

    with av.open(str(video)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def repeated_truth(truth: dict, passes: int) -> dict:
    """The demo's ground truth for the demo played ``passes`` times: new ids in each pass."""
    n = len(truth["frames"])
    ids = max(i for frame in truth["frames"] for i in frame.get("ids", [])) + 1
    out = copy.deepcopy(truth)
    out["frames"] = []
    for p in range(passes):
        for frame in truth["frames"]:
            frame = copy.deepcopy(frame)
            frame["frame"] += p * n
            frame["ids"] = [i + p * ids for i in frame["ids"]]
            out["frames"].append(frame)
    for line, original in zip(out["lines"], truth["lines"], strict=True):
        line["crossings"] = [
            {**c, "frame": c["frame"] + p * n, "id": c["id"] + p * ids}
            for p in range(passes)
            for c in original["crossings"]
        ]
    return out


def still_truth(truth: dict, moving: int) -> dict:
    """Ground truth for ``moving`` frames of the demo, then its frame ``moving - 1`` held."""
    out = copy.deepcopy(truth)
    held = truth["frames"][moving - 1]
    out["frames"] = [*truth["frames"][:moving], *(copy.deepcopy(held) for _ in range(moving))]
    for index, frame in enumerate(out["frames"]):
        frame["frame"] = index
    for line in out["lines"]:
        line["crossings"] = [c for c in line["crossings"] if c["frame"] < moving]
    return out


def run(
    video: Path,
    truth: dict,
    source: dict[str, Any],
    model: Path = assets.DEMO_MODEL,
    conf: float | None = None,
) -> tuple[list[dict], dict[str, float]]:
    """``video`` through the engine with tracking and the truth's lines; records and figures.

    ``conf``: the detector's ``postprocess.conf`` (None: its default)."""
    from vstream import Engine, VstreamConfig

    lines = [{"name": x["name"], "start": x["start"], "end": x["end"]} for x in truth["lines"]]
    with tempfile.TemporaryDirectory(prefix="cadence-") as tmp:
        output = Path(tmp) / "records.jsonl"
        pipeline = {
            "name": "cadence",
            "model": {"path": str(model)},
            "runtime": {"device": "cpu"},
            **({"postprocess": {"conf": conf}} if conf is not None else {}),
            "analytics": {"tracking": {}, "lines": lines},
            "sources": [{"id": "clip", "uri": str(video), **source}],
            "sinks": [{"type": "jsonl", "path": str(output)}],
        }
        engine = Engine(VstreamConfig.model_validate({"pipelines": [pipeline]}))
        wall, cpu = time.perf_counter(), time.process_time()
        with engine:
            engine.wait(threading.Event(), until_files_done=True)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            status = engine.stream("clip").to_json()
        records = [json.loads(line) for line in output.read_text().splitlines()]
    frames = len(records)
    return records, {
        "fps": frames / wall,
        "cpu_ms": 1000 * cpu / frames,
        "detected": status.get("frames_detected", frames),
        "skipped": status.get("frames_motion_skipped", 0),
    }


def score(records: list[dict], truth: dict) -> str:
    tracks = evaluate_tracks(records, truth)
    counts = evaluate_line_counts(records, truth)
    errors = sum(abs(c.error) for c in counts)
    return (
        f"MOTA {tracks.mota:.3f}  IDF1 {tracks.idf1:.3f}  count error {errors} "
        f"({', '.join(f'{c.direction} {c.predicted}/{c.truth}' for c in counts)})"
    )


def every(
    passes: int,
    everies: list[int],
    model: Path = assets.DEMO_MODEL,
    conf: float | None = None,
    keep: Path | None = None,
    clip: Path = SAMPLE,
) -> None:
    """``clip`` (with its ``<clip>_ground_truth.json``, or the demo's) ``passes`` times through
    ``model`` at each ``detect_every``; ``keep``: a folder to write each run's records to
    (``every_N.jsonl``, for ``vstream eval``)."""
    truth_path = TRUTH if clip == SAMPLE else clip.with_name(f"{clip.stem}_ground_truth.json")
    truth = repeated_truth(json.loads(truth_path.read_text()), passes)
    with tempfile.TemporaryDirectory(prefix="cadence-clip-") as tmp:
        video = Path(tmp) / "repeated.mp4"
        write_clip(video, sample_pictures(clip) * passes, truth["fps"])
        print(
            f"{clip.name} x{passes}: {len(truth['frames'])} frames, {model.name}"
            f"{f', conf {conf:g}' if conf is not None else ''}, cpu"
        )
        base = None
        for n in everies:
            records, figures = run(video, truth, {"detect_every": n}, model, conf)
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"every_{n}.jsonl").write_text(
                    "".join(json.dumps(record) + "\n" for record in records)
                )
            base = base or figures["fps"]
            print(
                f"detect_every {n}: {figures['fps']:6.1f} fps ({figures['fps'] / base:.2f}x)  "
                f"{figures['cpu_ms']:5.1f} ms CPU/frame  detected {figures['detected']:4d}  "
                f"{score(records, truth)}"
            )


def motion() -> None:
    truth = json.loads(TRUTH.read_text())
    moving = len(truth["frames"]) // 2
    truth = still_truth(truth, moving)
    pictures = sample_pictures()[:moving]
    with tempfile.TemporaryDirectory(prefix="cadence-clip-") as tmp:
        video = Path(tmp) / "half_still.mp4"
        write_clip(video, pictures + [pictures[-1]] * moving, truth["fps"])
        print(f"half still: {2 * moving} frames ({moving} moving, then {moving} still)")
        for label, source in (("every frame", {}), ("motion gate", {"motion": {}})):
            records, figures = run(video, truth, source)
            # The held frame shows objects: a record of the still half with boxes, none of
            # them predicted, is a detection.
            still_detected = sum(
                bool(r["detections"]) and not any(d.get("predicted") for d in r["detections"])
                for r in records[moving:]
            )
            print(
                f"{label:12s}: detected {figures['detected']:3d} of {len(records)}, "
                f"{figures['skipped']} skipped for no motion; still half: {still_detected} "
                f"detected, {1 - still_detected / moving:.0%} skipped  {score(records, truth)}"
            )


def live(counts: list[int], everies: list[int], adapt: int | None, queue_size: int) -> None:
    from vstream import Engine, VstreamConfig

    print(f"live: the demo video at its own 25 fps, policy latest, {SAMPLE.name} x N, cpu")
    for n in everies:
        kept = 0
        for streams in counts:
            sources = [
                {
                    "id": f"cam{i}",
                    "uri": str(SAMPLE),
                    "realtime": True,
                    "policy": "latest",
                    "detect_every": n,
                    "queue_size": queue_size,
                    **({"adapt_detect_every": adapt} if adapt and adapt > n else {}),
                }
                for i in range(streams)
            ]
            pipeline = {
                "name": "live",
                "model": {"path": str(assets.DEMO_MODEL)},
                "runtime": {"device": "cpu", "batch_size": min(streams, 8)},
                "analytics": {"tracking": {}},
                "sources": sources,
                "sinks": [{"type": "jsonl", "path": "/dev/null"}],
            }
            engine = Engine(VstreamConfig.model_validate({"pipelines": [pipeline]}))
            with engine:
                engine.wait(threading.Event(), until_files_done=True)
                status = [engine.stream(s["id"]).to_json() for s in sources]
            dropped = [s["frames_dropped"] / max(1, s["frames_decoded"]) for s in status]
            ok = max(dropped) <= 0.01
            kept = max(kept, streams) if ok else kept
            mean = 100 * sum(dropped) / streams
            adapted = sum(s.get("frames_adapted", 0) for s in status)
            print(
                f"detect_every {n}: {streams:2d} streams: dropped {mean:4.1f} % "
                f"(worst {100 * max(dropped):4.1f} %) {'keeps up' if ok else 'falls behind'}"
                + (f"; {adapted} frames predicted under load" if adapt and adapt > n else "")
            )
        print(f"detect_every {n}: {kept} streams at 25 fps kept up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "part", nargs="?", default="all", choices=["every", "motion", "live", "all"]
    )
    parser.add_argument("--repeat", type=int, default=5, help="passes of the demo video")
    parser.add_argument("--every", default="1,2,3,5", help="every: detect_every values")
    parser.add_argument(
        "--model",
        type=Path,
        default=assets.DEMO_MODEL,
        help="every: the detector (vstream/assets/parity/demo_tempered.onnx: realistic scores)",
    )
    parser.add_argument("--conf", type=float, help="every: postprocess.conf (default: its own)")
    parser.add_argument("--keep", type=Path, help="every: folder to write each run's records to")
    parser.add_argument(
        "--clip",
        type=Path,
        default=SAMPLE,
        help="every: the video (its ground truth beside it, <clip>_ground_truth.json)",
    )
    parser.add_argument("--streams", default="2,4,6,8,12,16", help="live: stream counts")
    parser.add_argument("--live-every", default="1,3", help="live: detect_every values")
    parser.add_argument("--adapt", type=int, help="live: adapt_detect_every (default off)")
    parser.add_argument("--queue-size", type=int, default=2, help="live: each stream's queue")
    args = parser.parse_args()
    if args.part in ("every", "all"):
        every(
            args.repeat,
            [int(x) for x in args.every.split(",")],
            args.model,
            args.conf,
            args.keep,
            args.clip,
        )
    if args.part in ("motion", "all"):
        motion()
    if args.part in ("live", "all"):
        live(
            [int(x) for x in args.streams.split(",")],
            [int(x) for x in args.live_every.split(",")],
            args.adapt,
            args.queue_size,
        )


if __name__ == "__main__":
    main()
