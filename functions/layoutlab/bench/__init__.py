"""Access benchmarks: patterns, readers, cold single-core runner, request accounting."""
