"""Load generation for the serving benchmarks: request bodies from real rows, driven by wrk."""
