"""Training: configs, data, features, losses, trainer (later issues)."""
