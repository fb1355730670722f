"""Streams on a real local Ray instance on 127.0.0.1: placement, exactly once, a lost worker.

One Ray instance (started by vstream's own connection code, loopback only)
serves the in-process tests of this module; each test starts its engine's
workers on it and stops them. ``vstream run`` with ``cluster:`` runs as a
user runs it, in a process of its own with a Ray instance of its own, and
must leave no Ray process behind. Nothing here waits on a clock: every wait
is for an event, with a generous bound.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import api_client, frames_by_stream, run_cli, wait_for

from vstream import assets
from vstream.cluster.connect import RayConnection
from vstream.cluster.driver import ClusterEngine
from vstream.cluster.worker import ClusterWorker
from vstream.config import load_config, parse_config
from vstream.config.cluster import ClusterConfig
from vstream.config.sources import SourceConfig
from vstream.errors import ModelError, VstreamError

MODEL = assets.DEMO_MODEL
COLOUR_MODEL = assets.COLOUR_MODEL
VIDEO = assets.SAMPLE_VIDEO
FPS = 25


def ray_processes() -> dict[int, str]:
    """Every Ray process on this machine (Ray's servers, agents and workers), by pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ray::" in command or "/site-packages/ray/" in command:
            found[int(entry.name)] = command[:120]
    return found


def descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def listening_addresses(pids: set[int]) -> set[str]:
    """The local addresses TCP sockets of ``pids`` listen on (from /proc/net)."""
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(fields[1].split(":")[0])
    return found


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}
"""127.0.0.1 as /proc/net/tcp and tcp6 write it."""


PIPELINE = {
    "name": "p",
    "model": {"path": str(MODEL)},
    "runtime": {"device": "cpu", "batch_size": 4},
}
"""The demo detector on the CPU, as every pipeline here runs it (sources and sinks apart)."""

COUNTING = {"tracking": {}, "lines": [{"name": "gate", "start": [320, 360], "end": [320, 0]}]}
"""Analytics that track and count a line the sample's objects cross."""


