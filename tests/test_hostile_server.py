"""Hostile clients of the API's HTTP server: floods of sockets, slow requests, no descriptors.

The third probe held 3,000 idle sockets for 70 s without a token; under a
limit of 1,024 open files, 1,100 of them stopped the API and a looping file
failed for good at its reopen, while ``accept()`` errors wrote 60 MB of
tracebacks in 20 s. Each test here runs the real uvicorn on 127.0.0.1 with
real sockets, under ``server.connections`` bounds set short.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import resource
import selectors
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from helpers import eventually, tiny_detector, wait_for, write_video
from test_daemon import Daemon, write_config

from vstream.config import parse_config
from vstream.config.pipelines import ConnectionsConfig
from vstream.engine import Engine
from vstream.server import ApiServer, create_app
from vstream.server.connections import OPEN_FILES_CEILING, REPEATS

CAP = 8
SHORT = 0.5
"""Seconds: the timeouts under test. Every wait for them is bounded far above."""
PATIENCE = 20.0


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """An engine with no streams: the API of ``vstream serve`` needs one."""
    directory = tmp_path_factory.mktemp("hostile_server")
    tiny_detector(directory / "model.onnx")
    config = parse_config(
        """
pipelines:
  - name: main
    model: {path: model.onnx}
    runtime: {device: cpu}
    sinks: [{type: jsonl, path: out.jsonl}]
""",
        base_dir=directory,
    )
    engine = Engine(config, base_dir=directory)
    engine.start()
    try:
        yield engine
    finally:
        engine.stop(timeout=20)


@contextlib.contextmanager
def serving(app: FastAPI, **bounds: float) -> Iterator[ApiServer]:
    server = ApiServer(app, port=0, connections=ConnectionsConfig(max_open=CAP, **bounds))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def lowest_free_descriptor() -> int:
    """The number the process's next descriptor would get."""
    spare = os.dup(0)
    os.close(spare)
    return spare


def plain_app() -> FastAPI:
    """Routes that answer at once and read a body: enough to hold connections busy or idle."""
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    return app


