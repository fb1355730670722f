"""The HTTP API of ``vstream serve`` (FastAPI).

Every response is JSON except ``/metrics``; every error is
``{"error": "<one clear sentence>"}`` with a fitting status. Before a route
sees a request, :class:`~vstream.server.guard.RequestGuard` checks ``Host``,
``Origin``, the body's ``Content-Type`` and, when a token is configured,
``Authorization: Bearer <token>`` (the scheme in any case). Request bodies
are bounded while they are read, and JSON nesting before it is parsed;
stream descriptions never show credentials.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vstream import __version__
from vstream.config.loading import ConfigError
from vstream.engine.errors import (
    PipelineFailed,
    PipelineNotFound,
    ShuttingDown,
    StreamConflict,
    StreamNotFound,
)
from vstream.engine.interface import StreamEngine
from vstream.errors import LimitExceeded, VstreamError, describe
from vstream.metrics import CONTENT_TYPE
from vstream.server.auth import SessionStore, bearer_token  # noqa: F401 - part of the API module
from vstream.server.dashboard import dashboard_router
from vstream.server.guard import RequestGuard, error
from vstream.server.preview import PreviewHub
from vstream.server.requests import stream_request
from vstream.uri import redact

log = logging.getLogger("vstream.server")


class BodyTooLarge(VstreamError):
    """The request body is over ``server.max_body_bytes`` (413)."""


_STATUS: tuple[tuple[type[VstreamError], int], ...] = (
    (StreamNotFound, 404),
    (PipelineNotFound, 404),
    (StreamConflict, 409),
    (BodyTooLarge, 413),
    (LimitExceeded, 429),
    (ShuttingDown, 503),
    (PipelineFailed, 503),
)


def _status_of(exc: VstreamError) -> int:
    return next((status for kind, status in _STATUS if isinstance(exc, kind)), 400)


def json_depth(body: bytes) -> int:
    """How deeply arrays and objects nest in ``body``, counted without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused as soon as it is known to be over ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the body is over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class InternalErrors:
    """ASGI middleware: an exception no handler took is logged in one line and answered 500.

    Starlette's own handler for ``Exception`` sits outside every middleware and
    raises the exception again once it has answered, for the server to log:
    uvicorn then writes a traceback ("Exception in ASGI application") and
    closes the connection, keep-alive or not. Here it goes no further. A
    response already begun (a preview's stream) can only be cut short.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            log.error("%s %s failed: %s", scope["method"], scope["path"], describe(exc))
            if not started:
                message = f"internal error ({type(exc).__name__}); see the server log"
                await error(500, message)(scope, receive, send)


def create_app(engine: StreamEngine, token: str | None = None) -> FastAPI:
    """The API and the dashboard over ``engine``; with ``token``, requests without it get 401.

    ``engine`` runs the pipelines in this process, or places their streams on
    the workers of a cluster: the same interface (:class:`StreamEngine`).

    The live-preview hub is ``app.state.preview``: close it before stopping the
    server, so that open MJPEG responses end at once.
    """
    app = FastAPI(
        title="vstream", version=__version__, docs_url=None, redoc_url=None, openapi_url=None
    )
    server = engine.config.server
    sessions = SessionStore(token)
    preview = server.preview
    hub = PreviewHub(
        max_fps=preview.max_fps,
        max_width=preview.max_width,
        quality=preview.quality,
        max_viewers=preview.max_viewers,
    )
    engine.attach_preview(hub)
    app.state.preview = hub

    app.add_middleware(RequestGuard, sessions=sessions, allowed_hosts=server.allowed_hosts)
    app.add_middleware(InternalErrors)  # added last: outside the guard, so it answers for it too

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no such endpoint: {request.url.path}"}.get(exc.status_code)
        if exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        return error(exc.status_code, message or str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(400, f"bad request: {exc.errors()[0].get('msg', 'invalid input')}")

    @app.exception_handler(ConfigError)
    async def bad_source(request: Request, exc: ConfigError) -> JSONResponse:
        lines = [redact(line) for line in exc.lines()]
        return error(400, "; ".join(lines), issues=lines)

    @app.exception_handler(VstreamError)
    async def refused(request: Request, exc: VstreamError) -> JSONResponse:
        status = 503 if engine.stopping.is_set() else _status_of(exc)
        return error(status, str(exc))

    @app.exception_handler(ClientDisconnect)
    async def gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client left while its body was read, or was cut off at the body timeout (and
        # answered 408 then): nobody to answer, and nothing wrong with the server to log.
        return Response(status_code=400)

    @app.get("/health")
    def health() -> JSONResponse:
        """Liveness: the process answers, and nothing in it is broken for good (a pipeline
        whose stages died takes no frame again: a restart is what mends it)."""
        if engine.stopping.is_set():
            return JSONResponse({"status": "stopping"})
        if broken := engine.broken():
            return JSONResponse({"status": "failed", "error": "; ".join(broken)}, 503)
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    def ready() -> JSONResponse:
        """Readiness: models loaded (they are, once the API is up) and every source delivering."""
        reasons = engine.not_ready()
        if reasons:
            return JSONResponse(
                {"ready": False, "error": "not ready: " + "; ".join(reasons), "reasons": reasons},
                503,
            )
        return JSONResponse({"ready": True, "reasons": []})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(engine.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/streams")
    def list_streams() -> dict[str, Any]:
        return {"streams": [s.to_json() for s in engine.streams()]}

    @app.get("/streams/{stream_id}")
    def get_stream(stream_id: str) -> dict[str, Any]:
        return engine.stream(stream_id).to_json()

    @app.post("/streams", status_code=201)
    async def add_stream(request: Request) -> dict[str, Any]:
        body = await read_body(request, server.max_body_bytes)
        if json_depth(body) > server.max_json_depth:
            raise VstreamError(f"the JSON body nests deeper than {server.max_json_depth} levels")
        try:
            data = json.loads(body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise VstreamError(f"the body is not valid JSON: {exc}") from None
        except ValueError as exc:  # an integer of over 4300 digits, Python's limit
            raise VstreamError(f"the body cannot be read: {str(exc).split(';')[0]}") from None
        pipeline, source = stream_request(data, engine.config, engine.base_dir)
        added = await run_in_threadpool(engine.add_stream, pipeline, source)
        return added.to_json()

    @app.delete("/streams/{stream_id}")
    def remove_stream(stream_id: str) -> dict[str, Any]:
        return {"removed": engine.remove_stream(stream_id).to_json()}

    app.include_router(
        dashboard_router(
            hub,
            engine.clips(),
            lambda: [s.id for s in engine.streams()],
            sessions=sessions,
            write_timeout=preview.write_timeout_seconds,
        )
    )
    return app
