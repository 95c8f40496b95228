"""Distillation losses for speculative-decoding drafters.

A drafter is useful in proportion to how often the target accepts its tokens. Under lossless
speculative sampling (Leviathan et al. 2023, sec. 3; Chen et al. 2023) a token drafted from q
is accepted with probability sum_x min(p(x), q(x)) = 1 - TVD(p, q), so every loss here pulls
the draft distribution q towards the target distribution p (DistillSpec, Zhou et al. 2023,
compares these divergences for exactly this purpose):

- ``fkl``: forward KL(p || q), classic distillation (Hinton et al. 2015); mass-covering.
- ``rkl``: reverse KL(q || p); mode-seeking (MiniLLM, Gu et al. 2024).
- ``jsd``: generalised JSD_beta of GKD (Agarwal et al. 2024, eq. 2) / DistillSpec.
- ``tvd``: total variation distance, directly 1 - acceptance probability (DistillSpec, sec. 3):
  the one divergence whose value is the objective itself (Leviathan et al. 2023, sec. 3).
- ``ce``: cross-entropy on the target's own next tokens (its generated data); not a divergence.

All math is float32 whatever the input dtype: bf16 keeps 8 mantissa bits, too few for sums
over a 100k-entry vocabulary.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from draftsmith.train.distributed import unwrap

KINDS = ("fkl", "rkl", "jsd", "tvd", "ce")
_DIVERGENCES = ("fkl", "rkl", "jsd", "tvd")
# Floor for log-probabilities: -inf logits (masked or padded vocabulary entries) give
# log p = -inf, and 0 * (-inf - -inf) = NaN in p * (log p - log q), whereas 0 * finite = 0.
# Both operands of a difference are <= 0, so differences of floored values never overflow.
_LOG_FLOOR = torch.finfo(torch.float32).min


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown loss kind {kind!r}; valid kinds: {', '.join(KINDS)}")


def _log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Floored log-softmax in float32; floored entries (exactly -inf) get no gradient.

    Each full pass over [N, V] costs: at T = 1 there is no division, and the floor is applied
    only when some logit is -inf (one min-reduction decides; nothing else can make -inf)."""
    logits = logits.float()
    logp = torch.log_softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)
    return logp.clamp(min=_LOG_FLOOR) if logits.numel() and bool(torch.isneginf(logits.detach().min())) else logp


def divergence(
    draft_logits: torch.Tensor,
    target_logits: torch.Tensor,
    kind: str,
    temperature: float = 1.0,
    beta: float = 0.5,
) -> torch.Tensor:
    """Per-row divergence between p = softmax(target/T) and q = softmax(draft/T).

    Shapes: draft_logits and target_logits [N, V]; returns float32 [N].

    - ``fkl``: KL(p || q) = sum_x p(x) (log p(x) - log q(x)).
    - ``rkl``: KL(q || p).
    - ``jsd``: beta * KL(p || m) + (1 - beta) * KL(q || m) with m = beta p + (1 - beta) q, the
      convention of GKD (Agarwal et al. 2024, eq. 2, P = teacher) and DistillSpec (Zhou et al.
      2023); beta in (0, 1). It is bounded by the entropy of (beta, 1 - beta) (log 2 at the
      symmetric beta = 0.5), JSD_beta / beta -> KL(p || q) as beta -> 0 and
      JSD_beta / (1 - beta) -> KL(q || p) as beta -> 1 (TRL's GKD reads beta the same way).
    - ``tvd``: 0.5 * sum_x |p(x) - q(x)|, in [0, 1].

    Target logits are not detached: pass logits computed under ``torch.no_grad`` for a frozen
    target. A divergence whose true value is infinite (e.g. KL(p || q) with q(x) = 0 < p(x))
    comes out huge or inf rather than NaN.
    """
    _check_divergence(draft_logits, target_logits, kind, temperature, beta)
    return _divergence(_log_probs(draft_logits, temperature), _log_probs(target_logits, temperature), kind, beta)


