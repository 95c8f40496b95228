"""DFlash's training step by vllm-project/speculators 0.9 (run in .references/speculators):

    .references/speculators/bin/python tests/references/speculators_dflash.py CASE.pt RESULT.pt

CASE.pt (written by tests/test_references.py): the draft's layer config, the weights under
speculators' names, one sequence (input ids, the target's fused context features, its last
hidden state before the final norm, the loss mask), the anchors draftsmith drew, block_size,
mask token and loss decay γ. It goes through speculators' own DFlashDraftModel.forward and its
KL loss (fp32, eager attention: flex attention's default needs a GPU). One substitution: the
random anchor draw (speculators.models.dflash.utils.select_anchors, a torch.randperm) returns
the anchors draftsmith drew, so that both score the same blocks; the draw itself is compared
nowhere. RESULT.pt: the loss, the gradient of every trainable parameter, and the target-entropy
term under speculators' own reduction (draftsmith logs KL + H(p)).
"""

import sys

import torch
from speculators.losses import resolve_loss_config
from speculators.models.dflash import core
from speculators.models.dflash.config import DFlashSpeculatorConfig
from speculators.models.dflash.core import DFlashDraftModel
from speculators_common import build, entropy, load_case, save_result, speculators_config
from transformers import Qwen3Config


def main(case_path: str, out_path: str) -> None:
    case = load_case(case_path)
    layer = Qwen3Config(**case["config"])
    layer._attn_implementation = "eager"
    bs = case["block_size"]
    config = DFlashSpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=case["config"]["vocab_size"],
        block_size=bs,
        aux_hidden_state_layer_ids=case["aux_layers"],
        mask_token_id=case["mask_token_id"],
        speculators_config=speculators_config("dflash", bs - 1),
    )
    model = build(DFlashDraftModel, config, case["weights"])

    anchors = case["anchors"]
    core.select_anchors = lambda loss_mask, n, block_size: (anchors, torch.ones_like(anchors, dtype=torch.bool))
    entropy_terms = []
    real_metrics = core.compute_metrics

    def compute_metrics(logits, targets, loss_mask, block_size, **kw):
        h, _ = real_metrics(logits, targets, loss_mask, block_size, **{**kw, "loss_config": {"h": (entropy, 1.0)}})
        entropy_terms.append(h.detach())
        return real_metrics(logits, targets, loss_mask, block_size, **kw)

    core.compute_metrics = compute_metrics
    b = case["batch"]
    T = b["input_ids"].shape[0]
    _, loss, _ = model(
        hidden_states=b["hidden_states"][None].float(),
        input_ids=b["input_ids"][None],
        loss_mask=b["loss_mask"][None],
        verifier_last_hidden_states=b["verifier_last_hidden_states"][None].float(),
        document_ids=torch.zeros(1, T, dtype=torch.long),
        loss_config=resolve_loss_config("kl_div", "eager"),  # the fused kernel needs Triton
        gamma=case["gamma"],
        max_anchors=anchors.numel(),
    )
    save_result(loss, entropy_terms, model, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
