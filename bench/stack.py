"""The server's own objects, in process: a real offline :class:`admission.runtime.Runtime`.

``tenantgate serve`` builds its admitter (the cluster guard around the
:class:`~tenants.decisions.PolicyAdmitter`), ledger, ledger controller and Starlette app in
:class:`~admission.runtime.Runtime`; the in-process measurements use the very same object, built
from a generated policy instead of a config file, so they measure what the server runs.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from admission.patch import encoded_json_patch
from admission.reviews import decode_review, encode_response
from admission.runtime import Runtime, Timings, tune_gc
from admission.settings import Settings
from bench.configgen import GeneratedPolicy
from tenants.kube.connection import resolve_target
from tenants.ledger import MemoryLedger
from tenants.verdicts import Admitter, Verdict

logger = logging.getLogger(__name__)


def offline_runtime(
    generated: GeneratedPolicy,
    *,
    cert_dir: Path = Path(".tenantgate/bench-certs"),
    clock: Callable[[], float] = time.time,
) -> Runtime:
    """The runtime ``tenantgate serve --offline`` would build for this policy (not started)."""
    source = f"<generated: {generated.tenants} tenants, {generated.rules} rules>"
    runtime = Runtime(
        Settings(cert_dir=cert_dir, offline=True),
        config_file=source,
        policy=generated.policy,
        config_path=Path(source),
        target=resolve_target(kubeconfig=None, offline=True, environ={}),
        connection=None,
        timings=Timings(),
        clock=clock,
    )
    # The collector as `serve` leaves it once started (frozen policy, raised young threshold),
    # so in-process figures measure what the server runs.
    tune_gc()
    return runtime


def settle(value: Any) -> Any:
    """``value``, or what it resolves to if it is awaitable and completes without suspending.

    The in-memory ledger never waits, so an ``async`` admitter over it runs to completion in
    one step: measuring it this way adds no event-loop overhead the server would not have.
    Anything that does suspend (a remote backend) needs an event loop: that is an error here.
    """
    if not inspect.isawaitable(value):
        return value
    steps = value.__await__()
    try:
        steps.send(None)
    except StopIteration as done:
        return done.value
    steps.close()
    raise RuntimeError("an admission step suspended: the bench drives the in-memory ledger only")


def _verdict(value: Any) -> Verdict:
    verdict = settle(value)
    if not isinstance(verdict, Verdict):
        raise TypeError(f"the admitter returned {type(verdict).__name__}, not a Verdict")
    return verdict


def memory_ledger(runtime: Runtime) -> MemoryLedger:
    """The runtime's ledger, which offline is the in-memory one."""
    ledger = runtime.ledger
    if not isinstance(ledger, MemoryLedger):
        raise TypeError(f"expected the in-memory ledger, not {type(ledger).__name__}")
    return ledger


class Pipeline:
    """What the webhook's review handler does per request, minus HTTP.

    Same calls, same order as :class:`admission.app.ReviewHandler`: decode, decide, JSONPatch
    (mutate only), encode. Metrics and logging are left to the ASGI measurement.
    """

    def __init__(self, admitter: Admitter) -> None:
        self.admitter = admitter

    def mutate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]:
        review = decode_review(body, objects="mutation")
        verdict = _verdict(self.admitter.mutate(review.request, now=now))
        patch: str | None = None
        original = review.request.object
        if verdict.allowed and verdict.patched is not None and original is not None:
            patch = encoded_json_patch(original, verdict.patched)
        answer = encode_response(
            api_version=review.api_version, uid=review.request.uid, verdict=verdict, patch=patch
        )
        return answer, verdict

    def validate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]:
        review = decode_review(body, objects="validation")
        verdict = _verdict(self.admitter.validate(review.request, now=now))
        answer = encode_response(
            api_version=review.api_version, uid=review.request.uid, verdict=verdict
        )
        return answer, verdict


STAGES: Final = (
    "decode review",
    "mutate: decide",
    "mutate: JSONPatch",
    "validate: decide",
    "encode response",
)


class StagedPipeline(Pipeline):
    """:class:`Pipeline` with the CPU time of each step added up in :attr:`stages` (ns).

    Reading the thread's CPU clock around each step costs a little; the plain pipeline is the
    one measured, this one only says how a pair's time divides.
    """

    def __init__(self, admitter: Admitter) -> None:
        super().__init__(admitter)
        self.stages: dict[str, int] = dict.fromkeys(STAGES, 0)

    def mutate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]:
        clock, stages = time.thread_time_ns, self.stages
        started = clock()
        review = decode_review(body, objects="mutation")
        decoded = clock()
        verdict = _verdict(self.admitter.mutate(review.request, now=now))
        decided = clock()
        patch: str | None = None
        original = review.request.object
        if verdict.allowed and verdict.patched is not None and original is not None:
            patch = encoded_json_patch(original, verdict.patched)
        patched = clock()
        answer = encode_response(
            api_version=review.api_version, uid=review.request.uid, verdict=verdict, patch=patch
        )
        stages["decode review"] += decoded - started
        stages["mutate: decide"] += decided - decoded
        stages["mutate: JSONPatch"] += patched - decided
        stages["encode response"] += clock() - patched
        return answer, verdict

    def validate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]:
        clock, stages = time.thread_time_ns, self.stages
        started = clock()
        review = decode_review(body, objects="validation")
        decoded = clock()
        verdict = _verdict(self.admitter.validate(review.request, now=now))
        decided = clock()
        answer = encode_response(
            api_version=review.api_version, uid=review.request.uid, verdict=verdict
        )
        stages["decode review"] += decoded - started
        stages["validate: decide"] += decided - decoded
        stages["encode response"] += clock() - decided
        return answer, verdict