def _check_divergence(draft_logits, target_logits, kind: str, temperature: float, beta: float) -> None:
    if kind == "ce":
        raise ValueError(
            "'ce' is not a divergence between two distributions: use "
            "cross_entropy(draft_logits, labels) on the target's next tokens"
        )
    if kind not in _DIVERGENCES:
        raise ValueError(
            f"unknown divergence kind {kind!r}; valid divergences: {', '.join(_DIVERGENCES)} "
            f"(all loss kinds: {', '.join(KINDS)})"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if kind == "jsd" and not 0.0 < beta < 1.0:
        # At beta = 0 or 1 JSD_beta is identically 0: a silent no-op loss.
        raise ValueError(f"jsd needs beta in (0, 1), got {beta}")
    if draft_logits.shape != target_logits.shape or draft_logits.dim() != 2:
        raise ValueError(
            f"expected two [N, V] tensors of one shape, got {tuple(draft_logits.shape)} and "
            f"{tuple(target_logits.shape)}"
        )


def _divergence(logq: torch.Tensor, logp: torch.Tensor, kind: str, beta: float) -> torch.Tensor:
    """`divergence` from the (floored) log-probabilities of the draft and the target."""
    if kind == "fkl":  # q itself is not needed: one exp pass fewer
        return (logp.exp() * (logp - logq)).sum(-1)
    p, q = logp.exp(), logq.exp()
    if kind == "rkl":
        return (q * (logq - logp)).sum(-1)
    if kind == "tvd":
        return 0.5 * (p - q).abs().sum(-1)
    # log m by logsumexp: m >= beta * p, so KL(p || m) stays finite even for disjoint supports.
    logm = torch.logsumexp(torch.stack((logp + math.log(beta), logq + math.log1p(-beta))), dim=0)
    return beta * (p * (logp - logm)).sum(-1) + (1.0 - beta) * (q * (logq - logm)).sum(-1)


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """A law's log-probabilities at T = 1, float32, floored (see _LOG_FLOOR): what `soft_loss`
    takes for the target, computed once where several draft rows are scored on the same rows."""
    return _log_probs(logits, 1.0)


def soft_loss(draft_logits: torch.Tensor, target_logp: torch.Tensor, kind: str, beta: float = 0.5) -> torch.Tensor:
    """Per-row loss [N] of draft logits [N, V] against the target's law given as log-probabilities
    [N, V] (`log_probs`; a constant: no gradient flows into it). The `drafter.divergence` of the
    kinds that train on the target's soft labels (EAGLE, EAGLE-3, Medusa distill, DFlash distill).

    ``fkl`` is computed as their papers' soft cross-entropy -sum_x p log q = KL(p || q) + H(p): the
    gradient of forward KL, with the value these kinds have always logged. The others are
    `divergence`'s (``tvd``: 1 - the expected acceptance of a token drafted from q)."""
    logq = _log_probs(draft_logits, 1.0)
    target_logp = target_logp.detach()
    if kind == "fkl":
        return -(target_logp.exp() * logq).sum(-1)
    _check_divergence(draft_logits, target_logp, kind, 1.0, beta)
    return _divergence(logq, target_logp, kind, beta)


def cross_entropy(draft_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy -log q(label), float32. Shapes: [N, V], [N] -> [N].

    Labels equal to -100 (the ``F.cross_entropy`` ignore index) give 0.
    """
    return F.cross_entropy(draft_logits.float(), labels, reduction="none")


@torch.no_grad()
def _acceptance_stats(draft_rows: torch.Tensor, target_rows: torch.Tensor, logs=None) -> tuple[float, float]:
    """Sums over rows of sum_x min(p, q) at T = 1 (Leviathan et al. 2023, sec. 3: the
    probability that one token drafted from q is accepted) and of argmax agreement (greedy
    acceptance). logs: (log q, log p) at T = 1 when the loss already computed them."""
    if logs is None:
        logs = (torch.log_softmax(draft_rows.float(), -1), torch.log_softmax(target_rows.float(), -1))
    logq, logp = logs
    # min(p, q) = exp(min(log p, log q)): one exp pass instead of two softmaxes
    accept = torch.minimum(logp, logq).exp_().sum(-1).sum()
    top1 = (logp.argmax(-1) == logq.argmax(-1)).sum()
    return float(accept), float(top1)


def distillation_loss(
    draft_logits: torch.Tensor,
    target_logits: torch.Tensor | None,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    kind: str = "fkl",
    temperature: float = 1.0,
    beta: float = 0.5,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Masked mean of a per-token distillation loss over a batch of sequences.

    Shapes: draft_logits [B, T, V_d], target_logits [B, T, V_t] (or None for ``ce``),
    input_ids [B, T], loss_mask [B, T] (non-zero where the token is a training target, e.g. an
    assistant token). Position t's logits predict token t+1, so position t counts when
    loss_mask[:, t+1] is set; the last position predicts nothing inside the sequence.

    V_d and V_t may differ by embedding padding (one tokenizer): both are cut to min(V_d, V_t)
    for divergences and stats. ``ce`` (the draft's cross-entropy on input_ids[:, t+1], the
    target's own tokens) uses the draft's full vocabulary, so it does not depend on whether
    target_logits is given.

    Returns (loss, stats). loss is 0, still attached to the graph, when nothing is counted.
    stats holds python floats: ``loss``, ``num_tokens``, and when target_logits is given
    ``token_acceptance`` (mean of sum_x min(p, q) at T = 1) and ``top1_agreement``; the means
    are 0 when num_tokens is 0, so weight them by num_tokens when averaging across batches.
    """
    _check_kind(kind)
    if target_logits is None and kind != "ce":
        raise ValueError(f"loss kind {kind!r} needs target_logits (only 'ce' works without)")
    shape = tuple(input_ids.shape)
    shapes = [tuple(draft_logits.shape[:2]), tuple(loss_mask.shape)]
    if target_logits is not None:
        shapes.append(tuple(target_logits.shape[:2]))
    if len(shape) != 2 or any(s != shape for s in shapes) or draft_logits.dim() != 3:
        raise ValueError(f"shape mismatch: input_ids {shape}, [B, T] of the others {shapes}")

    # Select the counted rows before any softmax: only N x V is ever materialised in float32.
    counted = loss_mask[:, 1:] != 0  # [B, T-1]; row t of the logits is scored on token t+1
    draft_rows = draft_logits[:, :-1][counted]  # [N, V_d]
    target_rows = None if target_logits is None else target_logits[:, :-1][counted]
    return rows_loss(draft_rows, target_rows, input_ids[:, 1:][counted], kind, temperature, beta)


def rows_loss(
    draft_rows: torch.Tensor,
    target_rows: torch.Tensor | None,
    labels: torch.Tensor,
    kind: str = "fkl",
    temperature: float = 1.0,
    beta: float = 0.5,
) -> tuple[torch.Tensor, dict[str, float]]:
    """distillation_loss on rows already selected: draft_rows [N, V_d], target_rows [N, V_t] (or
    None for ``ce``), labels [N] (the next tokens, for ``ce``). What a task calls when the LM
    heads only ever computed the counted rows (`head_on_rows`)."""
    _check_kind(kind)
    if target_rows is None and kind != "ce":
        raise ValueError(f"loss kind {kind!r} needs target rows (only 'ce' works without)")
    num = draft_rows.shape[0]
    vocab = draft_rows.shape[-1] if target_rows is None else min(draft_rows.shape[-1], target_rows.shape[-1])
    if target_rows is not None:
        target_rows = target_rows[:, :vocab]
    logs = None  # (log q, log p) at T = 1, reused by the acceptance stats
    if kind == "ce":
        per_row = cross_entropy(draft_rows, labels)
    else:
        _check_divergence(draft_rows[:, :vocab], target_rows, kind, temperature, beta)
        logq = _log_probs(draft_rows[:, :vocab], temperature)
        with torch.no_grad():
            logp = _log_probs(target_rows, temperature)
        per_row = _divergence(logq, logp, kind, beta)
        logs = (logq.detach(), logp) if temperature == 1.0 else None
    # sum / max(N, 1) instead of mean(): an empty selection gives 0 (not NaN) with a grad_fn.
    loss = per_row.sum() / max(num, 1)

    stats = {"loss": float(loss.detach()), "num_tokens": float(num)}
    if target_rows is not None:
        accept, top1 = _acceptance_stats(draft_rows[:, :vocab], target_rows, logs)
        stats["token_acceptance"] = accept / max(num, 1)
        stats["top1_agreement"] = top1 / max(num, 1)
    return loss, stats


@contextlib.contextmanager
def head_on_rows(model, rows: torch.Tensor):
    """Inside the block, `model`'s LM head computes logits for the positions `rows` ([B, T] bool)
    only: its input [B, T, d] becomes [1, N, d], so the forward returns logits [1, N, V].

    A distillation loss reads the rows it counts (assistant tokens) and nothing else; computing
    the other rows' logits through a 49k-152k-row head, forward and backward, then dropping them
    was a large part of a training step. A forward pre-hook rather than a call of the head
    outside the model: the head still runs inside the model's own forward, where DDP, FSDP and
    ZeRO-3 expect its parameters to be used (and gathered), and the state dict is unchanged.
    Whatever the model does after the head (Gemma's soft-capping, Cohere's scale) still applies.
    """
    head = unwrap(model).get_output_embeddings()

    def select(module, args):
        # rows [B, T] of a head input [B, T, d], or of [1, B*T, d] (rows laid end to end for flash attention)
        return (args[0][rows.reshape(args[0].shape[:-1])].unsqueeze(0), *args[1:])

    handle = head.register_forward_pre_hook(select)
    try:
        yield
    finally:
        handle.remove()


def expected_acceptance_length(alpha: float, k: int) -> float:
    """Expected tokens emitted per target forward with k drafted tokens, each accepted with
    probability alpha independently: (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al. 2023,
    eq. 1), counting the bonus/correction token; alpha = 1 gives k + 1, alpha = 0 gives 1.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    # The geometric sum 1 + alpha + ... + alpha^k equals eq. 1 and needs no division,
    # so it stays exact as alpha -> 1.
    return float(sum(alpha**i for i in range(k + 1)))
