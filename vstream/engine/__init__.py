"""The engine: the small part that wires the data path together and runs it.

- :mod:`~vstream.engine.reader`: a thread per stream, from its source into the intake;
- :mod:`~vstream.engine.intake`: a bounded queue per stream, with its freshness policy;
- :mod:`~vstream.engine.stages`: preprocessing, the model, postprocessing, overlapped;
- :mod:`~vstream.engine.pipeline`: one detector, its streams, stages and sinks;
- :mod:`~vstream.engine.interface`: the interface every engine offers (:class:`StreamEngine`),
  and what the two engines share;
- :mod:`~vstream.engine.engine`: every pipeline of a config, started and stopped together;
- :mod:`~vstream.engine.signals`: SIGTERM and SIGINT, graceful, then cut short;
- :mod:`~vstream.engine.carry`: a stream's tracks, counts and readings as bytes, for the
  cluster worker that takes the stream on.
"""

from vstream.lazy import lazy_exports

__all__ = [
    "Engine",
    "Pipeline",
    "PipelineNotFound",
    "ShuttingDown",
    "StreamConflict",
    "StreamEngine",
    "StreamNotFound",
    "StreamReader",
    "detect_iter",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Engine": "vstream.engine.engine",
        "Pipeline": "vstream.engine.pipeline",
        "detect_iter": "vstream.engine.pipeline",
        "StreamReader": "vstream.engine.reader",
        "StreamEngine": "vstream.engine.interface",
        "PipelineNotFound": "vstream.engine.errors",
        "ShuttingDown": "vstream.engine.errors",
        "StreamConflict": "vstream.engine.errors",
        "StreamNotFound": "vstream.engine.errors",
    },
)
