"""A live H.264 RTSP server for the tests: GStreamer's gst-rtsp-server.

It runs under Debian's ``/usr/bin/python3`` (python3-gi and
gir1.2-gst-rtsp-server-1.0 are Debian packages, not wheels), never inside the
project's virtualenv. It serves a moving test pattern, live, at
``rtsp://127.0.0.1:PORT/test``, prints ``ready`` once it listens, and stops on
SIGTERM or SIGINT. With ``--user``/``--password`` it requires HTTP basic
authentication, so tests can use URLs that carry credentials.
"""

from __future__ import annotations

import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

PIPELINE = (
    "( videotestsrc is-live=true pattern=ball "
    "! video/x-raw,width={width},height={height},framerate={fps}/1 "
    "! x264enc tune=zerolatency speed-preset=ultrafast key-int-max={gop} threads=1 {x264_options}"
    "! video/x-h264,stream-format={stream_format} "
    "! rtph264pay name=pay0 pt=96 config-interval={config_interval} )"
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/test")
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--gop", type=int, default=5, help="frames between key frames")
    parser.add_argument(
        "--headers-in-sdp-only",
        action="store_true",
        help="send the stream's SPS and PPS in the SDP alone, never in the stream itself, "
        "as some cameras do (by default they come in-band every second as well)",
    )
    parser.add_argument("--user")
    parser.add_argument("--password")
    return parser.parse_args()


def require_basic_auth(
    server: GstRtspServer.RTSPServer, factory: GstRtspServer.RTSPMediaFactory, user: str, pw: str
) -> None:
    """Let only ``user``/``pw`` (HTTP basic) see and play the stream."""
    auth = GstRtspServer.RTSPAuth()
    token = GstRtspServer.RTSPToken()
    token.set_string("media.factory.role", "viewer")
    auth.add_basic(GstRtspServer.RTSPAuth.make_basic(user, pw), token)
    server.set_auth(auth)
    permissions = GstRtspServer.RTSPPermissions()
    permissions.add_permission_for_role("viewer", "media.factory.access", True)
    permissions.add_permission_for_role("viewer", "media.factory.construct", True)
    factory.set_permissions(permissions)


def main() -> int:
    args = parse_args()
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    factory = GstRtspServer.RTSPMediaFactory()
    sdp_only = args.headers_in_sdp_only
    factory.set_launch(
        PIPELINE.format(
            width=args.width,
            height=args.height,
            fps=args.fps,
            gop=args.gop,
            x264_options='option-string="repeat-headers=0" ' if sdp_only else "",
            stream_format="avc" if sdp_only else "byte-stream",
            config_interval=0 if sdp_only else 1,
        )
    )
    factory.set_shared(True)
    if args.user:
        require_basic_auth(server, factory, args.user, args.password or "")
    server.get_mount_points().add_factory(args.path, factory)
    if server.attach(None) == 0:
        print(f"cannot listen on port {args.port}", file=sys.stderr, flush=True)
        return 1
    loop = GLib.MainLoop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signum, loop.quit)
    print("ready", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
