"""``tenantgate scheduler-config``: the KubeSchedulerConfiguration of the config's
``schedulers:`` block, for the second kube-scheduler of ``deploy/webhooks/components/schedulers``.

One profile per scheduler name the block configures (not ``default-scheduler``, which the
cluster runs, nor a name marked ``external``), each with its scoring strategy, preemption and
``percentageOfNodesToScore``; its own leader-election Lease.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

import yaml

from admission.runtime import DEFAULT_CONFIG
from tenants.configfile import ConfigError, load_config
from tenants.schedulers import scheduler_configuration

EXIT_INVALID = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "scheduler-config",
        help="print the KubeSchedulerConfiguration of the config's schedulers: block",
        description="Print a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration with one "
        "profile per scheduler name of the config's schedulers: block, for the second "
        "kube-scheduler of deploy/webhooks/components/schedulers.",
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="config file (default: the embedded one)"
    )
    parser.add_argument(
        "--lease-namespace", default="tenantgate-system", help="namespace of its leader Lease"
    )
    parser.add_argument("--lease-name", default="tenantgate-schedulers", help="its Lease's name")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    path = args.config if args.config is not None else DEFAULT_CONFIG
    try:
        config = load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"tenantgate scheduler-config: {problem}", file=sys.stderr)
        return EXIT_INVALID
    if not any(not spec.external for spec in config.schedulers.values()):
        print(
            f"tenantgate scheduler-config: {path} has no scheduler to run: its schedulers: "
            "block is empty or only external",
            file=sys.stderr,
        )
        return EXIT_INVALID
    document = scheduler_configuration(
        config.schedulers, lease_namespace=args.lease_namespace, lease_name=args.lease_name
    )
    stream.write(f"# From {path}: `tenantgate scheduler-config` renders it.\n")
    yaml.safe_dump(document, stream, sort_keys=False)
    return 0
