"""``tenantgate lint FILE...``: check config files for schema and semantic problems.

Prints every problem as ``FILE:LINE: FIELD: MESSAGE`` (on stdout, so CI logs and editors can
parse it) and exits 1 when any file has one; otherwise prints a short summary per file and
exits 0. Warnings (``FILE:LINE: FIELD: warning: MESSAGE``) never change the exit code.
Connected to a cluster (``--kubeconfig``), or given the rendered webhook configurations
(``--webhooks``), lint also warns about profiles naming a scheduler the cluster does not run
and tenant namespaces the webhooks are not sent. Exit 2 when the cluster or the webhooks file
cannot be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from tenants.clustercheck import ClusterFacts, webhook_scopes
from tenants.kube.connection import Connection, resolve_target
from tenants.kube.errors import KubeError
from tenants.lint import lint_file

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_UNREADABLE = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "lint",
        help="check tenant, profile and rule config files",
        description="Check config files: schema, unknown profiles or priority classes, a "
        "namespace claimed by two tenants, burst below guaranteed, rules that can never "
        "match. Exit code 1 when any problem is found.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="config file")
    parser.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="check against this cluster too: schedulers it runs, namespaces the webhooks see",
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--webhooks",
        type=Path,
        metavar="FILE",
        help="the webhook configurations as deployed (e.g. `kubectl kustomize DIR > FILE`); "
        "warns about tenant namespaces their namespaceSelector leaves out",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    try:
        facts = cluster_facts(args)
    except (KubeError, OSError, ValueError, yaml.YAMLError) as exc:
        print(f"tenantgate lint: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    problems = 0
    for path in args.files:
        report = lint_file(path, facts=facts)
        for warning in report.warnings:
            print(_as_warning(str(warning), warning.message), file=stream)
        if report.ok:
            if not args.quiet:
                print(f"{report.file}: ok: {report.summary}", file=stream)
            continue
        problems += len(report.problems)
        for problem in report.problems:
            print(problem, file=stream)
    if problems and not args.quiet:
        print(f"{problems} problem{'s' if problems != 1 else ''} found", file=stream)
    return EXIT_PROBLEMS if problems else EXIT_OK


def cluster_facts(args: argparse.Namespace) -> ClusterFacts | None:
    """What ``--kubeconfig`` and ``--webhooks`` tell about the cluster (None: nothing)."""
    facts: ClusterFacts | None = None
    kubeconfig: Path | None = getattr(args, "kubeconfig", None)
    webhooks: Path | None = getattr(args, "webhooks", None)
    if kubeconfig is not None:
        target = resolve_target(kubeconfig=kubeconfig, offline=False)
        connection = Connection.open(target, context=getattr(args, "context", None))
        try:
            from tenants.kube.clusterfacts import read_cluster_facts

            facts = read_cluster_facts(connection)
        finally:
            connection.close()
    if webhooks is not None:
        documents: list[Any] = list(yaml.safe_load_all(webhooks.read_text(encoding="utf-8")))
        scopes = webhook_scopes(d for d in documents if isinstance(d, dict))
        if not scopes:
            raise ValueError(f"{webhooks} holds no tenantgate webhook configuration")
        facts = dataclasses.replace(facts or ClusterFacts(), webhooks=scopes)
    return facts


def _as_warning(text: str, message: str) -> str:
    """``FILE:LINE: FIELD: warning: MESSAGE``."""
    return f"{text.removesuffix(message)}warning: {message}"