def single_process_records(pipeline: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """The records of ``pipeline`` (with its sources) run in one process, as a reference."""
    from vstream.engine import Engine

    sink = {"type": "jsonl", "path": str(tmp_path / "single.jsonl")}
    config = parse_config(json.dumps({"pipelines": [{**pipeline, "sinks": [sink]}]}))
    with Engine(config, base_dir=tmp_path) as engine:
        wait_for(engine.files_done, 120, "the single-process run")
    return [json.loads(line) for line in (tmp_path / "single.jsonl").read_text().splitlines()]


def assert_same_records(cluster: list[dict], single: list[dict]) -> None:
    """The same frames with the same detections, tracks and counts (floats to 1e-3)."""

    def key(record: dict) -> tuple[str, int]:
        return record["stream"], record["frame"]

    for stream in {r["stream"] for r in cluster}:  # each stream's records in frame order
        frames = [r["frame"] for r in cluster if r["stream"] == stream]
        assert frames == sorted(frames), stream
    cluster, single = sorted(cluster, key=key), sorted(single, key=key)
    assert [key(r) for r in cluster] == [key(r) for r in single]
    for ours, theirs in zip(cluster, single, strict=True):
        assert ours.keys() == theirs.keys()
        assert ours["pts"] == pytest.approx(theirs["pts"])
        assert ours["lines"] == theirs["lines"] and ours["events"] == theirs["events"]
        assert len(ours["detections"]) == len(theirs["detections"]), key(ours)
        for a, b in zip(ours["detections"], theirs["detections"], strict=True):
            assert (a["class_id"], a.get("track_id")) == (b["class_id"], b.get("track_id"))
            assert a.get("attributes") == b.get("attributes"), key(ours)
            assert a["bbox"] == pytest.approx(b["bbox"], abs=1e-2)
            assert a["score"] == pytest.approx(b["score"], abs=1e-3)


def test_vstream_run_with_cluster_gives_a_single_process_s_records_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    """As a user runs it: its own local Ray instance, stopped at the end, no process left.

    A file stream (compared, frame by frame, with a single process's records,
    tracks and line counts) and an endless one, until SIGTERM: intake stops,
    what is in flight is delivered, the summary is printed, exit status 0.
    """
    pipeline = {
        **PIPELINE,
        "analytics": COUNTING,
        "sources": [{"id": "file", "uri": str(VIDEO), "end_seconds": 2.0}],
    }
    endless = {"id": "endless", "uri": str(VIDEO), "loop": True, "realtime": True}
    config = tmp_path / "cluster.yaml"
    config.write_text(
        json.dumps(
            {
                "cluster": {"engine": "ray", "workers": 2},
                "pipelines": [
                    {
                        **pipeline,
                        "sources": [*pipeline["sources"], endless],
                        "sinks": [{"type": "jsonl", "path": "cluster.jsonl"}],
                    }
                ],
            }
        )
    )
    out = tmp_path / "cluster.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "vstream", "run", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: (
                out.exists()
                and (got := frames_by_stream(out)).get("file", []) == list(range(2 * FPS))
                and len(got.get("endless", [])) >= 10
            ),
            240,
            "the file's records and some of the endless stream's",
        )
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "file: 50 frames" in stderr and "on 2 Ray workers (cpu)" in stderr
    # The module's own instance is this process's; anything else is the run's, left behind.
    wait_for(
        lambda: not [p for p in ray_processes() if not descends_from(p, os.getpid())],
        30,
        "the run's Ray processes to end",
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    endless_frames = [r["frame"] for r in records if r["stream"] == "endless"]
    assert endless_frames == list(range(len(endless_frames)))  # nothing lost in the stop
    file_records = [r for r in records if r["stream"] == "file"]
    assert_same_records(file_records, single_process_records(pipeline, tmp_path))


def test_the_shipped_cluster_config_runs_as_a_user_runs_it(tmp_path: Path) -> None:
    """``vstream run configs/cluster.yaml``, unchanged: its own local Ray instance with two
    workers, four bundled streams tracked and counted there, every frame once and in order."""
    shipped = Path(__file__).resolve().parents[1] / "configs" / "cluster.yaml"
    shutil.copy(shipped, tmp_path / "cluster.yaml")
    done = run_cli("run", "cluster.yaml", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "on 2 Ray workers" in done.stderr
    out = tmp_path / "out" / "cluster-detections.jsonl"
    assert frames_by_stream(out) == {f"cam{i}": list(range(200)) for i in range(1, 5)}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all("gate" in r["lines"] for r in records)  # tracked and counted on the workers
    assert any(d.get("track_id") for r in records for d in r["detections"])


@pytest.fixture(scope="module")
def local_ray() -> Iterator[RayConnection]:
    """One local Ray instance for the module's in-process tests, started as vstream starts it.

    Ray is imported here, by vstream, not at the module's import: a local
    instance stays on 127.0.0.1 only when vstream sets that up before Ray loads.
    """
    connection = RayConnection(ClusterConfig(engine="ray", workers=2))
    assert connection.owned
    try:
        yield connection
    finally:
        connection.close()
        wait_for(
            lambda: not [p for p in ray_processes() if descends_from(p, os.getpid())],
            30,
            "every Ray process of the module's instance to end",
        )


def daemon_config(tmp_path: Path) -> Any:
    """Two workers, no streams yet; one replacement at most, a stream moved once at most."""
    pipeline = {
        **PIPELINE,
        "analytics": COUNTING,
        "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")}],
    }
    cluster = {"engine": "ray", "workers": 2, "max_worker_restarts": 1, "max_stream_moves": 1}
    document = {
        "server": {"allowed_paths": [str(tmp_path), str(VIDEO.parent)]},
        "cluster": cluster,
        "pipelines": [pipeline],
    }
    return parse_config(json.dumps(document), base_dir=tmp_path)


def test_the_local_instance_listens_on_loopback_only(local_ray: RayConnection) -> None:
    assert local_ray.ray.util.get_node_ip_address() == "127.0.0.1"
    mine = {p for p in ray_processes() if descends_from(p, os.getpid())}
    assert mine, "the instance's processes are children of this one"
    addresses = listening_addresses(mine)
    assert addresses and addresses <= LOOPBACK, addresses


def test_the_local_instance_s_workers_run_at_the_machine_s_normal_priority(
    local_ray: RayConnection,
) -> None:
    """Ray starts workers at niceness 15: on a busy machine they starved (the pipelines'
    work is theirs here), and a loaded CI box took minutes per cluster test."""
    ray = local_ray.ray

    @ray.remote(num_cpus=0)
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote(), timeout=120) == os.nice(0)


