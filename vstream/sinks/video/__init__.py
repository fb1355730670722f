"""The annotated video: the pictures the annotator drew, encoded to H.264 into a file or live.

One idea a module, read in this order:

- :mod:`~vstream.sinks.video.writer`: :class:`VideoWriter`, what the engine
  uses: the bounded queue, the encoder's thread, time stamps, failures logged
  once and counted, a live output's reconnections.
- :mod:`~vstream.sinks.video.encoders`: NVENC or libx264, and the presets,
  bounds and defaults, all read from the ``video`` sink's options.
- :mod:`~vstream.sinks.video.container`: where the video goes (a file written
  as ``PATH.partial`` until complete, or an RTMP URL) and what a backend is.
- :mod:`~vstream.sinks.video.libx264` and :mod:`~vstream.sinks.video.nvenc`:
  the two backends.

Nothing is imported here: the modules load torch, and PyAV once a video opens.
"""
