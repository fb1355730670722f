"""The cluster's costs, measured on a local Ray instance: workers, the driver, a lost worker.

Three measurements, each on its own local Ray instance (127.0.0.1 only):

- ``throughput``: N file streams of the sample video through the demo model,
  in one process (the engine) and on 1 and 2 Ray workers; aggregate frames
  per second from the first placement to the last record, and the driver's
  CPU time per record (what the cluster adds on the driver's side).
- ``driver``: what one driver can take: workers that make records without
  a model or a video (``SyntheticWorker``, ``--detections`` boxes each), as
  fast as the driver takes them, into a JSON Lines sink on /dev/null;
  records per second through Ray and driver CPU per record; ``--track``
  adds tracking, which runs on the workers, as on real ones: each record
  tracked there, each stream's tracker sent with its last record of a write.
- ``fault``: 4 streams paced at 25 fps on 2 workers; one worker's process
  is killed mid-run; the time from the kill to the driver noticing it, and
  to the first record of each moved stream from its new worker; then that
  every frame came once.

    .venv/bin/python benchmarks/cluster.py throughput [--streams 4] [--workers 1 2]
    .venv/bin/python benchmarks/cluster.py driver [--workers 1 2] [--seconds 10] [--track]
    .venv/bin/python benchmarks/cluster.py fault

Each run prints how many cores other processes used meanwhile (from
/proc/stat), since the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from vstream import assets
from vstream.analytics.stream import StreamAnalytics
from vstream.bench.measure import process_cpu_seconds
from vstream.cluster.relay import Relay
from vstream.cluster.worker import WorkerInfo, WorkerReport
from vstream.config import parse_data
from vstream.engine import carry
from vstream.engine.outputs import analyze
from vstream.results import Detections, FrameResult


def busy_cores() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


class Load:
    """CPU used by this process tree and by everything else while a measurement runs."""

    def __enter__(self) -> Load:
        self.wall = time.monotonic()
        self.machine = busy_cores()[0]
        self.mine = _tree_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self.wall
        machine = busy_cores()[0] - self.machine
        self.own = _tree_cpu() - self.mine
        self.others = max(0.0, machine - self.own) / self.seconds


def _tree_cpu() -> float:
    """CPU seconds of this process and every Ray process of this user (the workers included)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(entry.name) == os.getpid() or b"ray" in command:
            total += process_cpu_seconds(int(entry.name)) or 0.0
    return total


def pipeline(name: str, streams: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": {"path": str(assets.DEMO_MODEL)},
        "runtime": {"device": "cpu", "batch_size": 4},
        "sources": streams,
        "sinks": [{"type": "jsonl", "path": "/dev/null"}],
        **extra,
    }


def files(count: int, **options: Any) -> list[dict[str, Any]]:
    return [{"id": f"s{i}", "uri": str(assets.SAMPLE_VIDEO), **options} for i in range(count)]


