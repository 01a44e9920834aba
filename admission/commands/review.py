"""``tenantgate review``: offline, what would the webhook do to the pods of these manifests?

Reads YAML or JSON manifests (multi-document files, ``*List`` objects, anchors, any
apiVersion), finds every pod template in them (custom resources included, and the pods of
workloads that describe them otherwise: classifier/workloads/), builds the pod a
controller would create from each, and runs it through the server's own decision path: the
:class:`~tenants.decisions.PolicyAdmitter` answers /mutate and then /validate on the patched
pod, both as a dry run, so nothing is booked. Usage starts empty, or at a ``/status`` snapshot
(``--usage``), so CI can ask whether a pod would still fit at today's usage.

Each pod shows its tenant, tier, profile and why, the verdict (with the denial message and
the warnings kubectl would print), the JSONPatch and the mutated pod.

Exit codes: 0 every pod would be admitted; 3 at least one pod would be denied; 1 a manifest or
the usage snapshot could not be read, or a pod has invalid resources (this wins over 3);
2 the config is invalid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from admission.commands._groups import ManifestSizes, render_groups, review_groups
from admission.patch import make_json_patch
from classifier.agreement import measure
from classifier.quantities import QuantityError
from classifier.resources import pod_requests
from classifier.templates import PodTemplate, find_pod_templates, pod_from_template
from tenants.config import QUEUED_TIER, Policy
from tenants.configfile import ConfigError, load_policy
from tenants.decisions import PolicyAdmitter, Review
from tenants.ledger import LedgerError, MemoryLedger, ledger_from_usage

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_DENIED = 3

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "defaults" / "tenantgate.yaml"
DEFAULT_NAMESPACE: Final = "default"
# The API server labels every namespace with its own name (since Kubernetes 1.21), so a
# namespaceSelector on this label can be evaluated offline; other namespace labels are unknown.
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

_DESCRIPTION = """\
Find every pod template in the manifests (Pods, Deployments, Jobs, CronJobs, custom
resources...) and show what the webhook would do to its pod: tenant, tier, profile and why,
verdict, warnings, patch and mutated pod. Argo Workflows, SparkApplications, Tekton TaskRuns,
Knative Services, Argo Rollouts, PyTorchJobs, MPIJobs, JobSets and RayClusters give the pods
their operators would create. The server's own mutate and validate run as a dry run against
the usage given (none by default); nothing is sent to a cluster.
"""
_EPILOG = """\
Each pod template (a Deployment with replicas: 3, a Job, a CronJob...) is reviewed as ONE pod,
against the usage the ledger starts with: replicas are not multiplied and the pods reviewed do
not count against each other. Pod groups are the exception: the members of a group (a
PyTorchJob, a JobSet, an Indexed Job...) are also reviewed together, every pod counted, with
the group's total request and verdict (allowed, queued, incomplete or denied) after the table.

exit codes:
  0  every pod would be admitted
  1  a manifest or the usage snapshot could not be read, or a pod has invalid resources
  2  the config is invalid
  3  at least one pod would be denied (1 wins when both apply)
"""


class ManifestError(ValueError):
    """A manifest that cannot be read or parsed; the message starts with ``FILE:LINE:``."""


class UsageError(ValueError):
    """A usage snapshot that cannot be read; the message starts with the file name."""


class _PlainDumper(yaml.SafeDumper):
    """Writes objects shared between rows (a profile's tolerations...) out in full, never as
    ``&id001`` anchors and ``*id001`` aliases that readers of a mutated pod would not expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


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
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        metavar="NS",
        help="review every object as if created in NS (default: the object's namespace, "
        f"else {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--usage",
        metavar="FILE",
        type=Path,
        help="usage snapshot to start from (JSON or YAML, the shape GET /status serves on the "
        "metrics port); default: no usage",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="name in WHY every signal of the matching rule, or every profile's evidence with "
        "its weights and where it was read (and classify pods of namespaces no tenant claims, "
        "as the classifier would)",
    )
    parser.add_argument(
        "--expected",
        metavar="FILE",
        type=Path,
        help="index of expected profiles (file name -> <Kind>/<name>@<path> -> profile, as in "
        "tests/fixtures/manifests/expected.yaml): print the agreement rate and a confusion "
        "table after the results (implies --explain)",
    )
    parser.set_defaults(func=run)


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Document:
    file: str
    index: int
    body: Any


def _is_json(text: str) -> bool:
    return text.lstrip().startswith(("{", "["))


def _load_json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ManifestError(
            f"{name}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}"
        ) from error


