"""Medusa-1's training step by medusa-llm 0.1, the Medusa authors' package (run in
.references/medusa):

    .references/medusa/bin/python tests/references/medusa_medusa1.py CASE.pt RESULT.pt

CASE.pt (written by tests/test_references.py): the heads' weights under medusa-llm's names
(medusa_head.{i}.0.linear, medusa_head.{i}.1), the target's LM head, one batch (input ids,
attention mask, labels with -100 outside the replies) and the target's last hidden state. The
batch goes through medusa-llm's own MedusaModel.forward (heads on the base model's output) and
its trainer's compute_loss (medusa/train/train.py). Two stand-ins, nothing of the package edited:
the base model is a module that returns the given hidden state (its forward runs the base under
inference_mode and only reads outputs[0]; a base model of the target's shape would compute the
same tensor), and fastchat and the tokenizer (which train.py and MedusaModel import for data
and chat templates, never for the loss) are empty stand-ins.
RESULT.pt: the loss and the gradient of every head parameter.
"""

import sys
import types

import torch
from torch import nn


def stub_fastchat() -> None:
    for name in ("fastchat", "fastchat.conversation", "fastchat.model", "fastchat.model.model_adapter"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["fastchat.conversation"].SeparatorStyle = None
    sys.modules["fastchat.model.model_adapter"].get_conversation_template = None


class Base(nn.Module):
    """The base model as MedusaModel reads it: .model(...)[0], .lm_head, .config, .dtype, .device."""

    def __init__(self, hidden: torch.Tensor, lm_head: torch.Tensor):
        super().__init__()
        self.hidden = hidden
        self.lm_head = nn.Linear(lm_head.shape[1], lm_head.shape[0], bias=False)
        self.lm_head.weight.data.copy_(lm_head)
        self.config = types.SimpleNamespace()
        self.dtype, self.device = torch.float32, torch.device("cpu")
        self.model = lambda **kw: (self.hidden,)


def main(case_path: str, out_path: str) -> None:
    torch.manual_seed(0)
    case = torch.load(case_path)
    stub_fastchat()
    import medusa.model.medusa_model as mm
    from medusa.train.train import CustomizedTrainer

    mm.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda *a, **k: None)
    base = Base(case["hidden"].float(), case["lm_head"].float())
    model = mm.MedusaModel(base, case["num_heads"], case["num_layers"], "base")
    model.medusa_head.load_state_dict(case["weights"], strict=True)
    model.train()
    trainer = CustomizedTrainer.__new__(CustomizedTrainer)
    trainer.log = lambda logs: None
    loss = CustomizedTrainer.compute_loss(trainer, model, case["batch"])
    loss.backward()
    grads = {f"medusa_head.{n}": p.grad.detach().clone() for n, p in model.medusa_head.named_parameters()}
    torch.save({"loss": loss.detach(), "grads": grads}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
