"""Shipping a drafter: engine exports (export/, one module per format), the real engines that decode
them (engines/), `draftsmith crosscheck` (the engine agrees with our runtime) and `draftsmith publish`
(hub: the Hub repo and its model card)."""
