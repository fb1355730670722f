"""``vstream bench``: every stage alone, end to end, and baselines, side by side in one run.

The same video and model go through decoding alone, preprocessing alone,
the model alone (same batch and threads), postprocessing alone, the whole
overlapped pipeline with 1, 2 and 4 concurrent streams, and a naive loop
written the usual way (:mod:`vstream.bench.naive`); optionally whole
processes are compared with Ultralytics' streaming predict
(:mod:`vstream.bench.processes`). :mod:`vstream.bench.report` turns the
figures into ratios, targets and a table.
"""
