"""``tenantgate review``: offline, what would the webhook do to these manifests?

Reads YAML or JSON manifests (multi-document files, ``*List`` objects, anchors, any
apiVersion), finds every pod template in them (custom resources included), builds the pod a
controller would create from each, and shows its profile, why, the JSONPatch and the mutated
pod. Exit codes: 0 done, 1 a manifest could not be read or a pod could not be classified,
2 the config is invalid.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import jsonpatch
import yaml

from classifier.config import compile_classifier
from classifier.plan import Classifier
from classifier.quantities import QuantityError
from classifier.templates import PodTemplate, find_pod_templates, pod_from_template
from tenants.configfile import ConfigError, load_config

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "defaults" / "tenantgate.yaml"


class ManifestError(ValueError):
    """A manifest that cannot be read or parsed; the message starts with ``FILE:LINE:``."""


class _ManifestLoader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings, as the API server's JSON would."""


_ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "review",
        help="show what the webhook would do to the pods of some manifests (offline)",
        description="Find every pod template in the manifests (Pods, Deployments, Jobs, "
        "CronJobs, custom resources...) and show its profile, why, the patch and the mutated "
        "pod. Nothing is sent to a cluster.",
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="manifest file (YAML or JSON; '-' reads stdin); repeat for several",
    )
    parser.add_argument(
        "--config", metavar="FILE", type=Path, help="config file (default: the embedded one)"
    )
    parser.add_argument(
        "-o", "--output", choices=["table", "json", "yaml"], default="table", help="format"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="namespace of objects that name none (default: default)",
    )
    parser.set_defaults(func=run)


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Document:
    file: str
    index: int
    body: Any


def read_manifests(name: str, text: str) -> list[Document]:
    """Every document of one manifest file; :class:`ManifestError` with file and line."""
    if text.lstrip().startswith(("{", "[")):
        try:
            body = json.loads(text)
        except json.JSONDecodeError as error:
            raise ManifestError(
                f"{name}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}"
            ) from error
        bodies = body if isinstance(body, list) else [body]
        return [Document(name, i, b) for i, b in enumerate(bodies)]
    try:
        bodies = list(yaml.load_all(text, Loader=_ManifestLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        problem = error.problem or error.context or "invalid YAML"
        raise ManifestError(f"{where}: invalid YAML: {problem}") from error
    except yaml.YAMLError as error:
        raise ManifestError(f"{name}: invalid YAML: {error}") from error
    return [Document(name, i, b) for i, b in enumerate(bodies) if b is not None]


def _read_file(name: str, stdin: TextIO) -> str:
    if name == "-":
        return stdin.read()
    try:
        return Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ManifestError(f"{name}: cannot read: {reason}") from error


# --------------------------------------------------------------------------- reviewing


def review_template(
    found: PodTemplate, *, file: str, classifier: Classifier, namespace: str
) -> dict[str, Any]:
    """One result row: identity, profile and why, notes, RFC 6902 patch, mutated pod."""
    pod = pod_from_template(found, namespace=namespace)
    pod_namespace = str(pod["metadata"]["namespace"])
    row: dict[str, Any] = {
        "file": file,
        "kind": found.kind,
        "name": found.name,
        "namespace": pod_namespace,
        "path": found.path,
    }
    try:
        plan = classifier.plan(pod, namespace=pod_namespace)
    except QuantityError as error:
        row.update(profile=None, error=str(error))
        return row
    classification = plan.classification
    row.update(
        profile=classification.profile,
        classifiedBy=classification.classified_by,
        reason=classification.reason,
    )
    if classification.problem:
        row["problem"] = classification.problem
    row["notes"] = list(plan.notes)
    row["patch"] = jsonpatch.make_patch(pod, plan.mutated).patch if plan.changed else []
    row["mutated"] = plan.mutated
    return row


def review_documents(
    documents: Sequence[Document], *, classifier: Classifier, namespace: str
) -> Iterator[dict[str, Any]]:
    for document in documents:
        for found in find_pod_templates(document.body):
            yield review_template(
                found, file=document.file, classifier=classifier, namespace=namespace
            )


# --------------------------------------------------------------------------- output


def render_table(rows: Sequence[dict[str, Any]]) -> str:
    header = ("FILE", "OBJECT", "PATH", "PROFILE", "WHY")
    lines = [header]
    for row in rows:
        why = row.get("error") or row.get("reason") or ""
        if row.get("problem"):
            why += f" ({row['problem']})"
        lines.append(
            (
                row["file"],
                f"{row['kind']}/{row['name']}",
                row["path"] or "-",
                row.get("profile") or "error",
                why,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True))
        + "  "
        + line[-1]
        for line in lines
    )


def render(rows: Sequence[dict[str, Any]], output: str) -> str:
    if output == "json":
        return json.dumps(list(rows), indent=2)
    if output == "yaml":
        return yaml.safe_dump(list(rows), sort_keys=False, default_flow_style=False).rstrip()
    return render_table(rows)


# --------------------------------------------------------------------------- command


def load_classifier(path: Path | None) -> Classifier:
    """The classifier of ``path`` (default: the embedded config); ConfigError on problems."""
    return compile_classifier(load_config(path or DEFAULT_CONFIG))


def run(
    args: argparse.Namespace,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        classifier = load_classifier(args.config)
    except ConfigError as error:
        print(str(error), file=stderr)
        return EXIT_CONFIG
    documents: list[Document] = []
    failed = False
    for name in args.files:
        try:
            documents.extend(read_manifests(name, _read_file(name, stdin)))
        except ManifestError as error:
            print(str(error), file=stderr)
            failed = True
    if failed:
        return EXIT_FAILED
    rows = list(review_documents(documents, classifier=classifier, namespace=args.namespace))
    for document in documents:
        if not isinstance(document.body, dict):
            print(
                f"{document.file}: document {document.index + 1} is not an object; skipped",
                file=stderr,
            )
    if not rows:
        print("no pod templates found", file=stderr)
    print(render(rows, args.output), file=stdout)
    errors = [row for row in rows if row.get("error")]
    for row in errors:
        print(
            f"{row['file']}: {row['kind']}/{row['name']}@{row['path']}: {row['error']}",
            file=stderr,
        )
    return EXIT_FAILED if errors else EXIT_OK
