"""``tenantgate schema``: print the JSON Schema of the config file.

Editors (the YAML language server) and GitOps pipelines can validate config files with it
before tenantgate ever reads them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from tenants.config import TenantgateConfig

SCHEMA_ID = "https://tenantgate.io/schemas/tenantgate-config.v1alpha1.json"


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :class:`TenantgateConfig`, as pydantic generates it."""
    schema = TenantgateConfig.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
    }


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of the config file",
        description="Print the JSON Schema of the tenantgate config file, for editors and "
        "CI validation.",
    )
    parser.add_argument("--indent", type=int, default=2, help="indentation (default: 2)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    json.dump(config_schema(), stream, indent=args.indent, sort_keys=False)
    stream.write("\n")
    return 0
