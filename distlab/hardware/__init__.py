"""Accelerators and links as data: datasheet peaks, memory and links (gpus.toml, interconnect.toml),
and the alpha-beta cost model of collectives on them. Pure Python, no experiments."""
