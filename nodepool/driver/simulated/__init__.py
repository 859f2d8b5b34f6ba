"""The simulated driver: an in-memory provider for tests and benchmarks."""
