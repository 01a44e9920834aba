"""The HTTP edge: AdmissionReview wire format, Starlette app, JSONPatch, settings, metrics,
server and CLI."""
