"""Hostile input: each finding of the probe of the daemon and the CLI, as a behaviour test.

1. numbers without an upper bound (``decoder_threads``), and loose types;
2. credentials that a pattern could not mask (spaces, ``/``, ``@``, ``#``, ``%``, unicode);
3. no limit on streams, slow or racing removal, memory kept after churn;
4. sink drop logs that flood or under-report;
5. Redis entries written twice after a timeout;
6. request bodies read whole before the size check, deep JSON, lower-case ``bearer``;
7. local files reachable through ``POST /streams``;
8. ``vstream validate`` passing what ``serve`` rejects.

Everything runs against the real thing on 127.0.0.1: the FastAPI app under
uvicorn, redis-server, a slow HTTP receiver, an MQTT port nobody listens on.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import redis
from helpers import eventually, run_cli, tiny_detector, write_video

from vstream import assets
from vstream.cli import main
from vstream.config import ConfigError, parse_config, parse_source
from vstream.config.model import MAX_RUNS
from vstream.engine import Engine
from vstream.logs import RedactingFilter, TextFormatter
from vstream.results import FrameResult
from vstream.server import ApiServer, create_app
from vstream.sinks.factory import build_sink

if TYPE_CHECKING:
    from servers import Server

pytest_plugins = ("servers",)

TOKEN = "hostile-test-token"
MAX_BODY = 64 * 1024
JSON = {"Content-Type": "application/json"}


# -- the daemon under test -------------------------------------------------------------------


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("hostile")
    tiny_detector(directory / "model.onnx")
    write_video(directory / "clip.mp4", frames=10, width=96, height=64)
    (directory / "inside").mkdir()
    write_video(directory / "inside" / "ok.mp4", frames=5, width=96, height=64)
    return directory


@pytest.fixture(scope="module")
def engine(media: Path) -> Iterator[Engine]:
    config = parse_config(
        f"""
server: {{max_body_bytes: {MAX_BODY}, max_json_depth: 32, allowed_paths: [inside]}}
limits: {{max_streams: 25, max_streams_per_pipeline: 25, max_decoder_threads: 60}}
pipelines:
  - name: main
    model: {{path: model.onnx}}
    runtime: {{device: cpu}}
    sinks: [{{type: jsonl, path: out.jsonl}}]
