"""Sinks: where frame records go."""

from vstream.sinks.jsonl import JsonLinesSink

__all__ = ["JsonLinesSink"]