def connect(server: ApiServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (without waiting)."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except OSError:  # nothing to read yet, or not connected yet
        return False


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes ``sock`` (bounded by the socket's timeout)."""
    chunks = []
    with contextlib.suppress(ConnectionResetError):  # bytes sent after it closed: a reset
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def exchange(sock: socket.socket, request: bytes) -> tuple[bytes, bytes]:
    """Send ``request`` on a kept-alive connection: the response's head and body (as long as
    its Content-Length says), or what came before the server closed the connection."""
    sock.sendall(request)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        while length is not None and len(body) < int(length[1]) and (chunk := sock.recv(65536)):
            body += chunk
        return head, body
    return data, b""


def request(server: ApiServer, method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def test_idle_connections_are_closed_after_the_idle_timeout() -> None:
    with serving(plain_app(), idle_timeout_seconds=SHORT) as server:
        fresh = [connect(server) for _ in range(CAP - 2)]
        kept_alive = connect(server)
        kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert answer(kept_alive).startswith(b"HTTP/1.1 200 ")  # and then closed
        for sock in fresh:
            assert sock.recv(1) == b"", "a connection that never sent a byte was closed"
            sock.close()


def test_past_the_cap_idle_sockets_make_room_and_the_api_still_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="vstream.server")
    # Idle connections live for a minute here: those closed were closed to make room.
    with serving(plain_app(), idle_timeout_seconds=60) as server:
        flood = [connect(server) for _ in range(CAP + 50)]
        assert eventually(lambda: sum(map(closed_by_server, flood)) >= 50, PATIENCE)
        with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
            assert client.get("/health").json() == {"status": "ok"}
        assert sum(map(closed_by_server, flood)) >= 51
        for sock in flood:
            sock.close()
    lines = [r.getMessage() for r in caplog.records if "idle the longest" in r.getMessage()]
    assert len(lines) == 1, "one line per 10 s, not one per connection"


def test_when_every_connection_is_busy_a_new_one_is_closed() -> None:
    with serving(plain_app(), body_timeout_seconds=60) as server:
        busy = [connect(server) for _ in range(CAP)]
        for sock in busy:  # each announces a body and sends none of it
            sock.sendall(
                b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            assert sock.recv(100).startswith(b"HTTP/1.1 100 ")  # the route waits for the body
        extra = connect(server)
        assert answer(extra) == b""
        busy[0].sendall(b"123456789")
        assert busy[0].recv(100).startswith(b"HTTP/1.1 200 ")  # they were all kept
        for sock in busy:
            sock.close()


def test_a_client_sending_its_headers_byte_by_byte_is_cut_off_with_408(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="vstream.server")
    with serving(create_app(engine), header_timeout_seconds=SHORT) as server:
        sock = connect(server)
        request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 1000
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        for byte in request:  # one byte each 20 ms, until the server answers
            if selector.select(timeout=0.02):
                break
            sock.send(bytes([byte]))
        selector.close()
        response = answer(sock)
        sock.close()
    assert response.startswith(b"HTTP/1.1 408 "), response
    assert b'"error": "the request\'s headers did not arrive within 0.5 s"' in response
    assert any("headers took over 0.5 s" in r.getMessage() for r in caplog.records)


def test_a_client_that_never_sends_its_body_gets_408_and_no_traceback(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with serving(create_app(engine), body_timeout_seconds=SHORT) as server:
        sock = connect(server)
        sock.sendall(
            f"POST /streams HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()
            + b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"uri": '
        )
        response = answer(sock)
        sock.close()
        with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
            assert client.get("/streams").json() == {"streams": []}
    assert response.startswith(b"HTTP/1.1 408 "), response
    assert b"the request's body did not arrive within 0.5 s" in response
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_accept_errors_with_no_descriptor_left_are_one_line_per_interval(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio reports ``accept()`` out of descriptors once per waiting connection, each retry."""
    caplog.set_level(logging.DEBUG)
    # Over asyncio's 1 s between retries, so the second line counts at least one held back.
    monkeypatch.setattr(REPEATS, "interval", 1.5)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def accept_lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "socket.accept()" in r.getMessage()]

    def repeated() -> bool:
        return any("more like it" in r.getMessage() for r in accept_lines())

    with serving(plain_app()) as server:
        clients = [socket.socket() for _ in range(5)]
        try:
            # No descriptor left for this process: the server's accept() fails; connect() does
            # not need one (the sockets are made above). A new descriptor takes the lowest free
            # number and fails at or above the limit, so the limit is that number: a count of
            # those open would leave a closed one's number below it free.
            resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free_descriptor(), hard))
            for sock in clients:
                sock.connect(("127.0.0.1", server.port))
            failing = eventually(repeated, PATIENCE)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        with httpx.Client(base_url=server.url, timeout=PATIENCE) as client:
            assert client.get("/health").status_code == 200  # served again once descriptors free
        for sock in clients:
            sock.close()
    lines = accept_lines()
    first = lines[0].getMessage() if lines else "none"
    assert failing, f"the accept errors were logged again with their count ({len(lines)}: {first})"
    assert all(r.name == "vstream.server" and not r.exc_info for r in lines), "no traceback"
    assert "out of system resource (OSError: [Errno 24]" in lines[0].getMessage()
    assert re.search(r"\(and \d+ more like it, not shown\)$", lines[-1].getMessage())


def test_a_daemon_started_under_a_low_open_file_limit_raises_it_and_survives_a_flood(
    tmp_path: Path,
) -> None:
    """``ulimit -n 256``: the soft limit goes up to the hard one; 306 idle sockets take none."""
    tiny_detector(tmp_path / "model.onnx")
    write_video(tmp_path / "clip.mp4", frames=10, width=96, height=64)
    config = write_config(
        tmp_path,
        "flood",
        """
        server: {connections: {idle_timeout_seconds: 60}}
        pipelines:
          - name: main
            model: {path: model.onnx}
            sources: [{id: cam, uri: clip.mp4, loop: true, realtime: true}]
            sinks: [{type: jsonl, path: out.jsonl}]
        """,
    )
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1024:
        pytest.skip(f"the hard limit on open files here is {hard}: nothing to raise to")
    ceiling = min(hard, OPEN_FILES_CEILING)
    daemon = Daemon(config, open_files=(256, hard))
    try:
        limits = Path(f"/proc/{daemon.process.pid}/limits").read_text()
        assert re.search(rf"Max open files\s+{ceiling}\s+{hard}\s", limits), limits
        assert f"open files: soft limit raised from 256 to {ceiling}" in daemon.log()
        assert "API connections: at most 256" in daemon.log()

        flood = [socket.socket() for _ in range(256 + 50)]
        for sock in flood:  # all at once: a daemon answering slowly never holds the flood back
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", int(daemon.url.rsplit(":", 1)[1])))
        assert eventually(lambda: sum(map(closed_by_server, flood)) >= 50, PATIENCE)
        wait_for(lambda: daemon.processed("cam") > 0, what="frames")
        before = daemon.processed("cam")
        wait_for(lambda: daemon.processed("cam") > before + 20, what="frames after the flood")
        [stream] = daemon.http.get("/streams").json()["streams"]
        assert stream["state"] == "streaming"
        for sock in flood:
            sock.close()
    finally:
        daemon.kill()
    log = daemon.log()
    assert "Traceback" not in log
    assert log.count("idle the longest") == 1, log


@pytest.fixture
def every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's loggers let every line through: one of a kind an earlier test logged in
    the last 10 s would be held back (:data:`REPEATS`), and a line looked for missed."""
    monkeypatch.setattr(REPEATS, "filter", lambda record: True)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            b'{"id": "x", "uri": "clip.mp4", "stride": ' + b"9" * 5000 + b"}",
            "the body cannot be read: Exceeds the limit (4300 digits) for integer string "
            "conversion: value has 5000 digits",
        ),
        (
            b'{"id": "x", "uri": "~nosuchuser_zz/clip.mp4"}',
            "uri: file sources through the API must lie under server.allowed_paths (",
        ),
    ],
    ids=["long-integer", "home-of-no-user"],
)
@pytest.mark.usefixtures("every_line")
def test_a_body_python_cannot_build_is_a_400_and_the_connection_lives_on(
    engine: Engine, caplog: pytest.LogCaptureFixture, body: bytes, said: str
) -> None:
    """Python refuses an integer past its 4300 digits with a ValueError that is no
    JSONDecodeError, and ``~name`` of no user with a RuntimeError that pydantic lets through:
    each was a 500, a traceback in the log and a connection closed under the client."""
    caplog.set_level(logging.DEBUG)
    with serving(create_app(engine)) as server, connect(server) as sock:
        head, answer = exchange(sock, request(server, "POST", "/streams", body))
        assert head.startswith(b"HTTP/1.1 400 "), head + answer
        assert json.loads(answer)["error"].startswith(said)
        head, answer = exchange(sock, request(server, "GET", "/health"))
        assert head.startswith(b"HTTP/1.1 200 "), "the connection was kept"
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.usefixtures("every_line")
def test_an_unexpected_error_in_a_route_is_one_log_line_and_a_json_500(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Starlette's handler for any exception answers and then raises it again, for the
    server: uvicorn logged a traceback ("Exception in ASGI application") and closed the
    connection."""
    caplog.set_level(logging.DEBUG)
    app = create_app(engine)

    @app.get("/fails")
    def fails() -> None:
        raise RuntimeError("a bug")

    with serving(app) as server, connect(server) as sock:
        head, answer = exchange(sock, request(server, "GET", "/fails"))
        assert head.startswith(b"HTTP/1.1 500 "), head + answer
        assert json.loads(answer) == {"error": "internal error (RuntimeError); see the server log"}
        head, answer = exchange(sock, request(server, "GET", "/health"))
        assert head.startswith(b"HTTP/1.1 200 "), "the connection was kept"
    errors = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == ["GET /fails failed: RuntimeError: a bug"]
    assert not errors[0].exc_info
