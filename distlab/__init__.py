"""distlab: every number on the site, derived in code and checked at build time."""

__version__ = "0.1.0"
