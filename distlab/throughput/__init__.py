"""Chapter 10: throughput debugging (profiling, input starvation, stragglers, checkpoint interval,
elastic and spot training)."""
