"""Real servers for sink and daemon tests: mosquitto, redis-server, nginx-rtmp on 127.0.0.1.

Each server runs on a free port in the test's temporary directory, is waited
for with a deadline, and is always stopped (killed if it does not stop in
time), so a failing test never leaves one behind.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class Server:
    """A server process that can be killed and started again on the same port."""

    def __init__(self, name: str, command: list[str], port: int) -> None:
        self.name, self.command, self.port = name, command, port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if shutil.which(self.command[0]) is None:
            pytest.fail(f"{self.command[0]} is not installed (make system-deps installs it)")
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.stop()
            raise

    def kill(self) -> None:
        """Die abruptly, as a crashed broker does."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT)
            self.process = None

    @contextlib.contextmanager
    def stalled(self) -> Iterator[None]:
        """Frozen (SIGSTOP) inside the block, as a hung broker is: its port still takes
        connections and bytes, nothing answers. Always thawed (SIGCONT) on the way out."""
        assert self.process is not None, f"{self.name} is not running"
        self.process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)
        self.process = None


def mosquitto(directory: Path, users: dict[str, str] | None = None) -> Server:
    """mosquitto for anyone, or with ``users`` (name: password) for them alone."""
    port = free_port()
    conf = directory / "mosquitto.conf"
    access = "allow_anonymous true\n"
    if users:
        passwords = directory / "mosquitto.passwd"
        for name, password in users.items():
            create = [] if passwords.exists() else ["-c"]
            command = ["mosquitto_passwd", *create, "-b", str(passwords), name, password]
            subprocess.run(command, check=True, capture_output=True, timeout=START_TIMEOUT)
        # Run as whoever runs the tests (as root, mosquitto would turn into its own user,
        # who cannot read the test's private folder).
        access = f"allow_anonymous false\npassword_file {passwords}\nuser {getpass.getuser()}\n"
    conf.write_text(f"listener {port} 127.0.0.1\n{access}persistence false\nlog_dest none\n")
    return Server("mosquitto", ["mosquitto", "-c", str(conf)], port)


def redis_server(directory: Path, password: str | None = None) -> Server:
    """redis-server for anyone, or for clients that give ``password``."""
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--requirepass", password] if password else []
    command += ["--appendonly", "no", "--dir", str(directory), "--protected-mode", "yes"]
    return Server("redis", command, port)


RTMP_MODULE = Path("/usr/lib/nginx/modules/ngx_rtmp_module.so")


def nginx_rtmp(directory: Path) -> Server:
    """nginx with its RTMP module: ``rtmp://127.0.0.1:PORT/live/KEY`` is recorded to FLV.

    Each publication is recorded as ``recordings/KEY-TIMESTAMP.flv`` (``record_unique``),
    so a publisher that reconnects leaves one file per connection.
    """
    if not RTMP_MODULE.exists():
        pytest.fail(f"{RTMP_MODULE} is missing (make system-deps installs libnginx-mod-rtmp)")
    port = free_port()
    (directory / "recordings").mkdir(exist_ok=True)
    conf = directory / "nginx.conf"
    conf.write_text(
        f"load_module {RTMP_MODULE};\n"
        "daemon off;\nmaster_process off;\nworker_processes 1;\n"
        f"pid {directory}/nginx.pid;\nerror_log {directory}/nginx-error.log info;\n"
        "events { worker_connections 64; }\n"
        f"rtmp {{ server {{ listen 127.0.0.1:{port}; application live {{\n"
        f"  live on; record all; record_unique on; record_path {directory}/recordings;\n"
        "} } }\n"
    )
    command = [
        "nginx",
        "-c",
        str(conf),
        "-p",
        str(directory),
        "-e",
        str(directory / "nginx-error.log"),
    ]
    return Server("nginx", command, port)


def _running(server: Server) -> Iterator[Server]:
    """``server`` started for one test and always stopped after it."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mqtt_broker(tmp_path: Path) -> Iterator[Server]:
    yield from _running(mosquitto(tmp_path))


@pytest.fixture
def mqtt_broker_with_users(tmp_path: Path) -> Iterator[Server]:
    """mosquitto that lets in ``vstream`` with the password ``right``, and nobody else."""
    yield from _running(mosquitto(tmp_path, users={"vstream": "right"}))


@pytest.fixture
def redis_broker(tmp_path: Path) -> Iterator[Server]:
    yield from _running(redis_server(tmp_path))


@pytest.fixture
def redis_broker_with_password(tmp_path: Path) -> Iterator[Server]:
    """redis-server that takes commands only after the password ``right``."""
    yield from _running(redis_server(tmp_path, password="right"))


@pytest.fixture
def rtmp_server(tmp_path: Path) -> Iterator[Server]:
    yield from _running(nginx_rtmp(tmp_path))


@pytest.fixture
def subscribe() -> Iterator[Callable[[int], Subscriber]]:
    """Subscribers to ``vstream/#`` on a broker port, closed after the test."""
    made: list[Subscriber] = []

    def make(port: int) -> Subscriber:
        made.append(Subscriber(port))
        return made[-1]

    try:
        yield make
    finally:
        for subscriber in made:
            subscriber.close()


class Subscriber:
    """Collects every JSON message under a topic filter; re-subscribes after reconnecting."""

    def __init__(self, port: int, topic: str = "vstream/#") -> None:
        self.topic = topic
        self.messages: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
        self.client.reconnect_delay_set(1, 2)
        self.client.on_connect = lambda c, *_: c.subscribe(self.topic, qos=1)
        self.client.on_subscribe = lambda *_: self._subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect_async("127.0.0.1", port)
        self.client.loop_start()
        if not self._subscribed.wait(START_TIMEOUT):
            self.close()
            raise TimeoutError("the test subscriber could not subscribe")

    def _on_message(self, client: mqtt.Client, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append((message.topic, json.loads(message.payload)))

    def received(self) -> list[tuple[str, dict]]:
        with self._lock:
            return list(self.messages)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, dict]]:
        deadline = time.monotonic() + timeout
        while len(self.received()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.received()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
