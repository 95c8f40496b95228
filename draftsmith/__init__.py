"""draftsmith: train speculative-decoding drafters and measure their speedup end to end.

Kept import-light on purpose: `import draftsmith.errors` must not pull torch.
"""

__version__ = "0.1.0"
