"""What the speculators drivers (speculators_eagle3.py, speculators_dflash.py) share: the case
loaded, speculators' config around a draft's layer config, the draft built with the case's
weights, the target-entropy term and the result file. It runs in .references/speculators beside
them: a driver imports it from its own folder, which Python puts first on sys.path."""

import torch
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig


def load_case(case_path: str) -> dict:
    """CASE.pt (written by tests/test_references.py), with torch seeded as every driver starts."""
    torch.manual_seed(0)
    return torch.load(case_path)


def entropy(logits, targets):  # per position H(p) of the target's law, a loss_fn of speculators' shape
    logp = torch.log_softmax(targets.float(), -1)
    return -(logp.exp() * logp).sum(-1)


def speculators_config(algorithm: str, speculative_tokens: int) -> SpeculatorsConfig:
    """speculators' own wrapper of a draft: greedy proposals of `speculative_tokens`, a Llama verifier."""
    return SpeculatorsConfig(
        algorithm=algorithm,
        proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=speculative_tokens)],
        default_proposal_method="greedy",
        verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
    )


def build(model_class, config, weights: dict):
    """The draft in fp32, in training mode, with the case's weights (named as speculators names them)."""
    model = model_class(config).float()
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SystemExit(f"weights do not match speculators' names: missing {missing}, unexpected {unexpected}")
    model.train()
    return model


def save_result(loss, entropy_terms: list, model, out_path: str) -> None:
    """RESULT.pt: `loss` backpropagated, the entropy terms summed, every trainable parameter's gradient."""
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    torch.save({"loss": loss.detach(), "entropy": torch.stack(entropy_terms).sum(), "grads": grads}, out_path)
