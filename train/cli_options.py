"""The options of the training layer's commands that draftsmith/cli.py's parser declares without
torch: `draftsmith features` (also `python -m draftsmith.train.features`, train/features/cli.py).

Not in train/features/: importing anything there runs the feature cache's package, which loads torch,
and `draftsmith --help` must not.
"""

from __future__ import annotations

import argparse

# train/features/cache.py's CACHE_DTYPES (kept out of the import: it loads torch)
CACHE_DTYPE_NAMES = ("bfloat16", "float16", "float32")


def features_arguments(p: argparse.ArgumentParser) -> None:
    p.allow_abbrev = False
    p.description = "Extract the target's hidden states for a recipe into an offline feature cache."
    p.epilog = (
        "Any recipe key can be overridden: --data.max_rows=500. Rerun the same command after a kill: finished "
        "shards are kept."
    )
    p.add_argument("recipe", help="YAML recipe of an EAGLE drafter")
    p.add_argument("--output", "--output-dir", dest="output", required=True, help="the cache folder")
    p.add_argument(
        "--engine",
        choices=["transformers", "vllm"],
        default="transformers",
        help="who runs the target: transformers in this process (default), or vLLM in its own environment "
        "(bash scripts/install_engines.sh vllm, or vllm-gpu with --vllm), which shards a target too big for one "
        "device",
    )
    p.add_argument("--shard-rows", type=int, default=64, help="training rows per shard file")
    p.add_argument("--batch-size", type=int, default=4, help="rows per target forward")
    p.add_argument("--dtype", default="bfloat16", choices=list(CACHE_DTYPE_NAMES), help="stored dtype")
    p.add_argument("--layers", default=None, help="hidden-state indices instead of the drafter's, e.g. 2,5,-1")
    v = p.add_argument_group("--engine vllm (vLLM's extract_hidden_states; its own engine arguments)")
    v.add_argument("--tensor-parallel-size", type=int, default=None, help="vLLM: GPUs the target is split over")
    v.add_argument("--pipeline-parallel-size", type=int, default=None, help="vLLM: pipeline stages (e.g. nodes)")
    v.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any further vLLM engine argument (repeatable, JSON values), e.g. distributed_executor_backend=ray",
    )
    v.add_argument(
        "--from-hidden-states",
        default=None,
        metavar="DIR",
        help="read a folder vLLM already wrote (with its vllm-hidden-states.json) instead of starting vLLM",
    )
    v.add_argument("--vllm-log", default=None, help="vLLM's log file (default: OUTPUT/vllm.log)")
    v.add_argument(
        "--vllm",
        default=None,
        metavar="PATH",
        help="the vLLM to run: a venv, its python or its `vllm` executable (default: $DRAFTSMITH_VLLM, "
        "else .engines/vllm; GPUs: `bash scripts/install_engines.sh vllm-gpu`, then --vllm .engines/vllm-gpu)",
    )
