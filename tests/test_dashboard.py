"""The dashboard in a real headless browser: Debian's Chromium driven by Playwright.

The page is served by uvicorn on 127.0.0.1 with the dashboard router, fake
stream figures and a hub fed moving pictures; the tests open it, wait for the
streams and their live previews, and compare screenshots of the preview.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_app import FakeStreams, Feeder, moving_frame, serve
from helpers import eventually

from vstream.server.auth import SESSION_COOKIE
from vstream.server.preview import PreviewHub

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no Chromium installed (Debian: apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright Python package is not installed"
)

TOKEN = "dashboard-test-token"
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def hub() -> Iterator[PreviewHub]:
    hub = PreviewHub(max_fps=5, max_width=640)
    yield hub
    hub.close()


@pytest.fixture
def clips(tmp_path: Path) -> Iterator[Any]:
    """A clip recorder holding one clip of cam1."""
    from test_clips import Feed, encode

    from vstream.clips import ClipRecorder

    recorder = ClipRecorder(tmp_path / "clips", pre_roll=0.5, post_roll=0.5)
    ring = recorder.ring("cam1")
    feed = Feed(encode(tmp_path / "source.mp4", 50))
    feed.until(ring, 1.1)
    event = {
        "type": "line_crossing", "line": "gate", "direction": "in", "track_id": 61,
        "class_id": 3, "label": "cross", "attributes": {"colour": "red"}, "pts": 1.0,
    }  # fmt: skip
    recorder.trigger("cam1", event, 1.0, moving_frame(5))
    feed.until(ring)
    assert recorder.flush(10)
    yield recorder
    recorder.close()


def preview_loaded(page: Any, stream_id: str) -> None:
    """Wait until the stream's preview image has decoded a picture."""
    page.wait_for_function(
        """id => {
            const img = document.querySelector(`[data-stream="${id}"] img.preview-image`);
            return img && img.complete && img.naturalWidth > 0;
        }""",
        arg=stream_id,
        timeout=WAIT_MS,
    )


def preview_moves(page: Any, hub: PreviewHub, stream_id: str) -> None:
    """Two screenshots of the preview, some frames apart, differ: the picture is live."""
    image = page.locator(f'[data-stream="{stream_id}"] img.preview-image')
    first = image.screenshot()
    encodes = hub.stats()[stream_id]["encodes"]
    assert eventually(lambda: hub.stats()[stream_id]["encodes"] >= encodes + 3, 10)
    page.wait_for_timeout(300)
    second = image.screenshot()
    assert first != second, "the preview did not change"


def check_streams(page: Any, streams: FakeStreams) -> None:
    streams.streams = FakeStreams().streams
    cam1 = page.locator('[data-stream="cam1"]')
    cam2 = page.locator('[data-stream="cam2"]')
    sync_api.expect(cam1.locator(".state")).to_have_text("streaming", timeout=WAIT_MS)
    sync_api.expect(cam2.locator(".state")).to_have_text("reconnecting")
    sync_api.expect(cam1.locator(".pipeline")).to_have_text("yard / ")
    sync_api.expect(cam1.locator('[data-field="fps"]')).to_have_text("24.8")
    sync_api.expect(cam1.locator('[data-field="age"]')).to_have_text("84 ms")
    sync_api.expect(cam1.locator('[data-field="dropped"]')).to_have_text("10")
    sync_api.expect(cam2.locator('[data-field="reconnects"]')).to_have_text("4")
    sync_api.expect(cam1.locator('[data-field="detected"]')).to_have_text("400 (33 %)")
    sync_api.expect(cam1.locator('[data-field="predicted"]')).to_have_text("800")
    sync_api.expect(cam1.locator('[data-field="still"]')).to_have_text("150")
    # No cadence: every frame processed is detected (it said a dash).
    sync_api.expect(cam2.locator('[data-field="detected"]')).to_have_text("50 (100 %)")
    sync_api.expect(cam2.locator('[data-field="predicted"]')).to_have_text("0")
    sync_api.expect(cam2.locator('[data-field="still"]')).to_have_text("0")
    sync_api.expect(cam2.locator(".error")).to_have_text("camera-2: connection refused")
    sync_api.expect(cam1.locator('tr[data-name="gate"] .count')).to_have_text("in 3 · out 1")
    sync_api.expect(cam1.locator('tr[data-name="lawn"] .count')).to_have_text("inside 2")
    # The cascade's labels per secondary model, most seen first; an embedding has none.
    colour = cam1.locator('tr[data-kind="attribute"][data-name="colour"] .count')
    sync_api.expect(colour).to_have_text("red 12 · blue 5")
    sync_api.expect(colour).to_have_attribute(
        "title", "17 objects read in 9 runs (0.12 s), 40 readings carried"
    )
    reid = cam1.locator('tr[data-kind="attribute"][data-name="reid"] .count')
    sync_api.expect(reid).to_have_text("read 30")
    sync_api.expect(cam2.locator('tr[data-kind="attribute"]')).to_have_count(0)
    # Updated live: the page polls GET /streams.
    streams.streams[0]["frames_processed"] = 4321
    streams.streams[0]["lines"] = {"gate": {"in": 4, "out": 1}}
    labels = {f"c{i}": i for i in range(1, 9)}
    streams.streams[0]["attributes"]["colour"]["labels"] = labels
    sync_api.expect(cam1.locator('[data-field="processed"]')).to_have_text("4,321", timeout=WAIT_MS)
    sync_api.expect(cam1.locator('tr[data-name="gate"] .count')).to_have_text("in 4 · out 1")
    sync_api.expect(colour).to_have_text("c8 8 · c7 7 · c6 6 · c5 5 · c4 4 · c3 3 · +2 more")


