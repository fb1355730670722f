"""How far behind its camera a live stream is being read.

A camera sends a picture every frame period whether or not it is read. When
decoding is slower than the camera (many cameras on a small CPU), the packets
wait in the socket and in FFmpeg's buffers, and each is read later than the
last: the stream falls behind by seconds while every packet, once read, looks
fresh. The stream's own clock shows it. A packet's read time minus its time
stamp is constant while the stream keeps up (up to network jitter), and grows
by what it falls behind; the smallest value over the last
:data:`WINDOW_SECONDS` is the stream's offset when it kept up, so the backlog
of a packet is how far its value lies above that.

The window forgets the past on purpose, but slowly: a camera's clock drifts
against ours (100 ppm is 6 ms a minute), so the smallest offset that leaves
the window is kept, rising by at most :data:`MAX_DRIFT` a second from there.
A drift stays within that; a backlog that grows faster, however slowly (a
stream decoded at 97 % of its camera's pace falls 1.8 s behind a minute), is
never forgotten. A time stamp going back by more than
:data:`STEP_BACK_SECONDS` is the camera's clock restarting, not a delay: the
measure starts again. So does a backlog that skipping cannot bring down
(:class:`CatchUp`): a camera whose clock runs slower than ours by more than
the drift allowed; its pace is learnt then (:attr:`CatchUp.clock_lag`), so that
it is not misjudged again and again.

The demuxer measures it once a packet (:class:`~vstream.decoders.demux.Demuxer`):
handed along with each picture, it ages the frames (:mod:`vstream.sources.live`);
bounded, it is skipped (:class:`CatchUp`): a stream that has fallen too far behind drops
the packets waiting for it, undecoded and counted, up to a key frame read in
step with its camera again, since decoding can only start again at a key frame.
Reading without decoding is fast, so the wait drains quickly; what a stream
loses is its backlog and the rest of that key frame's group of pictures. An
open group's key frame (HEVC's CRA) may have leading pictures: read after it,
shown before it, some (RASL) referring to pictures of the group skipped. They
are skipped too, counted: FFmpeg's decoder would drop them without a word, and
a decoder that did not would show them from the wrong references. For the same
reason a live stream's packets before its first key frame are skipped and counted
(a camera is joined between key frames, at each reconnection too).
"""

from __future__ import annotations

from collections import deque

WINDOW_SECONDS = 60.0
"""How long the offset of a stream keeping up is remembered."""

STEP_BACK_SECONDS = 1.0
"""A time stamp this far before the latest is a restarted clock, not a packet read late."""

MAX_DRIFT = 0.001
"""How fast (seconds a second) the offset of a stream keeping up may rise once it has left
the window: ten times a poor camera clock's drift against ours (100 ppm)."""

MAX_PACE = 2.0
"""The slowest camera clock allowed for (:meth:`Backlog.restart`): one running at half the
pace of ours, a camera stamping 15 frames a second as 30. A stream falling behind faster
than that is no clock's doing."""

WARN_SECONDS = 1.0
"""Behind by this much, for :data:`WARN_AFTER_SECONDS` of reading: the log says so."""

WARN_AFTER_SECONDS = 3.0
"""How long a backlog lasts before it is told: a camera that sends the pictures it holds
when a client connects (a burst, caught up within a second) is not falling behind."""


