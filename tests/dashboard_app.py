"""A tiny daemon for the dashboard tests: the dashboard router, fake streams, moving frames.

The app mounts :func:`vstream.server.dashboard.dashboard_router` with a
``GET /streams`` of made-up figures behind the guard the daemon uses
(:class:`RequestGuard`: Host, Origin, Content-Type and, with a token, the
token). A :class:`Feeder` thread offers moving pictures to the hub as a
pipeline's delivery thread would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from fastapi import FastAPI

from vstream.server.auth import SessionStore
from vstream.server.dashboard import dashboard_router
from vstream.server.guard import RequestGuard
from vstream.server.http import ApiServer
from vstream.server.preview import PreviewHub


def moving_frame(i: int, width: int = 640, height: int = 360) -> torch.Tensor:
    """An RGB picture with a bright bar that moves with ``i`` over a changing background."""
    frame = torch.zeros((height, width, 3), dtype=torch.uint8)
    frame[..., 2] = (torch.arange(width) * 255 // width).to(torch.uint8)
    frame[..., 1] = (i * 37) % 200
    x = (i * 23) % (width - 40)
    frame[:, x : x + 40, 0] = 255
    return frame


class Feeder:
    """Offers a new frame of every stream ``fps`` times a second, as the pipeline does."""

    def __init__(self, hub: PreviewHub, streams: list[str], fps: float = 25.0, **size: int) -> None:
        self.hub, self.streams, self.period, self.size = hub, streams, 1.0 / fps, size
        self.produced = dict.fromkeys(streams, 0)
        """Frames the hub asked for (the callable was called): annotation work."""
        self.offers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(self.period):
            i += 1
            for sid in self.streams:
                self.offers += 1
                self.hub.offer(sid, lambda sid=sid, i=i: self._make(sid, i))

    def _make(self, sid: str, i: int) -> torch.Tensor:
        self.produced[sid] += 1
        return moving_frame(i, **self.size)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class FakeStreams:
    """What ``GET /streams`` answers, editable while the server runs."""

    streams: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {
                "id": "cam1",
                "pipeline": "yard",
                "uri": "rtsp://camera-1.local/stream",
                "state": "streaming",
                "error": None,
                "frames_decoded": 1200,
                "frames_processed": 1190,
                "frames_dropped": 10,
                "frames_detected": 400,
                "frames_predicted": 800,
                "frames_motion_skipped": 150,
                "detection_rate": 0.3333,
                "reconnects": 1,
                "fps": 24.8,
                "frame_age_seconds": 0.084,
                "lines": {"gate": {"in": 3, "out": 1}},
                "zones": {"lawn": 2},
                "attributes": {
                    "colour": {
                        "fresh": 17,
                        "cached": 40,
                        "runs": 9,
                        "seconds": 0.1234,
                        "labels": {"blue": 5, "red": 12},
                    },
                    "reid": {"fresh": 30, "cached": 0, "runs": 6, "seconds": 0.05, "labels": {}},
                },
            },
            {
                "id": "cam2",
                "pipeline": "yard",
                "uri": "file:///videos/door.mp4",
                "state": "reconnecting",
                "error": "camera-2: connection refused",
                "frames_decoded": 50,
                "frames_processed": 50,
                "frames_dropped": 0,
                "reconnects": 4,
                "fps": 0.0,
                "frame_age_seconds": None,
            },
        ]
    )

    def __call__(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self.streams]


def make_app(
    hub: PreviewHub,
    streams: FakeStreams,
    clips: Any = None,
    token: str | None = None,
    write_timeout: float = 10.0,
) -> tuple[FastAPI, SessionStore]:
    app = FastAPI()
    sessions = SessionStore(token)
    app.add_middleware(RequestGuard, sessions=sessions)

    @app.get("/streams")
    def list_streams() -> dict[str, Any]:
        return {"streams": streams()}

    app.include_router(
        dashboard_router(
            hub, clips, streams, sessions=sessions, check_every=0.2, write_timeout=write_timeout
        )
    )
    return app, sessions


@contextmanager
def serve(
    hub: PreviewHub,
    streams: FakeStreams,
    clips: Any = None,
    token: str | None = None,
    write_timeout: float = 10.0,
) -> Iterator[str]:
    """The app served by uvicorn on 127.0.0.1 (a free port); yields its base URL."""
    app, _ = make_app(hub, streams, clips, token, write_timeout)
    server = ApiServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
