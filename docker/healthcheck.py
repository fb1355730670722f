"""The GPU image's health check: ask the running ``vstream serve`` whether it answers.

``GET /health`` on the container's own port, with ``VSTREAM_API_TOKEN`` as the
bearer token where it is set (the shipped configs' ``server.token``; beyond
loopback a token is required): healthy when it answers ``{"status": "ok"}``.
Unhealthy when it does not answer, answers ``stopping``, fails (503 with the
error where a pipeline has failed for good: a restart mends it), or refuses
the token (401: taken for an answer, it hid every failure behind the token).
Standard library only, one request: nothing of the GPU is touched.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

URL = f"http://127.0.0.1:{os.environ.get('VSTREAM_PORT', '8080')}/health"


def main() -> int:
    token = os.environ.get("VSTREAM_API_TOKEN", "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(URL, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status = json.load(response).get("status")
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            sent = "VSTREAM_API_TOKEN" if token else "no token (VSTREAM_API_TOKEN is not set)"
            print(f"unhealthy: {URL} answered 401: the check sent {sent}", file=sys.stderr)
            return 1
        try:
            why = f": {json.load(exc)['error']}"
        except (OSError, ValueError, TypeError, KeyError):
            why = ""
        print(f"unhealthy: {URL} answered {exc.code}{why}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {URL}: {exc}", file=sys.stderr)
        return 1
    if status != "ok":
        print(f"unhealthy: {URL} says {status!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
