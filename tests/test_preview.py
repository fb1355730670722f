"""The live-preview hub, its MJPEG and snapshot routes, sessions, and the clip routes."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from dashboard_app import FakeStreams, Feeder, moving_frame, serve
from helpers import ManualClock, eventually
from PIL import Image

from vstream.config import PreviewConfig
from vstream.engine.outputs import Preview
from vstream.server.auth import SESSION_COOKIE, SessionStore
from vstream.server.dashboard import page
from vstream.server.preview import PreviewHub, TooManyViewers

TOKEN = "s3cret-token"


def jpeg_size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image.size


class MjpegReader:
    """The JPEGs of an MJPEG response, parsed by their Content-Length.

    Keeps one iterator over the body: dropping an ``iter_bytes()`` generator
    closes the response (and the connection) in httpx.
    """

    def __init__(self, response: httpx.Response) -> None:
        self.chunks = response.iter_bytes()
        self.buffer = b""

    def read(self, count: int, timeout: float = 15.0) -> list[bytes]:
        parts: list[bytes] = []
        deadline = time.monotonic() + timeout
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end >= 0:
                head = self.buffer[:head_end].decode("latin-1")
                assert "image/jpeg" in head, head
                length = next(
                    int(line.split(":")[1])
                    for line in head.split("\r\n")
                    if "Content-Length" in line
                )
                end = head_end + 4 + length
                if len(self.buffer) >= end:
                    parts.append(self.buffer[head_end + 4 : end])
                    rest = self.buffer[end:]
                    assert rest[:9] == b"\r\n--frame"[: len(rest[:9])]
                    self.buffer = rest
                    if len(parts) == count:
                        return parts
                    continue
            assert time.monotonic() < deadline, f"only {len(parts)} MJPEG parts in {timeout} s"
            self.buffer += next(self.chunks)
            if self.buffer.startswith(b"--frame\r\n"):
                self.buffer = self.buffer[len(b"--frame\r\n") :]
            elif self.buffer.startswith(b"\r\n--frame\r\n"):
                self.buffer = self.buffer[len(b"\r\n--frame\r\n") :]


def read_parts(response: httpx.Response, count: int) -> list[bytes]:
    """The first ``count`` JPEGs of an MJPEG response (the response stays open)."""
    reader = MjpegReader(response)
    response.reader = reader  # type: ignore[attr-defined]  # keeps the body iterator alive
    return reader.read(count)


@pytest.fixture
def hub():
    hub = PreviewHub(max_fps=5, max_width=320, snapshot_wait=1.0)
    yield hub
    hub.close()


def test_the_hub_is_what_the_engine_takes_as_a_preview(hub: PreviewHub) -> None:
    """The engine types the hub by the methods it calls (it may not import the server)."""
    assert isinstance(hub, Preview)


def test_nobody_watching_costs_nothing(hub: PreviewHub) -> None:
    called = []
    assert not hub.watched("cam1")
    assert hub.offer("cam1", lambda: called.append(1)) is False
    assert hub.offer("cam1", moving_frame(0)) is False
    assert called == [] and hub.stats() == {}


def test_mjpeg_delivers_frames_and_stops_when_the_client_leaves(hub: PreviewHub) -> None:
    streams = FakeStreams()
    with (
        Feeder(hub, ["cam1", "cam2"], width=1280, height=720) as feeder,
        serve(hub, streams) as url,
        httpx.Client(timeout=10) as client,
    ):
        with client.stream("GET", f"{url}/streams/cam1/preview.mjpg") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith(
                "multipart/x-mixed-replace; boundary=frame"
            )
            parts = read_parts(response, 4)
            assert hub.viewers("cam1") == 1 and hub.watched("cam1")
            assert not hub.watched("cam2")
        # Scaled down to max_width on the way, aspect kept; every part a new picture.
        assert {jpeg_size(p) for p in parts} == {(320, 180)}
        assert len(set(parts)) == 4
        # The client left: the viewer is gone and nothing more is produced or encoded.
        assert eventually(lambda: hub.viewers("cam1") == 0, 10), "the viewer was never released"
        assert not hub.watched("cam1")
        time.sleep(0.3)
        encodes, produced = hub.stats()["cam1"]["encodes"], feeder.produced["cam1"]
        offers = feeder.offers
        assert eventually(lambda: feeder.offers > offers + 10, 10)  # the pipeline goes on
        assert hub.stats()["cam1"]["encodes"] == encodes
        assert feeder.produced["cam1"] == produced
        assert feeder.produced["cam2"] == 0  # never watched, never annotated


def test_frames_are_taken_at_most_max_fps(hub: PreviewHub) -> None:
    async def watch() -> tuple[int, float]:
        got = 0
        started = time.monotonic()
        async for _ in hub.jpegs("cam1"):
            got += 1
            if got == 6:
                break
        return got, time.monotonic() - started

    with Feeder(hub, ["cam1"], fps=50) as feeder:
        got, seconds = asyncio.run(asyncio.wait_for(watch(), 20))
    taken = hub.stats()["cam1"]["offers"]
    assert got == 6 and hub.viewers() == 0
    # Offered at 50 fps but taken at most 5 a second (plus the first one at once).
    assert taken <= 5 * seconds + 2 and feeder.offers > taken


def test_snapshot_asks_for_one_frame_when_nobody_watches(hub: PreviewHub) -> None:
    streams = FakeStreams()
    with Feeder(hub, ["cam1"]) as feeder, serve(hub, streams) as url:
        response = httpx.get(f"{url}/streams/cam1/snapshot.jpg", timeout=10)
        assert response.status_code == 200 and response.headers["content-type"] == "image/jpeg"
        assert jpeg_size(response.content) == (320, 180)
        assert hub.viewers() == 0 and not hub.watched("cam1")
        produced = feeder.produced["cam1"]
        assert 1 <= produced <= 2
        time.sleep(0.5)
        assert feeder.produced["cam1"] == produced
        # A stream nobody feeds: no picture after the short wait; an unknown one: 404.
        silent = httpx.get(f"{url}/streams/cam2/snapshot.jpg", timeout=10)
        assert silent.status_code == 503 and "no frame" in silent.json()["error"]
        assert httpx.get(f"{url}/streams/nope/snapshot.jpg").status_code == 404
        assert httpx.get(f"{url}/streams/nope/preview.mjpg").status_code == 404


def test_viewers_are_capped() -> None:
    hub = PreviewHub(max_viewers=1)
    try:
        with (
            Feeder(hub, ["cam1"]),
            serve(hub, FakeStreams()) as url,
            httpx.Client(timeout=10) as client,
            client.stream("GET", f"{url}/streams/cam1/preview.mjpg") as first,
        ):
            read_parts(first, 1)
            second = client.get(f"{url}/streams/cam2/preview.mjpg")
            assert second.status_code == 503 and "too many" in second.json()["error"]
            # A snapshot of an unwatched stream takes a place while it waits: said so (it
            # said "no frame of cam2 yet" of a stream running all along).
            snapshot = client.get(f"{url}/streams/cam2/snapshot.jpg")
            assert snapshot.status_code == 503
            assert snapshot.json()["error"].startswith("too many preview viewers: ")
        assert eventually(lambda: hub.viewers() == 0, 10)
    finally:
        hub.close()


def test_a_cuda_frame_is_encoded_on_its_device() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    hub = PreviewHub(max_width=320)

    async def one() -> bytes:
        async for jpeg in hub.jpegs("gpu"):
            return jpeg
        raise AssertionError("no frame")

    async def main() -> bytes:
        task = asyncio.create_task(one())
        while not hub.watched("gpu"):
            await asyncio.sleep(0.01)
        assert hub.offer("gpu", moving_frame(3, 1280, 720).cuda())
        return await asyncio.wait_for(task, 10)

    try:
        assert jpeg_size(asyncio.run(main())) == (320, 180)
    finally:
        hub.close()


def test_removing_a_stream_ends_its_viewers(hub: PreviewHub) -> None:
    async def main() -> int:
        got = 0

        async def watch() -> None:
            nonlocal got
            async for _ in hub.jpegs("cam1"):
                got += 1

        task = asyncio.create_task(watch())
        while not hub.watched("cam1"):
            await asyncio.sleep(0.01)
        hub.offer("cam1", np.zeros((90, 160, 3), np.uint8))
        while got == 0:
            await asyncio.sleep(0.01)
        hub.remove("cam1")
        await asyncio.wait_for(task, 5)
        return got

    assert asyncio.run(asyncio.wait_for(main(), 20)) == 1
    assert hub.viewers() == 0


def test_too_many_viewers_is_raised_before_any_frame() -> None:
    hub = PreviewHub(max_viewers=1)

    async def main() -> None:
        first = hub.mjpeg("a")
        assert (await anext(first)).startswith(b"--frame")
        with pytest.raises(TooManyViewers):
            await anext(hub.mjpeg("b"))
        await first.aclose()
        assert hub.viewers() == 0

    try:
        asyncio.run(main())
    finally:
        hub.close()


def test_closing_the_hub_ends_open_responses() -> None:
    hub = PreviewHub()
    with (
        Feeder(hub, ["cam1"]),
        serve(hub, FakeStreams()) as url,
        httpx.Client(timeout=10) as client,
        client.stream("GET", f"{url}/streams/cam1/preview.mjpg") as response,
    ):
        reader = MjpegReader(response)
        reader.read(1)
        hub.close()
        rest = b"".join(reader.chunks)  # the body ends: no more frames, no hang
        assert rest.count(b"image/jpeg") <= 2
        assert hub.viewers() == 0
        assert client.get(f"{url}/streams/cam1/preview.mjpg").status_code == 503


def test_session_cookie_opens_media_only(hub: PreviewHub) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with Feeder(hub, ["cam1"]), serve(hub, FakeStreams(), token=TOKEN) as url:
        with httpx.Client(base_url=url, timeout=10) as anonymous:
            page_response = anonymous.get("/")  # the page itself holds no data
            assert page_response.status_code == 200
            assert "default-src 'none'" in page_response.headers["content-security-policy"]
            head = anonymous.head("/")  # an uptime probe's: it was 405
            assert head.status_code == 200 and not head.content
            assert head.headers["content-length"] == page_response.headers["content-length"]
            assert anonymous.get("/streams").status_code == 401
            assert anonymous.get("/streams/cam1/snapshot.jpg").status_code == 401
            assert anonymous.post("/session").status_code == 401
            wrong = anonymous.post("/session", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401 and not wrong.cookies
        with httpx.Client(base_url=url, timeout=10) as browser:
            opened = browser.post("/session", headers=bearer)
            assert opened.status_code == 200
            cookie = opened.headers["set-cookie"]
            assert cookie.startswith(f"{SESSION_COOKIE}=") and TOKEN not in cookie
            lowered = cookie.lower()
            assert "httponly" in lowered and "samesite=strict" in lowered and "path=/" in lowered
            assert browser.cookies.get(SESSION_COOKIE)
            # The cookie opens previews and snapshots ...
            assert browser.get("/streams/cam1/snapshot.jpg").status_code == 200
            with browser.stream("GET", "/streams/cam1/preview.mjpg") as response:
                assert response.status_code == 200
                read_parts(response, 1)
            assert browser.get("/clips/x/snapshot.jpg").status_code == 404  # passed auth
            # ... but not the API, and never for anything but GET.
            assert browser.get("/streams").status_code == 401
            assert browser.get("/clips").status_code == 401
            assert browser.post("/streams/cam1/snapshot.jpg").status_code == 401
            assert browser.get("/streams", headers=bearer).status_code == 200
            assert browser.delete("/session", headers=bearer).status_code == 200
            browser.cookies.set(SESSION_COOKIE, opened.cookies[SESSION_COOKIE])
            assert browser.get("/streams/cam1/snapshot.jpg").status_code == 401  # revoked


def test_sessions_expire_and_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from vstream.server import auth

    clock = ManualClock()  # a busy machine cannot age it early
    monkeypatch.setattr(auth, "time", clock)
    store = SessionStore("t", max_age=60, max_sessions=2)
    first, second, third = store.create(), store.create(), store.create()
    assert not store.valid(first) and store.valid(second) and store.valid(third)
    assert not store.valid("") and not store.valid("made-up")
    clock.advance(59.9)
    assert store.valid(third)
    clock.advance(0.2)
    assert not store.valid(third)
    assert SessionStore(None).bearer_ok(None)
    assert not store.bearer_ok("Bearer T") and store.bearer_ok("Bearer t")


def test_the_page_has_no_external_assets() -> None:
    html, policy = page()
    lowered = html.lower()
    for marker in ("http://", "https://", "//cdn", '<link rel="stylesheet"', 'src="http'):
        assert marker not in lowered
    assert "script-src 'sha256-" in policy and "style-src 'sha256-" in policy


def test_clip_routes(hub: PreviewHub, tmp_path: Path) -> None:
    from test_clips import Feed, encode

    from vstream.clips import ClipRecorder

    recorder = ClipRecorder(tmp_path / "clips", pre_roll=0.5, post_roll=0.5)
    try:
        ring = recorder.ring("cam1")
        feed = Feed(encode(tmp_path / "source.mp4", 50))
        feed.until(ring, 1.1)
        clip_id = recorder.trigger("cam1", {"type": "line", "line": "gate"}, 1.0, moving_frame(1))
        feed.until(ring)
        assert recorder.flush(10)
        # Past the video's end: recording, waiting for its post-roll, all along.
        waiting = recorder.trigger("cam1", {"type": "line", "line": "gate"}, 1.9, moving_frame(1))
        with serve(hub, FakeStreams(), clips=recorder) as url, httpx.Client(base_url=url) as c:
            listed = c.get("/clips").json()
            assert [r["id"] for r in listed["recording"]] == [waiting]
            assert [r["id"] for r in c.get("/clips?stream=cam1").json()["recording"]] == [waiting]
            assert c.get("/clips?stream=other").json()["recording"] == []  # it listed every one
            [clip] = listed["clips"]
            assert clip["id"] == clip_id and listed["stats"]["clips"] == 1
            assert clip["url"] == f"/clips/{clip_id}/video"
            video = c.get(clip["url"])
            assert video.headers["content-type"] == "video/mp4"
            assert video.content == (tmp_path / "clips" / clip["clip"]).read_bytes()
            ranged = c.get(clip["url"], headers={"Range": "bytes=0-99"})
            assert ranged.status_code == 206 and len(ranged.content) == 100
            snapshot = c.get(clip["snapshot_url"])
            assert snapshot.headers["content-type"] == "image/jpeg"
            assert jpeg_size(snapshot.content) == (640, 360)
            assert c.get("/clips?stream=other").json()["clips"] == []
            assert c.get("/clips/nope/video").status_code == 404
            assert c.get("/clips/..%2F..%2Fetc%2Fpasswd/video").status_code == 404
    finally:
        recorder.close()


def test_no_clip_recorder_lists_nothing(hub: PreviewHub) -> None:
    with serve(hub, FakeStreams()) as url, httpx.Client(base_url=url) as client:
        assert client.get("/clips").json() == {"clips": [], "recording": [], "stats": None}
        assert client.get("/clips/x/video").status_code == 404


# -- issue 19: idle viewers, clip links, HEAD, server paths ---------------------------------


def idle_viewers(url: str, stream_id: str, count: int) -> list[socket.socket]:
    """``count`` clients that ask for the preview and then never read a byte."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    clients = []
    for _ in range(count):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect((host, int(port)))
        request = f"GET /streams/{stream_id}/preview.mjpg HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
        client.sendall(request.encode())
        clients.append(client)
    return clients


