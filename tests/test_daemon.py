"""``vstream serve`` as a user runs it: a subprocess, its HTTP API, its signals and sinks."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from helpers import api_client, tiny_detector, wait_for, write_video
from prometheus_client.parser import text_string_to_metric_families

from vstream.engine.signals import REPEAT_SECONDS

if TYPE_CHECKING:
    from servers import Server, Subscriber

pytest_plugins = ("servers",)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TOKEN = "daemon-test-token"
SECRET = "S3cretPass"
START_TIMEOUT = 60.0
# The daemon gives itself 30 s to finish frames and flush sinks; wait longer than that so a
# slow (loaded) machine shows up as a late exit, not as a hang.
STOP_TIMEOUT = 60.0


class Daemon:
    """``python -m vstream serve CONFIG --port 0``, its log in a file, always stopped."""

    def __init__(
        self,
        config: Path,
        token: str | None = None,
        *options: str,
        log: Path | None = None,
        open_files: tuple[int, int] | None = None,
    ) -> None:
        """``open_files``: the (soft, hard) limit it starts under, as ``ulimit -n`` sets it."""
        self.log_path = log or config.with_suffix(".log")
        self.log_file = self.log_path.open("w")
        limit = open_files and partial(resource.setrlimit, resource.RLIMIT_NOFILE, open_files)
        self.started = time.monotonic()
        """Before the process was started: no source of it can have begun earlier."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vstream", "serve", str(config), "--port", "0", *options],
            stdout=subprocess.DEVNULL,
            stderr=self.log_file,
            env=shipped_environment(),
            preexec_fn=limit,
        )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = self._wait_for_url()
        self.http = api_client(self.url, headers=headers, timeout=20)

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", self.log())
            if match:
                return match.group(1)
            if self.process.poll() is not None:
                raise AssertionError(f"vstream serve exited early:\n{self.log()}")
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"vstream serve did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = self.http.get("/metrics").text
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def processed(self, stream: str, pipeline: str = "main") -> float:
        value = self.metric(
            "vstream_stream_frames_processed_total", pipeline=pipeline, stream=stream
        )
        return -1.0 if value is None else value

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """The exit status; a daemon that hangs is made to dump its threads into the log."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            self.process.wait(10)
            raise AssertionError(
                f"vstream serve did not exit in {timeout} s:\n{self.log()}"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.log_file.close()


def shipped_environment() -> dict[str, str]:
    """This environment without the variables the shipped configs read: their defaults apply."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    for name in ("VSTREAM_HOST", "VSTREAM_API_TOKEN", "MQTT_HOST"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("daemon")
    tiny_detector(directory / "model.onnx")
    write_video(directory / "clip.mp4", frames=20)
    return directory


