"""Paths an attacker with write access to a folder can swap: clips served, sinks validated.

Served clips: a file flipped between a plain file and a symbolic link while
it is requested (the check came before the open: a probe got ``/etc/passwd``
on 26 of 845 requests). Served by uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from dashboard_app import FakeStreams, serve

from vstream import assets
from vstream.errors import VstreamError
from vstream.server.preview import PreviewHub
from vstream.sinks.jsonl import JsonLinesSink


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


# -- sink paths: validate and the sink's opening refuse devices and kernel files -------------

GUARD = """
import os, sys
from vstream.cli import main

def guard(event, args):
    # Nothing under /proc, /sys or /dev but /dev/null is opened for writing: refused and told.
    if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    real = os.path.realpath(os.fsdecode(args[0]))
    special = real.split("/")[1] in ("proc", "sys", "dev") and real != os.devnull
    if args[2] & writing and special:
        print("OPENED FOR WRITING:", real, file=sys.stderr)
        raise PermissionError(real)

sys.addaudithook(guard)
for config in sys.argv[1:]:
    print("exit", main(["validate", config]), file=sys.stderr, flush=True)
"""


def test_validate_refuses_kernel_files_devices_and_pipes_without_opening_them(
    tmp_path: Path,
) -> None:
    """``/proc/sys/kernel/hostname`` passed, and as root the run then renamed the machine."""
    (tmp_path / "to-hostname.jsonl").symlink_to("/proc/sys/kernel/hostname")
    os.mkfifo(tmp_path / "fifo.jsonl")
    sinks = {
        "/proc/sys/kernel/hostname": "/proc/sys/kernel/hostname is under /proc",
        "to-hostname.jsonl": "/proc/sys/kernel/hostname is under /proc",
        "/proc/self/status": "/status is under /proc",
        "/dev/full": "/dev/full is under /dev",
        "fifo.jsonl": f"{tmp_path / 'fifo.jsonl'} is not a regular file",
        "/dev/null": None,
    }
    configs = []
    for i, path in enumerate(sinks):
        config = tmp_path / f"p{i}.yaml"
        config.write_text(
            f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
            f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
            f"    sinks: [{{type: jsonl, path: {path}}}]\n"
        )
        configs.append(config)
    done = subprocess.run(
        [sys.executable, "-c", GUARD, *map(str, configs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "OPENED FOR WRITING" not in done.stderr, done.stderr
    reports = re.split(r"^exit (\d+)\n", done.stderr, flags=re.M)
    outcomes = list(zip(reports[1::2], reports[0:-1:2], strict=True))
    for (status, report), (path, message) in zip(outcomes, sinks.items(), strict=True):
        if message is None:
            assert status == "0", report
            continue
        [line] = [line for line in report.splitlines() if line.strip()]
        assert status == "2" and "pipelines[0].sinks[0].path: " in line, (path, report)
        assert message in line and "Traceback" not in report, (path, report)


def test_a_jsonl_sink_refuses_at_its_opening_a_name_turned_into_a_device(tmp_path: Path) -> None:
    """What ``validate`` passed can have become a link to a device by the time the sink opens."""
    output = tmp_path / "out.jsonl"
    output.symlink_to("/dev/full")
    with pytest.raises(VstreamError, match=r"^cannot write output .*: /dev/full is under /dev"):
        JsonLinesSink(output)
    with JsonLinesSink(os.devnull) as discarded:  # the one device it takes: nothing to harm
        discarded.send([{"stream": "s", "frame": 0}])