""",
        base_dir=media,
    )
    engine = Engine(config, base_dir=media)
    engine.start()
    try:
        yield engine
    finally:
        engine.stop(timeout=20)


@pytest.fixture(scope="module")
def api(engine: Engine) -> Iterator[httpx.Client]:
    server = ApiServer(create_app(engine, TOKEN), port=0)
    server.start()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            yield client
    finally:
        server.stop()


def remove_all(api: httpx.Client) -> None:
    for stream in api.get("/streams").json()["streams"]:
        api.delete(f"/streams/{stream['id']}")


# -- 1. bounds and strict types --------------------------------------------------------------


def write_config(directory: Path, source: str = "", runtime: str = "", model: str = "") -> Path:
    path = directory / "p.yaml"
    path.write_text(
        f"pipelines:\n  - name: p\n    model: {{path: {model or assets.DEMO_MODEL}}}\n"
        f"    runtime: {{{runtime}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}{source}}}]\n"
        f"    sinks: [{{type: jsonl, path: {directory / 'out.jsonl'}}}]\n"
    )
    return path


@pytest.mark.parametrize(
    ("source", "runtime", "message"),
    [
        (", decoder_threads: 100000", "", "decoder_threads: must be in [0, 64], got 100000"),
        ("", "batch_size: 100000", "batch_size: must be in [1, 64], got 100000"),
        ("", "batch_size: true", "batch_size: must be an integer, got True"),
        (", realtime: 'yes'", "", "realtime: Input should be a valid boolean (got 'yes')"),
        (", open_timeout_seconds: .inf", "", "open_timeout_seconds: must be a finite number"),
        (", open_timeout_seconds: Infinity", "", "open_timeout_seconds: must be a number"),
        (
            ", reconnect: {initial_delay_seconds: 1.0e+308}",
            "",
            "reconnect.initial_delay_seconds: must be in (0, 3600], got 1e+308",
        ),
        ("", "in_flight: 1000", f"in_flight: must be in [1, {MAX_RUNS + 2}], got 1000"),
        (", queue_size: 10000000", "", "queue_size: must be in"),
    ],
)
def test_every_number_is_bounded_and_every_type_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, runtime: str, message: str
) -> None:
    assert main(["validate", str(write_config(tmp_path, source, runtime))]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_cli_bounds_decoder_threads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--decoder-threads", "20000"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "vstream: error: --decoder-threads: must be in [0, 64], got 20000"


def test_the_api_bounds_decoder_threads_and_the_total(api: httpx.Client) -> None:
    body = {"id": "t1", "uri": "inside/ok.mp4", "decoder_threads": 100000}
    response = api.post("/streams", json=body)
    assert response.status_code == 400
    assert "decoder_threads: must be in [0, 64], got 100000" in response.json()["error"]
    kept = api.post("/streams", json={**body, "decoder_threads": 40, "loop": True})
    assert kept.status_code == 201, kept.text
    try:
        refused = api.post("/streams", json={**body, "id": "t2", "decoder_threads": 40})
        assert refused.status_code == 429
        assert "limits.max_decoder_threads would be exceeded (80 of 60)" in refused.json()["error"]
        metrics = api.get("/metrics").text
        assert 'vstream_limit{limit="max_decoder_threads"} 60.0' in metrics
        assert 'vstream_limit_used{limit="max_decoder_threads"} 40.0' in metrics
    finally:
        api.delete("/streams/t1")


# -- 2. credentials --------------------------------------------------------------------------

PASSWORDS = ["S3cr tPass", "pa/ss/word", "p@ss@word", "pass#frag", "100%Sure", "pässwörd€", "a:b:c"]


@pytest.mark.parametrize("password", PASSWORDS)
def test_credentials_never_leak_from_the_api_logs_or_errors(
    api: httpx.Client, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    uri = f"rtsp://admin:{password}@127.0.0.1:9/cam"
    body = {"id": "secret", "uri": uri, "open_timeout_seconds": 0.5}
    added = api.post("/streams", json=body)
    assert added.status_code == 201, added.text
    try:
        assert added.json()["uri"] == "rtsp://***@127.0.0.1:9/cam"
        # Connection refused on port 9: the reader logs its reconnections.
        assert eventually(lambda: api.get("/streams/secret").json()["reconnects"] >= 1)
        shown = [
            api.get("/streams").text,
            api.get("/streams/secret").text,
            api.get("/metrics").text,
        ]
        bad = api.post("/streams", json={**body, "id": "bad", "uri": uri.replace(":9/", ":9x/")})
        assert bad.status_code == 400
        shown.append(bad.text)
    finally:
        shown.append(api.delete("/streams/secret").text)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "rtsp://***@127.0.0.1:9/cam" in logged
    for text in [*shown, logged]:
        assert password not in text
        assert password.encode("utf-8").decode("latin-1") not in text


@pytest.mark.parametrize("password", ["S3cr tPass", "pa/ss@wörd#1"])
def test_credentials_from_the_environment_never_reach_errors(
    tmp_path: Path,
    password: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CAM_PASSWORD", password)
    path = tmp_path / "p.yaml"
    path.write_text(
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        "    sources: [{id: s, uri: 'rtsp://admin:${CAM_PASSWORD}@127.0.0.1:bad/cam'}]\n"
        f"    sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]\n"
    )
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad port in rtsp://***@127.0.0.1:bad/cam" in err, err
    assert password not in err


# -- 3. limits, removal, churn ---------------------------------------------------------------


def test_past_the_stream_limit_new_streams_get_429(api: httpx.Client) -> None:
    try:
        for i in range(25):
            body = {"id": f"l{i}", "uri": "inside/ok.mp4", "decoder_threads": 1}
            assert api.post("/streams", json=body).status_code == 201
        refused = api.post("/streams", json={"id": "l25", "uri": "inside/ok.mp4"})
        assert refused.status_code == 429
        assert refused.json()["error"] == "limits.max_streams reached (25 streams)"
        assert 'vstream_limit_used{limit="max_streams"} 25.0' in api.get("/metrics").text
    finally:
        remove_all(api)


def test_exactly_one_of_five_concurrent_deletes_wins(api: httpx.Client) -> None:
    body = {"id": "racy", "uri": "inside/ok.mp4", "loop": True, "decoder_threads": 1}
    assert api.post("/streams", json=body).status_code == 201
    barrier = threading.Barrier(5)
    statuses: list[int] = []

    def delete() -> None:
        barrier.wait()
        statuses.append(api.delete("/streams/racy").status_code)

    threads = [threading.Thread(target=delete) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [200, 404, 404, 404, 404]


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_add_remove_churn_returns_threads_and_memory(api: httpx.Client, engine: Engine) -> None:
    """5 rounds of 20 looping streams added, streaming, then removed.

    The first round warms up what stays for good (codec tables, thread-local
    caches); after it, threads must come back to their count and memory to
    within 40 MB, where the probe saw 72 MB of growth over four rounds of 50.
    """

    def round_of_streams() -> None:
        for i in range(20):
            body = {"id": f"c{i}", "uri": "inside/ok.mp4", "loop": True, "decoder_threads": 1}
            assert api.post("/streams", json=body).status_code == 201
        assert eventually(
            lambda: all(s["frames_processed"] > 0 for s in api.get("/streams").json()["streams"])
        )
        for i in range(20):
            assert api.delete(f"/streams/c{i}").status_code == 200
        assert eventually(lambda: not any(r.running for p in engine.pipelines.values()
                                          for r in p.readers()))  # fmt: skip

    round_of_streams()
    threads, rss = threading.active_count(), rss_bytes()
    for _ in range(4):
        round_of_streams()
    assert eventually(lambda: threading.active_count() <= threads)
    assert rss_bytes() - rss < 40 * 2**20, f"RSS grew by {(rss_bytes() - rss) / 2**20:.1f} MB"


# -- 4. sink drop logs -----------------------------------------------------------------------


def frame_result(frame: int) -> FrameResult:
    return FrameResult("cam", frame, frame / 25, 320, 240)


class SlowReceiver(BaseHTTPRequestHandler):
    """A webhook receiver that takes 50 ms per request and counts the records it got."""

    received = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(0.05)
        with SlowReceiver.lock:
            SlowReceiver.received += len(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def slow_webhook() -> Iterator[str]:
    SlowReceiver.received = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowReceiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def sink_from(yaml_sink: str, directory: Path):
    config = parse_config(
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sinks: [{yaml_sink}]\n",
        base_dir=directory,
    )
    return build_sink(config.pipelines[0].sinks[0], "p")


def drop_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "records dropped (" in r.getMessage()]


def test_a_slow_webhook_logs_drops_once_per_interval_with_exact_totals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vstream")
    with slow_webhook() as url:
        sink = sink_from(
            f"{{type: webhook, url: '{url}', buffer_records: 4, batch_records: 2,"
            " flush_timeout_seconds: 30}",
            tmp_path,
        )
        for frame in range(400):
            sink.write([frame_result(frame)])
        sink.close()
        received = SlowReceiver.received
    # 400 one-record writes into a buffer of 4 behind a slow receiver: hundreds of drops,
    # logged at most once per 10 s interval instead of once per frame.
    assert sink.stats.dropped > 100
    assert 1 <= len(drop_lines(caplog)) <= 2, drop_lines(caplog)
    summary = [r.getMessage() for r in caplog.records if "records produced" in r.getMessage()]
    assert summary == [
        f"sink webhook (pipeline p): 400 records produced: {received} delivered,"
        f" {400 - received} dropped"
    ]
    assert sink.stats.delivered + sink.stats.dropped == 400


def test_an_unreachable_broker_reports_every_dropped_record_at_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from servers import free_port

    caplog.set_level(logging.INFO, logger="vstream")
    sink = sink_from(
        f"{{type: mqtt, host: 127.0.0.1, port: {free_port()}, flush_timeout_seconds: 0.5}}",
        tmp_path,
    )
    for frame in range(309):
        sink.write([frame_result(frame)])
    sink.close()
    summary = [r.getMessage() for r in caplog.records if "records produced" in r.getMessage()]
    assert summary == ["sink mqtt (pipeline p): 309 records produced: 0 delivered, 309 dropped"]
    assert sink.stats.dropped == 309


# -- 5. Redis: a timeout after the transaction ran never writes it twice ----------------------


def test_freezing_redis_past_the_timeout_writes_no_entry_twice(
    tmp_path: Path, redis_broker: Server
) -> None:
    sink = sink_from(
        f"{{type: redis, url: 'redis://127.0.0.1:{redis_broker.port}/0', timeout_seconds: 0.3,"
        " batch_records: 10, retry: {initial_delay_seconds: 0.05, max_delay_seconds: 0.2}}",
        tmp_path,
    )
    client = redis.Redis(port=redis_broker.port)
    assert redis_broker.process is not None
    try:
        for frame in range(50):
            sink.write([frame_result(frame)])
        assert eventually(lambda: client.xlen("vstream:cam") == 50)
        # Frozen while batches are in flight: the commands reach the socket, the timeout
        # fires, and redis runs them once it thaws, after vstream has sent them again.
        redis_broker.process.send_signal(signal.SIGSTOP)
        for frame in range(50, 150):
            sink.write([frame_result(frame)])
        assert eventually(lambda: sink.stats.retries >= 2, timeout=20)
        redis_broker.process.send_signal(signal.SIGCONT)
        sink.close()
    finally:
        redis_broker.process.send_signal(signal.SIGCONT)
    frames = [int(fields[b"frame"]) for _, fields in client.xrange("vstream:cam")]
    assert frames == list(range(150))
    assert sink.stats.delivered == 150 and sink.stats.dropped == 0


# -- 6. the API's input handling -------------------------------------------------------------


def test_an_oversized_body_is_refused_while_it_is_read(api: httpx.Client) -> None:
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        chunk = b" " * 2**20
        for _ in range(300):  # 300 MB, without a Content-Length
            sent += len(chunk)
            yield chunk

    status = None
    with contextlib.suppress(httpx.TransportError):
        status = api.post("/streams", content=body(), headers=JSON).status_code
    assert status in (413, None)
    # The server stopped reading long before the end: the client could not send it all.
    assert sent < 64 * 2**20, f"{sent / 2**20:.0f} MB went out before the refusal"
    assert api.get("/health").status_code == 200


def test_a_declared_oversized_body_is_refused_before_reading(api: httpx.Client) -> None:
    # Only the headers go out: the answer cannot wait for a body that is never sent. (Sending
    # the body too raced: the server closes with unread bytes, and the kernel's reset could
    # reach the client before the 413.)
    url = httpx.URL(str(api.base_url))
    connection = http.client.HTTPConnection(url.host, url.port, timeout=30)
    try:
        connection.putrequest("POST", "/streams")
        for name, value in {**api.headers, **JSON}.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(MAX_BODY + 1))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413
        assert json.loads(response.read())["error"] == f"the body is over {MAX_BODY} bytes"
        assert response.getheader("connection") == "close"
    finally:
        connection.close()


def test_deeply_nested_json_is_a_400_without_a_traceback(
    api: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    response = api.post("/streams", content=b"[" * 30_000 + b"]" * 30_000, headers=JSON)
    assert response.status_code == 400
    assert response.json()["error"] == "the JSON body nests deeper than 32 levels"
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_bearer_scheme_is_case_insensitive(api: httpx.Client, scheme: str) -> None:
    response = api.get("/streams", headers={"Authorization": f"{scheme} {TOKEN}"})
    assert response.status_code == 200


def test_a_wrong_token_is_refused_in_any_case(api: httpx.Client) -> None:
    response = api.get("/streams", headers={"Authorization": f"bearer {TOKEN}x"})
    assert response.status_code == 401


# -- 7. local files through the API ----------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "/etc/passwd",
        "/etc/no-such-file",
        "/proc/self/environ",
        "../../../../../../etc/passwd",
        "inside/../clip.mp4",
        "file:///etc/passwd",
    ],
)
def test_files_outside_the_allowed_paths_are_refused_without_saying_if_they_exist(
    api: httpx.Client, media: Path, uri: str
) -> None:
    response = api.post("/streams", json={"id": "f", "uri": uri})
    assert response.status_code == 400
    message = response.json()["error"]
    assert message.endswith(
        f"file sources through the API must lie under server.allowed_paths ({media / 'inside'})"
    ), message
    assert "not found" not in message


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        # A file outside the allowed paths, as its path says once its ``..`` are resolved.
        ("/dev/video/../../etc/passwd", "must lie under server.allowed_paths"),
        # Through the API a missing device reads as one that is not a device.
        ("/dev/video99", "/dev/video99 is not a V4L2 capture device"),
        ("/dev/null", "/dev/null is not a V4L2 capture device"),
    ],
)
def test_device_paths_must_be_real_v4l2_devices(api: httpx.Client, uri: str, message: str) -> None:
    response = api.post("/streams", json={"id": "d", "uri": uri})
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_a_file_inside_the_allowed_paths_is_taken(api: httpx.Client) -> None:
    added = api.post("/streams", json={"id": "ok", "uri": "inside/ok.mp4"})
    assert added.status_code == 201, added.text
    assert eventually(lambda: api.get("/streams/ok").json()["state"] == "finished")
    assert api.delete("/streams/ok").json()["removed"]["frames_processed"] == 5


# -- 8. validate checks what serve checks ----------------------------------------------------


@pytest.fixture
def bad_models(tmp_path: Path) -> dict[str, Path]:
    text = tmp_path / "text.onnx"
    text.write_text("not a model")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(assets.DEMO_MODEL.read_bytes()[:100_000])
    return {"text": text, "truncated": truncated}


@pytest.mark.parametrize("which", ["text", "truncated"])
def test_validate_loads_the_model(
    tmp_path: Path, bad_models: dict[str, Path], which: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, model=str(bad_models[which]))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"pipelines[0].model: cannot load model {bad_models[which]}" in err, err


def test_validate_checks_sizes_against_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path)
    path.write_text(path.read_text().replace("model: {path:", "model: {imgsz: 640, path:"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "takes a fixed 320x320 input; imgsz 640x640 does not fit" in err, err


@pytest.mark.parametrize(
    ("model", "runtime", "message"),
    [
        ("dtype: float16", "", "demo.onnx: the model input is float32, the config says float16"),
        ("format: yolov5", "", "4 class names for a model with 1995 classes"),
        ("scores: softmax", "", "model.scores (softmax) is for the detr format"),
        ("class_names: [a, b]", "", "demo.onnx: 2 class names for a model with 4 classes"),
        ("max_io_mib: 4", "device: cuda", "more than max_io_mib (4 MiB)"),
    ],
    ids=["dtype", "format", "scores", "class-names", "io-at-the-gpu-batch"],
)
def test_validate_refuses_what_a_run_refuses_at_start(
    tmp_path: Path, model: str, runtime: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each passed validate ("OK"), then failed ``vstream run`` at start (exit 2); the IO
    budget was checked at the CPU's batch of 1 where a GPU runs 32."""
    path = write_config(tmp_path, runtime=runtime)
    path.write_text(path.read_text().replace("model: {path:", f"model: {{{model}, path:"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err
    if runtime:
        return  # a GPU run: none here
    done = run_cli("run", path, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_validate_refuses_keypoints_the_model_has_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``anchor_keypoints`` on a model without keypoints passed validate, then failed the run."""
    path = write_config(tmp_path)
    analytics = "    analytics: {anchor_keypoints: [left_ankle]}\n    sinks:"
    path.write_text(path.read_text().replace("    sinks:", analytics))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    message = "analytics.anchor_keypoints ['left_ankle'] needs a pose model"
    assert f"pipelines[0].{message}" in err and len(err.splitlines()) == 1, err
    done = run_cli("run", path, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("sink_path", "message"),
    [("adir", "adir is a directory, not a file"), ("afile/x.jsonl", "not a directory: ")],
)
def test_validate_checks_sink_paths(
    tmp_path: Path, sink_path: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    path = write_config(tmp_path)
    path.write_text(path.read_text().replace(str(tmp_path / "out.jsonl"), sink_path))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "pipelines[0].sinks[0].path" in err, err


# -- issue 19: masking reads each URL; long names are a clear 400 ----------------------------


@contextlib.contextmanager
def daemon_log() -> Iterator[io.StringIO]:
    """What the daemon's log handler writes (its redacting filter and formatter), as text."""
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(TextFormatter(timestamps=True))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield text
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def shown_for(api: httpx.Client, body: dict[str, object], log: io.StringIO) -> list[str]:
    """The POST answer, GET /streams and the log once the reader has tried to connect."""
    added = api.post("/streams", json=body)
    assert added.status_code == 201, added.text
    try:
        assert eventually(lambda: api.get(f"/streams/{body['id']}").json()["reconnects"] >= 1)
        return [added.text, api.get("/streams").text, api.get("/metrics").text, log.getvalue()]
    finally:
        api.delete(f"/streams/{body['id']}")


def test_a_user_name_is_masked_in_its_url_only(api: httpx.Client) -> None:
    """Finding 3: "admin" of rtsp://admin:...@ is not blanked out of unrelated text."""
    secret = {"id": "cam", "uri": "rtsp://admin:Adm1n-pw@127.0.0.1:9/x", "open_timeout_seconds": 1}
    assert api.post("/streams", json=secret).status_code == 201
    body = {"id": "admin-door", "uri": "inside/ok.mp4", "loop": True, "decoder_threads": 1}
    assert api.post("/streams", json=body).status_code == 201
    try:
        again = api.post("/streams", json=body)
        assert again.status_code == 409
        assert again.json()["error"] == "a stream with id 'admin-door' is already running"
    finally:
        api.delete("/streams/admin-door")
        api.delete("/streams/cam")


def test_masking_holds_after_thousands_of_rejected_credentials(api: httpx.Client) -> None:
    """Finding 3: no list of remembered secrets to fill (it failed open past 10,000)."""
    for i in range(3_400):
        refused = {"id": "r", "uri": f"rtsp://u{i}:pw-{i:05d}-xyz@127.0.0.1:bad/cam"}
        with pytest.raises(ConfigError, match=re.escape("bad port in rtsp://***@127.0.0.1:bad/")):
            parse_source(refused)
    password = "Fresh/Pass-After-Cap"  # a "/" is past what a pattern alone can mask
    uri = f"rtsp://viewer:{password}@127.0.0.1:9/cam"
    with daemon_log() as log:
        shown = shown_for(api, {"id": "late", "uri": uri, "open_timeout_seconds": 0.5}, log)
    assert '"uri":"rtsp://***@127.0.0.1:9/cam"' in shown[0]
    assert "rtsp://***@127.0.0.1:9/cam" in shown[3]
    for text in shown:
        assert password not in text and "viewer" not in text


def test_secrets_in_query_strings_are_masked(api: httpx.Client) -> None:
    """Finding 3: ?password=, ?pass=, ?token=, ?key=, ?secret=, ?auth= and the like."""
    secrets = {
        "password": "Qs-one-1",
        "pass": "Qs-two-2",
        "token": "Qs-three-3",
        "key": "Qs-four-4",
        "secret": "Qs-five-5",
        "auth": "Qs-six-6",
        "access_token": "Qs-seven-7",
        "apiKey": "Qs-eight-8",
    }
    query = "&".join(f"{name}={value}" for name, value in secrets.items())
    uri = f"rtsp://127.0.0.1:9/cam?channel=2&{query}"
    with daemon_log() as log:
        shown = shown_for(api, {"id": "query", "uri": uri, "open_timeout_seconds": 0.5}, log)
    masked = "&".join(f"{name}=***" for name in secrets)
    assert f"rtsp://127.0.0.1:9/cam?channel=2&{masked}" in shown[0]
    for text in shown:
        for value in secrets.values():
            assert value not in text


def test_a_file_name_too_long_for_the_system_is_a_clear_400(
    api: httpx.Client, media: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 6: ENAMETOOLONG was a 500 with a traceback."""
    caplog.set_level(logging.DEBUG)
    name = "a" * 300 + ".mp4"
    inside = api.post("/streams", json={"id": "long", "uri": f"inside/{name}"})
    assert inside.status_code == 400, inside.text
    assert inside.json()["error"].startswith(f"uri: cannot use video file {media / 'inside'}")
    assert inside.json()["error"].endswith("...: File name too long")
    outside = api.post("/streams", json={"id": "long", "uri": f"/tmp/{name}"})
    assert outside.status_code == 400, outside.text
    assert "must lie under server.allowed_paths" in outside.json()["error"]
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"


@pytest.mark.parametrize("command", ["validate", "serve"])
@pytest.mark.parametrize(
    ("part", "message"),
    [
        ("source", "pipelines[0].sources[0].uri: cannot use video file "),
        ("sink", "cannot check path "),
    ],
)
def test_a_file_name_too_long_in_a_config_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, part: str, message: str
) -> None:
    """Finding 6: validate and serve exited 1 ("unexpected error")."""
    path = write_config(tmp_path)
    replaced = str(assets.SAMPLE_VIDEO) if part == "source" else "out.jsonl"
    path.write_text(path.read_text().replace(replaced, "b" * 300 + Path(replaced).suffix))
    assert main([command, str(path), *(["--port", "0"] if command == "serve" else [])]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert message in err and err.rstrip().endswith(": File name too long"), err