def write_config(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


@pytest.fixture(scope="module")
def daemon(media: Path) -> Iterator[Daemon]:
    """One daemon with a token and a looping file, replayed at its own 25 fps."""
    config = write_config(
        media,
        "api",
        f"""
        server: {{token: {TOKEN}}}
        pipelines:
          - name: main
            model: {{path: model.onnx}}
            sources: [{{id: cam1, uri: clip.mp4, loop: true, realtime: true}}]
            sinks: [{{type: jsonl, path: api.jsonl}}]
        """,
    )
    daemon = Daemon(config, TOKEN)
    try:
        yield daemon
    finally:
        daemon.kill()


def test_health_ready_and_metrics_move_as_frames_flow(daemon: Daemon) -> None:
    assert daemon.http.get("/health").json() == {"status": "ok"}
    wait_for(lambda: daemon.http.get("/ready").status_code == 200, what="/ready")
    first = daemon.metrics()
    labels = (("pipeline", "main"), ("stream", "cam1"))
    for name in (
        "vstream_stream_frames_decoded_total",
        "vstream_stream_frames_processed_total",
    ):
        wait_for(lambda n=name: daemon.metrics()[(n, labels)] > first[(n, labels)] + 10, what=name)
    # realtime: paced at the video's 25 fps from its first frame, never ahead of that clock
    # (read from the daemon's start, an earlier origin: after 7 s of video an unpaced stream,
    # at about 200 frames/s here, is far past it). Not the fps gauge: after a stall on a
    # loaded machine the stream catches up, and the gauge, a rate over the last seconds, may
    # then read well above 25.
    decoded = ("vstream_stream_frames_decoded_total", labels)
    wait_for(lambda: daemon.metrics()[decoded] >= 175, what="7 s of video")
    second = daemon.metrics()
    assert second[decoded] <= 25 * (time.monotonic() - daemon.started) + 1
    assert second[("vstream_stream_fps", labels)] > 0
    assert 0 <= second[("vstream_stream_frame_age_seconds", labels)] < 5
    state = tuple(sorted((*labels, ("state", "streaming"))))
    assert second[("vstream_stream_state", state)] == 1
    latency = ("vstream_inference_latency_seconds_count", (("pipeline", "main"),))
    assert second[latency] > first[latency]
    delivered = ("vstream_sink_records_delivered_total", (("pipeline", "main"), ("sink", "jsonl")))
    assert second[delivered] > first[delivered]


def test_streams_are_added_and_removed_while_another_keeps_running(daemon: Daemon) -> None:
    added = daemon.http.post(
        "/streams", json={"id": "cam2", "uri": "clip.mp4", "loop": True, "realtime": True}
    )
    assert added.status_code == 201, added.text
    assert added.json()["id"] == "cam2" and added.json()["pipeline"] == "main"
    wait_for(lambda: daemon.processed("cam2") > 10, what="cam2 frames")
    ids = [s["id"] for s in daemon.http.get("/streams").json()["streams"]]
    assert ids == ["cam1", "cam2"]

    before = daemon.processed("cam1")
    removed = daemon.http.delete("/streams/cam2")
    assert removed.status_code == 200 and removed.json()["removed"]["id"] == "cam2"
    assert [s["id"] for s in daemon.http.get("/streams").json()["streams"]] == ["cam1"]
    assert daemon.processed("cam2") == -1.0  # gone from the metrics
    wait_for(lambda: daemon.processed("cam1") > before + 10, what="cam1 to keep running")
    assert daemon.http.get("/ready").status_code == 200


def test_the_token_is_required(daemon: Daemon) -> None:
    for path in ("/health", "/metrics", "/streams"):
        response = httpx.get(daemon.url + path, timeout=10)
        assert response.status_code == 401
        assert "bearer token" in response.json()["error"]
    refused = httpx.post(daemon.url + "/streams", json={"id": "x", "uri": "clip.mp4"}, timeout=10)
    assert refused.status_code == 401
    assert "x" not in [s["id"] for s in daemon.http.get("/streams").json()["streams"]]


def test_credentials_are_absent_from_logs_metrics_and_api(daemon: Daemon) -> None:
    uri = f"rtsp://admin:{SECRET}@127.0.0.1:9/stream"
    added = daemon.http.post("/streams", json={"id": "door", "uri": uri})
    assert added.status_code == 201
    wait_for(lambda: "127.0.0.1:9" in daemon.log(), what="a log line about the camera")
    time.sleep(0.5)
    texts = [
        added.text,
        daemon.http.get("/streams").text,
        daemon.http.get("/metrics").text,
        daemon.http.get("/ready").text,
        daemon.http.delete("/streams/door").text,
        daemon.http.post("/streams", json={"id": "bad", "uri": uri.replace("9/", "x/")}).text,
        daemon.log(),
    ]
    assert "rtsp://***@127.0.0.1:9/stream" in texts[0]
    for text in texts:
        assert SECRET not in text and "admin" not in text


def test_sigterm_flushes_every_sink_and_exits_0(
    media: Path, mqtt_broker: Server, subscribe: Callable[[int], Subscriber]
) -> None:
    subscriber = subscribe(mqtt_broker.port)
    config = write_config(
        media,
        "flush",
        f"""
        server: {{port: 0}}
        pipelines:
          - name: main
            model: {{path: model.onnx}}
            sources:
              - {{id: a, uri: clip.mp4, loop: true, realtime: true}}
              - {{id: b, uri: clip.mp4, loop: true, realtime: true}}
            sinks:
              - {{type: jsonl, path: flush.jsonl}}
              - {{type: mqtt, host: 127.0.0.1, port: {mqtt_broker.port}, qos: 1,
                 batch_records: 1}}
        """,
    )
    daemon = Daemon(config)
    try:
        wait_for(lambda: daemon.processed("a") > 30 and daemon.processed("b") > 30)
        seen = daemon.processed("a") + daemon.processed("b")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0, daemon.log()
    finally:
        daemon.kill()
    records = [json.loads(line) for line in (media / "flush.jsonl").read_text().splitlines()]
    assert len(records) >= seen
    for stream in ("a", "b"):
        frames = [r["frame"] for r in records if r["stream"] == stream]
        assert frames == list(range(len(frames)))
    n = len(records)
    for sink in ("jsonl", "mqtt"):
        summary = f"sink {sink} (pipeline main): {n} records produced: {n} delivered, 0 dropped"
        assert summary in daemon.log()
    received = subscriber.wait_for(len(records))
    assert sorted((p["stream"], p["frame"]) for _, p in received) == sorted(
        (r["stream"], r["frame"]) for r in records
    )


def test_a_second_signal_cuts_the_stop_short_counting_every_record_and_logs_json(
    media: Path,
) -> None:
    unreachable = 9  # the discard port: nothing listens there
    config = write_config(
        media,
        "force",
        f"""
        server: {{port: 0}}
        pipelines:
          - name: main
            model: {{path: model.onnx}}
            sources: [{{id: a, uri: clip.mp4, loop: true}}]
            sinks:
              - {{type: mqtt, host: 127.0.0.1, port: {unreachable}, flush_timeout_seconds: 120}}
        """,
    )
    daemon = Daemon(config, None, "--log-format", "json")
    try:
        wait_for(lambda: daemon.processed("a") > 20)
        daemon.signal(signal.SIGTERM)
        # The second signal only once the first was taken: two sent at once can arrive as one.
        wait_for(lambda: "SIGTERM: stopping" in daemon.log(), 60, "the first signal's answer")
        assert daemon.process.poll() is None, "the flush should still be waiting for the broker"
        time.sleep(REPEAT_SECONDS)  # sooner, it is taken for the first one delivered twice
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 128 + signal.SIGTERM
    finally:
        daemon.kill()
    entries = [json.loads(line) for line in daemon.log().splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    (forced,) = [e for e in entries if e["message"].startswith("SIGTERM again: ")]
    assert forced["level"] == "error"
    # Cut short, not thrown away: every record made is delivered or counted as dropped, and
    # the totals are logged (the broker never answered: all of them dropped).
    messages = "\n".join(e["message"] for e in entries)
    made = re.search(r"stream a: (\d+) frames processed", messages)
    totals = re.search(
        r"sink mqtt \(pipeline main\): (\d+) records produced: (\d+) delivered, (\d+) dropped",
        messages,
    )
    assert made and totals, messages
    assert int(totals[2]) + int(totals[3]) == int(totals[1]) == int(made[1]) > 20


def test_a_broker_outage_costs_counted_records_but_never_stalls_the_pipeline(
    media: Path, mqtt_broker: Server, subscribe: Callable[[int], Subscriber]
) -> None:
    subscriber = subscribe(mqtt_broker.port)
    config = write_config(
        media,
        "outage",
        f"""
        server: {{port: 0}}
        pipelines:
          - name: main
            model: {{path: model.onnx}}
            sources: [{{id: a, uri: clip.mp4, loop: true, realtime: true}}]
            sinks:
              - {{type: mqtt, host: 127.0.0.1, port: {mqtt_broker.port}, buffer_records: 10,
                 retry: {{initial_delay_seconds: 0.05, max_delay_seconds: 0.2}}}}
        """,
    )
    sink = {"pipeline": "main", "sink": "mqtt"}
    daemon = Daemon(config)
    try:
        wait_for(lambda: len(subscriber.received()) > 10, what="records in mosquitto")
        mqtt_broker.kill()
        during = daemon.processed("a")
        wait_for(
            lambda: (daemon.metric("vstream_sink_records_dropped_total", **sink) or 0) > 0,
            what="drops while the broker is down",
        )
        # Drops begin once the 10-record buffer is full; the pipeline goes on past that.
        wait_for(
            lambda: daemon.processed("a") > during + 30,
            what="frames processed while the broker is down (the pipeline stalled with its sink)",
        )
        mqtt_broker.start()
        resumed = len(subscriber.received())
        wait_for(lambda: len(subscriber.received()) > resumed + 10, what="delivery to resume")
        metrics = daemon.metrics()
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
    finally:
        daemon.kill()
    labels = tuple(sorted(sink.items()))
    assert metrics[("vstream_sink_failures_total", labels)] > 0
    assert metrics[("vstream_sink_retries_total", labels)] > 0
    frames = [p["frame"] for _, p in subscriber.received()]
    first_seen = list(dict.fromkeys(frames))  # QoS 1: a frame may arrive twice
    assert first_seen == sorted(first_seen)


# -- issue 19: safe by default, with a shipped config and no optional key set -----------------


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """``vstream serve configs/cpu.yaml``: no token, no allowed_paths, no allowed_hosts."""
    daemon = Daemon(CONFIGS / "cpu.yaml", log=tmp_path_factory.mktemp("shipped") / "serve.log")
    try:
        yield daemon
    finally:
        daemon.kill()


def test_file_sources_are_confined_to_the_config_directory_by_default(shipped: Daemon) -> None:
    """Finding 1: the default of server.allowed_paths is the config file's directory."""
    outside = (
        f"file sources through the API must lie under server.allowed_paths ({CONFIGS.resolve()})"
    )
    link = CONFIGS / f".test-link-{os.getpid()}.mp4"  # inside, pointing outside
    link.symlink_to(CONFIGS.parent / "vstream" / "assets" / "sample.mp4")
    try:
        uris = [
            "/etc/passwd",
            "/etc/nonexistent",
            "file:///etc/passwd",
            "../../../../../../etc/passwd",
            "/proc/self/environ",
            "../vstream/assets/sample.mp4",  # a real video, outside
            link.name,
        ]
        for i, uri in enumerate(uris):
            response = shipped.http.post("/streams", json={"id": f"f{i}", "uri": uri})
            assert response.status_code == 400, (uri, response.text)
            assert response.json()["error"] == f"uri: {outside}", uri
    finally:
        link.unlink()
    assert [s["id"] for s in shipped.http.get("/streams").json()["streams"]] == ["sample"]


def test_cross_site_requests_and_rebinding_are_refused_without_a_token(shipped: Daemon) -> None:
    """Finding 2: a page of another origin, or reached by another name, gets nothing."""
    port = shipped.url.rsplit(":", 1)[1]
    body = json.dumps({"id": "csrf", "uri": "rtsp://127.0.0.1:9/x"})
    # What fetch(..., {mode: "no-cors"}) sends from a page on another local port.
    no_cors = shipped.http.post(
        "/streams",
        content=body,
        headers={"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://127.0.0.1:3000"},
    )
    assert no_cors.status_code == 403, no_cors.text
    assert "cross-origin request refused" in no_cors.json()["error"]
    # Without an Origin (not a browser), a body that is not JSON is still refused.
    plain = shipped.http.post("/streams", content=body, headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415, plain.text
    # DNS rebinding: the browser sends the attacker's name as Host.
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1:1", "localhost.evil.example"):
        rebound = shipped.http.get("/streams", headers={"Host": host})
        assert rebound.status_code == 400, (host, rebound.text)
        assert "is not this server" in rebound.json()["error"]
    image = shipped.http.get(
        "/streams/sample/snapshot.jpg", headers={"Sec-Fetch-Site": "same-site"}
    )
    assert image.status_code == 403, image.text
    assert "csrf" not in [s["id"] for s in shipped.http.get("/streams").json()["streams"]]
    # The names of this host, and the dashboard's own same-origin JSON requests, pass.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert shipped.http.get("/streams", headers={"Host": host}).status_code == 200
    own = shipped.http.post(
        "/streams",
        json={"id": "own", "uri": "missing.mp4"},
        headers={"Origin": shipped.url, "Sec-Fetch-Site": "same-origin"},
    )
    assert own.status_code == 400 and "video file not found" in own.json()["error"]


EXPOSED = ("--host", "0.0.0.0", "--port", "0")


def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    """Finding 2: exposed without a token, the daemon does not start (one line, exit 2)."""
    result = subprocess.run(
        [sys.executable, "-m", "vstream", "serve", str(CONFIGS / "cpu.yaml"), *EXPOSED],
        capture_output=True,
        text=True,
        timeout=120,
        env=shipped_environment(),
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "vstream: error: server.host 0.0.0.0 listens beyond loopback, and no server.token is "
        'set: set one (at least 8 characters, e.g. token: "${VSTREAM_API_TOKEN}") or listen on '
        "127.0.0.1"
    ]
