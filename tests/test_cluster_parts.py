"""The parts of the cluster that need no Ray: config, placement, the relay, resuming sources.

Ray itself runs in tests/test_cluster.py; here are the pieces it is built
from, each against its real collaborators (real videos decoded by the real
sources, the real RTSP server), plus what a user without Ray sees.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import RtspServer, write_video

from vstream import assets
from vstream.cluster.placement import WorkerLoad, choose_worker
from vstream.cluster.relay import Relay
from vstream.config import ConfigError, DecoderKind, SourceOptions, parse_config
from vstream.results import FrameResult
from vstream.sources import LiveSource, ResumePoint, VideoFileSource

MODEL = assets.DEMO_MODEL
VIDEO = assets.SAMPLE_VIDEO


def config_text(cluster: str, *, sinks: str = "[{type: stdout}]", device: str = "cpu") -> str:
    return (
        f"cluster: {cluster}\n"
        "pipelines:\n"
        "  - name: p\n"
        f"    model: {{path: {MODEL}}}\n"
        f"    runtime: {{device: '{device}'}}\n"
        f"    sinks: {sinks}\n"
    )


# -- config ---------------------------------------------------------------------------------


def test_a_cluster_section_is_read_with_its_defaults() -> None:
    config = parse_config(config_text("{engine: ray, workers: 3, address: 'ray://head:10001'}"))
    assert config.cluster is not None
    assert (config.cluster.workers, config.cluster.address) == (3, "ray://head:10001")
    assert config.cluster.gpus_per_worker is None  # decided from the devices and the cluster
    assert parse_config(config_text("null")).cluster is None


@pytest.mark.parametrize(
    ("cluster", "sinks", "device", "message"),
    [
        (
            "{engine: ray, address: 'http://head:1'}",
            "[{type: stdout}]",
            "cpu",
            "cluster.address: must be auto, HOST:PORT or ray://HOST:PORT, got 'http://head:1'",
        ),
        ("{engine: dask}", "[{type: stdout}]", "cpu", "cluster.engine: Input should be 'ray'"),
        ("{engine: ray, workers: 0}", "[{type: stdout}]", "cpu", "must be in [1, 4096], got 0"),
        ("{engine: ray, gpus_per_worker: -1}", "[{type: stdout}]", "cpu", "[0, 64], got -1"),
        ("{engine: ray, replicas: 2}", "[{type: stdout}]", "cpu", "unknown key 'replicas'"),
        (
            "{engine: ray}",
            "[{type: video, path: v.mp4}]",
            "cpu",
            "has a video sink, which needs the frames",
        ),
        ("{engine: ray}", "[{type: stdout}]", "cuda:1", "asks for device cuda:1"),
    ],
    ids=["address", "engine", "workers", "gpus", "unknown", "frame-sink", "device"],
)
def test_a_bad_cluster_section_is_one_line_naming_the_value(
    cluster: str, sinks: str, device: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(config_text(cluster, sinks=sinks, device=device), source="p.yaml")
    assert message in str(raised.value)
    assert str(raised.value).startswith("p.yaml:")


# -- placement ------------------------------------------------------------------------------


def load(slot: int, throughput: float, streams: int = 0, nvdec: int = 0, gpu: bool = False):
    return WorkerLoad(slot, throughput, streams, nvdec, gpu)


def place(workers: list[WorkerLoad], count: int, decoder: DecoderKind = DecoderKind.AUTO):
    """Place ``count`` streams one after the other, as the driver does; the slots chosen."""
    chosen = []
    for _ in range(count):
        placement = choose_worker(workers, decoder, max_streams=4, nvdec_sessions=2)
        if placement is None:
            chosen.append(None)
            continue
        chosen.append(placement.slot)
        workers = [
            load(w.slot, w.throughput, w.streams + 1, w.nvdec_streams + placement.nvdec, w.gpu)
            if w.slot == placement.slot
            else w
            for w in workers
        ]
    return chosen


def test_streams_go_where_there_is_most_room_by_throughput() -> None:
    assert place([load(0, 100), load(1, 100)], 4) == [0, 1, 0, 1]
    # A worker twice as fast takes twice the streams.
    assert sorted(place([load(0, 200), load(1, 100)], 6)).count(0) == 4
    # Streams already held count; a full worker takes none; none has room: None.
    assert place([load(0, 100, streams=3), load(1, 100)], 2) == [1, 1]
    assert place([load(0, 100, streams=4), load(1, 100, streams=3)], 2) == [1, None]


def test_nvdec_sessions_are_counted_per_gpu_worker() -> None:
    gpu = [load(0, 100, gpu=True), load(1, 100, gpu=False)]
    # nvdec streams only go where a session is free, two per worker here.
    assert place(gpu, 3, DecoderKind.NVDEC) == [0, 0, None]
    # auto streams use a free session, then decode on the worker's CPU.
    first = choose_worker(gpu, DecoderKind.AUTO, max_streams=4, nvdec_sessions=2)
    assert first is not None and (first.slot, first.nvdec) == (0, True)
    full = [load(0, 100, streams=2, nvdec=2, gpu=True)]
    fallback = choose_worker(full, DecoderKind.AUTO, max_streams=4, nvdec_sessions=2)
    assert fallback is not None
    assert (fallback.nvdec, fallback.decoder) == (False, DecoderKind.CPU)


# -- the relay ------------------------------------------------------------------------------


def record(stream: str, index: int) -> FrameResult:
    return FrameResult(stream, index, index / 25, 64, 48)


def test_the_relay_keeps_each_streams_order_and_counts_what_entered() -> None:
    relay = Relay(capacity=8)
    relay.write([record("a", 0), record("b", 0)])
    relay.write([record("a", 1)])
    taken = relay.take(limit=1, wait=0.0)  # a write leaves whole
    assert [(r.stream_id, r.frame_index) for r in taken.records] == [("a", 0), ("b", 0)]
    assert taken.received == {"a": 2, "b": 1}
    assert taken.waiting == {"a"} and not taken.ended
    relay.close()  # what is queued stays for the driver
    last = relay.take(limit=10, wait=0.0)
    assert [(r.stream_id, r.frame_index) for r in last.records] == [("a", 1)]
    assert last.ended and not last.waiting


def test_a_full_relay_makes_the_pipeline_wait_until_the_driver_takes() -> None:
    relay = Relay(capacity=4)
    relay.write([record("a", 0), record("a", 1)])
    writer = threading.Thread(target=relay.write, args=([record("a", i) for i in (2, 3, 4)],))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive(), "a write past the capacity must wait"
    assert relay.buffered == 2
    frames: list[int] = []

    def drain() -> None:  # a take waits for records as long as it is told: here, for ever
        while len(frames) < 5:
            frames.extend(r.frame_index for r in relay.take(limit=1, wait=3600).records)

    taker = threading.Thread(target=drain, daemon=True)
    taker.start()
    taker.join(60)
    writer.join(60)
    assert not taker.is_alive(), "records waited in the relay while the taker slept"
    assert frames == [0, 1, 2, 3, 4] and relay.stats.dropped == 0
    relay.write([record("b", i) for i in range(6)])  # larger than the relay: whole, once empty
    assert relay.buffered == 6


def test_the_relay_sends_each_streams_analytics_with_its_last_record_of_a_write() -> None:
    """What the driver keeps with the frame a stream resumes after: its analytics then."""
    analysed: Counter[str] = Counter()  # frames each stream's analytics have seen

    def snapshot(stream: str) -> bytes | None:
        return None if stream == "none" else f"{stream} after {analysed[stream]}".encode()

    relay = Relay(capacity=64, state_of=snapshot)

    def analyse_and_write(*records: FrameResult) -> None:  # as the postprocessing thread does
        analysed.update(r.stream_id for r in records)
        relay.write(records)

    analyse_and_write(record("a", 0), record("b", 0), record("a", 1), record("none", 0))
    analyse_and_write(record("b", 1))
    analyse_and_write(record("a", 2))
    first = relay.take(limit=2, wait=0.0)
    assert len(first.records) == 4  # the whole first write
    assert first.states == {"a": b"a after 2", "b": b"b after 1"}
    second = relay.take(limit=100, wait=0.0)
    assert [r.stream_id for r in second.records] == ["b", "a"]
    assert second.states == {"a": b"a after 3", "b": b"b after 2"}


# -- resuming sources -----------------------------------------------------------------------


def frames_of(source) -> list[tuple[int, float]]:
    with source:
        return [(f.index, round(f.pts_seconds, 6)) for f in source]


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_video(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=40, width=64, height=48)


@pytest.mark.parametrize(
    "options",
    [{}, {"stride": 3}, {"start_seconds": 0.4, "end_seconds": 1.4}],
    ids=["whole", "stride", "range"],
)
def test_a_file_resumes_after_a_delivered_frame_with_its_original_indices(
    clip: Path, options: dict
) -> None:
    """What a moved stream gives: exactly the frames after the last one delivered, once."""
    opts = SourceOptions(**options)
    full = frames_of(VideoFileSource(clip, options=opts))
    for cut in (0, len(full) // 2, len(full) - 1):
        index, pts = full[cut]
        resumed = frames_of(
            VideoFileSource(clip, options=opts, resume=ResumePoint(index, pts, time.time()))
        )
        assert resumed == full[cut + 1 :], f"resumed after frame {index}"


def test_a_looped_file_resumes_as_one_long_stream_after_a_gap(clip: Path) -> None:
    opts = SourceOptions(loop=True)
    resume = ResumePoint(57, 2.28, time.time() - 1.0)
    source = VideoFileSource(clip, options=opts, resume=resume)
    with source:
        frames = [(f.index, f.pts_seconds) for _, f in zip(range(45), source, strict=False)]
    indices = [i for i, _ in frames]
    assert indices == list(range(58, 58 + 45))  # on past the end of a pass
    times = [t for _, t in frames]
    assert times[0] >= resume.pts_seconds + 1.0  # the gap shows in the time stamps
    assert times == sorted(times)


def test_a_live_stream_resumes_with_indices_and_time_going_on(tmp_path: Path) -> None:
    with RtspServer() as server:
        resume = ResumePoint(500, 20.0, time.time() - 0.5)
        source = LiveSource(server.url(), options=SourceOptions(), resume=resume)
        with source:
            frames = [(f.index, f.pts_seconds) for _, f in zip(range(5), source, strict=False)]
    assert [i for i, _ in frames] == [501, 502, 503, 504, 505]
    assert frames[0][1] >= 20.5
    assert source.stats.last_gap_seconds is not None and source.stats.last_gap_seconds >= 0.5


# -- without Ray ----------------------------------------------------------------------------

NO_RAY = """
import importlib.machinery, sys
class WithoutRay:
    # Python's own path finder, except that it finds no Ray: as if it were not installed.
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)
    @staticmethod
    def find_distributions(*args, **kwargs):
        return importlib.machinery.PathFinder.find_distributions(*args, **kwargs)
    @staticmethod
    def invalidate_caches():
        importlib.machinery.PathFinder.invalidate_caches()
