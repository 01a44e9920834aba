"""Tenants: config, ledger, tiers, reservations, quota decisions and the controller.

Everything outside ``tenants.kube`` is pure: it does no I/O and takes ``now`` as an argument.
"""
