"""Training drafters: recipes (config), data, losses, one accelerate trainer, checkpoints.

`python -m draftsmith.train RECIPE.yaml [--output-dir D] [--resume] [--section.key=value ...]`
or `draftsmith train ...`; under `accelerate launch --config_file configs/accelerate/<mode>.yaml
-m draftsmith.train RECIPE.yaml` for DDP, DeepSpeed ZeRO-2/3 or FSDP.
"""
