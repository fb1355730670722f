"""The HTTP API of ``vstream serve`` (FastAPI).

Every response is JSON except ``/metrics``; every error is
``{"error": "<one clear sentence>"}`` with a fitting status. When a token is
configured, every request must carry ``Authorization: Bearer <token>``.
Stream descriptions show URIs without credentials.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from vstream import __version__
from vstream.config.loading import ConfigError
from vstream.errors import VstreamError
from vstream.metrics import CONTENT_TYPE
from vstream.runtime import PipelineNotFound, Runtime, StreamConflict, StreamNotFound
from vstream.uri import redact_uri

log = logging.getLogger("vstream.server")

MAX_BODY_BYTES = 64 * 1024


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": redact_uri(message), **extra}, status, headers=headers)


def _status_of(exc: VstreamError) -> int:
    if isinstance(exc, StreamNotFound | PipelineNotFound):
        return 404
    if isinstance(exc, StreamConflict):
        return 409
    return 400


def create_app(runtime: Runtime, token: str | None = None) -> FastAPI:
    """The API over ``runtime``; with ``token``, requests without it get 401."""
    app = FastAPI(
        title="vstream", version=__version__, docs_url=None, redoc_url=None, openapi_url=None
    )
    expected = f"Bearer {token}".encode() if token else None

    @app.middleware("http")
    async def require_token(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if expected is not None:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return error(401, "missing or wrong bearer token (Authorization: Bearer <token>)")
        return await call_next(request)

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
        lines = exc.lines()
        return error(400, "; ".join(lines), issues=lines)

    @app.exception_handler(VstreamError)
    async def refused(request: Request, exc: VstreamError) -> JSONResponse:
        status = 503 if runtime.stopping.is_set() else _status_of(exc)
        return error(status, str(exc))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return error(500, f"internal error ({type(exc).__name__}); see the server log")

    @app.get("/health")
    def health() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "stopping" if runtime.stopping.is_set() else "ok"}

    @app.get("/ready")
    def ready() -> JSONResponse:
        """Readiness: models loaded (they are, once the API is up) and every source delivering."""
        reasons = runtime.not_ready()
        if reasons:
            return JSONResponse(
                {"ready": False, "error": "not ready: " + "; ".join(reasons), "reasons": reasons},
                503,
            )
        return JSONResponse({"ready": True, "reasons": []})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(runtime.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/streams")
    def list_streams() -> dict[str, Any]:
        return {"streams": runtime.streams()}

    @app.get("/streams/{stream_id}")
    def get_stream(stream_id: str) -> dict[str, Any]:
        return runtime.stream(stream_id)

    @app.post("/streams", status_code=201)
    async def add_stream(request: Request) -> dict[str, Any]:
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            raise VstreamError(f"body too large (over {MAX_BODY_BYTES} bytes)")
        try:
            data = json.loads(body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise VstreamError(f"the body is not valid JSON: {exc}") from None
        return await run_in_threadpool(runtime.add_stream, data)

    @app.delete("/streams/{stream_id}")
    def remove_stream(stream_id: str) -> dict[str, Any]:
        return {"removed": runtime.remove_stream(stream_id)}

    return app