def test_a_model_that_does_not_load_on_a_worker_fails_at_start_in_one_line(
    local_ray: RayConnection, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model" * 100)
    document = {
        "cluster": {"engine": "ray", "workers": 1},
        "pipelines": [
            {
                "name": "p",
                "model": {"path": str(broken)},
                "runtime": {"device": "cpu"},
                "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")}],
            }
        ],
    }
    with pytest.raises(ModelError) as raised:
        ClusterEngine(parse_config(json.dumps(document)), base_dir=tmp_path)
    assert str(raised.value).startswith(f"cannot load model {broken}")
    ray = local_ray.ray
    wait_for(lambda: ray.available_resources().get("CPU") == 2.0, 30, "the worker to be gone")


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (
            {"gpus_per_worker": 1},
            "cluster.workers (1) x cluster.gpus_per_worker (1) needs more GPUs than this "
            "machine's 0",
        ),
        (
            {"address": "auto", "gpus_per_worker": 1, "start_timeout_seconds": 2},
            "1 of 1 Ray workers did not start within cluster.start_timeout_seconds (2 s): "
            "each asks for 1 CPU and 1 GPU",
        ),
    ],
    ids=["local-without-gpus", "cluster-without-room"],
)
def test_workers_that_cannot_be_placed_fail_the_start_in_one_line(
    local_ray: RayConnection, tmp_path: Path, cluster: dict, message: str
) -> None:
    document = {
        "cluster": {"engine": "ray", "workers": 1, **cluster},
        "pipelines": [
            {
                "name": "p",
                "model": {"path": str(MODEL)},
                "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")}],
            }
        ],
    }
    with pytest.raises(VstreamError) as raised:
        ClusterEngine(parse_config(json.dumps(document)), base_dir=tmp_path)
    assert str(raised.value).startswith(message)
    ray = local_ray.ray
    wait_for(lambda: ray.available_resources().get("CPU") == 2.0, 30, "nothing left placed")


def engine_config(
    tmp_path: Path,
    sources: list[dict],
    sink: dict | None = None,
    extra: dict | None = None,
    **cluster: Any,
) -> Any:
    """One pipeline of the demo model, ``sources``, a JSON Lines sink (with the options of
    ``sink``) and the ``extra`` pipeline keys; the cluster options given.

    No CPU is reserved for the workers: the daemon's workers may hold the
    module instance's CPUs, and these tests need places, not cores.
    """
    document = {
        "cluster": {"engine": "ray", "workers": 2, "cpus_per_worker": 0, **cluster},
        "pipelines": [
            {
                **PIPELINE,
                "sources": sources,
                "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl"), **(sink or {})}],
                **(extra or {}),
            }
        ],
    }
    return parse_config(json.dumps(document), base_dir=tmp_path)


