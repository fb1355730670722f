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
  frames the ``latest`` policy dropped. Live means p95 < 0.5 s and no drops;
- **stages**: host milliseconds per batch of each stage (letterbox launches,
  model launch, postprocess with its one wait, delivery: tracking and sinks);
- ``--processes P``: the same S streams split over P processes on the GPU
  (started together; aggregate frames/s over the union of their runs);
- ``--ray-processes N``: the same S streams through ``processes: N`` (Ray workers
  sharing the GPU, the driver writing every record), as a user runs them, timed in
  the steady state (files looped, every stream delivering), with the host CPU per
  frame of the driver and the workers together;
- ``--probe``: whether NVDEC decoding waits for GPU work the process queued
  on other streams (it does: see BENCHMARKS.md);
- ``--shapes``: host milliseconds per model run as the batch size changes, in one
  ONNX Runtime session and in a session per bucket; ``--one-session`` runs the
  table with one session for every bucket (as before), to compare;
- ``--host-wait`` and ``--switch-interval``: how threads waiting for the GPU wait (the CUDA
  driver's default spins) and how long a thread may keep the GIL from others, to compare;
- ``$PYSPY`` (a py-spy binary): native stacks of the probe's busy cases and of the
  one-stream live run, where a thread waits inside a library.

    python benchmarks/gpu_scale.py --source 1080p.mp4 --model demo.onnx --imgsz 320 \
        [--streams 1 8 16 32 64] [--frames 150] [--live-seconds 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from vstream.bench.measure import process_cpu_seconds
from vstream.cli import spare_the_last_collection
from vstream.config import parse_data
from vstream.engine import Engine
from vstream.transfer import transfers

DEVICE = "cuda"
"""Where the pipelines run (``--device``; ``cpu`` only to try the script on a CPU)."""

COUNTING: dict[str, Any] = {}
RUNTIME: dict[str, Any] = {}
"""Runtime options of every pipeline measured beside the device (``--letterbox-kernel``)."""
"""With ``--counting``: a counting line across the middle of the 1080p picture and a zone over
its left half, added to the tracking (what a user who counts runs)."""
COUNTING_PLACES = {
    "lines": [{"name": "gate", "start": [0, 540], "end": [1920, 540]}],
    "zones": [{"name": "left", "points": [[0, 0], [960, 0], [960, 1080], [0, 1080]]}],
}


HOST_WAITS = {"auto": 0, "spin": 1, "yield": 2, "block": 4}
"""``CU_CTX_SCHED_*``: how a thread waiting for the GPU waits (``cuCtxSetFlags``)."""


def set_host_wait(policy: str) -> str:
    """Make every wait for the GPU in this process's primary context ``policy``; say what the
    context's flags were and are.

    The driver's default (``auto``) spins while the process has fewer contexts than the
    machine has cores: every thread waiting for the GPU burns a core meanwhile. vstream's
    own host wait (a batch's copy) uses a blocking event, but NVDEC's parser waits inside
    PyNvVideoCodec's ``Decode`` for the work queued on the pipeline's stream (BENCHMARKS.md,
    "Decoding waits for its own stream"), on an event of its own. ``cuCtxSetFlags`` (CUDA
    12.1) changes the flags of the current context, here the primary one torch uses.
    """
    import ctypes

    import torch

    torch.cuda.current_stream().query()  # torch's primary context made and current
    driver = ctypes.CDLL("libcuda.so.1")
    if not hasattr(driver, "cuCtxSetFlags"):
        return f"host wait {policy}: this driver has no cuCtxSetFlags (CUDA 12.1): left as it was"
    before, after = ctypes.c_uint(), ctypes.c_uint()
    driver.cuCtxGetFlags(ctypes.byref(before))
    code = driver.cuCtxSetFlags(ctypes.c_uint((before.value & ~0x7) | HOST_WAITS[policy]))
    driver.cuCtxGetFlags(ctypes.byref(after))
    return f"host wait {policy}: cuCtxSetFlags {code}, flags {before.value:#x} -> {after.value:#x}"


def _config(
    model: Path,
    imgsz: int,
    source: Path,
    streams: int,
    *,
    live: bool,
    tracking: bool,
    processes: int = 1,
    loop: bool = False,
) -> Any:
    """One pipeline of ``streams`` copies of ``source``; ``live``: each paced at its own rate,
    looped, the latest frame kept; ``loop``: files started again at their end (endless)."""
    source_options: dict[str, Any] = {"decoder": "nvdec" if DEVICE == "cuda" else "auto"}
    if live:
        source_options |= {"realtime": True, "loop": True, "policy": "latest"}
    elif loop:
        source_options["loop"] = True
    pipeline: dict[str, Any] = {
        "name": "scale",
        "model": {"path": str(model), "imgsz": imgsz},
        "runtime": {"device": DEVICE, **RUNTIME},
        "sources": [
            {"id": f"cam{i}", "uri": str(source), **source_options} for i in range(streams)
        ],
        "sinks": [{"type": "jsonl", "path": "/dev/null"}],
    }
    if tracking:
        pipeline["analytics"] = {"tracking": {}, **COUNTING}
    return parse_data({"processes": processes, "pipelines": [pipeline]})


class Ages(list):
    """Capture-to-record ages of every delivered frame, and when the first batch came: the
    runs are timed from there, so that opening the model and the decoders is left out."""

    first: tuple[float, float, int] | None = None
    """``time.time``, ``process_time`` and frames delivered when the first batch came."""
    stages: collections.Counter[str]
    """Host seconds each stage spent on the delivered batches, and the batches."""


def _watch_ages(engine: Engine) -> Ages:
    """Capture-to-record ages of every delivered frame, collected as batches are delivered."""
    pipeline = engine.pipelines["scale"]
    ages = Ages()
    ages.stages = collections.Counter()
    deliver = pipeline._deliver

    def timed(batch: Any) -> object:
        now = time.time()
        ages.extend(now - a.captured_at for a in batch.arrivals)
        if ages.first is None:
            ages.first = (now, time.process_time(), len(ages))
            if os.environ.get("GPU_SCALE_DELIVERING"):  # a profiler waits for this file
                Path(os.environ["GPU_SCALE_DELIVERING"]).touch()
        stages = ages.stages
        stages["batches"] += 1
        stages["preprocess"] += batch.preprocess_seconds
        stages["inference"] += batch.inference_seconds
        stages["postprocess"] += batch.postprocess_seconds
        started = time.perf_counter()
        try:
            return deliver(batch)
        finally:
            stages["deliver"] += time.perf_counter() - started

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


def _stage_ms(ages: Ages) -> dict[str, float]:
    """Host milliseconds per batch of each stage, over the delivered batches."""
    batches = max(1, ages.stages["batches"])
    return {
        k: round(1000 * ages.stages[k] / batches, 2)
        for k in ("preprocess", "inference", "postprocess", "deliver")
    }


def _wait_for_go(go: Path | None) -> None:
    """With ``--go``: say this process is ready (models and decoders open), then wait for the
    parent's word, so that the processes of a run start together."""
    if go is None:
        return
    Path(f"{go}.ready.{os.getpid()}").touch()
    deadline = time.monotonic() + 300
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go from the parent in 300 s")
        time.sleep(0.01)


def throughput(
    model: Path,
    imgsz: int,
    source: Path,
    streams: int,
    tracking: bool,
    sample: bool = False,
    go: Path | None = None,
) -> dict:
    engine = Engine(_config(model, imgsz, source, streams, live=False, tracking=tracking))
    ages = _watch_ages(engine)
    waits0, syncs0 = transfers.host_waits, transfers.implicit_sync_total()
    _, batches0 = transfers.snapshot()
    syncs_before = dict(transfers.implicit_syncs)
    _wait_for_go(go)
    with StackSampler() if sample else contextlib.nullcontext() as sampler:
        engine.start()
        engine.wait(threading.Event(), until_files_done=True)
    end_wall, end_cpu = time.time(), time.process_time()
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
        "started_at": first_wall,
        "ended_at": end_wall,
        "cpu_seconds": cpu,
        "batches": batches,
        "waits": waits,
        "cpu_ms_per_frame": round(1000 * cpu / max(1, frames), 3),
        "frames_per_batch": round(frames / max(1, batches), 1),
        "host_waits_per_batch": round(waits / max(1, batches), 2),
        "stage_ms_per_batch": _stage_ms(ages),
        "implicit_syncs": {
            k: v - syncs_before.get(k, 0)
            for k, v in transfers.implicit_syncs.items()
            if v != syncs_before.get(k, 0)
        },
        "plan": f"batch {batch}, {plan}",
    }


def _age_figures(ages: list[float]) -> dict[str, float | None]:
    """Median and 95th percentile in ms of ``ages`` (seconds, sorted)."""
    if not ages:
        return {"age_p50_ms": None, "age_p95_ms": None}
    return {
        "age_p50_ms": round(1000 * statistics.median(ages), 1),
        "age_p95_ms": round(1000 * ages[int(0.95 * (len(ages) - 1))], 1),
    }


def live(
    model: Path,
    imgsz: int,
    source: Path,
    streams: int,
    seconds: float,
    tracking: bool,
    go: Path | None = None,
    keep_ages: bool = False,
) -> dict:
    engine = Engine(_config(model, imgsz, source, streams, live=True, tracking=tracking))
    ages = _watch_ages(engine)
    _wait_for_go(go)
    engine.start()
    deadline = time.monotonic() + 60
    while ages.first is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)  # past the first batches: the steady state only
    dropped0 = sum(r.frames_dropped for r in engine.readers())
    ages.clear()
    ages.stages.clear()
    cpu = time.process_time()
    if streams == 1:
        _dump_native_stacks_soon("one live stream", seconds / 2)
    time.sleep(seconds)
    cpu = time.process_time() - cpu
    ordered = sorted(ages)
    stages = _stage_ms(ages)
    dropped = sum(r.frames_dropped for r in engine.readers()) - dropped0
    engine.stop(timeout=60)
    return {
        "stage_ms_per_batch": stages,
        **({"ages": ordered} if keep_ages else {}),
        "streams": streams,
        "records": len(ordered),
        "fps": round(len(ordered) / seconds, 1),
        **_age_figures(ordered),
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


def _dump_native_stacks_soon(title: str, seconds: float) -> None:
    """With ``$PYSPY`` (a py-spy binary), print this process's native stacks ``seconds`` from
    now: where a thread waits inside a library (PyNvVideoCodec, ONNX Runtime, CUDA)."""
    pyspy = os.environ.get("PYSPY")
    if not pyspy:
        return

    def dump() -> None:
        time.sleep(seconds)
        command = [pyspy, "dump", "--native", "--pid", str(os.getpid())]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        print(f"--- native stacks: {title}\n{done.stdout}{done.stderr}", flush=True)

    threading.Thread(target=dump, daemon=True).start()


def decoding_probe(source: Path, frames: int = 60) -> list[dict]:
    """Whether NVDEC decoding waits for GPU work the process queued elsewhere.

    A decoder decodes 40 frames (its session made, its buffers allocated),
    then about a second of GPU work is queued (one thread block's sleep) on
    the stream the frames are read on, or on an unrelated stream, and the
    next ``frames`` frames are decoded: ``decode_ms`` against the idle run
    says whether decoding waited for that work.
    """
    import torch

    from vstream.decoders import nvdec
    from vstream.inference.providers import pipeline_stream

    device = torch.device("cuda", 0)
    rows = []
    for busy in ("none", "readers' stream", "unrelated stream"):
        readers = pipeline_stream(device)
        elsewhere = torch.cuda.Stream(device)
        with torch.cuda.stream(readers):
            decoder = nvdec.NvdecDecoder(str(source), device=device, cache=None)
            pictures = decoder.pictures()
            warm = [next(pictures) for _ in range(40)]
            del warm
            torch.cuda.synchronize()
            if busy != "none":
                with torch.cuda.stream(readers if busy == "readers' stream" else elsewhere):
                    torch.cuda._sleep(2_000_000_000)  # about a second of one SM's time
                _dump_native_stacks_soon(f"probe, busy on the {busy}", 0.3)
            started = time.perf_counter()
            count = 0
            for _ in pictures:
                count += 1
                if count >= frames:
                    break
            seconds = time.perf_counter() - started
        decoder.close()
        torch.cuda.synchronize()
        rows.append({"busy": busy, "frames": count, "decode_ms": round(1000 * seconds, 1)})
    return rows


def across_processes(args: argparse.Namespace, streams: int, live_run: bool) -> dict:
    """``streams`` streams split over ``args.processes`` processes started together."""
    processes = args.processes
    shares = [streams // processes + (i < streams % processes) for i in range(processes)]
    shares = [n for n in shares if n]
    folder = Path(f"/tmp/gpu_scale_{os.getpid()}_{streams}_{int(live_run)}")
    folder.mkdir(parents=True, exist_ok=True)
    go = folder / "go"
    children = []
    for i, share in enumerate(shares):
        command = [
            sys.executable,
            __file__,
            "--source", str(args.source), "--model", str(args.model),
            "--imgsz", str(args.imgsz), "--streams", str(share), "--skip-limits",
            "--device", args.device,
            "--live-seconds", str(args.live_seconds),
            "--child", "live" if live_run else "files", "--go", str(go),
            "--json", str(folder / f"child{i}.json"),
        ]  # fmt: skip
        if args.tracking:
            command.append("--counting" if args.counting else "--tracking")
        if args.host_wait is not None:
            command += ["--host-wait", args.host_wait]
        if args.switch_interval is not None:
            command += ["--switch-interval", str(args.switch_interval)]
        if args.letterbox_kernel:
            command.append("--letterbox-kernel")
        children.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
    deadline = time.monotonic() + 300
    while len(list(folder.glob("go.ready.*"))) < len(children):
        if time.monotonic() > deadline or any(c.poll() is not None for c in children):
            break
        time.sleep(0.05)
    go.touch()
    for child in children:
        child.wait(timeout=600)
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("child*.json"))]
    if len(runs) != len(children):
        return {"streams": streams, "processes": len(children), "failed": True}
    if live_run:
        ages = sorted(a for r in runs for a in r["ages"])
        return {
            "streams": streams,
            "processes": len(children),
            "fps": round(sum(r["fps"] for r in runs), 1),
            **_age_figures(ages),
            "dropped": sum(r["dropped"] for r in runs),
        }
    frames = sum(r["frames"] for r in runs)
    wall = max(r["ended_at"] for r in runs) - min(r["started_at"] for r in runs)
    batches = sum(r["batches"] for r in runs)
    return {
        "streams": streams,
        "processes": len(children),
        "frames": frames,
        "fps": round(frames / wall, 1),
        "cpu_ms_per_frame": round(1000 * sum(r["cpu_seconds"] for r in runs) / frames, 3),
        "frames_per_batch": round(frames / max(1, batches), 1),
        "host_waits_per_batch": round(sum(r["waits"] for r in runs) / max(1, batches), 2),
    }