finders = sys.meta_path
finders[:] = [WithoutRay if f is importlib.machinery.PathFinder else f for f in finders]
from vstream.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["run", "validate", "serve"])
@pytest.mark.parametrize(
    ("text", "asked"),
    [
        (config_text("{engine: ray}"), "cluster.engine ray"),
        ("processes: 2\n" + config_text("null"), "processes 2"),
    ],
    ids=["cluster", "processes"],
)
def test_without_ray_a_config_that_needs_it_fails_with_one_clear_line(
    tmp_path: Path, command: str, text: str, asked: str
) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", NO_RAY, command, str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert lines[-1].endswith(
        f"the config asks for {asked}, but Ray is not installed: pip install 'vstream[ray]'"
    ), lines
    assert "Traceback" not in done.stderr


# --- the stall watchdog ----------------------------------------------------------------------


def reported(stream: object, decoded: int, dropped: int = 0, skipped: int = 0) -> None:
    stream.report(  # type: ignore[attr-defined]
        {
            "state": "streaming",
            "frames_decoded": decoded,
            "frames_dropped": dropped,
            "frames_skipped": skipped,
        }
    )


def test_a_stream_stalls_only_while_its_worker_neither_delivers_nor_takes_its_frames() -> None:
    """A loaded worker (or one just given a moved stream, seeking to its resume point) takes
    its frames slowly and delivers none for a while: that is no stall. A stuck pipeline stops
    taking frames once its queues are full; a live stream's frames dropped there are no work."""
    from vstream.cluster.stream import ClusterStream
    from vstream.config.sources import SourceConfig

    stream = ClusterStream("p", SourceConfig(id="s", uri=str(assets.SAMPLE_VIDEO)))
    stream.placed(0, False, 1)
    reported(stream, decoded=0, skipped=0)
    assert stream.pulled(1.0, 0) == 1.0, "reading, nothing taken: counts"
    reported(stream, decoded=10, skipped=10)  # seeking to where it left off
    assert stream.pulled(1.0, 0) == 0.0
    reported(stream, decoded=14, skipped=10)  # its first frames handed to the pipeline
    assert stream.pulled(1.0, 0) == 0.0
    reported(stream, decoded=18, skipped=14)  # skipping after that is no work of its own
    assert stream.pulled(1.0, 0) == 1.0
    reported(stream, decoded=30, dropped=12, skipped=14)  # dropped at a full queue
    assert stream.pulled(1.0, 0) == 2.0
    assert stream.pulled(0.5, 3) == 0.0, "records"
    reported(stream, decoded=31, dropped=12, skipped=14)
    assert stream.pulled(1.0, 0) == 0.0, "one more frame taken"
    stream.placed(1, False, 2)  # moved: a new reader, counting from 0 again
    reported(stream, decoded=2)
    assert stream.pulled(1.0, 0) == 0.0


