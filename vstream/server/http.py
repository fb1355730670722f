"""Serving the API with uvicorn on a background thread, on a socket bound up front.

Binding the socket before uvicorn starts makes a busy port a clear error at
start-up and lets ``port: 0`` pick a free port that is then logged. The main
thread stays free for signal handling. Connections are bounded in number and
time by :mod:`vstream.server.connections`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from functools import partial

import uvicorn
from fastapi import FastAPI

from vstream.config.pipelines import ConnectionsConfig
from vstream.errors import VstreamError
from vstream.server.connections import (
    LISTEN_QUEUE,
    MAX_HEAD_BYTES,
    BoundedH11Protocol,
    Connections,
    connection_limits,
    loop_error,
    quiet_repeats,
)


class _Server(uvicorn.Server):
    """uvicorn's server with the event loop's errors reported by :func:`loop_error`.

    asyncio takes its ``backlog`` both as the ``listen()`` queue and as how
    many connections it accepts in one go: the second is kept small (each
    accepted connection holds a descriptor until it is seen), the kernel's
    queue is then deepened again, so that a burst of clients waits there
    instead of having its SYNs dropped (and retried only after seconds).
    """

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(loop_error)
        await super().startup(sockets=sockets)
        for sock in sockets or ():
            sock.listen(LISTEN_QUEUE)


class ApiServer:
    """uvicorn serving ``app`` on ``host:port`` until :meth:`stop`.

    ``connections``: ``server.connections`` (its defaults if None); the cap
    in force, :attr:`max_connections`, is lowered to what the process's
    open-file limit leaves (:func:`~vstream.server.connections.connection_limits`).
    """

    def __init__(
        self,
        app: FastAPI,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        connections: ConnectionsConfig | None = None,
    ) -> None:
        self.app = app
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self.socket = socket.create_server((host, port), family=family, reuse_port=False)
        except OSError as exc:
            raise VstreamError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.port: int = self.socket.getsockname()[1]
        bounds = connections or ConnectionsConfig()
        self.max_connections, backlog = connection_limits(bounds.max_open)
        config = uvicorn.Config(
            app,
            http=partial(BoundedH11Protocol, shared=Connections(bounds, self.max_connections)),
            ws="none",  # no route takes a WebSocket: an upgrade would escape the bounds
            backlog=backlog,
            timeout_keep_alive=bounds.idle_timeout_seconds,  # type: ignore[arg-type]  # a float
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        quiet_repeats()
        self._server = _Server(config)
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
