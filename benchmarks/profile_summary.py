"""Where a process's threads spend their time, from py-spy's raw stacks (``-f raw --threads``).

``gpu_scale.sh profile`` samples one process of 32 streams with py-spy: the thread holding
the GIL (``gil32.txt``), every busy thread (``cpu32.txt``) and, with ``--native``, every
thread with its native frames (``native32.txt``). This prints, per kind of thread (``reader``
for all the readers, ``postprocess-detect``, ...), what its samples were doing:

- ``waiting for the GIL``: runnable, but another thread holds the interpreter;
- ``waiting``: blocked on a lock, a condition, a queue, a sleep or I/O (idle);
- ``running <library>``: in native code of that library (``libnvcuvid``: NVDEC's parser,
  ``libcuda``: the driver, ``libtorch_cuda``, ``libonnxruntime``, ``libpython``: the
  interpreter itself);
- ``running Python``: a Python frame at the top (stacks without native frames);

then the innermost vstream functions of its running samples. Usage::

    python benchmarks/profile_summary.py native32.txt [--top 8]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

WAITING_FOR_THE_GIL = (
    "take_gil",
    "PyEval_RestoreThread",
    "PyEval_AcquireThread",
    "PyGILState_Ensure",
    "pybind11::gil_scoped_acquire",
    "pthread_cond_timedwait",
)
"""The innermost named frames of a thread that wants the GIL back. CPython's ``take_gil`` is
often inlined away, leaving its ``pthread_cond_timedwait``: in a Python thread here the GIL
is the one timed condition wait (Python's own locks wait on semaphores)."""
WAITING = (
    "PyThread_acquire_lock_timed",
    "lock_PyThread_acquire_lock",
    "sem_clockwait",
    "sem_timedwait",
    "sem_wait",
    "pthread_cond_wait",
    "time_sleep",
    "select",
    "poll",
    "epoll_wait",
    "__futex",
)
"""The innermost named frames of a blocked thread: Python's locks and conditions, sleeps, I/O."""
THREAD = re.compile(r"^thread \(\d+\): (?P<name>.*)$")
NATIVE = re.compile(r"\((?P<library>[^():]+\.so[^():]*)\)$")


def thread_kind(frame: str) -> str:
    """``reader-cam7`` -> ``reader``; other names as they are (``postprocess-detect``)."""
    match = THREAD.match(frame)
    name = match["name"] if match else frame
    return "reader" if name.startswith("reader-") else name


def state(frames: list[str]) -> str:
    """What a sample's stack was doing (see the module docstring), by its innermost named
    frame (frames that are bare addresses, libc's internals, are passed over)."""
    for frame in reversed(frames):
        if frame.startswith("0x"):
            continue
        if frame.startswith(WAITING_FOR_THE_GIL):
            return "waiting for the GIL"
        if frame.startswith(WAITING):
            return "waiting"
        break
    library = NATIVE.search(frames[-1])
    if library is None:
        return "running Python"
    return f"running {Path(library['library']).name.split('.so')[0].split('.cpython')[0]}"


def ours(frames: list[str]) -> str | None:
    """The innermost vstream frame of a stack, without its line number."""
    for frame in reversed(frames):
        if "vstream/" in frame:
            return frame.rsplit(":", 1)[0] + ")"
    return None


def summarise(path: Path, top: int) -> str:
    states: dict[str, Counter[str]] = defaultdict(Counter)
    where: dict[str, Counter[str]] = defaultdict(Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        kind, doing = thread_kind(frames[0]), state(frames[1:] or frames)
        states[kind][doing] += int(count)
        if doing.startswith("running") and (frame := ours(frames)) is not None:
            where[kind][frame] += int(count)
    total = sum(sum(c.values()) for c in states.values())
    lines = [f"{path.name}: {total} samples"]
    for kind, doing in sorted(states.items(), key=lambda kv: -sum(kv[1].values())):
        samples = sum(doing.values())
        lines.append(f"\n{kind}: {samples} samples ({100 * samples / total:.1f} % of all)")
        for what, n in doing.most_common():
            lines.append(f"  {n:6d}  {100 * n / samples:5.1f} %  {what}")
        for frame, n in where[kind].most_common(top):
            lines.append(f"          {100 * n / samples:5.1f} %  in {frame}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, nargs="+", help="py-spy record -f raw --threads output")
    parser.add_argument("--top", type=int, default=8, help="vstream functions per thread kind")
    args = parser.parse_args()
    print("\n\n".join(summarise(path, args.top) for path in args.raw))


if __name__ == "__main__":
    main()