class Gate:
    """A sink's transport that waits until it is opened: a destination that stopped taking."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.open = threading.Event()

    def send(self, records: Any) -> None:
        self.open.wait()
        self.transport.send(records)

    def close(self, timeout: float) -> int:
        return self.transport.close(timeout)


def test_a_sink_that_blocks_holds_back_the_records_but_not_the_move_of_a_lost_worker(
    local_ray: RayConnection, tmp_path: Path
) -> None:
    """The JSON Lines sink (overflow: block) stops taking: its buffer fills and its writes wait.

    A worker killed meanwhile is still noticed, and its stream placed on the
    other worker at once; when the sink takes again, every frame is there once.
    """
    sources = [
        {"id": s, "uri": str(VIDEO), "end_seconds": 4.0, "realtime": True} for s in ("s0", "s1")
    ]
    config = engine_config(tmp_path, sources, {"buffer_records": 16, "overflow": "block"})
    engine = ClusterEngine(config, base_dir=tmp_path)
    (buffered,) = engine.sinks["p"]
    gate = buffered.transport = Gate(buffered.transport)
    try:
        engine.start()
        wait_for(
            lambda: buffered.buffered >= 16 and engine.records_received > 16,
            60,
            "the sink's buffer to fill, and the driver to take more than it holds",
        )
        victim = engine.stream("s0").placement["worker"]
        os.kill(engine.worker_pid(victim), signal.SIGKILL)
        wait_for(
            lambda: (
                (s := engine.stream("s0")).placement["moves"] == 1
                and s.placement["worker"] not in (None, victim)
            ),
            30,
            "s0 to move off the killed worker while the sink blocks",
        )
        assert engine.workers()[victim]["state"] in ("starting", "ready")  # its replacement
        gate.open.set()
        wait_for_records(tmp_path / "out.jsonl", {s: list(range(4 * FPS)) for s in ("s0", "s1")})
        metrics = engine.metrics.render().decode()
    finally:
        gate.open.set()
        engine.stop()
    assert "vstream_cluster_worker_failures_total 1.0" in metrics
    assert 'reason="duplicate"' not in metrics
    assert not engine.failures()


class StuckWorker(ClusterWorker):
    """A real worker whose pipeline hangs at frame 30 of the first stream placed in the run.

    The stage that hands records to the relay waits (as one stuck in a
    driver call would), so the stream's reader fills its queue and waits;
    the worker still answers every pull, with no records. The stage is let
    go at the finish, and writes what it held: late records of an
    incarnation the driver has moved away.
    """

    def open(self, pipelines: list[Any], buffered_records: int) -> Any:
        info = super().open(pipelines, buffered_records)
        self.released = threading.Event()
        relay, write = self.relay, self.relay.write

        def stuck(results: Any) -> None:
            if any(r.stream_id.endswith("#1") and r.frame_index >= 30 for r in results):
                self.released.wait()
            write(results)

        relay.write = stuck
        return info

    def stop_taking_frames(self) -> None:
        self.released.set()
        super().stop_taking_frames()


def test_a_stream_whose_worker_hangs_is_moved_after_its_last_delivered_frame(
    local_ray: RayConnection, tmp_path: Path
) -> None:
    """Moved at frame 30, its tracks, counts and readings go on where they were: the records
    are a single process's, frame by frame (the workers track and read colours, and the
    driver hands the tracker, lines, zones and the colour readings on with the stream; the
    readings are kept 10 s, so those after the move are the ones read before it)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    source = {"id": "s", "uri": str(VIDEO), "end_seconds": 4.0}
    analytics = {
        **COUNTING,
        "zones": [{"name": "left", "points": [[0, 0], [320, 0], [320, 360], [0, 360]]}],
    }
    secondary = [{"name": "colour", "path": str(COLOUR_MODEL), "reinfer_seconds": 10}]
    extra = {"analytics": analytics, "secondary": secondary}
    config = engine_config(tmp_path, [source], extra=extra, stall_timeout_seconds=5)
    engine = ClusterEngine(config, base_dir=tmp_path, worker_class=StuckWorker)
    try:
        engine.start()
        first = wait_for(
            lambda: (w := engine.stream("s").placement["worker"]) is not None and str(w),
            60,
            "s on a worker",
        )
        wait_for_records(tmp_path / "out.jsonl", {"s": list(range(4 * FPS))})
        # Its figures are its worker's last report, which comes with or after its last record.
        wait_for(engine.files_done, 60, "the stream's last state")
        described = engine.stream("s")
        metrics = engine.metrics.render().decode()
    finally:
        engine.stop()
    assert described.placement["stalls"] == 1 and described.placement["moves"] == 1
    assert described.placement["worker"] not in (None, int(first))
    assert described.frames_processed == 4 * FPS
    assert "vstream_cluster_stream_stalls_total 1.0" in metrics
    assert "vstream_cluster_worker_failures_total 0.0" in metrics
    assert 'reason="duplicate"' not in metrics
    assert not engine.failures()
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert any(r["events"] for r in records[30:]), "a crossing after the move, to compare"
    after = [d["attributes"]["colour"] for r in records[30:] for d in r["detections"]]
    assert any(not reading["fresh"] for reading in after), "readings kept across the move"
    readings = [d["attributes"]["colour"] for r in records for d in r["detections"]]
    # Counted on both workers and added up: the stuck one may have read a batch it never sent.
    colour = described.to_json()["attributes"]["colour"]
    assert colour["fresh"] >= sum(r["fresh"] for r in readings)
    assert colour["fresh"] + colour["cached"] >= len(readings)
    fresh = 'vstream_secondary_readings_total{model="colour",pipeline="p",reading="fresh"}'
    assert f"{fresh} {float(colour['fresh'])}" in metrics
    single = single_process_records({**PIPELINE, **extra, "sources": [source]}, tmp_path)
    assert_same_records(records, single)


