"""The HTTP API in process: token, JSON error bodies, and no credentials in what it shows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import tiny_detector, wait_for, write_video
from httpx import Client

from vstream.config import parse_config
from vstream.config.sources import SourceConfig
from vstream.engine import Engine
from vstream.errors import VstreamError
from vstream.server import ApiServer, create_app

TOKEN = "t0ken-for-tests"
SECRET = "Pa55w0rdXyz"
CREDENTIALS = f"camuser:{SECRET}"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    directory = tmp_path_factory.mktemp("server")
    tiny_detector(directory / "model.onnx")
    write_video(directory / "clip.mp4", frames=10)
    config = parse_config(
        """
pipelines:
  - name: main
    model: {path: model.onnx}
    sources: [{id: cam1, uri: clip.mp4, loop: true, realtime: true}]
    sinks: [{type: jsonl, path: out.jsonl}]
  - name: other
    model: {path: model.onnx}
    sinks: [{type: jsonl, path: other.jsonl}]
""",
        base_dir=directory,
    )
    runtime = Engine(config, base_dir=directory)
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop(timeout=10)


@pytest.fixture(scope="module")
def server(runtime: Engine) -> Iterator[ApiServer]:
    """The API served by uvicorn on a free port of 127.0.0.1."""
    server = ApiServer(create_app(runtime, TOKEN), port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(server: ApiServer) -> Iterator[Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with Client(base_url=server.url, headers=headers, timeout=20) as client:
        yield client


def test_the_api_listens_on_loopback_by_default(server: ApiServer) -> None:
    assert server.socket.getsockname()[0] == "127.0.0.1"


def test_a_busy_port_is_one_clear_error(server: ApiServer, runtime: Engine) -> None:
    with pytest.raises(VstreamError, match=rf"cannot listen on 127.0.0.1:{server.port}: "):
        ApiServer(create_app(runtime), port=server.port)


@pytest.mark.parametrize("path", ["/health", "/ready", "/metrics", "/streams", "/nope"])
@pytest.mark.parametrize("header", [None, "Bearer wrong-token", f"Basic {TOKEN}", TOKEN])
def test_requests_without_the_token_are_refused(
    server: ApiServer, path: str, header: str | None
) -> None:
    with Client(base_url=server.url, timeout=20) as anonymous:
        response = anonymous.get(path, headers={"Authorization": header} if header else {})
    assert response.status_code == 401
    assert response.json() == {
        "error": "missing or wrong bearer token (Authorization: Bearer <token>)"
    }
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_with_the_token_every_endpoint_answers(client: Client) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    wait_for(lambda: client.get("/ready").status_code == 200, 120, "/ready")
    assert client.get("/ready").json() == {"ready": True, "reasons": []}
    assert "vstream_stream_frames_processed_total" in client.get("/metrics").text
    assert [s["id"] for s in client.get("/streams").json()["streams"]] == ["cam1"]


def test_a_stream_says_each_figure_once_and_no_empty_sections(client: Client) -> None:
    """``GET /streams/{id}`` gave ``lines``/``zones`` at the top and again under
    ``analytics``, and ``cadence: {}`` and ``placement: {}`` where there were none."""
    from dataclasses import replace

    from vstream.engine.status import StreamStatus

    shown = client.get("/streams/cam1").json()
    assert shown["id"] == "cam1" and "frames_processed" in shown
    assert not {"analytics", "cadence", "placement", "lines", "zones"} & shown.keys()
    # With analytics, cadence and a cluster's placement: their keys once, at the top level.
    status = StreamStatus(**{k: v for k, v in shown.items() if k != "attributes"})
    full = replace(
        status,
        analytics={"lines": {"gate": {"in": 1, "out": 0}}, "zones": {"yard": 2}},
        cadence={"frames_detected": 4, "detection_rate": 0.5},
        placement={"worker": 1},
    ).to_json()
    assert list(full)[-5:] == ["lines", "zones", "frames_detected", "detection_rate", "worker"]
    assert not {"analytics", "cadence", "placement"} & full.keys()


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("get", "/nope", None, 404, "no such endpoint: /nope"),
        ("put", "/streams", None, 405, "PUT is not allowed on /streams"),
        ("post", "/streams", b"{not json", 400, "the body is not valid JSON: "),
        ("post", "/streams", b"[1, 2]", 400, "the body must be a JSON object describing a source"),
        ("post", "/streams", b'{"uri": "clip.mp4"}', 400, "say which pipeline: 'pipeline' is"),
        (
            "post",
            "/streams",
            b'{"pipeline": "main", "uri": "clip.mp4"}',
            400,
            "id: missing required key 'id'",
        ),
        (
            "post",
            "/streams",
            b'{"pipeline": "nope", "id": "x", "uri": "clip.mp4"}',
            404,
            "no pipeline 'nope'; choose from main, other",
        ),
        (
            "post",
            "/streams",
            b'{"pipeline": 5, "id": "x", "uri": "clip.mp4"}',
            400,
            "'pipeline' must be a pipeline's name, got 5",
        ),
        (
            "post",
            "/streams",
            b'{"pipeline": "main", "id": "x", "uri": "gone.mp4"}',
            400,
            "uri: video file not found: ",
        ),
        (
            "post",
            "/streams",
            b'{"pipeline": "main", "id": "x", "uri": "clip.mp4", "stride": 0}',
            400,
            "stride: must be in [1, 10000], got 0",
        ),
        (
            "post",
            "/streams",
            b'{"pipeline": "other", "id": "cam1", "uri": "clip.mp4"}',
            409,
            "a stream with id 'cam1' is already running",
        ),
        ("delete", "/streams/nope", None, 404, "no stream 'nope'"),
        ("get", "/streams/nope", None, 404, "no stream 'nope'"),
    ],
)
def test_every_bad_request_gets_a_json_error(
    client: Client, method: str, path: str, body: bytes | None, status: int, message: str
) -> None:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    response = client.request(method.upper(), path, content=body, headers=headers)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]


def test_credentials_never_appear_in_responses_metrics_or_logs(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    uri = f"rtsp://{CREDENTIALS}@127.0.0.1:9/live"
    added = client.post("/streams", json={"pipeline": "other", "id": "door", "uri": uri})
    assert added.status_code == 201, added.text
    assert added.json()["uri"] == "rtsp://***@127.0.0.1:9/live"
    wait_for(  # it tries to connect, fails, and logs that
        lambda: any("rtsp://***@127.0.0.1:9/live" in r.getMessage() for r in caplog.records),
        120,
        "a log line about the camera",
    )
    shown = [
        client.get("/streams").text,
        client.get("/streams/door").text,
        client.get("/metrics").text,
        client.get("/ready").text,
        client.delete("/streams/door").text,
        client.post(
            "/streams", json={"pipeline": "other", "id": "d", "uri": uri.replace(":9/", ":9x/")}
        ).text,
    ]
    assert "bad port in rtsp://***@127.0.0.1:9x/live" in shown[-1]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "door" in logged and "rtsp://***@127.0.0.1:9/live" in logged
    for text in [*shown, logged]:
        assert SECRET not in text and "camuser" not in text


def test_a_stream_added_to_one_pipeline_does_not_touch_the_other(
    client: Client, runtime: Engine
) -> None:
    before = runtime.pipelines["main"].streams["cam1"].counters.frames_processed
    added = client.post("/streams", json={"pipeline": "other", "id": "cam9", "uri": "clip.mp4"})
    assert added.status_code == 201 and added.json()["pipeline"] == "other"
    wait_for(lambda: client.get("/streams/cam9").json()["state"] == "finished", 120, "cam9")
    again = client.post("/streams", json={"pipeline": "other", "id": "cam9", "uri": "clip.mp4"})
    assert again.status_code == 409  # not "already running": what to do instead
    assert again.json()["error"] == (
        "a stream with id 'cam9' has finished; DELETE /streams/cam9 (its final counts), "
        "then add it again"
    )
    removed = client.delete("/streams/cam9").json()["removed"]
    assert removed["frames_processed"] == 10 and removed["frames_dropped"] == 0
    assert runtime.pipelines["main"].streams["cam1"].counters.frames_processed > before


def test_automatic_decoder_threads_count_the_same_in_validate_and_the_api_on_64_cores(
    client: Client, runtime: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``decoder_threads: 0`` counts as the decoder's own automatic share, everywhere.

    On 64 cores that is 4 threads a stream: with the default limits (256
    threads) five automatic streams fit beside cam1, as ``validate`` says.
    """
    monkeypatch.setattr("vstream.cores.available_cores", lambda: 64)
    ids = [f"auto{i}" for i in range(5)]
    try:
        for stream_id in ids:
            body = {"pipeline": "other", "id": stream_id, "uri": "rtsp://127.0.0.1:9/live"}
            added = client.post("/streams", json=body)
            assert added.status_code == 201, added.text
        metrics = client.get("/metrics").text
        assert 'vstream_limit_used{limit="max_decoder_threads"} 24.0' in metrics
    finally:
        for stream_id in ids:
            client.delete(f"/streams/{stream_id}")
    sources = "".join(f"\n      - {{id: s{i}, uri: rtsp://127.0.0.1:9/live}}" for i in range(5))
    text = f"""
limits: {{max_decoder_threads: 16}}
pipelines:
  - name: main
    model: {{path: model.onnx}}
    sinks: [{{type: stdout}}]
    sources:{sources}
"""
    with pytest.raises(VstreamError, match=r"ask for 20 decoder threads, more than .*\(16\)"):
        parse_config(text, base_dir=runtime.base_dir)


def test_the_engine_gets_a_validated_source_and_a_bad_body_never_reaches_it(
    client: Client, runtime: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, object]] = []
    add = runtime.add_stream

    def recording(pipeline: str, source: SourceConfig) -> object:
        seen.append((pipeline, source))
        return add(pipeline, source)

    monkeypatch.setattr(runtime, "add_stream", recording)
    bad = client.post("/streams", json={"pipeline": "other", "id": "x", "uri": "a", "loop": "yes"})
    assert bad.status_code == 400 and "loop" in bad.json()["error"] and seen == []
    added = client.post("/streams", json={"pipeline": "other", "id": "cam8", "uri": "clip.mp4"})
    assert added.status_code == 201, added.text
    try:
        ((pipeline, source),) = seen
        assert pipeline == "other" and isinstance(source, SourceConfig) and source.id == "cam8"
        assert Path(source.uri).is_absolute(), "relative to the config, resolved by the server"
    finally:
        client.delete("/streams/cam8")
