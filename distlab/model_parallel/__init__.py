"""Chapter 7: tensor, sequence, pipeline, context and expert parallelism."""
