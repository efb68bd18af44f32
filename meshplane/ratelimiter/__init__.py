"""The global rate-limit service Envoy calls (`envoy.service.ratelimit.v3`), configured by the local agent.

Limits arrive over xDS as envoyproxy/ratelimit's `RateLimitConfig` and are compiled once per update;
counters live in memory (one replica) or in Redis (shared by replicas).
"""
