"""Who may call the API: the bearer token, and browser sessions for the dashboard's media.

Every request needs ``Authorization: Bearer <token>`` when a token is
configured (the scheme in any case, as RFC 7235 says). An ``<img>`` or
``<video>`` cannot send that header, so ``POST /session`` (with the token)
sets a cookie holding a random session secret, never the token itself, which
opens only ``GET``/``HEAD`` of the media paths (:data:`MEDIA_PATH`). The auth
middleware makes one call: :meth:`SessionStore.allows`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict

from fastapi import Request, Response

SESSION_COOKIE = "vstream_session"
PUBLIC_PATHS = frozenset({"/"})
"""Paths served without any credentials: the page itself, which holds no data."""
MEDIA_PATH = re.compile(
    r"^/(streams/[^/]+/(preview\.mjpg|snapshot\.jpg)|clips/[^/]+/(video|snapshot\.jpg))$"
)
"""Paths a session cookie may open (GET/HEAD only): what ``<img>``/``<video>`` load."""


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; the scheme in any case."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class SessionStore:
    """Browser sessions for a daemon with a bearer ``token`` (no token: nothing to check).

    Secrets are random (256 bits), kept only as SHA-256 digests, expire after
    ``max_age`` seconds, and at most ``max_sessions`` live at once (the oldest
    is dropped first).
    """

    def __init__(
        self, token: str | None, *, max_age: float = 12 * 3600, max_sessions: int = 64
    ) -> None:
        self.token = token or None
        self.max_age = float(max_age)
        self.max_sessions = int(max_sessions)
        self._expected = token.encode() if token else None
        self._sessions: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.token is not None

    def bearer_ok(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries the token (constant time)."""
        if self._expected is None:
            return True
        given = bearer_token(authorization or "") or ""
        return hmac.compare_digest(given.encode(), self._expected)

    def create(self) -> str:
        """A new session secret (for the cookie)."""
        secret = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            self._sessions[_digest(secret)] = now + self.max_age
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return secret

    def valid(self, secret: str | None) -> bool:
        """Whether ``secret`` is a live session."""
        if not secret:
            return False
        now = time.monotonic()
        with self._lock:
            expires = self._sessions.get(_digest(secret))
            if expires is None:
                return False
            if expires <= now:
                del self._sessions[_digest(secret)]
                return False
            return True

    def revoke(self, secret: str | None) -> None:
        if secret:
            with self._lock:
                self._sessions.pop(_digest(secret), None)

    def __len__(self) -> int:
        return len(self._sessions)

    def _expire(self, now: float) -> None:
        for key in [k for k, expires in self._sessions.items() if expires <= now]:
            del self._sessions[key]

    def allows(self, request: Request) -> bool:
        """Whether the auth middleware lets ``request`` through: the one call it needs.

        True when no token is configured, when ``Authorization: Bearer <token>``
        is right, for ``GET``/``HEAD /`` (the page, holding no data), and for
        ``GET``/``HEAD`` of a media path (:data:`MEDIA_PATH`) with a live
        session cookie. Works for Starlette's ``Request`` and anything with
        ``method``, ``url.path``, ``headers`` and ``cookies``.
        """
        if self._expected is None:
            return True
        if self.bearer_ok(request.headers.get("authorization")):
            return True
        if request.method not in ("GET", "HEAD"):
            return False
        path = request.url.path
        if path in PUBLIC_PATHS:
            return True
        return bool(MEDIA_PATH.match(path)) and self.valid(request.cookies.get(SESSION_COOKIE))

    def set_cookie(self, response: Response, secret: str, secure: bool) -> None:
        response.set_cookie(
            SESSION_COOKIE,
            secret,
            max_age=int(self.max_age),
            path="/",
            httponly=True,
            samesite="strict",
            secure=secure,
        )


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
