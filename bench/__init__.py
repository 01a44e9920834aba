"""tenantgate benchmarks (``python -m bench``): core cost, server load, scale curves, memory.

Every figure is measured against a baseline or a target in the same run; nothing here is a test.
"""