def test_a_stream_with_a_detection_cadence_gives_a_single_process_s_records(
    local_ray: RayConnection, tmp_path: Path
) -> None:
    """``detect_every: 3`` on a worker: the frames between detections are the worker's
    tracker's predictions, as in one process (the frames never leave the worker)."""
    source = {"id": "s", "uri": str(VIDEO), "end_seconds": 3.0, "detect_every": 3}
    config = engine_config(tmp_path, [source], extra={"analytics": COUNTING})
    engine = ClusterEngine(config, base_dir=tmp_path)
    try:
        engine.start()
        wait_for_records(tmp_path / "out.jsonl", {"s": list(range(3 * FPS))})
        wait_for(engine.files_done, 60, "the stream's last state")
        described = engine.stream("s").to_json()
    finally:
        engine.stop()
    assert not engine.failures()
    assert (described["frames_detected"], described["frames_predicted"]) == (25, 50)
    assert described["detection_rate"] == pytest.approx(1 / 3, abs=1e-4)
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert any(d.get("predicted") for r in records for d in r["detections"])
    single = single_process_records(
        {**PIPELINE, "analytics": COUNTING, "sources": [source]}, tmp_path
    )
    assert_same_records(records, single)


PROCESSES_FILE = """\
# Four cameras' recordings over two worker processes of this machine
# (pip install 'vstream[ray]'): one Python process tops out near 1,000 frames/s on an H100.
processes: 2
pipelines:
  - name: demo
    model: {{path: {model}}}
    runtime: {{batch_size: 4}}
    sources:
      - {{id: cam1, uri: {video}, end_seconds: 2}}
      - {{id: cam2, uri: {video}, end_seconds: 2}}
      - {{id: cam3, uri: {video}, end_seconds: 2}}
      - {{id: cam4, uri: {video}, end_seconds: 2}}
    sinks:
      - {{type: jsonl, path: detections.jsonl}}
"""


