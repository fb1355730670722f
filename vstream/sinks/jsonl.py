"""JSON Lines output: one record per frame, one line per record, with optional rotation."""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vstream.config.sinks import fill, unfit_output
from vstream.errors import VstreamError
from vstream.sinks.base import DeliveryError, Record, encode_records, make_parents

log = logging.getLogger("vstream.sinks")

DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
"""Write errors that pass once space is freed: retried, not a failure of the sink."""

STDOUT_WAITS = DISK_FULL | {errno.EAGAIN}
"""The same for stdout, which may also be a non-blocking pipe whose reader is behind."""


def _write_all(fd: int, data: bytes) -> tuple[int, OSError | None]:
    """Write ``data`` to ``fd`` until it is all in or a write fails (the kernel may take part
    of it first): the bytes written, and the failure."""
    view, written = memoryview(data), 0
    try:
        while written < len(view):
            written += os.write(fd, view[written:])
    except OSError as exc:
        return written, exc
    return written, None


def encode(record: Record) -> bytes:
    """One line of the file: the record's JSON and a newline."""
    return encode_records(record) + b"\n"


class JsonLinesSink:
    """Writes frame records as JSON Lines to a file or to stdout.

    Each record is written as a whole line and the stream is flushed after
    every batch, so if a run stops midway the output holds only complete
    records. A file can be rotated by size (``rotate_bytes``) and/or age
    (``rotate_seconds``): the full file becomes ``PATH.1`` (older ones shift
    to ``.2`` .. ``.keep``, the oldest is deleted) and a new ``PATH`` starts;
    rotation happens between batches, never inside a record.

    A full disk (``ENOSPC``, ``EDQUOT``) is a transient fault: the kernel
    writes what fits, then refuses, so the file is cut back to its last whole
    line and :class:`~vstream.sinks.base.DeliveryError` says how many records
    did get in; the sink retries the rest with backoff until space is freed.
    A file is written with ``os.write`` (no buffer of its own) so that what
    is in it is known to the byte; so is stdout, where a line cut off cannot be
    cut back and is finished first at the next write instead.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        append: bool = False,
        rotate_bytes: int | None = None,
        rotate_seconds: float | None = None,
        keep: int = 5,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self.keep = keep
        self.records = 0
        self._fd: int | None = None
        self._tail = b""
        """Stdout only: the rest of a line cut off by a full disk, written before anything else."""
        self._size = 0
        """Bytes of whole lines in the file: where it is cut back to after a partial write."""
        self._replaces = False
        """The file holds an earlier run's records, emptied at this run's first write: a run
        that fails before writing any (a corrupt input, a dead camera) leaves them be."""
        if self.path is not None:
            self._open(append=append)
        self._opened_at = time.monotonic()

    def _open(self, *, append: bool) -> None:
        """Open the file; refuse a device, a pipe or a kernel file (see :func:`unfit_output`).

        Checked before the open and again on what was opened, in case the name
        changed in between; ``O_NONBLOCK`` keeps a pipe put there from blocking.
        """
        assert self.path is not None
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if append else 0)
        if (why := unfit_output(self.path)) is None:
            try:
                make_parents(self.path)
                self._fd = os.open(self.path, flags, 0o666)
                self._size = os.lseek(self._fd, 0, os.SEEK_END)
            except OSError as exc:
                raise VstreamError(f"cannot write output {self.path}: {exc.strerror}") from exc
            why = unfit_output(self.path, self._fd)
        if why is not None:
            self.close()
            raise VstreamError(f"cannot write output {self.path}: {why}")
        if append and self._size:
            self._end_the_last_line()
        elif not append:
            self._replaces, self._size = self._size > 0, 0

    def _end_the_last_line(self) -> None:
        """A file appended to that ends inside a line (a run killed mid-write, or a file
        of someone else's) gets a line break first: the new records then start lines of
        their own, and the broken one stays broken alone. Its bytes are not ours to cut."""
        assert self.path is not None and self._fd is not None
        try:
            with open(self.path, "rb") as file:
                file.seek(-1, os.SEEK_END)
                if file.read(1) == b"\n":
                    return
            self._size += os.write(self._fd, b"\n")
        except OSError as exc:
            raise VstreamError(f"cannot write output {self.path}: {exc.strerror}") from exc
        log.warning(
            "%s ended inside a line (a run stopped while writing it?): "
            "a line break added before the new records",
            self.path,
        )

    def send(self, records: Sequence[Record]) -> None:
        """Write ``records``; a full disk is retried, any other failed write fails the sink.

        A reader that went away (``BrokenPipeError``) is raised as it is, so
        that ``vstream run | head`` can stop quietly.
        """
        try:
            self._write_lines(records)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise VstreamError(
                f"cannot write {self.path or 'stdout'}: {exc.strerror or exc}"
            ) from None

    def _write_lines(self, records: Sequence[Record]) -> None:
        lines = [encode(r) for r in records]
        if self.path is None:
            self._write_stdout(lines)
            return
        if self._due_for_rotation():
            self._rotate()
        assert self._fd is not None
        if self._replaces:
            self._cut(0)
            self._replaces = False
        written, failure = _write_all(self._fd, b"".join(lines))
        if failure is not None:
            if failure.errno not in DISK_FULL:
                # The sink fails and counts the whole batch lost: so the file holds none of
                # it, and never half a line (EFBIG, EIO). A cut that fails too is left be.
                with contextlib.suppress(OSError):
                    self._cut(self._size)
                raise failure
            whole, kept = self._whole_lines(lines, written)
            self._cut(self._size + kept)
            self.records += whole
            raise DeliveryError(f"cannot write {self.path}: {failure.strerror}", delivered=whole)
        self._size += written
        self.records += len(records)

    def _write_stdout(self, lines: list[bytes]) -> None:
        """``lines`` to stdout, through its file descriptor as a file is written, so that what
        got out is known to the byte (``sys.stdout``'s buffer let a full disk's partial
        write pass as written). A pipe or a redirected file cannot be cut back: a line cut
        off there is finished first at the next write, and counted as delivered. A stdout
        that is no file (replaced in-process: a test's capture, a notebook) is written as
        text."""
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            sys.stdout.write(b"".join(lines).decode())
            sys.stdout.flush()
            self.records += len(lines)
            return
        sys.stdout.flush()  # what was printed before goes first
        tail = self._tail
        written, failure = _write_all(fd, tail + b"".join(lines))
        if failure is not None:
            if failure.errno not in STDOUT_WAITS:  # a reader gone (EPIPE) among them
                raise failure
            whole = 0
            if written < len(tail):
                self._tail = tail[written:]
            else:
                whole, kept = self._whole_lines(lines, written - len(tail))
                cut = written - len(tail) - kept
                self._tail = lines[whole][cut:] if cut else b""
                whole += bool(cut)
            self.records += whole
            raise DeliveryError(f"cannot write stdout: {failure.strerror}", delivered=whole)
        self._tail = b""
        self.records += len(lines)

    @staticmethod
    def _whole_lines(lines: list[bytes], written: int) -> tuple[int, int]:
        """How many of ``lines`` fit whole in the first ``written`` bytes, and their bytes."""
        count = kept = 0
        for line in lines:
            if kept + len(line) > written:
                break
            count, kept = count + 1, kept + len(line)
        return count, kept

    def _cut(self, size: int) -> None:
        """Cut the file back to ``size`` bytes (its whole lines); the next line goes there."""
        assert self._fd is not None
        os.ftruncate(self._fd, size)
        os.lseek(self._fd, size, os.SEEK_SET)
        self._size = size

    def _due_for_rotation(self) -> bool:
        if self.rotate_bytes is not None and self._size >= self.rotate_bytes:
            return True
        return (
            self.rotate_seconds is not None
            and time.monotonic() - self._opened_at >= self.rotate_seconds
            and self._size > 0
        )

    def _rotate(self) -> None:
        assert self.path is not None and self._fd is not None
        os.close(self._fd)
        self._fd = None
        rotated = [self.path.with_name(f"{self.path.name}.{n}") for n in range(1, self.keep + 1)]
        rotated[-1].unlink(missing_ok=True)
        for older, newer in zip(reversed(rotated[1:]), reversed(rotated[:-1]), strict=True):
            if newer.exists():
                newer.rename(older)
        with contextlib.suppress(FileNotFoundError):  # moved or deleted by someone else
            self.path.rename(rotated[0])
        self._open(append=False)
        self._opened_at = time.monotonic()

    def close(self, timeout: float = 0.0) -> int:
        """Close the file; the record whose line was cut off on stdout and could not be
        finished is the one never confirmed."""
        if self.path is None:
            sys.stdout.flush()
            if self._tail:
                try:
                    self._write_stdout([])
                except (OSError, DeliveryError):
                    return 1
        elif self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if self._replaces:  # said, not warned: the run's own failure is what to read
                log.info(
                    "%s: no record written, so the records of an earlier run in it are kept",
                    self.path,
                )
        return 0

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MAX_OPEN_FILES = 64
"""Files a ``{stream}`` sink keeps open at once."""


class JsonLinesPerStream:
    """JSON Lines files, one per stream: ``{stream}`` in the path filled in with each record's.

    A pipeline's records come mixed; each run of one stream's records goes to
    that stream's :class:`JsonLinesSink` (opened at its first record, rotated
    on its own), in order, so a full disk part-way still means "the first
    ``delivered`` records of the batch got in", as for one file. At most
    :data:`MAX_OPEN_FILES` are open: beyond it the least recently written is
    closed, and appended to when its stream writes again (its age for
    ``rotate_seconds`` then counts from there), so that streams coming and going
    in a daemon never use up the process's file descriptors.
    """

    def __init__(self, template: str, pipeline: str, **options: Any) -> None:
        self.template = template
        self.pipeline = pipeline
        self.options = options
        self.files: dict[str, JsonLinesSink] = {}
        """The open files by stream, the least recently written first."""
        self._started: set[str] = set()
        """Streams whose file this sink has opened: opened again, it is appended to."""
        self._closed_records = 0
        """Records written to files closed since."""

    @property
    def records(self) -> int:
        return self._closed_records + sum(f.records for f in self.files.values())

    def send(self, records: Sequence[Record]) -> None:
        delivered = 0
        for stream, run in itertools.groupby(records, key=lambda r: str(r.get("stream", ""))):
            batch = list(run)
            sink = self.files.pop(stream, None)
            if sink is None:
                path = fill(self.template, stream=stream, pipeline=self.pipeline)
                again = {"append": True} if stream in self._started else {}
                sink = JsonLinesSink(path, **{**self.options, **again})
                self._started.add(stream)
            self.files[stream] = sink
            while len(self.files) > MAX_OPEN_FILES:
                oldest = self.files.pop(next(iter(self.files)))
                self._closed_records += oldest.records
                oldest.close()
            try:
                sink.send(batch)
            except DeliveryError as exc:
                raise DeliveryError(str(exc), delivered=delivered + exc.delivered) from None
            delivered += len(batch)

    def close(self, timeout: float = 0.0) -> int:
        for sink in self.files.values():
            sink.close()
        return 0
