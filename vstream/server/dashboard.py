"""The dashboard page, the live-preview and clip routes, and browser sessions.

:func:`dashboard_router` returns the routes to mount on the daemon's app:

- ``GET /``: the dashboard, one self-contained page (inline CSS and script,
  nothing fetched from elsewhere; a Content-Security-Policy says so);
- ``GET /streams/{id}/preview.mjpg`` and ``GET /streams/{id}/snapshot.jpg``;
- ``GET /clips``, ``GET /clips/{id}/video``, ``GET /clips/{id}/snapshot.jpg``;
- ``POST /session`` and ``DELETE /session``.

Media paths answer ``HEAD`` as well as ``GET``. A preview viewer that takes
no part of the stream for ``write_timeout`` seconds (a client that stopped
reading, its socket still open) is dropped and its slot freed; one that
closes its socket is gone at once. Clips are listed with names relative to
their folder, and a clip file that is a symbolic link is never served: the
file is opened without following links, checked, and served from that descriptor.

With a token configured, the page asks for it once, keeps it in the tab's
``sessionStorage`` and sends it as ``Authorization: Bearer`` on its API calls.
An ``<img>`` or ``<video>`` cannot send that header, so ``POST /session``
(with the bearer token) sets a cookie holding a random session secret, never
the token itself: ``HttpOnly`` (no script can read it), ``SameSite=Strict``
(no other site's page can make the browser send it), ``Secure`` over HTTPS.
The cookie is accepted only for ``GET``/``HEAD`` of the media routes above
(:data:`MEDIA_PATH`); every other request still needs the bearer token. The
auth middleware makes one call: :meth:`vstream.server.auth.SessionStore.allows`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import re
import stat
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from vstream.server.auth import SESSION_COOKIE, SessionStore
from vstream.server.preview import MEDIA_TYPE, PreviewHub, TooManyViewers

log = logging.getLogger(__name__)

StreamsProvider = Callable[[], Iterable[Any]]
"""Returns the streams now: their ids, or dictionaries with an ``"id"`` (as ``GET /streams``)."""
MEDIA = ["GET", "HEAD"]
"""Methods of the page and the media routes: a HEAD tells a client (a player, an uptime
probe) the type and size without the body."""
_PREVIEW_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_UNFINISHED = "ASGI callable returned without completing response"


class _AbandonedResponses(logging.Filter):
    """Hides uvicorn's error line for a preview response ended on purpose before its end.

    A viewer that takes nothing for ``write_timeout`` seconds is dropped by
    returning from its response mid-body; uvicorn then closes the connection,
    which is what is wanted, and logs that as an error. The response logs a
    line of its own, so uvicorn's is dropped, once per dropped viewer (both
    happen on the event loop's thread, one right after the other).
    """

    def __init__(self) -> None:
        super().__init__()
        self.expected = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self.expected and record.getMessage().startswith(_UNFINISHED):
            self.expected -= 1
            return False
        return True


_ABANDONED = _AbandonedResponses()
logging.getLogger("uvicorn.error").addFilter(_ABANDONED)


class MjpegResponse(StreamingResponse):
    """An MJPEG response each part of which must be taken within ``write_timeout`` seconds.

    uvicorn waits as long as it takes for a client's socket to take a part;
    a client that stops reading would hold its viewer slot for as long as it
    keeps the socket open. Past the timeout the response ends (the body
    iterator is closed, which releases the viewer) and the connection is closed.
    """

    def __init__(self, content: AsyncIterator[bytes], write_timeout: float, label: str) -> None:
        super().__init__(content, media_type=MEDIA_TYPE, headers=_PREVIEW_HEADERS)
        self.write_timeout = write_timeout
        self.label = label
        self.parts = content

    async def stream_response(self, send: Any) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})
        try:
            async for part in self.parts:
                try:
                    async with asyncio.timeout(self.write_timeout):
                        await send({"type": "http.response.body", "body": part, "more_body": True})
                except TimeoutError:
                    log.warning(
                        "%s: the viewer took nothing for %g s; dropped",
                        self.label,
                        self.write_timeout,
                    )
                    _ABANDONED.expected += 1
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.parts.aclose()  # type: ignore[attr-defined]  # an async generator


@cache
def page() -> tuple[str, str]:
    """The dashboard's HTML and its Content-Security-Policy (hashes of its inline code)."""
    html = resources.files("vstream.server").joinpath("static/dashboard.html").read_text("utf-8")

    def hashes(tag: str) -> str:
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.S)
        return " ".join(
            f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'"
            for b in blocks
        )

    policy = (
        "default-src 'none'; "
        f"script-src {hashes('script')}; style-src {hashes('style')}; "
        "img-src 'self' data:; media-src 'self'; connect-src 'self'; "
        "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    )
    return html, policy


def _open_plain(path: Path) -> int | None:
    """A read-only descriptor of ``path`` if it is a plain file, not a link; else None.

    Checked on the opened file, not on the name: a name checked and then
    opened can be swapped for a link in between (a link placed in the clips
    folder could point anywhere). ``O_NONBLOCK``: a FIFO does not wait for a writer.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


class OpenedFileResponse(FileResponse):
    """A :class:`FileResponse` of a file already opened; the descriptor is closed when sent.

    Starlette opens a path again for each part it sends; ``/proc/self/fd/N``
    reopens the very file the descriptor holds, whatever its name now is.
    """

    def __init__(self, fd: int, *, media_type: str, filename: str) -> None:
        self.fd = fd
        super().__init__(
            f"/proc/self/fd/{fd}",
            media_type=media_type,
            filename=filename,
            stat_result=os.fstat(fd),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            os.close(self.fd)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status)


def _ids(streams: Iterable[Any]) -> set[str]:
    return {str(s["id"]) if isinstance(s, Mapping) else str(s) for s in streams}


def dashboard_router(
    hub: PreviewHub,
    clips: Any | None,
    streams_provider: StreamsProvider | None,
    *,
    sessions: SessionStore | None = None,
    check_every: float = 1.0,
    write_timeout: float = 10.0,
) -> APIRouter:
    """The dashboard's routes over ``hub``, a ``ClipRecorder`` (or None) and the streams.

    ``streams_provider`` tells which stream ids exist (unknown ones get 404;
    None accepts any). ``sessions`` holds browser sessions (None: no token).
    ``check_every``: seconds between checks that an idle MJPEG client is still there.
    ``write_timeout``: seconds a preview viewer may take no part before it is dropped.
    """
    sessions = SessionStore(None) if sessions is None else sessions
    router = APIRouter()

    def known(stream_id: str) -> bool:
        return streams_provider is None or stream_id in _ids(streams_provider())

    @router.api_route("/", methods=MEDIA, include_in_schema=False)
    def dashboard() -> HTMLResponse:
        html, policy = page()
        return HTMLResponse(
            html,
            headers={
                "Content-Security-Policy": policy,
                "Cache-Control": "no-store",
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
            },
        )

    @router.api_route("/streams/{stream_id}/preview.mjpg", methods=MEDIA)
    async def preview(request: Request, stream_id: str) -> Response:
        if not known(stream_id):
            return _error(404, f"no such stream: {stream_id}")
        if request.method == "HEAD":  # no body: no viewer joins
            return Response(media_type=MEDIA_TYPE, headers=_PREVIEW_HEADERS)
        # Uvicorn tells a departed client by cancelling the response (Starlette listens for
        # the disconnect), which ends the generator and releases the viewer at once.
        jpegs = hub.mjpeg(stream_id, check_every=check_every)
        try:
            first = await anext(jpegs)  # joins now: the viewer cap answers before any header
        except TooManyViewers as exc:
            return _error(503, f"too many preview viewers: {exc}")

        async def body() -> Any:
            try:
                yield first
                async for part in jpegs:
                    yield part
            finally:
                await jpegs.aclose()

        return MjpegResponse(body(), write_timeout, f"preview of {stream_id}")

    @router.api_route("/streams/{stream_id}/snapshot.jpg", methods=MEDIA)
    async def snapshot(stream_id: str) -> Response:
        if not known(stream_id):
            return _error(404, f"no such stream: {stream_id}")
        try:
            jpeg = await hub.snapshot(stream_id)
        except TooManyViewers as exc:
            return _error(503, f"too many preview viewers: {exc}")
        if jpeg is None:
            return _error(503, f"no frame of {stream_id} yet")
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

    @router.get("/clips")
    def list_clips(stream: str | None = None) -> dict[str, Any]:
        if clips is None:
            return {"clips": [], "recording": [], "stats": None}
        listed = clips.clips(stream)
        for clip in listed:
            # Server paths stay on the server: "clip" and "snapshot" name the files in the folder.
            clip.pop("path", None)
            clip.pop("snapshot_path", None)
            base = f"/clips/{clip['id']}"
            clip["url"] = f"{base}/video" if clip.get("clip") else None
            clip["snapshot_url"] = f"{base}/snapshot.jpg" if clip.get("snapshot") else None
        recording = clips.recording(stream)
        return {"clips": listed, "recording": recording, "stats": clips.stats.to_dict()}

    def clip_file(clip_id: str, kind: str, media_type: str | None) -> Response:
        path = clips.file(clip_id, kind) if clips is not None else None
        fd = _open_plain(path) if path is not None else None
        if path is None or fd is None:
            return _error(404, f"no such clip {kind}: {clip_id}")
        if media_type is None:
            media_type = "video/mp4" if path.suffix == ".mp4" else "video/x-matroska"
        return OpenedFileResponse(fd, media_type=media_type, filename=path.name)

    @router.api_route("/clips/{clip_id}/video", methods=MEDIA)
    def clip_video(clip_id: str) -> Response:
        return clip_file(clip_id, "video", None)

    @router.api_route("/clips/{clip_id}/snapshot.jpg", methods=MEDIA)
    def clip_snapshot(clip_id: str) -> Response:
        return clip_file(clip_id, "snapshot", "image/jpeg")

    @router.post("/session")
    def open_session(request: Request) -> Response:
        if not sessions.enabled:
            return JSONResponse({"session": False, "reason": "no token is configured"})
        if not sessions.bearer_ok(request.headers.get("authorization")):
            return JSONResponse(
                {"error": "missing or wrong bearer token (Authorization: Bearer <token>)"},
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        response = JSONResponse({"session": True, "expires_in": int(sessions.max_age)})
        response.headers["Cache-Control"] = "no-store"
        sessions.set_cookie(response, sessions.create(), request.url.scheme == "https")
        return response

    @router.delete("/session")
    def close_session(request: Request) -> Response:
        sessions.revoke(request.cookies.get(SESSION_COOKIE))
        response = JSONResponse({"session": False})
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    return router