def test_processes_2_spreads_a_pipelines_file_over_two_workers_with_every_frame_once(
    local_ray: RayConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``processes: 2``: two Ray workers on this machine, each asking Ray for its share.

    A share of 2 cores (made the same on every machine: the module's
    instance has 2 CPUs) and of the GPU where there is one (this machine
    has none; tests/test_processes.py checks the shares of one GPU). Before
    the daemon's tests: its workers hold the module instance's CPUs until
    the module ends.
    """
    from ray.actor import ActorClass

    from vstream.cluster import open_engine

    asked: list[dict[str, Any]] = []
    options = ActorClass.options

    def spy(actor_class: Any, **given: Any) -> Any:
        asked.append(given)
        return options(actor_class, **given)

    monkeypatch.setattr(ActorClass, "options", spy)
    monkeypatch.setattr("vstream.cluster.processes.available_cores", lambda: 2)
    path = tmp_path / "processes.yaml"
    path.write_text(PROCESSES_FILE.format(model=MODEL, video=VIDEO))
    engine = open_engine(load_config(path), base_dir=tmp_path)
    try:
        engine.start()
        held = {engine.stream(f"cam{i}").placement["worker"] for i in range(1, 5)}
        wait_for(engine.files_done, 120, "the four files")
    finally:
        engine.stop()
    gpus = local_ray.resources().get("GPU", 0.0)  # where there is one, each takes half
    assert [(a["num_cpus"], a["num_gpus"]) for a in asked] == [(1, min(1.0, gpus / 2))] * 2
    assert held == {0, 1}, "both workers take streams"
    records = frames_by_stream(tmp_path / "detections.jsonl")
    assert records == {f"cam{i}": list(range(2 * FPS)) for i in range(1, 5)}
    assert not engine.failures()


@dataclass
class Daemon:
    """A cluster engine with two workers behind the real HTTP API, as ``vstream serve`` runs it."""

    engine: ClusterEngine
    client: httpx.Client
    records: Path


@pytest.fixture(scope="module")
def daemon(local_ray: RayConnection, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    from vstream.server import ApiServer, create_app

    tmp_path = tmp_path_factory.mktemp("daemon")
    engine = ClusterEngine(daemon_config(tmp_path), base_dir=tmp_path)
    server = ApiServer(create_app(engine), host="127.0.0.1", port=0)
    server.start()
    engine.start()
    try:
        with api_client(server.url, timeout=30) as client:
            yield Daemon(engine, client, tmp_path / "out.jsonl")
    finally:
        engine.stop()
        server.stop()


def wait_for_records(path: Path, expected: dict[str, list[int]], timeout: float = 120) -> None:
    """Wait until the sink has written ``expected``'s streams in full; then compare exactly.
    A wait that runs out says how far each stream got."""
    try:
        wait_for(
            lambda: (
                path.exists()
                and all(
                    len(frames_by_stream(path).get(s, [])) >= len(f) for s, f in expected.items()
                )
            ),
            timeout,
            "the records of " + ", ".join(expected),
        )
    except AssertionError as exc:
        got = frames_by_stream(path) if path.exists() else {}
        far = {s: (len(got.get(s, [])), max(got.get(s, [-1]))) for s in expected}
        raise AssertionError(f"{exc}; (records, last frame) so far: {far}") from None
    got = frames_by_stream(path)
    assert {s: got[s] for s in expected} == expected


def test_four_files_on_two_workers_give_every_frame_once_in_order(daemon: Daemon) -> None:
    # Who takes what is asserted below: both workers must be up before the streams come.
    wait_for(
        lambda: all(w["state"] == "ready" for w in daemon.engine.workers()),
        120,
        "both workers to be ready",
    )
    for i in range(4):
        body = {"id": f"f{i}", "uri": str(VIDEO), "end_seconds": 2.0}
        assert daemon.client.post("/streams", json=body).status_code == 201
    wait_for_records(daemon.records, {f"f{i}": list(range(2 * FPS)) for i in range(4)})
    held = [w["streams"] for w in daemon.engine.workers()]
    assert all(held), f"both workers take streams: {held}"
    assert sorted(s for streams in held for s in streams) == ["f0", "f1", "f2", "f3"]
    wait_for(
        lambda: all(daemon.engine.stream(f"f{i}").state == "finished" for i in range(4)),
        30,
        "the streams to be reported finished",
    )
    assert not daemon.engine.failures()


def test_streams_are_added_and_removed_through_the_api_while_running(daemon: Daemon) -> None:
    client = daemon.client
    endless = {"id": "b", "uri": str(VIDEO), "loop": True, "realtime": True}
    assert client.post("/streams", json=endless).status_code == 201
    added = client.post("/streams", json={"id": "a", "uri": str(VIDEO), "end_seconds": 2})
    assert added.status_code == 201, added.text
    assert client.post("/streams", json=endless).status_code == 409
    outside = client.post("/streams", json={"id": "c", "uri": "/etc/hostname"})
    assert outside.status_code == 400 and "allowed_paths" in outside.json()["error"]
    assert client.get("/streams/c").status_code == 404
    wait_for_records(daemon.records, {"a": list(range(2 * FPS))})
    wait_for(
        lambda: client.get("/streams/b").json()["frames_processed"] >= 5,
        60,
        "stream b to deliver records",
    )
    removed = client.delete("/streams/b")
    assert removed.status_code == 200, removed.text
    assert removed.json()["removed"]["frames_processed"] >= 5
    assert client.delete("/streams/b").status_code == 404
    assert "b" not in {s["id"] for s in client.get("/streams").json()["streams"]}
    got = frames_by_stream(daemon.records)["b"]
    assert got == list(range(len(got)))  # in order, each once, up to the removal
    wait_for(lambda: client.get("/ready").status_code == 200, 30, "/ready once a is finished")
    metrics = client.get("/metrics").text
    assert 'vstream_cluster_workers{state="ready"} 2.0' in metrics
    assert 'vstream_stream_frames_processed_total{pipeline="p",stream="a"} 50.0' in metrics
    assert 'stream="b"' not in metrics


def test_a_killed_worker_s_streams_finish_on_the_other_without_loss_or_duplicates(
    daemon: Daemon, tmp_path: Path
) -> None:
    """A worker dies: files go on after their last delivered frame, with their tracks and
    counts, a live stream after a gap."""
    engine, client = daemon.engine, daemon.client
    live = {"id": "live", "uri": str(VIDEO), "loop": True, "realtime": True}
    assert client.post("/streams", json=live).status_code == 201
    files = [f"k{i}" for i in range(4)]
    for stream in files:  # paced at the file's rate, so that the worker dies mid-stream
        body = {"id": stream, "uri": str(VIDEO), "end_seconds": 4.0, "realtime": True}
        assert client.post("/streams", json=body).status_code == 201
    victim = next(w for w in engine.workers() if "live" in w["streams"])
    moved = sorted(set(victim["streams"]) & {*files, "live"})
    wait_for(
        lambda: all(engine.stream(s).frames_processed >= 10 for s in moved),
        60,
        "the victim's streams to deliver records",
    )
    before = {s: client.get(f"/streams/{s}").json() for s in [*files, "live"]}
    os.kill(engine.worker_pid(victim["worker"]), signal.SIGKILL)
    # Other streams may still be connecting then (a loaded machine starts them late), so the
    # loss is looked for by its own reason: the victim's replacement starting.
    starting = f"worker {victim['worker']} is starting"
    wait_for(
        lambda: (r := client.get("/ready")).status_code == 503 and starting in r.json()["reasons"],
        30,
        "/ready to show the replacement starting",
    )
    wait_for_records(daemon.records, {s: list(range(4 * FPS)) for s in files})
    wait_for(lambda: client.get("/ready").status_code == 200, 120, "the replacement worker")
    # A file's last records can reach the driver a report before its "finished" state does.
    wait_for(
        lambda: all(client.get(f"/streams/{s}").json()["state"] == "finished" for s in files),
        30,
        "the moved files to be reported finished",
    )
    described = {s: client.get(f"/streams/{s}").json() for s in [*files, "live"]}
    assert {s for s, d in described.items() if d["moves"]} == set(moved), (
        f"victim {victim}, workers now {engine.workers()}; before the kill {before}; "
        f"after {described}"
    )
    assert described["live"]["gap_seconds"] > 0  # the live stream's gap, counted
    removed = client.delete("/streams/live").json()["removed"]
    frames = frames_by_stream(daemon.records)["live"]
    assert frames == list(range(len(frames))) and len(frames) == removed["frames_processed"]
    metrics = client.get("/metrics").text
    assert "vstream_cluster_worker_failures_total 1.0" in metrics
    assert "vstream_cluster_worker_restarts_total 1.0" in metrics
    assert f"vstream_cluster_stream_moves_total {float(len(moved))}" in metrics
    assert 'vstream_cluster_workers{state="ready"} 2.0' in metrics
    assert 'reason="duplicate"' not in metrics
    assert not engine.failures()
    # The moved files' tracks and counts went on from their state at the last delivered
    # frame: every file's records are a single process's (the four files are one video).
    file = {"id": "k", "uri": str(VIDEO), "end_seconds": 4.0}
    expected = single_process_records(
        {**PIPELINE, "analytics": COUNTING, "sources": [file]}, tmp_path
    )
    records = [json.loads(line) for line in daemon.records.read_text().splitlines()]
    for stream in files:  # moved or not (the victim holds files unless placement, by the
        # workers' timed throughput, put them all on the other: the stall test moves one)
        ours = [r | {"stream": "k"} for r in records if r["stream"] == stream]
        assert_same_records(ours, expected)


def test_losses_past_the_bounds_fail_once_and_loudly(daemon: Daemon) -> None:
    """The daemon's last test: no replacement past max_worker_restarts, no move past max moves."""
    engine, client = daemon.engine, daemon.client
    endless = {"id": "z", "uri": str(VIDEO), "loop": True, "realtime": True}
    assert client.post("/streams", json=endless).status_code == 201
    for kills in (1, 2):  # its worker, then the one it moved to
        wait_for(lambda: engine.stream("z").placement["worker"] is not None, 60, "z on a worker")
        before = engine.stream("z").frames_processed
        wait_for(lambda b=before: engine.stream("z").frames_processed > b, 60, "z's records")
        slot = engine.stream("z").placement["worker"]
        workers = engine.workers()
        pid = engine.worker_pid(slot)
        os.kill(pid, signal.SIGKILL)
        try:
            wait_for(lambda k=kills: engine.stream("z").placement["moves"] >= k, 30, "the loss")
        except AssertionError as exc:  # seen once beside two CPU hogs: say what each was
            raise AssertionError(
                f"{exc}; killed worker {slot} (pid {pid}) holding z; workers before {workers}, "
                f"now {engine.workers()}; z now {engine.stream('z')}"
            ) from None
    z = wait_for(lambda: (d := engine.stream("z")).state == "failed" and d, 30, "z to fail")
    assert "cluster.max_stream_moves (1)" in z.error
    assert [w["state"] for w in engine.workers()] == ["failed", "failed"]
    failures = [str(f) for f in engine.failures()]
    assert "every cluster worker was lost" in failures[0]
    ready = client.get("/ready")
    assert ready.status_code == 503 and "worker 0 is failed" in ready.json()["reasons"]
    metrics = client.get("/metrics").text
    assert 'vstream_cluster_workers{state="failed"} 2.0' in metrics
    assert "vstream_cluster_worker_restarts_total 1.0" in metrics  # none past the bound
    assert "vstream_cluster_worker_failures_total 3.0" in metrics


class ReaddWorker:
    """A stand-in worker with the real :class:`Relay`, for a stream removed and added again.

    Each added stream writes frames 0 to 232 into the relay, except that the
    first stream's last twelve (221 to 232) are still "in the pipeline" when
    it is removed: they reach the relay only after the next add, as records
    in a real pipeline's stages do.
    """

    def __init__(self, torch_threads: int) -> None:
        self.relay: Any = None
        self.in_pipeline: list[Any] = []

    def open(self, pipelines: list[Any], buffered_records: int) -> Any:
        from vstream.cluster.relay import Relay
        from vstream.cluster.worker import WorkerInfo

        self.relay = Relay(buffered_records)
        return WorkerInfo(os.getpid(), "here", "127.0.0.1", "stand-in", 100.0)

    def pid(self) -> int:
        return os.getpid()

    def add(self, pipeline: str, source: Any, resume: Any, state: Any = None) -> None:
        from vstream.results import FrameResult

        records = [FrameResult(source.id, i, i / FPS, 64, 48) for i in range(233)]
        first = not self.in_pipeline
        self.relay.write(self.in_pipeline)
        self.relay.write(records[:221] if first else records)
        self.in_pipeline = records[221:] if first else []

    def remove(self, stream_id: str) -> None:
        return None

    def take(self, limit: int, wait: float) -> Any:
        from vstream.cluster.worker import WorkerReport

        taken = self.relay.take(limit, wait)
        return WorkerReport(taken.records, None, taken.ended)

    def stop_taking_frames(self) -> None:
        pass

    def finish(self, timeout: float) -> None:
        self.relay.close()


def test_a_stream_added_again_with_its_id_gets_none_of_the_removed_ones_records(
    local_ray: RayConnection, tmp_path: Path
) -> None:
    """Records name the stream's incarnation: the old one's late records are dropped, counted."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    document = {
        # No CPU reserved: the stand-in decodes nothing, and the daemon's workers may hold them.
        "cluster": {"engine": "ray", "workers": 1, "cpus_per_worker": 0},
        "pipelines": [
            {
                "name": "p",
                "model": {"path": str(MODEL)},
                "runtime": {"device": "cpu"},
                "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")}],
            }
        ],
    }
    config = parse_config(json.dumps(document), base_dir=tmp_path)
    engine = ClusterEngine(config, base_dir=tmp_path, worker_class=ReaddWorker)
    camera = SourceConfig(id="cam", uri="rtsp://127.0.0.1:9/cam")
    try:
        engine.start()
        engine.add_stream("p", camera)
        wait_for(lambda: engine.records_received == 221, 60, "the first stream's records")
        engine.remove_stream("cam")
        engine.add_stream("p", camera)
        wait_for(lambda: engine.records_received == 221 + 12 + 233, 60, "every record")
        new = engine.stream("cam")
        dropped = engine.metrics.render().decode()
    finally:
        engine.stop()
    assert new.frames_processed == 233
    assert frames_by_stream(tmp_path / "out.jsonl")["cam"] == [*range(221), *range(233)]
    assert 'vstream_cluster_records_dropped_total{reason="removed"} 12.0' in dropped
    assert 'reason="duplicate"' not in dropped


def test_a_stream_stuck_on_its_only_worker_fails_once_after_its_last_delivered_frame(
    local_ray: RayConnection, tmp_path: Path
) -> None:
    """With no other worker to move it to, a stream whose worker hangs fails once, saying
    so, and the run ends with every record delivered before the stall; it waited for ever
    for a worker it had not stalled on."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    source = {"id": "s", "uri": str(VIDEO), "end_seconds": 4.0}
    config = engine_config(tmp_path, [source], stall_timeout_seconds=5, workers=1)
    engine = ClusterEngine(config, base_dir=tmp_path, worker_class=StuckWorker)
    try:
        engine.start()
        wait_for(engine.files_done, 120, "the run to end")
        described = engine.stream("s")
        failures = engine.failures()
    finally:
        engine.stop()
    assert described.placement["stalls"] == 1
    assert len(failures) == 1
    assert "stalled on every worker left (1 of cluster.workers: 1)" in str(failures[0])
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    frames = [r["frame"] for r in records]
    # Up to the batch the worker hangs in (the one with frame 30), each once, in order.
    assert frames == list(range(len(frames))) and 0 < len(frames) <= 30
