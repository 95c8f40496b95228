"""EAGLE-1's training step by eagle-llm 1.2.1, the EAGLE authors' package (run in .references/eagle):

    .references/eagle/bin/python tests/references/eagle_eagle1.py CASE.pt RESULT.pt

CASE.pt (written by tests/test_references.py): the draft's weights under eagle-llm's names (the
same as draftsmith's, plus embed_tokens), its layer config, the target's LM head, one sequence
(input ids, the target's last hidden states after the final norm, the loss mask) and the loss
weights. The draft is eagle-llm's own eagle.model.cnets.Model (bias=False: draftsmith's FC has
none). Its training loss lives inline in the script eagle/train/main.py, which starts training
when imported, so the sample preparation (CustomDataset.__getitem__, lines 143-185) and the loss
(the training loop, lines 355-367) are restated here line for line, noise off.
RESULT.pt: the loss and the gradient of every draft parameter.
"""

import sys

import torch
from eagle.model.cnets import Model
from eagle.model.configs import EConfig
from torch import nn


def main(case_path: str, out_path: str) -> None:
    torch.manual_seed(0)
    case = torch.load(case_path)
    config = EConfig(num_hidden_layers=1, **case["config"])
    model = Model(config, load_emb=False, bias=False).float()
    missing, unexpected = model.load_state_dict(case["weights"], strict=False)
    if [k for k in missing if "rotary" not in k] or unexpected:
        raise SystemExit(f"weights do not match eagle-llm's names: missing {missing}, unexpected {unexpected}")
    head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
    head.weight.data.copy_(case["lm_head"])
    head.requires_grad_(False)
    model.train()

    # CustomDataset.__getitem__ (main.py 143-185), one sample, batch of one
    hidden_state = case["hidden_state"][None].float()
    input_ids = case["input_ids"][None]
    loss_mask = case["loss_mask"].tolist()
    loss_mask[-1] = 0
    input_ids_target = torch.cat((input_ids[:, 1:], torch.tensor([[0]])), dim=1)
    target = hidden_state[:, 1:, :]
    target = torch.cat((target, torch.zeros(1, 1, target.shape[2])), dim=1)
    data = {
        "hidden_states": hidden_state,
        "input_ids": input_ids_target,
        "attention_mask": torch.ones(1, hidden_state.shape[1], dtype=torch.long),
        "loss_mask": torch.tensor([loss_mask]),
        "target": target,
    }

    # the training step (main.py 355-367)
    criterion = nn.SmoothL1Loss(reduction="none")
    predict = model(data["hidden_states"], input_ids=data["input_ids"], attention_mask=data["attention_mask"])
    with torch.no_grad():
        target_head = head(data["target"])
        target_p = nn.Softmax(dim=2)(target_head)
        target_p = target_p.detach()
    out_head = head(predict)
    out_logp = nn.LogSoftmax(dim=2)(out_head)
    loss_mask = data["loss_mask"][:, :, None]
    plogp = target_p * out_logp
    ploss = -torch.sum(torch.sum(loss_mask * plogp, 2)) / (loss_mask.sum() + 1e-5)
    vloss = criterion(predict, data["target"])
    vloss = torch.sum(torch.mean(loss_mask * vloss, 2)) / (loss_mask.sum() + 1e-5)
    loss = case["v_w"] * vloss + case["p_w"] * ploss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    torch.save({"loss": loss.detach(), "grads": grads}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