def _load_yaml(name: str, text: str) -> list[Any]:
    """Every document of a YAML stream (empty ones included)."""
    try:
        return list(yaml.load_all(text, Loader=_ManifestLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        problem = error.problem or error.context or "invalid YAML"
        raise ManifestError(f"{where}: invalid YAML: {problem}") from error
    except yaml.YAMLError as error:
        raise ManifestError(f"{name}: invalid YAML: {error}") from error


def read_manifests(name: str, text: str) -> list[Document]:
    """Every document of one manifest file; :class:`ManifestError` with file and line.

    A JSON array holds one document per item, as ``kubectl apply -f`` reads it.
    """
    if _is_json(text):
        body = _load_json(name, text)
        bodies = body if isinstance(body, list) else [body]
        return [Document(name, i, b) for i, b in enumerate(bodies)]
    bodies = _load_yaml(name, text)
    return [Document(name, i, b) for i, b in enumerate(bodies) if b is not None]


def _read_file(name: str, stdin: TextIO) -> str:
    if name == "-":
        return stdin.read()
    try:
        return Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{name}: cannot read: {_reason(error)}") from error


def _reason(error: OSError | UnicodeDecodeError) -> str:
    return error.strerror if isinstance(error, OSError) and error.strerror else str(error)


def read_usage(path: Path) -> MemoryLedger:
    """The ledger of a usage snapshot file; :class:`UsageError` names the file (and line)."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        if _is_json(text):
            document = _load_json(name, text)
        else:
            documents = [d for d in _load_yaml(name, text) if d is not None]
            if len(documents) != 1:
                raise UsageError(f"{name}: a usage snapshot is one JSON or YAML document")
            document = documents[0]
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{name}: cannot read: {_reason(error)}") from error
    except ManifestError as error:
        raise UsageError(str(error)) from error
    try:
        return ledger_from_usage(document)
    except LedgerError as error:
        raise UsageError(f"{name}: invalid usage snapshot: {error}") from error


# --------------------------------------------------------------------------- reviewing


def namespace_labels(namespace: str) -> Mapping[str, str]:
    """The labels every namespace is known to carry offline."""
    return {NAMESPACE_NAME_LABEL: namespace}


def make_admitter(
    policy: Policy, ledger: MemoryLedger | None = None, *, sizes: ManifestSizes | None = None
) -> PolicyAdmitter:
    """The server's admitter over ``ledger`` (default: empty), for offline reviews; a pod
    group's size is read from the manifests (``sizes``) when written in an object there."""
    return PolicyAdmitter(
        policy,
        ledger if ledger is not None else MemoryLedger(),
        namespace_labels=namespace_labels,
        sizes=sizes,
    )


async def _decide(admitter: PolicyAdmitter, pod: Mapping[str, Any], *, namespace: str) -> Review:
    # The one call into the decision path: /mutate then /validate, as a dry run.
    return await admitter.review(pod, namespace=namespace, now=time.time())


async def review_template(
    found: PodTemplate,
    *,
    file: str,
    admitter: PolicyAdmitter,
    namespace: str | None,
    explain: bool = False,
) -> dict[str, Any]:
    """One result row: identity, tenant, tier, profile and why, verdict, patch, mutated pod.

    ``namespace`` (when given) replaces the object's own namespace. With ``explain``, the
    reason names every signal of the matching rule, and a pod of a namespace no tenant claims
    is still classified (``rulesProfile``: what the rules would give it).
    """
    pod = pod_from_template(found, namespace=namespace or DEFAULT_NAMESPACE)
    if namespace is not None:
        pod["metadata"]["namespace"] = namespace
    pod_namespace = str(pod["metadata"]["namespace"])
    row: dict[str, Any] = {
        "file": file,
        "kind": found.kind,
        "name": found.name,
        "namespace": pod_namespace,
        "path": found.path,
    }
    try:
        # The API server would refuse such a pod before any webhook: a manifest error.
        pod_requests(pod)
    except QuantityError as error:
        row.update(tenant=None, tier=None, profile=None, allowed=None, error=str(error))
        return row

    outcome = await _decide(admitter, pod, namespace=pod_namespace)
    row.update(tenant=outcome.tenant, tier=outcome.tier)
    tenant = admitter.policy.tenants.get(outcome.tenant) if outcome.tenant is not None else None
    notes: list[str] = []
    if tenant is None:
        untouched = "admitted untouched" if outcome.allowed else "denied"
        reason = f'namespace "{pod_namespace}" belongs to no tenant: {untouched}'
        if explain:
            rules = admitter.policy.classifier.classify(pod, namespace=pod_namespace, explain=True)
            row["rulesProfile"] = rules.profile
            reason += f" (the classifier would give {rules.profile}: {rules.reason})"
        row.update(profile=None, classifiedBy=None, reason=reason)
    else:
        # The tenant's classifier, as /mutate ran it: the verdict does not carry the reason.
        plan = tenant.classifier.plan(
            pod,
            namespace=pod_namespace,
            allowed_profiles=tenant.allowed_profiles,
            explain=explain,
        )
        classification = plan.classification
        row.update(
            profile=classification.profile,
            classifiedBy=classification.classified_by,
            reason=classification.reason,
        )
        if explain:
            row["rulesProfile"] = classification.profile
        if classification.problem:
            row["problem"] = classification.problem
        notes = list(plan.notes)
    if not outcome.allowed and outcome.code == HTTPStatus.BAD_REQUEST:
        # The webhook found the pod itself malformed (a negative request): a manifest error.
        row["error"] = outcome.message
    row.update(
        allowed=outcome.allowed,
        code=outcome.code,
        message=outcome.message,
        warnings=list(outcome.warnings),
        notes=notes,
        patch=make_json_patch(pod, dict(outcome.mutated)),
        mutated=outcome.mutated,
    )
    return row


async def review_documents(
    documents: Sequence[Document],
    *,
    admitter: PolicyAdmitter,
    namespace: str | None,
    explain: bool = False,
) -> list[dict[str, Any]]:
    """One row per pod template, in manifest order; each reviewed against the same usage.

    The members of a pod group also carry ``group``: the whole group's members, pods, total
    request and verdict (admission/commands/_groups.py).
    """
    rows = []
    members = []
    for document in documents:
        for found in find_pod_templates(document.body):
            row = await review_template(
                found, file=document.file, admitter=admitter, namespace=namespace, explain=explain
            )
            rows.append(row)
            if not row.get("error"):
                pod = pod_from_template(found, namespace=namespace or DEFAULT_NAMESPACE)
                if namespace is not None:
                    pod["metadata"]["namespace"] = namespace
                members.append((row, pod, found.count))
    sizes = admitter.sizes
    if not isinstance(sizes, ManifestSizes):
        sizes = ManifestSizes(
            [d.body for d in documents], namespace=namespace, default_namespace=DEFAULT_NAMESPACE
        )
    groups = review_groups(admitter.policy, admitter.ledger, members, sizes)
    for group in groups:
        for row in rows:
            if any(
                row["namespace"] == group["namespace"]
                and f"{row['kind']}/{row['name']}" == member["object"]
                and row["path"] == member["path"]
                for member in group["members"]
            ):
                row["group"] = group
    return rows


def groups_of(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pod groups of ``rows``, each once, in order."""
    seen: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:
        group = row.get("group")
        if isinstance(group, dict):
            seen.setdefault((group["namespace"], group["key"]), group)
    return list(seen.values())


# --------------------------------------------------------------------------- agreement


class ExpectedError(ValueError):
    """An index of expected profiles that cannot be read; the message names the file."""


def read_expected(path: Path) -> dict[str, dict[str, str]]:
    """The expected profile per manifest file name and ``<Kind>/<name>@<path>`` key.

    The index maps a file name to its entries; an entry is a profile, or a mapping with the
    profile under ``expected`` (as tests/fixtures/manifests/expected.yaml records known
    misses).
    """
    name = str(path)
    try:
        documents = [d for d in _load_yaml(name, path.read_text(encoding="utf-8")) if d]
    except (OSError, UnicodeDecodeError) as error:
        raise ExpectedError(f"{name}: cannot read: {_reason(error)}") from error
    except ManifestError as error:
        raise ExpectedError(str(error)) from error
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise ExpectedError(f"{name}: expected one mapping of file name to entries")
    index: dict[str, dict[str, str]] = {}
    for file, entries in documents[0].items():
        if not isinstance(entries, dict | None):
            raise ExpectedError(f"{name}: {file}: expected a mapping of template key to profile")
        index[str(file)] = {}
        for key, entry in (entries or {}).items():
            profile = entry.get("expected") if isinstance(entry, dict) else entry
            if not isinstance(profile, str):
                raise ExpectedError(f"{name}: {file}: {key}: expected a profile name")
            index[str(file)][str(key)] = profile
    return index


def agreement_report(
    rows: Sequence[Mapping[str, Any]], expected: Mapping[str, Mapping[str, str]]
) -> str:
    """The agreement rate and confusion table of the rows the index has an entry for."""
    pairs = []
    unlisted = 0
    for row in rows:
        got = row.get("rulesProfile") or row.get("profile")
        want = expected.get(Path(row["file"]).name, {}).get(
            f"{row['kind']}/{row['name']}@{row['path']}"
        )
        if want is None or got is None:
            unlisted += 1
            continue
        pairs.append((want, str(got)))
    found = measure(pairs)
    lines = [found.summary(), found.confusion_table()]
    if unlisted:
        lines.append(f"{unlisted} pods without an expected profile (or a profile) left out")
    return "\n".join(lines)


# --------------------------------------------------------------------------- output


def verdict_of(row: Mapping[str, Any]) -> str:
    """``allowed``, ``queued`` (admitted behind tenantgate's gate), ``denied`` or ``error``."""
    if row.get("error"):
        return "error"
    if not row.get("allowed"):
        return "denied"
    return "queued" if row.get("tier") == QUEUED_TIER else "allowed"


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Aligned columns, WHY last; each denial's message follows the table, in full."""
    header = ("FILE", "OBJECT", "PATH", "PROFILE", "TENANT", "TIER", "VERDICT", "WHY")
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
                row.get("profile") or "-",
                row.get("tenant") or "-",
                row.get("tier") or "-",
                verdict_of(row),
                why,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    text = [
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True))
        + "  "
        + line[-1]
        for line in lines
    ]
    for row in rows:
        if verdict_of(row) == "queued" and "group" not in row:
            # A pod group's member waits for its group: the group's block below says why.
            where = f" {row['path']}" if row["path"] else ""
            told = [w for w in row.get("warnings", ()) if w.startswith(f"{QUEUED_TIER}:")]
            text.append("")
            text.append(
                f"{row['kind']}/{row['name']}{where} in namespace {row['namespace']} "
                f"({row['file']}) would wait in its tenant's queue:"
            )
            text.extend(f"  {line}" for line in told[:1])
        if verdict_of(row) == "denied":
            where = f" {row['path']}" if row["path"] else ""
            text.append("")
            text.append(
                f"{row['kind']}/{row['name']}{where} in namespace {row['namespace']} "
                f"({row['file']}) would be denied:"
            )
            text.append(f"  {row['message']}")
    text.extend(render_groups(groups_of(rows)))
    return "\n".join(text)


def render(rows: Sequence[dict[str, Any]], output: str) -> str:
    if output == "json":
        return json.dumps(list(rows), indent=2)
    if output == "yaml":
        return yaml.dump(
            list(rows), Dumper=_PlainDumper, sort_keys=False, default_flow_style=False
        ).rstrip()
    return render_table(rows)


# --------------------------------------------------------------------------- command


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
        policy = load_policy(args.config or DEFAULT_CONFIG)
    except ConfigError as error:
        print(str(error), file=stderr)
        return EXIT_CONFIG
    ledger = MemoryLedger()
    if args.usage is not None:
        try:
            ledger = read_usage(args.usage)
        except UsageError as error:
            print(str(error), file=stderr)
            return EXIT_FAILED
        for name in sorted(set(ledger.snapshot()) - set(policy.tenants)):
            print(f"{args.usage}: tenant {name} is not in the config; ignored", file=stderr)
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
    expected = None
    if args.expected is not None:
        try:
            expected = read_expected(args.expected)
        except ExpectedError as error:
            print(str(error), file=stderr)
            return EXIT_FAILED
    sizes = ManifestSizes(
        [d.body for d in documents], namespace=args.namespace, default_namespace=DEFAULT_NAMESPACE
    )
    admitter = make_admitter(policy, ledger, sizes=sizes)
    rows = asyncio.run(
        review_documents(
            documents,
            admitter=admitter,
            namespace=args.namespace,
            explain=args.explain or expected is not None,
        )
    )
    for document in documents:
        if not isinstance(document.body, dict):
            print(
                f"{document.file}: document {document.index + 1} is not an object; skipped",
                file=stderr,
            )
    if not rows:
        print("no pod templates found", file=stderr)
    print(render(rows, args.output), file=stdout)
    if expected is not None:
        # After a table, on stdout; after JSON or YAML, on stderr, so the output still parses.
        report = agreement_report(rows, expected)
        print(
            ("\n" + report) if args.output == "table" else report,
            file=stdout if args.output == "table" else stderr,
        )
    errors = [row for row in rows if row.get("error")]
    for row in errors:
        print(
            f"{row['file']}: {row['kind']}/{row['name']}@{row['path']}: {row['error']}",
            file=stderr,
        )
    if errors:
        return EXIT_FAILED
    denied = any(verdict_of(row) == "denied" for row in rows) or any(
        group["verdict"] == "denied" for group in groups_of(rows)
    )
    return EXIT_DENIED if denied else EXIT_OK
