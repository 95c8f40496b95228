"""EAGLE-3's training step by SpecForge 0.2 (SGLang's trainer; run in .references/specforge):

    .references/specforge/bin/python tests/references/specforge_eagle3.py CASE.pt RESULT.pt

CASE.pt (written by tests/test_references.py): the draft's layer config, the weights under
SpecForge's names (the same as draftsmith's, plus embed_tokens), one sequence (input ids, the
target's fused aux hidden states, its logits, the loss mask), the draft vocabulary (t2d),
ttt_steps and the per-step decay. The draft is SpecForge's LlamaForCausalLMEagle3 and the step
its OnlineEagle3Model.forward (sdpa backend); the inputs are shifted as its TargetHead.preprocess
shifts them, and the steps are summed with ploss_decay^i as Eagle3TrainStrategy sums them.

SpecForge installs without SGLang (its modelling imports alone), but its KL loss is a Triton
kernel (specforge/core/loss.py, LogSoftmaxLoss): Triton is a GPU compiler. Here `triton` is an
empty stand-in so that the module imports, and LogSoftmaxLoss.apply is the module's own
reference implementation beside the kernel (_compute_loss, the same sum); torch.compile is off
(TORCHDYNAMO_DISABLE: its CPU backend needs a C++ toolchain). RESULT.pt: the loss and the
gradient of every trainable parameter.
"""

import os
import sys
import types

os.environ["TORCHDYNAMO_DISABLE"] = "1"


class _Anything:
    """What the Triton kernels' decorators and annotations touch at import: accepts everything."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Anything()


def import_without_triton():
    """specforge's EAGLE-3 modules, imported with `triton` an empty stand-in, which is removed
    again afterwards (torch and transformers look for a real Triton where they have a use for
    one: what needs neither is imported first)."""
    import specforge.core.compact_teacher  # noqa: F401
    import specforge.core.eagle3_adapters  # noqa: F401
    import specforge.core.lk_loss  # noqa: F401
    import specforge.modeling.draft  # noqa: F401
    import specforge.utils  # noqa: F401

    for name in ("triton", "triton.language"):
        module = types.ModuleType(name)
        module.__getattr__ = _Anything().__getattr__  # no __path__: torch sees no Triton backends
        sys.modules[name] = module
    sys.modules["triton"].language = sys.modules["triton.language"]
    try:
        from specforge.algorithms.eagle3 import model as eagle3_model
        from specforge.core import loss as core_loss
    finally:
        del sys.modules["triton"], sys.modules["triton.language"]
    return eagle3_model, core_loss


def main(case_path: str, out_path: str) -> None:
    import torch

    eagle3_model, core_loss = import_without_triton()
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from specforge.utils import padding
    from transformers import LlamaConfig

    eagle3_model.LogSoftmaxLoss = types.SimpleNamespace(apply=core_loss._compute_loss)
    torch.manual_seed(0)
    case = torch.load(case_path)
    config = LlamaConfig(num_hidden_layers=1, **case["config"])
    draft = LlamaForCausalLMEagle3(config, attention_backend="sdpa").float()
    missing, unexpected = draft.load_state_dict(case["weights"], strict=False)
    if [k for k in missing if "rotary" not in k] or unexpected:
        raise SystemExit(f"weights do not match SpecForge's names: missing {missing}, unexpected {unexpected}")
    draft.freeze_embedding()  # as SpecForge trains: the embedding is the target's, frozen
    draft.train()
    trainer = eagle3_model.OnlineEagle3Model(draft, length=case["ttt_steps"], attention_backend="sdpa")

    b = case["batch"]
    # TargetHead.preprocess: input ids and the target shifted left one place, the loss mask not
    input_ids = padding(b["input_ids"][None], left=False)
    target = padding(b["logits"][None].float(), left=False)
    loss_mask = b["loss_mask"][None][..., None]
    plosses = trainer(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        target=target,
        loss_mask=loss_mask,
        hidden_states=b["hidden_states"][None].float(),
    )[0]
    # Eagle3TrainStrategy: loss = sum(ploss_decay**i * plosses[i])
    loss = sum(case["ttt_decay"] ** i * p for i, p in enumerate(plosses))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in draft.named_parameters() if p.requires_grad}
    torch.save({"loss": loss.detach(), "grads": grads}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
