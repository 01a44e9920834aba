"""Queue mode: over-quota pods wait behind tenantgate's scheduling gate and are released in order.

``admission`` decides at admission whether a pod waits, ``gate`` is the validating webhook's
side of the gate, ``line`` is one tenant's queue, ``book`` every tenant's (from the watch), and
``release`` picks the pods that fit now, books them and paces the releases.
"""
