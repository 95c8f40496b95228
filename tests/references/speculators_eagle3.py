"""EAGLE-3's training step by vllm-project/speculators 0.9 (run in .references/speculators):

    .references/speculators/bin/python tests/references/speculators_eagle3.py CASE.pt RESULT.pt

CASE.pt (written by tests/test_references.py): the draft's layer config, the weights under
speculators' names, one sequence (input ids, the target's fused aux hidden states, its last
hidden state before the final norm, the loss mask), ttt_steps and ttt_step_loss_decay. The
sequence goes through speculators' own shift_batch and Eagle3DraftModel.forward with its KL loss
(fp32, eager attention: flex attention's default needs a GPU); nothing of speculators is edited.
RESULT.pt: the loss, the gradient of every parameter that requires one, and the target-entropy
term under speculators' own alignment and reduction (speculators logs KL(p || q); draftsmith
logs the cross-entropy KL + H(p), whose gradient is the same).
"""

import sys

import torch
from speculators.losses import resolve_loss_config
from speculators.models.eagle3 import core
from speculators.models.eagle3.config import Eagle3SpeculatorConfig
from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.models.eagle3.data import shift_batch
from speculators_common import build, entropy, load_case, save_result, speculators_config
from transformers import LlamaConfig


def main(case_path: str, out_path: str) -> None:
    case = load_case(case_path)
    c = case["config"]
    layer = LlamaConfig(num_hidden_layers=1, **c)
    layer._attn_implementation = "eager"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=case["draft_vocab_size"],
        norm_before_residual=case["norm_before_residual"],
        eagle_aux_hidden_state_layer_ids=case["aux_layers"],
        speculators_config=speculators_config("eagle3", case["ttt_steps"]),
    )
    model = build(Eagle3DraftModel, config, case["weights"])

    entropy_terms = []
    real_metrics = core.compute_metrics

    def compute_metrics(logits, targets, loss_mask, prev_correct, ttt_step, decay, loss_config=None):
        h, _ = real_metrics(logits, targets, loss_mask, None, ttt_step, decay, {"h": (entropy, 1.0)})
        entropy_terms.append(h.detach())
        return real_metrics(logits, targets, loss_mask, prev_correct, ttt_step, decay, loss_config)

    core.compute_metrics = compute_metrics
    b = case["batch"]
    T = b["input_ids"].shape[0]
    s = shift_batch({**b, "lengths": torch.tensor([T]), "position_ids": torch.arange(T)})
    _, loss, _ = model(
        hidden_states=s["hidden_states"][None].float(),
        input_ids=s["input_ids"][None],
        document_ids=torch.zeros(1, T - 1, dtype=torch.long),
        loss_mask=s["loss_mask"][None],
        position_ids=s["position_ids"][None],
        verifier_last_hidden_states=s["verifier_last_hidden_states"][None].float(),
        ttt_steps=case["ttt_steps"],
        ttt_step_loss_decay=case["ttt_decay"],
        loss_config=resolve_loss_config("kl_div", "eager"),  # the fused kernel needs Triton
    )
    save_result(loss, entropy_terms, model, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
