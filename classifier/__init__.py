"""Understanding a pod: quantities, exact pod requests, rules, profiles and the mutation plan.

Pure code: no I/O, no clock. Imports only the standard library and pydantic.
"""
