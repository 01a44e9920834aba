"""The devapi tests drive the test API server only through the real Kubernetes clients."""
