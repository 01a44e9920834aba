"""Pod groups: pods that only work together are admitted all or nothing.

* ``membership``: which group an admitted member belongs to, written on the pod by /mutate;
* ``admission``: a member at admission (gated until its whole group exists and fits), the
  group's known total, the warning it gets, and the denial of a group that can never fit;
* ``release``: which complete groups fit now, and the ledger change that books all their
  members at once (one compare-and-swap with several replicas);
* ``running``: the groups with released members, so a restarted member is admitted on its
  group's room without queueing behind other work;
* ``sizes``: the port that reads a group's size from the cluster (a Job, a PodGroup).

Everything here is pure; ``tenants/kube/`` reads sizes and removes gates.
"""
