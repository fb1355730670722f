"""Screenshot the dashboard of ``vstream serve configs/dashboard.yaml`` (the README's picture).

Starts the daemon on a free port of 127.0.0.1 with the shipped dashboard config
(two replayed cameras, tracking, the colour classifier, a line, a zone and
event clips; its outputs go to ``out/``), waits until it has made
``--clips`` new clips, opens the page in Debian's Chromium through Playwright (as
``tests/test_dashboard.py`` does), waits for both live previews, and saves a
screenshot of the whole page, 1280 pixels wide, as a palette PNG (small: a
dark page has few colours). From the repository root::

    .venv/bin/python tools/dashboard_screenshot.py [--out docs/images/dashboard.png]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "dashboard.yaml"
STREAMS = ("entrance", "yard")


def wait(condition: Callable[[], T | None], seconds: float, what: str) -> T:
    """``condition()``'s first true value, asked every 0.5 s; exits naming ``what`` after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    sys.exit(f"dashboard_screenshot: timed out waiting for {what}")


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    parser.add_argument("--clips", type=int, default=3, help="clips to wait for (default 3)")
    parser.add_argument(
        "--colours", type=int, default=256, help="palette size of the PNG; 0: full colour"
    )
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("dashboard_screenshot: no Chromium (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    log = (ROOT / "out").joinpath("dashboard_screenshot.log")
    log.parent.mkdir(exist_ok=True)
    started = time.time()
    with log.open("w") as stderr:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "vstream", "serve", str(CONFIG), "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        url = wait(
            lambda: (
                (found := re.search(r"serving on (http://\S+)", log.read_text())) and found.group(1)
            ),
            120,
            "the daemon to listen",
        )

        def new_clips() -> bool:  # out/clips may hold clips of earlier runs
            return sum(c["created"] >= started for c in get(url + "/clips")["clips"]) >= args.clips

        wait(new_clips, 300, f"{args.clips} clips")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + "/")
            for stream in STREAMS:
                page.wait_for_function(
                    """id => {
                        const img = document.querySelector(`[data-stream="${id}"] img`);
                        return img && img.complete && img.naturalWidth > 0;
                    }""",
                    arg=stream,
                    timeout=60_000,
                )
            page.wait_for_selector("#clips tbody tr img", timeout=60_000)
            page.wait_for_timeout(1500)  # the clips' thumbnails decode
            png = page.screenshot(full_page=True)
            browser.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    picture = Image.open(io.BytesIO(png)).convert("RGB")
    if args.colours:
        picture = picture.quantize(args.colours, method=Image.Quantize.FASTOCTREE)
    picture.save(args.out, optimize=True)
    print(f"{args.out}: {picture.width}x{picture.height}, {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
