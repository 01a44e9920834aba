"""``tenantgate certs``: create, rotate and inspect the webhook's TLS material; print caBundle.

Exit codes: 0 done, 1 the material or directory is unusable (the message says why), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

import certs
from admission.settings import Settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="create, rotate and inspect TLS certificates",
        description="Manage the CA and serving certificate in a directory "
        "(ca.crt, ca.key, tls.crt, tls.key: the layout of a kubernetes.io/tls Secret).",
    )
    actions = parser.add_subparsers(dest="certs_command", metavar="ACTION", required=True)
    dir_help = "certificate directory (default: $TENANTGATE_CERT_DIR or .tenantgate/certs)"

    init = actions.add_parser(
        "init",
        help="create a CA and a serving certificate",
        description="Create a CA and a serving certificate for SERVICE in NAMESPACE.",
    )
    init.add_argument("--service", help="Service name (default: $TENANTGATE_SERVICE or tenantgate)")
    init.add_argument(
        "--namespace",
        help="namespace of the Service (default: $TENANTGATE_NAMESPACE or tenantgate-system)",
    )
    init.add_argument("--dir", type=Path, help=dir_help)
    _validity_flags(init)
    init.add_argument("--force", action="store_true", help="replace existing material")
    init.set_defaults(func=run_init)

    rotate = actions.add_parser(
        "rotate",
        help="issue a new serving certificate (and CA with --ca)",
        description="Issue a new serving certificate with the same names from the existing CA. "
        "With --ca, also roll the CA: the previous CA stays in ca.crt and cross-signs the new "
        "one, so clients that trust only the previous CA keep verifying; update the webhook "
        "caBundle afterwards.",
    )
    rotate.add_argument("--dir", type=Path, help=dir_help)
    rotate.add_argument("--ca", action="store_true", help="roll the CA as well")
    _validity_flags(rotate)
    rotate.set_defaults(func=run_rotate)

    bundle = actions.add_parser(
        "ca-bundle",
        help="print the base64 caBundle for the webhook configurations",
        description="Print ca.crt base64-encoded, as the caBundle field of a webhook expects.",
    )
    bundle.add_argument("--dir", type=Path, help=dir_help)
    bundle.set_defaults(func=run_ca_bundle)

    show = actions.add_parser(
        "show",
        help="describe the material and check it is usable",
        description="Describe the serving certificate and CA bundle; exit 1 if unusable now.",
    )
    show.add_argument("--dir", type=Path, help=dir_help)
    show.set_defaults(func=run_show)


def run_init(args: argparse.Namespace) -> int:
    given = (args.dir, args.service, args.namespace)
    # The environment is only consulted (and must only be valid) for what the flags leave out.
    defaults = _settings() if None in given else Settings.model_construct()
    if defaults is None:
        return EXIT_USAGE
    directory: Path = defaults.cert_dir if args.dir is None else args.dir
    try:
        info = certs.init(
            directory,
            service=defaults.service if args.service is None else args.service,
            namespace=defaults.namespace if args.namespace is None else args.namespace,
            valid_days=args.valid_days,
            ca_valid_days=args.ca_valid_days,
            force=args.force,
        )
    except certs.CertError as exc:
        return _fail(exc)
    print(f"created a CA and a serving certificate in {directory}")
    _print_certificate(info, sys.stdout)
    return EXIT_OK


def run_rotate(args: argparse.Namespace) -> int:
    directory = _directory(args)
    if directory is None:
        return EXIT_USAGE
    try:
        info = certs.rotate(
            directory, ca=args.ca, valid_days=args.valid_days, ca_valid_days=args.ca_valid_days
        )
    except certs.CertError as exc:
        return _fail(exc)
    what = "CA and serving certificate" if args.ca else "serving certificate"
    print(f"rotated the {what} in {directory}")
    _print_certificate(info, sys.stdout)
    if args.ca:
        print("update the caBundle of the webhook configurations: tenantgate certs ca-bundle")
    return EXIT_OK


def run_ca_bundle(args: argparse.Namespace) -> int:
    directory = _directory(args)
    if directory is None:
        return EXIT_USAGE
    try:
        bundle = certs.ca_bundle(directory)
    except certs.CertError as exc:
        return _fail(exc)
    print(bundle)
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    directory = _directory(args)
    if directory is None:
        return EXIT_USAGE
    try:
        material = certs.describe(directory)
    except certs.CertError as exc:
        return _fail(exc)
    print(f"serving certificate ({certs.TLS_CERT}):")
    _print_certificate(material.serving, sys.stdout)
    for intermediate in material.intermediates:
        print(f"  served with: {intermediate.subject} (issued by {intermediate.issuer})")
    print(f"CA bundle ({certs.CA_CERT}):" if material.bundle else "CA bundle: none")
    for ca in material.bundle:
        print(f"  {ca.subject}  serial {ca.serial_hex}  valid until {_when(ca.not_after)}")
    problems = certs.problems(directory, now=datetime.now(UTC))
    for problem in problems:
        print(f"tenantgate certs: problem: {problem}", file=sys.stderr)
    return EXIT_FAILED if problems else EXIT_OK


def _validity_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--valid-days",
        type=_positive_int,
        default=certs.DEFAULT_VALID_DAYS,
        metavar="N",
        help=f"serving certificate lifetime in days (default: {certs.DEFAULT_VALID_DAYS})",
    )
    parser.add_argument(
        "--ca-valid-days",
        type=_positive_int,
        default=certs.DEFAULT_CA_VALID_DAYS,
        metavar="N",
        help=f"CA lifetime in days, for a new CA (default: {certs.DEFAULT_CA_VALID_DAYS})",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _directory(args: argparse.Namespace) -> Path | None:
    if args.dir is not None:
        path: Path = args.dir
        return path
    defaults = _settings()
    return defaults.cert_dir if defaults is not None else None


def _settings() -> Settings | None:
    """Settings from ``TENANTGATE_*``: the defaults ``serve`` would use."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        print(
            f"tenantgate certs: error: invalid TENANTGATE_* environment: {problems}",
            file=sys.stderr,
        )
        return None


def _fail(exc: certs.CertError) -> int:
    print(f"tenantgate certs: error: {exc}", file=sys.stderr)
    return EXIT_FAILED


def _print_certificate(info: certs.CertificateInfo, out: TextIO) -> None:
    names = [*info.dns_names, *info.ip_addresses]
    print(f"  subject:     {info.subject}", file=out)
    print(f"  issuer:      {info.issuer}", file=out)
    print(f"  serial:      {info.serial_hex}", file=out)
    print(f"  valid:       {_when(info.not_before)} to {_when(info.not_after)}", file=out)
    print(f"  names:       {', '.join(names) if names else '(none)'}", file=out)


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
