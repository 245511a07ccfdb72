"""Chapter 4: mixed precision (number formats, loss scaling, master weights, fp8)."""