class Backlog:
    """The backlog of a live stream's packets, one connection's worth (the module's docstring).

    :meth:`behind` takes each packet's read time (``time.time()``) and time stamp
    (seconds, the stream's clock), in the order the packets come. A second of the
    stream's clock is taken to last :attr:`pace` seconds of ours: 1 until a camera whose
    clock runs slow is found out (:meth:`restart`).
    """

    def __init__(self, window_seconds: float = WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self._offsets: deque[tuple[float, float]] = deque()
        """``(read time, read time - time stamp)`` with offsets rising from the front: the
        front is the smallest offset within the window."""
        self._latest_pts = -float("inf")
        self._latest_read = -float("inf")
        """The latest read time seen (the wall clock may step back)."""
        self._expired: tuple[float, float] | None = None
        """``(read time, offset)`` of the smallest offset to have left the window: the floor
        from there rises by :data:`MAX_DRIFT` a second at most."""
        self.pace = 1.0

    def restart(self, clock_lag: float = 0.0) -> None:
        """Measure from the next packet on, as if the stream started there; a second of the
        stream's clock lasting ``clock_lag`` seconds of ours more than it did
        (:attr:`CatchUp.clock_lag`), up to :data:`MAX_PACE`."""
        if clock_lag < 0:
            raise ValueError(f"clock_lag must be 0 or more, got {clock_lag!r}")
        self.pace = min(MAX_PACE, self.pace + clock_lag)
        self._offsets.clear()
        self._expired = None

    def behind(self, read_time: float, pts_seconds: float) -> float:
        """Seconds this packet was read later than the stream's pace allows (0 when in step)."""
        if pts_seconds < self._latest_pts - STEP_BACK_SECONDS:
            self.restart()  # the camera's clock started again
            self._latest_pts = pts_seconds
        else:
            self._latest_pts = max(self._latest_pts, pts_seconds)
        self._latest_read = max(self._latest_read, read_time)
        offset = read_time - pts_seconds * self.pace
        offsets = self._offsets
        while offsets and offsets[-1][1] >= offset:
            offsets.pop()
        offsets.append((read_time, offset))
        while offsets[0][0] < self._latest_read - self.window_seconds and len(offsets) > 1:
            read, old = offsets.popleft()
            if self._expired is None or old < self._drifted(read):
                self._expired = (read, old)
        floor = offsets[0][1]
        if self._expired is not None:
            floor = min(floor, self._drifted(read_time))
        return offset - floor

    def _drifted(self, read_time: float) -> float:
        """The floor the expired offset allows at ``read_time``."""
        assert self._expired is not None
        read, offset = self._expired
        return offset + MAX_DRIFT * max(0.0, read_time - read)


KEY_FRAME_WAIT_SECONDS = 10.0
"""How much of the stream :class:`CatchUp` skips waiting for a key frame (caught up, or at the
stream's start) before it lets decoding start without one: a stream may have none (intra
refresh), and its decoder then recovers as the refresh sweeps the picture, which is better
than nothing."""

MISJUDGED_AFTER = (2.0, 1.0)
"""``(factor, seconds)``: a catch-up that has skipped more of the stream than ``factor`` times
the backlog it started from, plus ``seconds``, and is still behind at a key frame, is
skipping no backlog (a backlog drains as fast as packets are read undecoded, much faster
than the camera sends them): the stream's clock runs slower than ours. Decoding starts
again there, and the backlog is measured afresh (:attr:`CatchUp.misjudged`), at the clock's
pace learnt from the episode (:attr:`CatchUp.clock_lag`)."""

LAG_SPAN_SECONDS = 0.25
"""The span of the stream in which a misjudged catch-up keeps the packet read least late,
to learn the camera clock's pace from (:attr:`CatchUp.clock_lag`)."""

KEY_FRAME_WAIT_PACKETS = 1000
"""The same wait at a stream's start, in packets: the bound where packets have no time
stamps."""


class CatchUp:
    """Skips a live stream's packets once it has fallen ``max_behind_seconds`` behind its
    camera (None: never), up to the first key frame read within half of that (the module's
    docstring); with ``wait_for_key_frame``, also those before the stream's first key frame.

    A live stream is joined where its camera is, mostly between two key frames: the
    packets before the first refer to pictures never received. FFmpeg's decoder drops them
    without a word; a decoder that did not would show pictures decoded from nothing. So they
    are skipped here, counted, for every decoder alike.

    :meth:`skip` takes each packet as it is read, in the stream's order, with its backlog
    (:meth:`Backlog.behind`); :attr:`skipped` counts those it said to skip (each a picture
    never decoded), :attr:`episodes` the times the stream fell behind the limit, and
    :attr:`misjudged` those of them that skipping could not end (:data:`MISJUDGED_AFTER`):
    the owner of the :class:`Backlog` restarts it then, with :attr:`clock_lag`.
    """

    def __init__(
        self, max_behind_seconds: float | None, *, wait_for_key_frame: bool = False
    ) -> None:
        if max_behind_seconds is not None and not max_behind_seconds > 0:
            raise ValueError(f"max_behind_seconds must be above 0, got {max_behind_seconds!r}")
        self.max_behind_seconds = max_behind_seconds
        self.waiting = wait_for_key_frame
        """Before the stream's first key frame."""
        self.skipping = False
        self.skipped = 0
        self.episodes = 0
        self.misjudged = 0
        self.clock_lag = 0.0
        """How much the backlog grew a second of the stream's clock, in the last misjudged
        episode once any backlog it started from had been read: how much longer than a
        second of ours a second of the camera's clock lasts, less what the backlog already
        allowed for (see :meth:`Backlog.restart`). The slope of the packets read least late
        (:attr:`_lows`), over at least ``max_behind_seconds`` and half a second of the stream;
        a clock still found slow later is learnt again, more closely."""
        self._episode: tuple[float, float] | None = None
        """While skipping: the time stamp and the backlog the episode started at."""
        self._lows: list[tuple[float, float]] = []
        """While skipping, from where any backlog the episode started from could have been
        read: the time stamp and backlog of the packet read least behind in each
        :data:`LAG_SPAN_SECONDS` of the stream (the clock's slope is theirs: a packet is read
        late by the network's jitter, never early)."""
        self._in_step_since: float | None = None
        """While skipping: the time stamp of the first packet read within half the limit."""
        self._waiting_since: float | None = None
        """While waiting: the time stamp of the stream's first packet that had one."""
        self._waited = 0
        self._resumed_at: float | None = None
        """The time stamp of the key frame decoding started again at, until a packet after it
        in time ends its leading pictures (none may follow one that is not: HEVC's rule)."""

    def skip(self, pts_seconds: float | None, behind_seconds: float, key_frame: bool) -> bool:
        """Whether the packet with this time stamp (seconds; None: the stream gave it none),
        read ``behind_seconds`` behind the camera's pace, is to be dropped undecoded."""
        if self.waiting:
            return self._wait(pts_seconds, key_frame)
        if pts_seconds is None:  # no pace to measure: skipped with its neighbours
            if self.skipping and key_frame:  # nor whether it caught up: decoding starts here
                self.skipping, self._resumed_at = False, None
                return False
            drop = self.skipping or self._resumed_at is not None
            self.skipped += drop
            return drop
        if self._resumed_at is not None:
            if self._resumed_at - STEP_BACK_SECONDS < pts_seconds < self._resumed_at:
                self.skipped += 1  # a leading picture of the key frame resumed at
                return True
            self._resumed_at = None
        limit = self.max_behind_seconds
        if not self.skipping:
            if limit is None or behind_seconds <= limit:
                return False
            self.skipping, self._in_step_since = True, None
            self._episode, self._lows = (pts_seconds, behind_seconds), []
            self.episodes += 1
            self.skipped += 1
            return True
        assert limit is not None  # only a limit starts a catch-up
        if self._could_have_drained(pts_seconds):
            self._note_low(pts_seconds, behind_seconds)
        if key_frame and behind_seconds > limit / 2 and self._skipped_in_vain(pts_seconds):
            self.skipping, self._resumed_at = False, pts_seconds
            self.misjudged += 1
            self.clock_lag = self._lag()
            return False
        if behind_seconds <= limit / 2:
            if self._in_step_since is None:
                self._in_step_since = pts_seconds
            if key_frame or pts_seconds - self._in_step_since > KEY_FRAME_WAIT_SECONDS:
                self.skipping = False
                self._resumed_at = pts_seconds if key_frame else None
                return False
        self.skipped += 1
        return True

    def _could_have_drained(self, pts_seconds: float) -> bool:
        """Whether the episode has skipped past the backlog it started from, and half of
        :data:`MISJUDGED_AFTER`'s margin."""
        assert self._episode is not None
        since, behind = self._episode
        return pts_seconds - since > behind + MISJUDGED_AFTER[1] / 2

    def _skipped_in_vain(self, pts_seconds: float) -> bool:
        """Whether the episode has skipped past any backlog it started from (see
        :data:`MISJUDGED_AFTER`)."""
        assert self._episode is not None
        since, behind = self._episode
        factor, seconds = MISJUDGED_AFTER
        return pts_seconds - since > factor * behind + seconds

    def _note_low(self, pts_seconds: float, behind_seconds: float) -> None:
        lows = self._lows
        if not lows or pts_seconds - lows[-1][0] >= LAG_SPAN_SECONDS:
            lows.append((pts_seconds, behind_seconds))
        elif behind_seconds < lows[-1][1]:
            lows[-1] = (pts_seconds, behind_seconds)

    def _lag(self) -> float:
        """The slope (least squares) of the episode's :attr:`_lows` (:attr:`clock_lag`)."""
        lows = self._lows
        if len(lows) < 2:
            return 0.0
        mean_pts = sum(pts for pts, _ in lows) / len(lows)
        mean_behind = sum(behind for _, behind in lows) / len(lows)
        spread = sum((pts - mean_pts) ** 2 for pts, _ in lows)
        if spread <= 0:
            return 0.0
        slope = sum((pts - mean_pts) * (behind - mean_behind) for pts, behind in lows) / spread
        return max(0.0, slope)

    def _wait(self, pts_seconds: float | None, key_frame: bool) -> bool:
        """:meth:`skip` before the stream's first key frame (a burst at the start is no
        backlog: whether the stream is behind is not asked yet)."""
        if pts_seconds is not None and self._waiting_since is None:
            self._waiting_since = pts_seconds
        waited_long = self._waited >= KEY_FRAME_WAIT_PACKETS or (
            pts_seconds is not None
            and self._waiting_since is not None
            and pts_seconds - self._waiting_since > KEY_FRAME_WAIT_SECONDS
        )
        if key_frame or waited_long:
            self.waiting = False
            self._resumed_at = pts_seconds if key_frame else None
            return False
        self._waited += 1
        self.skipped += 1
        return True
