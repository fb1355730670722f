"""Many 1080p streams on one GPU: aggregate frames/s, frame age and host CPU by stream count.

The table issue 29 asks for, in one run (``benchmarks/gpu_scale.sh`` installs
what the device machine lacks and calls this):

- **limits**: NVDEC alone (one session, and one per stream at the largest
  count), the model alone at the pipeline's batch (the card's ceilings);
- **throughput**: S file streams (the same 1080p H.264 video, NVDEC) as fast
  as they go: aggregate frames/s, host CPU ms per frame (the process's CPU
  time over the frames), host waits per batch;
- **live**: S streams replayed at their native 30 fps (``realtime: true``,
  ``policy: latest``): frame age (capture to record) p50 and p95, and the
  frames the ``latest`` policy dropped. Live means p95 < 0.5 s and no drops.

    python benchmarks/gpu_scale.py --source 1080p.mp4 --model demo.onnx --imgsz 320 \
        [--streams 1 8 16 32 64] [--frames 150] [--live-seconds 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from vstream.config import parse_data
from vstream.engine import Engine
from vstream.transfer import transfers

DEVICE = "cuda"
"""Where the pipelines run (``--device``; ``cpu`` only to try the script on a CPU)."""


def _config(
    model: Path, imgsz: int, source: Path, streams: int, *, live: bool, tracking: bool
) -> Any:
    source_options: dict[str, Any] = {"decoder": "nvdec" if DEVICE == "cuda" else "auto"}
    if live:
        source_options |= {"realtime": True, "loop": True, "policy": "latest"}
    pipeline: dict[str, Any] = {
        "name": "scale",
        "model": {"path": str(model), "imgsz": imgsz},
        "runtime": {"device": DEVICE},
        "sources": [
            {"id": f"cam{i}", "uri": str(source), **source_options} for i in range(streams)
        ],
        "sinks": [{"type": "jsonl", "path": "/dev/null"}],
    }
    if tracking:
        pipeline["analytics"] = {"tracking": {}}
    return parse_data({"pipelines": [pipeline]})


class Ages(list):
    """Capture-to-record ages of every delivered frame, and when the first batch came: the
    runs are timed from there, so that opening the model and the decoders is left out."""

    first: tuple[float, float, int] | None = None
    """``perf_counter``, ``process_time`` and frames delivered when the first batch came."""


def _watch_ages(engine: Engine) -> Ages:
    """Capture-to-record ages of every delivered frame, collected as batches are delivered."""
    pipeline = engine.pipelines["scale"]
    ages = Ages()
    deliver = pipeline._deliver

    def timed(batch: Any) -> object:
        now = time.time()
        ages.extend(now - a.captured_at for a in batch.arrivals)
        if ages.first is None:
            ages.first = (time.perf_counter(), time.process_time(), len(ages))
        return deliver(batch)

    pipeline._deliver = timed
    pipeline.stages._deliver = timed
    return ages


IDLE = ("wait", "sleep", "select", "poll", "_wait_for_tstate_lock", "get", "acquire", "accept")
"""Leaf functions of a thread that is waiting, not working: left out of the stack samples."""


class StackSampler:
    """Where the process's threads spend their time: the innermost vstream (or library)
    function of every thread, sampled every ``interval`` seconds (``sys._current_frames``)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.counts: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            for ident, frame in sys._current_frames().items():
                if ident == me or frame.f_code.co_name in IDLE:
                    continue
                where = frame
                while where is not None and "vstream" not in where.f_code.co_filename:
                    where = where.f_back
                leaf = f"{frame.f_code.co_name}"
                owner = (
                    f"{Path(where.f_code.co_filename).name}:{where.f_code.co_name}"
                    if where is not None
                    else "-"
                )
                self.counts[f"{owner} > {leaf}"] += 1

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def top(self, n: int = 25) -> list[tuple[str, int]]:
        return self.counts.most_common(n)


def throughput(
    model: Path, imgsz: int, source: Path, streams: int, tracking: bool, sample: bool = False
) -> dict:
    engine = Engine(_config(model, imgsz, source, streams, live=False, tracking=tracking))
    ages = _watch_ages(engine)
    waits0, syncs0 = transfers.host_waits, transfers.implicit_sync_total()
    _, batches0 = transfers.snapshot()
    syncs_before = dict(transfers.implicit_syncs)
    with StackSampler() if sample else contextlib.nullcontext() as sampler:
        engine.start()
        engine.wait(threading.Event(), until_files_done=True)
    end_wall, end_cpu = time.perf_counter(), time.process_time()
    if sampler is not None:
        for where, count in sampler.top():
            print(f"  samples {count:6d}  {where}", flush=True)
    plan = engine.pipelines["scale"].detector.plan.describe()
    batch = engine.pipelines["scale"].detector.batch_size
    engine.stop(timeout=60)
    # Timed from the first batch delivered (opening the model and the decoders left out);
    # counted after stop: the last batches are delivered as the sinks close.
    assert ages.first is not None, "no frame was delivered"
    first_wall, first_cpu, first_frames = ages.first
    wall = end_wall - first_wall
    cpu = end_cpu - first_cpu
    frames = len(ages) - first_frames
    _, batches = transfers.snapshot()
    batches -= batches0
    waits = transfers.host_waits - waits0 + transfers.implicit_sync_total() - syncs0
    return {
        "streams": streams,
        "frames": frames,
        "fps": round(frames / wall, 1),
        "cpu_ms_per_frame": round(1000 * cpu / max(1, frames), 3),
        "frames_per_batch": round(frames / max(1, batches), 1),
        "host_waits_per_batch": round(waits / max(1, batches), 2),
        "implicit_syncs": {
            k: v - syncs_before.get(k, 0)
            for k, v in transfers.implicit_syncs.items()
            if v != syncs_before.get(k, 0)
        },
        "plan": f"batch {batch}, {plan}",
    }