def through_ray(args: argparse.Namespace, streams: int, live_run: bool) -> dict:
    """``streams`` streams through ``processes: N`` (Ray workers sharing the GPU, the driver
    writing the records), as a user runs them, in the steady state: the files looped, timed
    over ``--steady-seconds`` (live: ``--live-seconds``) once every stream has delivered
    (the workers start one after another: a run timed from the first record, as before,
    counted their start-up and the last streams' tail alone). Frames/s from the streams'
    delivered counts; host CPU per frame of the driver and of every worker process
    together (``/proc``: the workers run on this machine); live, the frames dropped and
    the streams' ages as their workers report them (capture to record on the worker, the
    latest frame of each stream, sampled)."""
    from vstream.cluster import open_engine
    from vstream.cluster.processes import resolve

    config = _config(
        args.model, args.imgsz, args.source, streams, live=live_run, tracking=args.tracking,
        processes=args.ray_processes, loop=True,
    )  # fmt: skip
    config = resolve(config)  # as open_engine does it (once: a resolved config stays as is)
    processes = config.cluster.workers if config.cluster is not None else 1
    engine = open_engine(config)
    started = time.monotonic()
    engine.start()

    def counts() -> tuple[list[int], int]:
        readers = engine.readers()
        return [r.counters.frames_processed for r in readers], sum(
            r.frames_dropped for r in readers
        )

    def host_cpu() -> tuple[float, float]:
        workers = engine.workers() if hasattr(engine, "workers") else []  # none in one process
        pids = {w["pid"] for w in workers if w["pid"] is not None} - {os.getpid()}
        return time.process_time(), sum(process_cpu_seconds(pid) or 0.0 for pid in pids)

    try:
        deadline = time.monotonic() + 300
        first_record: float | None = None
        while time.monotonic() < deadline:
            delivered, _ = counts()
            if first_record is None and any(delivered):
                first_record = time.monotonic()
            if all(delivered):
                break
            time.sleep(0.1)
        else:
            return {
                "streams": streams,
                "processes": processes,
                "failed": "not every stream "
                f"delivered within 300 s: {sum(map(bool, counts()[0]))} of {streams}",
            }
        spread = time.monotonic() - (first_record or started)
        time.sleep(2.0)  # past the last streams' first batches: the steady state only
        window = args.live_seconds if live_run else args.steady_seconds
        first = time.monotonic()
        (frames0, dropped0), (driver0, workers0) = counts(), host_cpu()
        ages: list[float] = []
        while time.monotonic() - first < window:
            time.sleep(0.1)
            if live_run:
                ages += [a for r in engine.readers() if (a := r.frame_age_seconds) is not None]
        seconds = time.monotonic() - first
        (frames1, dropped1), (driver1, workers1) = counts(), host_cpu()
    finally:
        engine.stop(timeout=60)
    frames = max(1, sum(frames1) - sum(frames0))
    row: dict[str, Any] = {
        "streams": streams,
        "processes": processes,
        "engine": "ray" if processes > 1 else "one process",
        "frames": frames,
        "fps": round(frames / seconds, 1),
        "cpu_ms_per_frame": round(1000 * (driver1 - driver0 + workers1 - workers0) / frames, 3),
        "all_streams_delivering_after_s": round(spread, 1),
    }
    if processes > 1:
        row["driver_cpu_ms_per_frame"] = round(1000 * (driver1 - driver0) / frames, 3)
    if live_run:
        row |= {**_age_figures(sorted(ages)), "dropped": dropped1 - dropped0}
    return row


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


