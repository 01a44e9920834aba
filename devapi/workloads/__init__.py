"""Workloads in the test API server: Deployments, ReplicaSets, Jobs and CronJobs, and the
simulated controllers (and, on request, scheduler and kubelet) that turn them into pods through
the same admission chain as any client's create.
"""
