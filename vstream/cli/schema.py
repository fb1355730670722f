"""``vstream schema``: the JSON Schema of pipelines files, for editors."""

from __future__ import annotations

import argparse
import json

from vstream.cli.args import EXIT_OK
from vstream.config import config_schema


def add_parser(commands: argparse._SubParsersAction) -> None:
    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of pipelines files",
        description="Print the JSON Schema of pipelines files, e.g. for an editor: "
        "vstream schema > vstream.schema.json",
    )
    schema.set_defaults(handler=schema_command)


def schema_command(args: argparse.Namespace) -> int:
    print(json.dumps(config_schema(), indent=2))
    return EXIT_OK