def shape_changes(model: Path, imgsz: int, runs: int = 60) -> list[dict]:
    """Host milliseconds per model run (queued and waited for) as the batch size changes.

    The sizes follow a live pipeline's part-filled batches (1, 2, 1, 4, ...). Run in
    one session for every bucket (as before) and in a session per bucket (as shipped,
    :func:`vstream.inference.buckets.session_per_bucket`), then at a constant size:
    whether a change of input shape costs the CUDA provider a rebuild of its plans.
    """
    import torch

    from vstream.detector import split_options
    from vstream.inference import session as session_module

    pattern = [1, 2, 1, 4, 2, 1, 8, 1, 2, 4]
    rows = []
    for label, own, sizes in (
        ("one session, sizes changing", False, pattern),
        ("a session per bucket, sizes changing", True, pattern),
        ("one session, size 1 only", False, [1]),
    ):
        shipped = session_module.session_per_bucket
        session_module.session_per_bucket = lambda device, providers, own=own: own
        try:
            config, _, runtime = split_options(
                model, {"device": DEVICE, "imgsz": imgsz, "batch_size": 8, "in_flight": 1}
            )
            engine = session_module.ModelSession(config, runtime)
        finally:
            session_module.session_per_bucket = shipped
        buffer = engine.buffers[0]
        times = []
        for i in range(runs):
            bucket = buffer.bucket_for(sizes[i % len(sizes)])
            started = time.perf_counter()
            engine.run(bucket)
            if engine.cuda_stream is not None:
                engine.cuda_stream.synchronize()
            times.append(time.perf_counter() - started)
        del engine
        torch.cuda.empty_cache() if DEVICE == "cuda" else None
        ms = sorted(1000 * t for t in times[len(sizes) :])  # past the first pass
        rows.append(
            {
                "runs": label,
                "median_ms": round(statistics.median(ms), 2),
                "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 16, 32, 64])
    parser.add_argument("--live-seconds", type=float, default=8.0)
    parser.add_argument(
        "--steady-seconds",
        type=float,
        default=8.0,
        help="with --ray-processes: the file runs' window, timed once every stream delivers",
    )
    parser.add_argument("--tracking", action="store_true", help="the ByteTrack tracker on")
    parser.add_argument(
        "--counting", action="store_true", help="tracking, a counting line and a zone"
    )
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
    parser.add_argument("--skip-files", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model-runs", type=int, default=200)
    parser.add_argument("--nvdec-frames", type=int, default=150)
    parser.add_argument("--probe", action="store_true", help="the decoding probe, then exit")
    parser.add_argument(
        "--shapes", action="store_true", help="run times as the batch size changes, then exit"
    )
    parser.add_argument(
        "--one-session",
        action="store_true",
        help="every bucket in one ONNX Runtime session (before session_per_bucket), to compare",
    )
    parser.add_argument(
        "--track-alone",
        action="store_true",
        help="each stream's tracker stepped alone, a frame at a time (as before the pipeline "
        "stepped a batch's together), to compare",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="seconds a thread may hold the GIL before another waiting for it gets it "
        "(sys.setswitchinterval; Python's default 0.005): one process's 40-odd threads hand "
        "it over at each native call, so how often it is taken from them may matter",
    )
    parser.add_argument(
        "--host-wait",
        choices=sorted(HOST_WAITS),
        help="how threads waiting for the GPU wait (the primary context's scheduling flag; "
        "the driver's default is auto: spin while there are fewer contexts than cores)",
    )
    parser.add_argument(
        "--letterbox-kernel",
        action="store_true",
        help="runtime.letterbox_kernel: a batch letterboxed by one CUDA kernel, not ~100 torch "
        "operations",
    )
    parser.add_argument("--processes", type=int, default=1, help="split the streams over these")
    parser.add_argument(
        "--ray-processes",
        type=lambda text: text if text == "auto" else int(text),
        default=1,
        help="run the streams through processes: N or auto (Ray workers, the driver writing "
        "records)",
    )
    parser.add_argument("--child", choices=["files", "live"], help=argparse.SUPPRESS)
    parser.add_argument("--go", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if args.host_wait is not None:
        print(set_host_wait(args.host_wait), flush=True)
    if args.letterbox_kernel:
        RUNTIME["letterbox_kernel"] = True
    if args.counting:
        args.tracking = True
        COUNTING.update(COUNTING_PLACES)
    if args.track_alone:
        from vstream.engine.pipeline import Pipeline

        Pipeline.track_together = False
    if args.one_session:
        from vstream.inference import session as session_module

        session_module.session_per_bucket = lambda device, providers: False
    if args.probe:
        for row in decoding_probe(args.source):
            print("probe", json.dumps(row), flush=True)
        return
    if args.shapes:
        for row in shape_changes(args.model, args.imgsz):
            print("shapes", json.dumps(row), flush=True)
        return
    if args.child:  # one share of a run across processes (across_processes)
        streams = args.streams[0]
        if args.child == "files":
            row = throughput(
                args.model, args.imgsz, args.source, streams, args.tracking, go=args.go
            )
        else:
            row = live(
                args.model, args.imgsz, args.source, streams, args.live_seconds,
                args.tracking, go=args.go, keep_ages=True,
            )  # fmt: skip
        args.json.write_text(json.dumps(row))
        return
    out: dict[str, Any] = {
        "model": args.model.name,
        "imgsz": args.imgsz,
        "tracking": args.tracking,
        "counting": args.counting,
        "sessions": "one" if args.one_session else "per bucket",
        "trackers": "alone" if args.track_alone else "together",
        "switch_interval_seconds": sys.getswitchinterval(),
        "host_wait": args.host_wait or "auto (the driver's)",
        "letterbox": "one kernel" if args.letterbox_kernel else "torch",
    }

    def say(key: str, row: dict) -> None:
        out.setdefault(key, []).append(row)
        print(key, json.dumps(row), flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))

    if not args.skip_limits:
        say("model_alone", model_alone(args.model, args.imgsz, args.model_runs))
        for sessions in sorted({1, 8, max(args.streams)}):
            say("nvdec_alone", nvdec_alone(args.source, sessions, args.nvdec_frames))
    by_ray = args.ray_processes != 1
    out["processes"] = args.ray_processes if by_ray else args.processes
    for streams in [] if args.skip_files else args.streams:
        if by_ray:
            run = through_ray(args, streams, live_run=False)
        elif args.processes > 1:
            run = across_processes(args, streams, live_run=False)
        else:
            sample = streams in args.sample
            run = throughput(args.model, args.imgsz, args.source, streams, args.tracking, sample)
            for key in ("started_at", "ended_at", "cpu_seconds", "batches", "waits"):
                run.pop(key)
        say("throughput", run)
    if not args.skip_live:
        for streams in args.streams:
            if by_ray:
                row = through_ray(args, streams, live_run=True)
            elif args.processes > 1:
                row = across_processes(args, streams, live_run=True)
            else:
                row = live(
                    args.model, args.imgsz, args.source, streams, args.live_seconds, args.tracking
                )
            say("live", row)
    print(
        f"\n{args.model.name} at {args.imgsz}{', tracking' if args.tracking else ''}"
        f"{', a line and a zone' if args.counting else ''}, "
        f"{out['processes']} process(es){' through Ray' if by_ray else ''}, "
        f"sessions: {out['sessions']}, trackers stepped {out['trackers']}, "
        f"GIL switch interval {out['switch_interval_seconds'] * 1e3:g} ms, "
        f"host wait {out['host_wait']}, letterbox by {out['letterbox']}"
    )
    print(
        "| streams | files: frames/s | CPU ms/frame | frames/batch | waits/batch "
        "| live: frames/s | age p50 ms | age p95 ms | dropped |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lives = {r["streams"]: r for r in out.get("live", [])}
    files = {r["streams"]: r for r in out.get("throughput", [])}
    for r in files.values() or [{"streams": n} for n in lives]:
        lv = lives.get(r["streams"], {})
        print(
            f"| {r['streams']} | {r.get('fps', '-')} | {r.get('cpu_ms_per_frame', '-')} "
            f"| {r.get('frames_per_batch', '-')} | {r.get('host_waits_per_batch', '-')} "
            f"| {lv.get('fps', '-')} | {lv.get('age_p50_ms', '-')} "
            f"| {lv.get('age_p95_ms', '-')} | {lv.get('dropped', '-')} |"
        )
    for key in ("throughput", "live"):
        for r in out.get(key, []):
            if "stage_ms_per_batch" in r:
                print(f"stages ms/batch, {key} {r['streams']} streams: {r['stage_ms_per_batch']}")
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        main()
    finally:
        # These processes ended in SIGSEGV at exit as the CLI's did (BENCHMARKS.md, sixth run).
        spare_the_last_collection()