def test_idle_viewers_are_dropped_and_closed_ones_free_their_slot() -> None:
    """Finding 5: three clients that read nothing held every slot of max_viewers 3."""
    hub = PreviewHub(max_fps=30, max_width=1280, quality=95, max_viewers=3)
    try:
        with (
            Feeder(hub, ["cam1"], fps=30, width=1280, height=720),
            serve(hub, FakeStreams(), write_timeout=1.0) as url,
        ):
            clients = idle_viewers(url, "cam1", 3)
            try:
                assert eventually(lambda: hub.viewers() == 3, 10)
                # Their sockets stay open, but they take nothing: dropped after the timeout.
                assert eventually(lambda: hub.viewers() == 0, 60), hub.stats()
                with httpx.stream("GET", f"{url}/streams/cam1/preview.mjpg", timeout=10) as ok:
                    assert ok.status_code == 200
                    read_parts(ok, 2)
            finally:
                for client in clients:
                    client.close()
        with (
            Feeder(hub, ["cam1"], fps=30, width=1280, height=720),
            serve(hub, FakeStreams(), write_timeout=600) as url,
        ):
            clients = idle_viewers(url, "cam1", 3)
            assert eventually(lambda: hub.viewers() == 3, 10)
            for client in clients:
                client.close()
            # Long before the write timeout: a closed socket frees its slot at once.
            assert eventually(lambda: hub.viewers() == 0, 30), hub.stats()
            assert httpx.get(f"{url}/streams/cam1/snapshot.jpg", timeout=10).status_code == 200
    finally:
        hub.close()


