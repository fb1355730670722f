"""Paths an attacker with write access to a folder can swap: clips served, sinks validated.

Served clips: a file flipped between a plain file and a symbolic link while
it is requested (the check came before the open: a probe got ``/etc/passwd``
on 26 of 845 requests). Served by uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from dashboard_app import FakeStreams, serve

from vstream.server.preview import PreviewHub


class OneFolder:
    """The clips of a folder as the clip routes read them: ``file`` names a file in it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def file(self, clip_id: str, kind: str) -> Path:
        return self.folder / f"{clip_id}.mp4"


def test_a_clip_flipped_between_file_and_link_never_serves_the_links_target(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "clips"
    folder.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET\n")
    clip, plain, link = folder / "c.mp4", folder / ".plain", folder / ".link"
    stop = threading.Event()

    def flip() -> None:
        """Swap ``clip`` atomically between a plain file and a link to the secret."""
        while not stop.is_set():
            plain.write_bytes(b"video")
            os.replace(plain, clip)
            link.symlink_to(secret)
            os.replace(link, clip)

    os.mkfifo(folder / "fifo.mp4")  # opening it for reading must not wait for a writer
    hub = PreviewHub(max_fps=5, max_width=320, snapshot_wait=1.0)
    flipper = threading.Thread(target=flip, daemon=True)
    limits = httpx.Limits(max_connections=10)
    try:
        with (
            serve(hub, FakeStreams(), clips=OneFolder(folder)) as url,
            httpx.Client(base_url=url, timeout=10, limits=limits) as client,
        ):

            def fetch(_: int) -> tuple[int, bytes]:
                """Status and body; 0 and the error for an answer cut short."""
                try:
                    answer = client.get("/clips/c/video")
                except httpx.HTTPError as exc:
                    return 0, repr(exc).encode()
                return answer.status_code, answer.content

            assert client.get("/clips/fifo/video").status_code == 404
            flipper.start()
            with ThreadPoolExecutor(10) as pool:  # ten at a time: the race gets more chances
                answers = list(pool.map(fetch, range(300)))
    finally:
        stop.set()
        flipper.join(5)
        hub.close()
    leaked = [a for a in answers if b"SECRET" in a[1]]
    assert not leaked, f"{len(leaked)} of {len(answers)} requests served the link's target"
    assert {a for a in answers if a[0] != 404} == {(200, b"video")}
