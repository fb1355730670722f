"""What every request passes before it reaches a route: Host, Origin, Content-Type, the token.

A daemon on 127.0.0.1 without a token is still reachable from a browser: a
page of any site (or of another local port) can send it requests, and by DNS
rebinding (a name of the attacker's that resolves to 127.0.0.1) even read the
answers. So, in this order:

1. ``Host`` must name this server: ``127.0.0.1``, ``localhost``, ``[::1]`` or
   the address the client connected to, with the listening port, or an entry
   of ``server.allowed_hosts`` (``name`` for any port, ``name:port``, ``*``
   for any). A rebinding page sends its own name: 400.
2. ``Origin``, when a browser sends one, must be this same origin (scheme,
   name and port of ``Host``) or an allowed host, and ``Sec-Fetch-Site``,
   when sent, ``same-origin`` or ``none``: a page of another site or port
   gets 403, even for an ``<img>``.
3. A ``POST``, ``PUT``, ``PATCH`` or ``DELETE`` with a body must say
   ``Content-Type: application/json`` (415): a form or a ``no-cors`` fetch
   can only send ``text/plain``, form or multipart bodies.
4. The bearer token (or a session cookie for media), when one is configured:
   401 (:meth:`vstream.server.auth.SessionStore.allows`).

It is plain ASGI rather than an ``@app.middleware``: that wrapper would pass
every response through a queue of its own, and a preview's write timeout
could not see the client's socket behind it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from vstream.server.auth import SessionStore
from vstream.uri import redact

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
"""Names a client on this host reaches a loopback listener by."""
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SAFE_FETCH_SITES = frozenset({"same-origin", "none"})
"""``Sec-Fetch-Site`` values of the dashboard's own requests and of an address typed in."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str, default_port: int) -> tuple[str, int] | None:
    """``name[:port]`` or ``[v6][:port]`` as (lower-case name, port); None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name += "]"
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    name = name.rstrip(".")
    if not name or any(c.isspace() or c in "/@?#" for c in name):
        return None
    if not rest:
        return name, default_port
    digits = rest[1:]
    if not rest.startswith(":") or not digits.isdigit() or not 0 < int(digits) < 65536:
        return None
    return name, int(digits)


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    """The API's error response: ``{"error": "<one clear sentence>"}``, credentials masked."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if status == 413:
        # The rest of the body is never read: close the connection instead of draining it.
        headers["Connection"] = "close"
    return JSONResponse({"error": redact(message), **extra}, status, headers=headers or None)


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class RequestGuard:
    """ASGI middleware applying the checks of this module before ``app`` sees a request.

    ``allowed_hosts``: ``server.allowed_hosts``. ``sessions``: who holds the token.
    """

    def __init__(
        self, app: ASGIApp, *, sessions: SessionStore, allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.sessions = sessions
        self.allowed_hosts = frozenset(h.lower().rstrip(".") for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.check(Request(scope))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        await error(status, message)(scope, receive, send)

    def check(self, request: Request) -> tuple[int, str] | None:
        """(status, message) when ``request`` is refused, else None."""
        default_port = _DEFAULT_PORTS.get(request.url.scheme, 80)
        host_header = request.headers.get("host")
        if host_header is None:
            return 400, "the Host header is missing"
        host = split_host(host_header, default_port)
        if host is None or not self._allowed_host(host, request):
            return 400, self._host_message(host_header, request)
        refusal = self._cross_site(request, host)
        if refusal is not None:
            return 403, refusal
        if request.method in BODY_METHODS and _has_body(request):
            media_type = request.headers.get("content-type", "").partition(";")[0].strip()
            if media_type.lower() != "application/json":
                return 415, "a request body must be JSON (Content-Type: application/json)"
        if not self.sessions.allows(request):
            return 401, "missing or wrong bearer token (Authorization: Bearer <token>)"
        return None

    def _listening(self, request: Request) -> tuple[str | None, int | None]:
        server = request.scope.get("server") or (None, None)
        return server[0], server[1]

    def _listed(self, name: str, port: int) -> bool:
        allowed = self.allowed_hosts
        return "*" in allowed or name in allowed or f"{name}:{port}" in allowed

    def _allowed_host(self, host: tuple[str, int], request: Request) -> bool:
        name, port = host
        address, listening_port = self._listening(request)
        local = {*LOOPBACK_NAMES, _bracketed(address).lower()} if address else LOOPBACK_NAMES
        return (name in local and port == listening_port) or self._listed(name, port)

    def _host_message(self, value: str, request: Request) -> str:
        _, port = self._listening(request)
        shown = value if len(value) <= 100 else value[:97] + "..."
        return (
            f"Host {shown!r} is not this server: reach it as 127.0.0.1, localhost or [::1] on "
            f"port {port}, or list the name in server.allowed_hosts"
        )

    def _cross_site(self, request: Request, host: tuple[str, int]) -> str | None:
        """Why a request that a page of another origin made is refused; None if it is not."""
        site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin.strip())
            scheme = parts.scheme.lower()
            claimed = split_host(parts.netloc, _DEFAULT_PORTS.get(scheme, 0)) if scheme else None
            same = claimed == host and scheme == request.url.scheme
            if not same and (claimed is None or not self._listed(*claimed)):
                shown = origin if len(origin) <= 100 else origin[:97] + "..."
                return f"cross-origin request refused: Origin {shown!r} is not this server"
        elif site is not None and site.lower() not in SAFE_FETCH_SITES:
            return f"cross-site request refused (Sec-Fetch-Site: {site[:20]})"
        return None


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in request.headers