def test_clips_are_plain_files_listed_by_name_and_answer_head(
    hub: PreviewHub, tmp_path: Path
) -> None:
    """Finding 8: links in the clips folder, HEAD on media, absolute paths in GET /clips."""
    from test_clips import Feed, encode

    from vstream.clips import ClipRecorder

    folder = tmp_path / "clips"
    recorder = ClipRecorder(folder, pre_roll=0.5, post_roll=0.5)
    try:
        ring = recorder.ring("cam1")
        feed = Feed(encode(tmp_path / "source.mp4", 50))
        feed.until(ring, 1.1)
        clip_id = recorder.trigger("cam1", {"type": "line", "line": "gate"}, 1.0, moving_frame(1))
        feed.until(ring)
        assert recorder.flush(10)
    finally:
        recorder.close()
    # What someone with write access to the folder leaves there before a restart: a clip
    # whose video is a link to a secret, and a description that is itself a link.
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret\n")
    described = json.loads((folder / f"{clip_id}.json").read_text())
    for name in ("evil", "evil2"):
        fake = {**described, "id": name, "clip": f"{name}.mp4", "snapshot": f"{name}.jpg"}
        (tmp_path / f"{name}.json").write_text(json.dumps(fake))
        (folder / f"{name}.mp4").symlink_to(secret)
        (folder / f"{name}.jpg").symlink_to(secret)
    (folder / "evil.json").write_text((tmp_path / "evil.json").read_text())
    (folder / "evil2.json").symlink_to(tmp_path / "evil2.json")
    restarted = ClipRecorder(folder, pre_roll=0.5, post_roll=0.5)
    try:
        with (
            Feeder(hub, ["cam1"]),
            serve(hub, FakeStreams(), clips=restarted) as url,
            httpx.Client(base_url=url, timeout=10) as client,
        ):
            listing = client.get("/clips")
            assert str(tmp_path) not in listing.text
            clips = {c["id"]: c for c in listing.json()["clips"]}
            assert "evil2" not in clips
            assert clips[clip_id]["clip"] == f"{clip_id}.mp4"
            for name in ("evil", "evil2"):
                for kind in ("video", "snapshot.jpg"):
                    refused = client.get(f"/clips/{name}/{kind}")
                    assert refused.status_code == 404 and "secret" not in refused.text
            video = client.head(f"/clips/{clip_id}/video")
            assert video.status_code == 200 and video.content == b""
            size = (folder / f"{clip_id}.mp4").stat().st_size
            assert video.headers["content-type"] == "video/mp4"
            assert int(video.headers["content-length"]) == size
            assert client.head(f"/clips/{clip_id}/snapshot.jpg").status_code == 200
            assert client.head("/streams/cam1/snapshot.jpg").status_code == 200
            mjpeg = client.head("/streams/cam1/preview.mjpg")
            assert mjpeg.status_code == 200 and mjpeg.content == b""
            assert mjpeg.headers["content-type"].startswith("multipart/x-mixed-replace")
            assert client.head("/streams/nope/preview.mjpg").status_code == 404
            assert hub.viewers() == 0
    finally:
        restarted.close()


@pytest.mark.parametrize(
    "option", [{"quality": 5}, {"quality": 100}, {"max_width": 32}, {"max_fps": 0}]
)
def test_a_hub_made_in_python_has_the_bounds_of_server_preview(option: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(option))):
        PreviewHub(**option)


def test_a_hub_made_in_python_has_the_defaults_of_server_preview() -> None:
    hub, config = PreviewHub(), PreviewConfig()
    assert (hub.max_fps, hub.max_width, hub.quality, hub.max_viewers) == (
        config.max_fps,
        config.max_width,
        config.quality,
        config.max_viewers,
    )
