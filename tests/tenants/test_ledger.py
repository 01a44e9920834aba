"""Ledger transitions, serialisation and the in-memory store (tenants/ledger.py)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Mapping
from fractions import Fraction

import pytest

from classifier.quantities import Quantity
from tenants.ledger import (
    Charge,
    LedgerError,
    MemoryLedger,
    Reservation,
    TenantLedger,
    bind,
    book,
    cancel,
    confirm,
    expire,
    ledger_from_json,
    ledger_from_usage,
    ledger_to_json,
    release,
    resize,
    top_up,
)
from tenants.quota import build_quota, check


def rl(**items: str) -> dict[str, Quantity]:
    return {name: Quantity.parse(value) for name, value in items.items()}


def empty() -> TenantLedger:
    return TenantLedger("team-a")


def booked(**amount: str) -> TenantLedger:
    return book(
        empty(), reservation_id="r1", tier="guaranteed", amount=rl(**amount), now=100, ttl=120
    )


class TestBook:
    def test_adds_usage_and_reservation(self) -> None:
        state = booked(cpu="500m", memory="256Mi", pods="1")
        assert state.guaranteed == rl(cpu="500m", memory="256Mi", pods="1")
        assert state.burst == {}
        reservation = state.reservations["r1"]
        assert reservation == Reservation(
            "r1", "guaranteed", rl(cpu="500m", memory="256Mi", pods="1"), 100, 220, None
        )

    def test_is_pure(self) -> None:
        before = empty()
        after = book(before, reservation_id="r1", tier="burst", amount=rl(cpu="1"), now=0, ttl=1)
        assert before.burst == {}
        assert len(before.reservations) == 0
        assert after.burst == rl(cpu="1")

    def test_duplicate_id_is_refused(self) -> None:
        with pytest.raises(LedgerError, match="reservation r1 already exists"):
            book(booked(cpu="1"), reservation_id="r1", tier="burst", amount={}, now=0, ttl=1)

    def test_a_pod_holds_one_reservation(self) -> None:
        state = book(
            empty(), reservation_id="a", tier="burst", amount={}, now=0, ttl=1, pod_uid="p"
        )
        with pytest.raises(LedgerError, match="pod p already holds a reservation"):
            book(state, reservation_id="b", tier="burst", amount={}, now=0, ttl=1, pod_uid="p")

    def test_usage_sums_exactly_and_keeps_formats(self) -> None:
        state = empty()
        for index in range(3):
            state = book(
                state,
                reservation_id=f"r{index}",
                tier="guaranteed",
                amount=rl(cpu="100m", memory="1.5Gi"),
                now=0,
                ttl=1,
            )
        assert state.guaranteed == rl(cpu="300m", memory="4608Mi")
        assert str(state.guaranteed["memory"]) == "4608Mi"
        assert state.total() == state.guaranteed


class TestTopUpAndBind:
    def test_top_up_grows_and_shrinks_to_the_exact_amount(self) -> None:
        state = booked(cpu="1", memory="1Gi")
        grown = top_up(state, reservation_id="r1", amount=rl(cpu="2", memory="1Gi"))
        assert grown.guaranteed == rl(cpu="2", memory="1Gi")
        shrunk = top_up(grown, reservation_id="r1", amount=rl(cpu="500m"))
        assert shrunk.guaranteed == rl(cpu="500m")  # memory dropped to zero and disappears
        assert shrunk.reservations["r1"].amount == rl(cpu="500m")

    def test_top_up_can_bind(self) -> None:
        state = top_up(booked(cpu="1"), reservation_id="r1", amount=rl(cpu="1"), pod_uid="p1")
        assert state.reservations["r1"].pod_uid == "p1"
        assert state.reservation_for_pod("p1") == state.reservations["r1"]

    def test_unknown_reservation(self) -> None:
        with pytest.raises(LedgerError, match="no reservation nope in tenant team-a"):
            top_up(empty(), reservation_id="nope", amount={})

    def test_bind_once_to_one_pod(self) -> None:
        state = bind(booked(cpu="1"), reservation_id="r1", pod_uid="p1")
        assert bind(state, reservation_id="r1", pod_uid="p1") is state
        with pytest.raises(LedgerError, match="bound to pod p1, not p2"):
            bind(state, reservation_id="r1", pod_uid="p2")


class TestLifecycle:
    def test_confirm_turns_the_reservation_into_a_charge(self) -> None:
        state = bind(booked(cpu="1"), reservation_id="r1", pod_uid="p1")
        confirmed = confirm(
            state, pod_uid="p1", reservation_id="r1", tier="guaranteed", amount=rl(cpu="1")
        )
        assert confirmed.guaranteed == rl(cpu="1")  # usage stays
        assert len(confirmed.reservations) == 0
        assert confirmed.reservation_for_pod("p1") is None
        assert confirmed.charges["p1"] == Charge("guaranteed", rl(cpu="1"))

    def test_confirm_is_idempotent(self) -> None:
        state = booked(cpu="1")
        once = confirm(state, pod_uid="p1", reservation_id="r1", tier="guaranteed", amount={})
        twice = confirm(once, pod_uid="p1", reservation_id="r1", tier="guaranteed", amount={})
        assert twice is once

    def test_confirm_without_reservation_charges_the_pod(self) -> None:
        state = confirm(
            empty(), pod_uid="p9", reservation_id=None, tier="burst", amount=rl(cpu="2")
        )
        assert state.burst == rl(cpu="2")
        assert state.charges["p9"] == Charge("burst", rl(cpu="2"))

    def test_confirm_ignores_a_reservation_bound_to_another_pod(self) -> None:
        state = bind(booked(cpu="1"), reservation_id="r1", pod_uid="p1")
        other = confirm(
            state, pod_uid="p2", reservation_id="r1", tier="guaranteed", amount=rl(cpu="3")
        )
        assert "r1" in other.reservations
        assert other.guaranteed == rl(cpu="4")

    def test_release_happens_exactly_once(self) -> None:
        state = confirm(
            booked(cpu="1"), pod_uid="p1", reservation_id="r1", tier="guaranteed", amount={}
        )
        released = release(state, pod_uid="p1")
        assert released.guaranteed == {}
        assert len(released.charges) == 0
        assert release(released, pod_uid="p1") is released

    def test_release_of_an_unconfirmed_bound_pod_frees_its_reservation(self) -> None:
        state = bind(booked(cpu="1"), reservation_id="r1", pod_uid="p1")
        released = release(state, pod_uid="p1")
        assert released.guaranteed == {}
        assert len(released.reservations) == 0

    def test_release_of_an_unknown_pod_is_a_no_op(self) -> None:
        state = booked(cpu="1")
        assert release(state, pod_uid="nobody") is state

    def test_cancel(self) -> None:
        state = cancel(booked(cpu="1"), reservation_id="r1")
        assert state.guaranteed == {}
        assert len(state.reservations) == 0
        assert cancel(state, reservation_id="r1") is state

    def test_expire_removes_only_due_reservations(self) -> None:
        state = booked(cpu="1")
        state = book(state, reservation_id="r2", tier="burst", amount=rl(cpu="2"), now=200, ttl=120)
        kept, expired = expire(state, now=219.9)
        assert kept is state
        assert expired == ()
        later, expired = expire(state, now=220)
        assert [r.id for r in expired] == ["r1"]
        assert later.guaranteed == {}
        assert later.burst == rl(cpu="2")

    def test_expire_can_keep_bound_reservations(self) -> None:
        state = bind(booked(cpu="1"), reservation_id="r1", pod_uid="p1")
        state = book(state, reservation_id="r2", tier="burst", amount=rl(cpu="2"), now=0, ttl=1)
        kept, expired = expire(state, now=1000, only_unbound=True)
        assert [r.id for r in expired] == ["r2"]
        assert kept.guaranteed == rl(cpu="1")
        assert kept.burst == {}
        assert [r.id for r in expire(state, now=1000)[1]] == ["r2", "r1"]  # by expiry

    def test_resize_charges_the_delta(self) -> None:
        state = confirm(
            booked(cpu="1"), pod_uid="p1", reservation_id="r1", tier="guaranteed", amount={}
        )
        grown, known = resize(state, pod_uid="p1", delta=rl(cpu="500m"))
        assert known
        assert grown.guaranteed == rl(cpu="1500m")
        assert grown.charges["p1"].amount == rl(cpu="1500m")
        shrunk, _ = resize(grown, pod_uid="p1", delta=rl(cpu="-1"))
        assert shrunk.guaranteed == rl(cpu="500m")
        assert release(shrunk, pod_uid="p1").guaranteed == {}

    def test_resize_of_a_bound_reservation(self) -> None:
        state = bind(booked(cpu="1"), reservation_id="r1", pod_uid="p1")
        grown, known = resize(state, pod_uid="p1", delta=rl(cpu="1"))
        assert known
        assert grown.reservations["r1"].amount == rl(cpu="2")

    def test_resize_of_an_unknown_pod_changes_nothing(self) -> None:
        state = booked(cpu="1")
        assert resize(state, pod_uid="x", delta=rl(cpu="1")) == (state, False)


class TestSerialisation:
    def test_round_trip(self) -> None:
        state = bind(booked(cpu="1500m", memory="1Gi"), reservation_id="r1", pod_uid="p1")
        state = book(state, reservation_id="r2", tier="burst", amount=rl(cpu="1"), now=5, ttl=10)
        state = confirm(state, pod_uid="p3", reservation_id=None, tier="burst", amount=rl(cpu="2"))
        document = ledger_to_json(state)
        assert document["used"] == {
            "guaranteed": {"cpu": "1500m", "memory": "1Gi"},
            "burst": {"cpu": "3"},
        }
        assert document["reservations"][0] == {
            "id": "r1",
            "tier": "guaranteed",
            "amount": {"cpu": "1500m", "memory": "1Gi"},
            "createdAt": 100,
            "expiresAt": 220,
            "podUID": "p1",
        }
        again = ledger_from_json(document)
        assert again == state
        assert again.reservation_for_pod("p1") == state.reservations["r1"]
        assert "charges" not in ledger_to_json(state, charges=False)

    @pytest.mark.parametrize(
        ("document", "message"),
        [
            ([], "ledger: expected an object"),
            ({"used": {}}, "ledger.tenant: expected a tenant name"),
            ({"tenant": "a", "used": {"gold": {}}}, "a.used: unknown tier 'gold'"),
            (
                {"tenant": "a", "used": {"burst": {"cpu": "4x"}}},
                'a.used.burst.cpu: invalid quantity "4x"',
            ),
            (
                {"tenant": "a", "reservations": [{"id": "r", "tier": "x"}]},
                "a.reservations[0].tier: tier must be guaranteed or burst",
            ),
            ({"tenant": "a", "charges": []}, "a.charges: expected an object keyed by pod uid"),
        ],
    )
    def test_bad_documents_name_the_field(self, document: object, message: str) -> None:
        with pytest.raises(LedgerError) as caught:
            ledger_from_json(document)
        assert str(caught.value).startswith(message)

    def test_usage_snapshot_in_the_status_shape(self) -> None:
        store = ledger_from_usage(
            {
                "tenants": {
                    "team-a": {
                        "guaranteed": {"cpu": "4"},
                        "ceiling": {"cpu": "6"},
                        "used": {"guaranteed": {"cpu": "4"}, "burst": {"cpu": "1500m"}},
                        "reservations": 3,
                    }
                },
                "synced": True,
            }
        )
        state = store.get("team-a")
        assert state.guaranteed == rl(cpu="4")
        assert state.burst == rl(cpu="1500m")
        assert store.get("ml") == TenantLedger("ml")
        with pytest.raises(LedgerError, match='expected an object with a "tenants" object'):
            ledger_from_usage({"team-a": {}})


class TestMemoryLedger:
    def test_update_commits_or_not(self) -> None:
        store = MemoryLedger()

        def add(state: TenantLedger) -> tuple[TenantLedger, int]:
            new = book(
                state,
                reservation_id=f"r{len(state.reservations)}",
                tier="burst",
                amount=rl(cpu="1"),
                now=0,
                ttl=10,
            )
            return new, len(new.reservations)

        assert store.update("team-a", add, commit=False) == 1
        assert store.get("team-a") == TenantLedger("team-a")
        assert store.update("team-a", add) == 1
        assert store.update("team-a", add) == 2
        assert store.get("team-a").burst == rl(cpu="2")
        assert set(store.snapshot()) == {"team-a"}
        assert [ledger.tenant for ledger in store] == ["team-a"]

    def test_expire_across_tenants(self) -> None:
        store = MemoryLedger([booked(cpu="1"), TenantLedger("ml")])
        assert store.expire(now=1000, only_unbound=True)[0].id == "r1"
        store = MemoryLedger([bind(booked(cpu="1"), reservation_id="r1", pod_uid="p")])
        assert store.expire(now=1000, only_unbound=True) == ()
        assert [r.id for r in store.expire(now=1000)] == ["r1"]
        assert store.get("team-a").guaranteed == {}

    def test_transact_never_suspends_so_concurrent_tasks_never_over_admit(self) -> None:
        quota = build_quota(rl(cpu="4", memory="8Gi", pods="20"), ratio=Fraction(3, 2))
        request = rl(cpu="500m", memory="256Mi", pods="1")
        store = MemoryLedger()

        def admit(state: TenantLedger, rid: str) -> tuple[TenantLedger, str | None]:
            decision = check(quota, state, request)
            if decision.tier is None:
                return state, None
            return book(
                state, reservation_id=rid, tier=decision.tier, amount=request, now=0, ttl=60
            ), decision.tier

        async def main() -> list[str | None]:
            # The first step of the coroutine completes it: nothing can interleave.
            steps = store.transact("team-a", functools.partial(admit, rid="first")).__await__()
            with pytest.raises(StopIteration):
                steps.send(None)
            return await asyncio.gather(
                *(
                    store.transact("team-a", functools.partial(admit, rid=f"r{n}"))
                    for n in range(40)
                )
            )

        tiers = asyncio.run(main())
        assert tiers.count("guaranteed") == 7
        assert tiers.count("burst") == 4
        assert tiers.count(None) == 29
        assert asyncio.run(store.transact("team-a", lambda s: (s, len(s.reservations)))) == 12

    def test_concurrent_check_and_book_never_over_admits(self) -> None:
        quota = build_quota(rl(cpu="4", memory="8Gi", pods="20"), ratio=Fraction(3, 2))
        request = rl(cpu="500m", memory="256Mi", pods="1")
        store = MemoryLedger()
        tiers: list[str | None] = []
        lock = threading.Lock()
        start = threading.Barrier(16)

        def admit(state: TenantLedger, rid: str) -> tuple[TenantLedger, str | None]:
            decision = check(quota, state, request)
            if decision.tier is None:
                return state, None
            return book(
                state, reservation_id=rid, tier=decision.tier, amount=request, now=0, ttl=60
            ), decision.tier

        def worker(index: int) -> None:
            start.wait()
            for attempt in range(25):
                rid = f"w{index}-{attempt}"
                tier = store.update("team-a", functools.partial(admit, rid=rid))
                with lock:
                    tiers.append(tier)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(tiers) == 400
        assert tiers.count("guaranteed") == 8
        assert tiers.count("burst") == 4
        assert tiers.count(None) == 388
        final = store.get("team-a")
        assert final.guaranteed == rl(cpu="4", memory="2Gi", pods="8")
        assert final.burst == rl(cpu="2", memory="1Gi", pods="4")
        assert len(final.reservations) == 12


def test_a_booking_with_peers_reads_the_peers_in_use_and_any_other_as_empty() -> None:
    # tests/tenants/cohorts covers the rule on these ledgers; this is what the store hands it.
    busy = TenantLedger.of("team-b", guaranteed={"cpu": Quantity.parse("2")})
    other = TenantLedger.of("team-z", guaranteed={"cpu": Quantity.parse("1")})
    store = MemoryLedger([busy, other, TenantLedger.of("team-a")])
    seen: dict[str, object] = {}

    def change(
        ledger: TenantLedger, peers: Mapping[str, TenantLedger]
    ) -> tuple[TenantLedger, None]:
        seen["items"] = list(peers.items())
        seen["keys"] = list(peers)
        seen["len"] = len(peers)
        seen["in"] = ("team-b" in peers, "team-c" in peers, "team-z" in peers)
        seen["idle"] = peers["team-c"]
        with pytest.raises(KeyError):
            peers["team-z"]  # not a peer, though it has a ledger
        return ledger, None

    peers = ("team-c", "team-b", "team-a")  # team-c never booked
    asyncio.run(store.transact_with_peers("team-a", peers, change))
    assert seen["items"] == [("team-a", TenantLedger.of("team-a")), ("team-b", busy)]
    assert seen["keys"] == ["team-a", "team-b"]
    assert seen["len"] == 2
    assert seen["in"] == (True, False, False)
    assert seen["idle"] == TenantLedger("team-c")
    assert store.snapshot().keys() == {"team-a", "team-b", "team-z"}  # nothing was written