def wait(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark did not finish in time")
        time.sleep(0.01)


def run_single(streams: int) -> dict[str, Any]:
    from vstream.engine import Engine

    config = parse_data({"pipelines": [pipeline("p", files(streams))]})
    engine = Engine(config)
    with Load() as load:
        engine.start()
        wait(engine.files_done, 600)
    engine.stop()
    frames = sum(s.frames for s in engine.summary())
    return {
        "run": "one process",
        "frames": frames,
        "fps": frames / load.seconds,
        "others_cores": load.others,
    }


def run_cluster(
    streams: list[dict[str, Any]],
    workers: int,
    worker_class: Any = None,
    analytics: dict[str, Any] | None = None,
    **cluster: Any,
) -> Any:
    from vstream.cluster.driver import ClusterEngine, ClusterWorker

    extra = {"analytics": analytics} if analytics else {}
    config = parse_data(
        {
            "cluster": {"engine": "ray", "workers": workers, **cluster},
            "pipelines": [pipeline("p", streams, **extra)],
        }
    )
    return ClusterEngine(config, worker_class=worker_class or ClusterWorker)


def throughput(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = [run_single(args.streams)]
    for workers in args.workers:
        engine = run_cluster(files(args.streams), workers)
        try:
            driver_cpu = time.process_time()
            with Load() as load:
                engine.start()
                wait(engine.files_done, 600)
            driver_cpu = time.process_time() - driver_cpu
        finally:
            engine.stop()
        frames = sum(s.frames for s in engine.summary())
        rows.append(
            {
                "run": f"{workers} Ray workers",
                "frames": frames,
                "fps": frames / load.seconds,
                "driver_cpu_ms_per_record": 1000 * driver_cpu / frames,
                "others_cores": load.others,
            }
        )
    return rows


class SyntheticWorker:
    """A worker without a model or a video: records as fast as the driver takes them.

    It answers the driver exactly as :class:`~vstream.cluster.worker.ClusterWorker`
    does (same relay, same reports, each stream tracked here when the pipeline
    tracks), so the driver's side is measured alone.
    """

    detections = 5

    def __init__(self, torch_threads: int) -> None:
        self.relay: Relay | None = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.tracking: dict[str, Any] = {}
        self.analytics: dict[str, Any] = {}

    def open(self, pipelines: list[Any], buffered_records: int) -> WorkerInfo:
        self.relay = Relay(buffered_records, state_of=self._analytics_of)
        self.tracking = {p.name: p.analytics for p in pipelines if p.analytics.enabled}
        return WorkerInfo(
            pid=os.getpid(),
            host=socket.gethostname(),
            node_ip="127.0.0.1",
            device="synthetic",
            throughput=1000.0,
        )

    def _analytics_of(self, stream: str) -> bytes | None:
        analytics = self.analytics.get(stream)
        return None if analytics is None else carry.dumps(analytics)

    def pid(self) -> int:
        return os.getpid()

    def add(self, pipeline: str, source: Any, resume: Any, analytics: Any = None) -> None:
        if pipeline in self.tracking:
            self.analytics[source.id] = StreamAnalytics(self.tracking[pipeline], {0: "a"})
        thread = threading.Thread(target=self._make, args=(source.id,), daemon=True)
        self.threads.append(thread)
        thread.start()

    def _make(self, stream: str) -> None:
        assert self.relay is not None
        analytics = self.analytics.get(stream)
        shift = np.arange(self.detections, dtype=np.float32)[:, None]
        boxes = Detections(
            np.array([10.0, 20.0, 50.0, 80.0], np.float32) + shift * [1, 0, 1, 0],
            np.full(self.detections, 0.9, np.float32),
            np.zeros(self.detections, np.int64),
            class_names={0: "a"},
        )
        index = 0
        while not self.stop.is_set():
            batch = [
                FrameResult(stream, index + i, (index + i) / 25, 640, 360, boxes) for i in range(4)
            ]
            if analytics is not None:
                batch = [analyze(analytics, result) for result in batch]
            self.relay.write(batch)
            index += 4

    def remove(self, stream_id: str) -> None:
        return None

    def take(self, limit: int, wait: float) -> WorkerReport:
        assert self.relay is not None
        taken = self.relay.take(limit, wait)
        return WorkerReport(taken.records, None, taken.ended, taken.states)

    def stop_taking_frames(self) -> None:
        self.stop.set()

    def finish(self, timeout: float) -> None:
        self.stop.set()
        if self.relay is not None:
            self.relay.close()
        for thread in self.threads:
            thread.join(timeout)


def driver(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    SyntheticWorker.detections = args.detections
    for workers in args.workers:
        analytics = {"tracking": {}} if args.track else None
        engine = run_cluster(
            files(args.streams), workers, SyntheticWorker, analytics, cpus_per_worker=0.5
        )
        try:
            engine.start()
            wait(lambda e=engine: e.records_received > 0, 60)
            before, cpu = engine.records_received, time.process_time()
            with Load() as load:
                time.sleep(args.seconds)
            records = engine.records_received - before
            cpu = time.process_time() - cpu
        finally:
            engine.stop()
        rows.append(
            {
                "run": f"driver, {workers} synthetic workers, {args.streams} streams, "
                f"{args.detections} boxes per record" + (", tracking" if args.track else ""),
                "records_per_second": records / load.seconds,
                "driver_cpu_ms_per_record": 1000 * cpu / records,
                "others_cores": load.others,
            }
        )
    return rows


def fault(args: argparse.Namespace) -> list[dict[str, Any]]:
    from vstream.cluster.driver import ClusterEngine

    out = Path(tempfile.mkdtemp()) / "fault.jsonl"
    streams = files(4, end_seconds=6.0, realtime=True)
    doc = {
        "cluster": {"engine": "ray", "workers": 2},
        "pipelines": [{**pipeline("p", streams), "sinks": [{"type": "jsonl", "path": str(out)}]}],
    }
    engine = ClusterEngine(parse_data(doc))
    try:
        engine.start()
        victim = next(w for w in engine.workers() if w["streams"])
        moved = victim["streams"]
        wait(lambda: all(engine.stream(s).frames_processed >= 50 for s in moved), 60)
        pid = engine.worker_pid(victim["worker"])
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait(lambda: any(w["state"] == "starting" for w in engine.workers()), 60)
        noticed = time.monotonic() - killed
        counts = {s: engine.stream(s).frames_processed for s in moved}
        resumed: dict[str, float] = {}
        while len(resumed) < len(moved):
            for s in moved:
                if s not in resumed and engine.stream(s).frames_processed > counts[s]:
                    resumed[s] = time.monotonic() - killed
            time.sleep(0.005)
        wait(engine.files_done, 120)
        wait(lambda: all(w["state"] == "ready" for w in engine.workers()), 120)
        replacement = time.monotonic() - killed
    finally:
        engine.stop()
    frames: dict[str, list[int]] = {}
    for line in out.read_text().splitlines():
        record = json.loads(line)
        frames.setdefault(record["stream"], []).append(record["frame"])
    exact = len(frames) == 4 and all(f == list(range(150)) for f in frames.values())
    return [
        {
            "run": "a worker killed, 4 streams at 25 fps on 2 workers",
            "moved_streams": len(moved),
            "noticed_after_s": noticed,
            "first_record_after_s": max(resumed.values()),
            "replacement_ready_after_s": replacement,
            "every_frame_once": exact,
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["throughput", "driver", "fault"])
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--detections", type=int, default=5)
    parser.add_argument("--track", action="store_true", help="driver: the workers track")
    args = parser.parse_args()
    rows = {"throughput": throughput, "driver": driver, "fault": fault}[args.what](args)
    for row in rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))


if __name__ == "__main__":
    main()
