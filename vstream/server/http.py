"""Serving the API with uvicorn on a background thread, on a socket bound up front.

Binding the socket before uvicorn starts makes a busy port a clear error at
start-up and lets ``port: 0`` pick a free port that is then logged. The main
thread stays free for signal handling.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from vstream.errors import VstreamError


class ApiServer:
    """uvicorn serving ``app`` on ``host:port`` until :meth:`stop`."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 8080) -> None:
        self.app = app
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self.socket = socket.create_server((host, port), family=family, reuse_port=False)
        except OSError as exc:
            raise VstreamError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.port: int = self.socket.getsockname()[1]
        config = uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="api", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _serve(self) -> None:
        self._server.run(sockets=[self.socket])

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise VstreamError(f"the API server did not start on {self.url}")
            time.sleep(0.02)

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self.socket.close()
