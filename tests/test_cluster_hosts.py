"""A Ray cluster of two nodes on this machine, joined as a user joins one; a node dies mid-run.

``ray start --head`` and ``ray start --address`` run here as they would on
two hosts, on 127.0.0.1, each with ``--block`` in a process group of its
own, so that the test ends exactly the Ray processes it started (``ray stop``
would end every Ray process of the machine). ``vstream run`` joins the
cluster with ``address: HOST:PORT``, its two workers one on each node; the
second node's raylet is killed while its worker reads: its streams move to
the head's worker, and every file's records come out once, in order.
About 40 s on this 2-core machine (two ``ray start``, two workers loading
the model): short enough for the default run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import frames_by_stream, free_port, wait_for

from vstream import assets

FPS = 25
RAY = str(Path(sys.executable).with_name("ray"))


@dataclass
class Node:
    process: subprocess.Popen
    log: Path
    manager_port: int

    def raylet(self) -> int:
        """The pid of this node's raylet (found by the port given to it)."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            port = f"--node_manager_port={self.manager_port}".encode()
            if command[0].endswith(b"/raylet") and port in command:
                with contextlib.suppress(OSError):
                    if os.getpgid(int(entry.name)) == self.process.pid:  # started here
                        return int(entry.name)
        raise AssertionError(f"no raylet with node manager port {self.manager_port}")

    def stop(self) -> None:
        """``ray start --block`` stops its node on SIGTERM; what is left of the group is killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


def start_node(args: list[str], directory: Path, name: str, env: dict[str, str]) -> Node:
    manager_port = free_port()
    log = directory / f"{name}.log"
    process = subprocess.Popen(
        [
            *(RAY, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1"),
            *("--node-manager-port", str(manager_port), "--disable-usage-stats", *args),
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    node = Node(process, log, manager_port)
    try:
        wait_for(
            lambda: "Ray runtime started" in log.read_text() or process.poll() is not None,
            120,
            f"ray start of the {name}",
        )
        assert process.poll() is None, log.read_text()
    except BaseException:
        node.stop()
        raise
    return node


@dataclass
class TwoNodes:
    address: str
    env: dict[str, str]
    head: Node
    second: Node


@pytest.fixture
def two_nodes() -> Iterator[TwoNodes]:
    """A head and a second node, one CPU each, on 127.0.0.1; stopped at the end, by group."""
    # A short directory of its own: Ray's socket paths must stay under 108 bytes, and
    # /tmp/ray (another run's cluster, `address: auto`) is left alone.
    directory = Path(tempfile.mkdtemp(prefix="vsr", dir="/tmp"))
    # One secret for the cluster, in every node's environment and the driver's (README).
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
    }
    # A local instance started earlier in this process (vstream.cluster.connect) sets this to 0,
    # and Ray then refuses to start a second node ("not supported on Windows and OSX").
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    port = free_port()
    try:
        yield from _nodes(directory, env, port)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _nodes(directory: Path, env: dict[str, str], port: int) -> Iterator[TwoNodes]:
    head = start_node(
        ["--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", str(directory)],
        directory,
        "head",
        env,
    )
    try:
        second = start_node(["--address", f"127.0.0.1:{port}"], directory, "second", env)
        try:
            yield TwoNodes(f"127.0.0.1:{port}", env, head, second)
        finally:
            second.stop()
    finally:
        head.stop()


def test_a_lost_node_s_streams_move_and_every_frame_comes_once(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    streams = [f"f{i}" for i in range(4)]
    config = tmp_path / "cluster.yaml"
    out = tmp_path / "out.jsonl"
    document = {
        "cluster": {"engine": "ray", "address": two_nodes.address, "workers": 2},
        "pipelines": [
            {
                "name": "p",
                "model": {"path": str(assets.DEMO_MODEL)},
                "runtime": {"device": "cpu", "batch_size": 4},
                "sources": [
                    {"id": s, "uri": str(assets.SAMPLE_VIDEO), "end_seconds": 6.0, "realtime": True}
                    for s in streams
                ],
                "sinks": [{"type": "jsonl", "path": str(out)}],
            }
        ],
    }
    config.write_text(json.dumps(document))
    run = subprocess.Popen(
        [sys.executable, "-m", "vstream", "run", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=two_nodes.env,
    )
    try:
        wait_for(
            lambda: (
                out.exists()
                and len(got := frames_by_stream(out)) == 4
                and all(len(f) >= 10 for f in got.values())
            ),
            180,
            "every stream's first records",
        )
        os.kill(two_nodes.second.raylet(), signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=180)
    finally:
        run.kill()
    assert run.returncode == 0, stderr
    moved = re.search(r"worker \d \(pid \d+ on .*\) lost: .*; moving (\d) streams", stderr)
    assert moved and int(moved.group(1)) >= 1, stderr
    assert frames_by_stream(out) == {s: list(range(6 * FPS)) for s in streams}
    # Ray's own messages ("(raylet) ...": a worker died, a node is dead) stay in vstream's log.
    assert "(raylet)" not in stdout + stderr, stdout + stderr
    assert "Traceback" not in stderr