def test_dashboard_shows_streams_live_previews_and_clips(
    browser: Any, hub: PreviewHub, clips: Any, tmp_path: Path
) -> None:
    streams = FakeStreams()
    with Feeder(hub, ["cam1", "cam2"]) as feeder, serve(hub, streams, clips) as url:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        requests: list[str] = []
        context.on("request", lambda request: requests.append(request.url))
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/")
        sync_api.expect(page.locator("#login")).to_be_hidden()
        check_streams(page, streams)
        preview_loaded(page, "cam1")
        preview_loaded(page, "cam2")
        assert hub.watched("cam1") and hub.watched("cam2")
        preview_moves(page, hub, "cam1")
        # The two cards share the row's whole width (a third of it stayed empty).
        grid, *cards = (
            page.locator(selector).bounding_box()
            for selector in ("#streams", '[data-stream="cam1"]', '[data-stream="cam2"]')
        )
        assert cards[0]["y"] == cards[1]["y"], "side by side"
        assert abs(cards[1]["x"] + cards[1]["width"] - (grid["x"] + grid["width"])) <= 1
        # The clip is listed with its snapshot, its event said plainly, a link to the video.
        row = page.locator("#clips tbody tr").first
        sync_api.expect(row).to_contain_text(
            "cross #61 crossed gate (in) · colour red", timeout=WAIT_MS
        )
        sync_api.expect(row).to_contain_text("cam1")
        page.wait_for_function(
            "() => { const i = document.querySelector('#clips img');"
            " return i && i.complete && i.naturalWidth === 640; }",
            timeout=WAIT_MS,
        )
        href = row.locator("a").get_attribute("href")
        video = page.request.get(url + href)
        assert video.status == 200 and video.headers["content-type"] == "video/mp4"
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        assert (tmp_path / "dashboard.png").stat().st_size > 10_000
        # Nothing but this server is ever asked for anything (no external assets).
        assert requests and all(r.startswith(url) or r.startswith("data:") for r in requests)
        assert errors == []
        # Closing the page ends the previews: no viewer, no encoding, no annotating.
        context.close()
        assert eventually(lambda: hub.viewers() == 0, 10), hub.stats()
        produced = dict(feeder.produced)
        encodes = hub.stats()["cam1"]["encodes"]
        offers = feeder.offers
        assert eventually(lambda: feeder.offers > offers + 10, 10)
        assert feeder.produced == produced
        # Only what was taken as the last viewer left may still be encoded: the frame in the
        # hub thread's hand and one offered at that moment; none is taken once nobody
        # watches, while the feeder went on offering more than ten.
        assert hub.stats()["cam1"]["encodes"] <= encodes + 2


def test_dashboard_asks_for_the_token_once(browser: Any, hub: PreviewHub, clips: Any) -> None:
    streams = FakeStreams()
    with Feeder(hub, ["cam1", "cam2"]), serve(hub, streams, clips, token=TOKEN) as url:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(url + "/")
        sync_api.expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
        sync_api.expect(page.locator("#main")).to_be_hidden()
        assert not hub.watched("cam1")
        # A wrong token is refused and nothing is kept.
        page.fill("#token", "wrong")
        page.click("#login-form button")
        sync_api.expect(page.locator("#login-error")).to_have_text(
            "That token was refused.", timeout=WAIT_MS
        )
        assert page.evaluate("sessionStorage.getItem('vstream.token')") is None
        assert context.cookies() == []
        # The right one opens the dashboard; previews load through the session cookie.
        page.fill("#token", TOKEN)
        page.click("#login-form button")
        sync_api.expect(page.locator("#login")).to_be_hidden(timeout=WAIT_MS)
        check_streams(page, streams)
        preview_loaded(page, "cam1")
        preview_moves(page, hub, "cam1")
        sync_api.expect(page.locator("#clips tbody tr")).to_have_count(1, timeout=WAIT_MS)
        assert page.evaluate("sessionStorage.getItem('vstream.token')") == TOKEN
        [cookie] = context.cookies()
        assert cookie["name"] == SESSION_COOKIE and cookie["value"] != TOKEN
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
        assert page.evaluate("document.cookie") == ""  # no script can read the session
        # A reload keeps the token for the tab's session: no second prompt.
        page.reload()
        check_streams(page, streams)
        sync_api.expect(page.locator("#login")).to_be_hidden()
        preview_loaded(page, "cam1")
        # A new tab of another session must ask again.
        other = browser.new_context()
        fresh = other.new_page()
        fresh.goto(url + "/")
        sync_api.expect(fresh.locator("#login")).to_be_visible(timeout=WAIT_MS)
        other.close()
        # "Forget token" ends the session: the cookie no longer opens previews.
        page.click("#forget")
        sync_api.expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
        assert page.evaluate("sessionStorage.getItem('vstream.token')") is None
        snapshot = page.request.get(url + "/streams/cam1/snapshot.jpg")
        assert snapshot.status == 401
        context.close()
        assert eventually(lambda: hub.viewers() == 0, 10), hub.stats()
