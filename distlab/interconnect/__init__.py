"""Chapter 9: interconnect and topology (the alpha-beta model fitted to real collectives, placement)."""