def test_a_moved_stream_s_cadence_and_readings_add_up_over_its_workers() -> None:
    """Each worker counts from 0 for its own reader; the stream shows, and the pipeline's
    metrics count, what every worker it ran on counted, removed streams included."""
    import threading

    from vstream.cluster.stream import ClusterStream, PipelineFigures
    from vstream.config.sources import SourceConfig

    def on_worker(detected: int, predicted: int, fresh: int, labels: dict[str, int]) -> dict:
        colour = {"fresh": fresh, "cached": 2, "runs": 1, "seconds": 0.5, "labels": labels}
        return {
            "state": "streaming",
            "frames_detected": detected,
            "frames_predicted": predicted,
            "frames_motion_skipped": 0,
            "frames_adapted": 0,
            "detect_every_now": 3,
            "attributes": {"colour": colour},
        }

    config = SourceConfig(id="s", uri=str(assets.SAMPLE_VIDEO), detect_every=3)
    stream = ClusterStream("p", config)
    streams = {"s": stream}
    figures = PipelineFigures("p", streams, threading.Lock())
    stream.placed(0, False, 1)
    stream.report(on_worker(10, 20, 4, {"red": 3, "blue": 1}))
    stream.lost_worker()
    stream.placed(1, False, 2)
    stream.report(on_worker(5, 10, 2, {"red": 2}))
    shown = stream.status().to_json()
    assert (shown["frames_detected"], shown["frames_predicted"]) == (15, 30)
    assert shown["detection_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert shown["attributes"]["colour"] == {
        "fresh": 6,
        "cached": 4,
        "runs": 2,
        "seconds": 1.0,
        "labels": {"red": 5, "blue": 1},
    }
    assert figures.totals()["colour"].fresh == 6
    del streams["s"]
    figures.removed(stream)
    assert figures.stream_counts() == {}
    assert figures.totals()["colour"].labels == {"red": 5, "blue": 1}  # counters never fall


def test_a_removal_while_the_metrics_are_read_leaves_the_totals_whole() -> None:
    """The driver removes a stream under its lock (popped, then its figures kept); a scrape
    that read the kept figures before it took that lock, and the streams after, lost the
    stream from both, and the counter fell for one scrape (a reset to Prometheus)."""
    from types import SimpleNamespace

    from vstream.cascade.counts import ModelCounts
    from vstream.cluster.stream import PipelineFigures

    stream = SimpleNamespace(
        id="s", pipeline="p", model_counts=lambda: {"colour": ModelCounts(fresh=10, runs=5)}
    )
    streams = {"s": stream}

    class RemovedWhenTaken:
        """The driver's lock, with the removal winning the race for it once."""

        def __init__(self) -> None:
            self.lock, self.race = threading.RLock(), True

        def __enter__(self) -> None:
            self.lock.acquire()
            if self.race:
                self.race = False
                del streams["s"]
                figures.removed(stream)

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    figures = PipelineFigures("p", streams, RemovedWhenTaken())
    assert figures.totals()["colour"].fresh == 10
    assert streams == {} and figures.totals()["colour"].fresh == 10
