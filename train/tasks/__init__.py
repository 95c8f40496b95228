"""The training tasks: one module per drafter kind, each a `TrainingTask` (base.py) with its recipe
`drafter:` dataclass; the registry (draftsmith/kinds.py) names them, the trainer drives them."""
