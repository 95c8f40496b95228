"""Training drafters: recipes (config), data, losses, one accelerate trainer, checkpoints.

`python -m draftsmith.train RECIPE.yaml [--output-dir D] [--resume] [--section.key=value ...]`
or `draftsmith train ...`; under `accelerate launch --config_file configs/accelerate/<mode>.yaml
-m draftsmith.train RECIPE.yaml` for DDP, DeepSpeed ZeRO-2/3 or FSDP.
"""

import sys
import types


class _TrainPackage(types.ModuleType):
    """`from draftsmith import train` names this package (a subpackage wins over any attribute of
    the same name), so the package itself is the documented `train(recipe, resume=None)`."""

    def __call__(self, recipe, resume: bool | None = None) -> dict:
        from draftsmith.train.trainer.loop import train

        return train(recipe, resume=resume)


sys.modules[__name__].__class__ = _TrainPackage