def live(
    model: Path, imgsz: int, source: Path, streams: int, seconds: float, tracking: bool
) -> dict:
    engine = Engine(_config(model, imgsz, source, streams, live=True, tracking=tracking))
    ages = _watch_ages(engine)
    engine.start()
    deadline = time.monotonic() + 60
    while ages.first is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)  # past the first batches: the steady state only
    dropped0 = sum(r.frames_dropped for r in engine.readers())
    ages.clear()
    cpu = time.process_time()
    time.sleep(seconds)
    cpu = time.process_time() - cpu
    ordered = sorted(ages)
    dropped = sum(r.frames_dropped for r in engine.readers()) - dropped0
    engine.stop(timeout=60)
    return {
        "streams": streams,
        "records": len(ordered),
        "fps": round(len(ordered) / seconds, 1),
        "age_p50_ms": round(1000 * statistics.median(ordered), 1) if ordered else None,
        "age_p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 1) if ordered else None,
        "dropped": dropped,
        "cpu_ms_per_frame": round(1000 * cpu / max(1, len(ordered)), 3),
    }


def nvdec_alone(source: Path, sessions: int, frames: int) -> dict:
    """Frames/s of NVDEC decoding alone, ``sessions`` decoders at once (one thread each)."""
    from vstream.config.sources import SourceOptions
    from vstream.sources.file import VideoFileSource

    counts = [0] * sessions

    def decode(i: int) -> None:
        options = SourceOptions(decoder="nvdec" if DEVICE == "cuda" else "auto", loop=True)
        with VideoFileSource(source, stream_id=str(i), device=DEVICE, options=options) as video:
            for n, _ in enumerate(video, 1):
                counts[i] = n
                if n >= frames:
                    break

    threads = [threading.Thread(target=decode, args=(i,)) for i in range(sessions)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    return {"sessions": sessions, "fps": round(sum(counts) / seconds, 1)}


def model_alone(model: Path, imgsz: int, runs: int = 200) -> dict:
    """Frames/s of the model alone at the pipeline's default batch, bound buffers (IO binding)."""
    import torch

    from vstream.detector import Detector

    detector = Detector(model, device=DEVICE, imgsz=imgsz)
    batch = detector.batch_size
    for _ in range(10):
        detector.infer(0, batch)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(runs):
        detector.infer(0, batch)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {"batch": batch, "fps": round(runs * batch / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 16, 32, 64])
    parser.add_argument("--live-seconds", type=float, default=8.0)
    parser.add_argument("--tracking", action="store_true", help="the ByteTrack tracker on")
    parser.add_argument("--skip-limits", action="store_true")
    parser.add_argument(
        "--sample",
        type=int,
        nargs="*",
        default=[],
        metavar="STREAMS",
        help="print where the threads spend their time in the file runs of these stream counts",
    )
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model-runs", type=int, default=200)
    parser.add_argument("--nvdec-frames", type=int, default=150)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    out: dict[str, Any] = {"model": args.model.name, "imgsz": args.imgsz, "tracking": args.tracking}

    def say(key: str, row: dict) -> None:
        out.setdefault(key, []).append(row)
        print(key, json.dumps(row), flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))

    if not args.skip_limits:
        say("model_alone", model_alone(args.model, args.imgsz, args.model_runs))
        for sessions in sorted({1, 8, max(args.streams)}):
            say("nvdec_alone", nvdec_alone(args.source, sessions, args.nvdec_frames))
    for streams in args.streams:
        sample = streams in args.sample
        run = throughput(args.model, args.imgsz, args.source, streams, args.tracking, sample)
        say("throughput", run)
    if not args.skip_live:
        for streams in args.streams:
            say(
                "live",
                live(
                    args.model, args.imgsz, args.source, streams, args.live_seconds, args.tracking
                ),
            )
    print(f"\n{args.model.name} at {args.imgsz}{', tracking' if args.tracking else ''}")
    print(
        "| streams | files: frames/s | CPU ms/frame | frames/batch | waits/batch "
        "| live: frames/s | age p50 ms | age p95 ms | dropped |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lives = {r["streams"]: r for r in out.get("live", [])}
    for r in out.get("throughput", []):
        lv = lives.get(r["streams"], {})
        print(
            f"| {r['streams']} | {r['fps']} | {r['cpu_ms_per_frame']} | {r['frames_per_batch']} "
            f"| {r['host_waits_per_batch']} | {lv.get('fps', '-')} | {lv.get('age_p50_ms', '-')} "
            f"| {lv.get('age_p95_ms', '-')} | {lv.get('dropped', '-')} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
