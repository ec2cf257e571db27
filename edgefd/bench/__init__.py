"""Benchmarks that print figures (never asserted on time)."""
