"""Weighed evidence: what a person reads in a pod, each sign with a weight, summed per profile.

``signals`` reads the pod once into signals, ``weights`` holds the weights tenantgate ships,
and ``weigh`` compiles a config's table and picks the profile with the most evidence.
"""

from __future__ import annotations

from classifier.evidence.weigh import Evidence, Item, Weighing, compile_evidence

__all__ = ["Evidence", "Item", "Weighing", "compile_evidence"]
