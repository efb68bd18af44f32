"""The test harness: real processes, fault helpers, document builders, `eventually`, and the north client.

Tests and benchmarks import it alike; nothing here imports pytest, so benchmarks run without it.
"""
