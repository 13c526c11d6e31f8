"""Retention, quota eviction, dedup and the cleanup scheduler."""
