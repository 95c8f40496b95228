"""How long regenerating the replies takes, for the server that serves the target (`draftsmith plan`).

`data.source: regenerated` with `data.regenerate_with: endpoint` has the target write every reply
through a vLLM server (docs/your-target.md, step 3). The estimate takes that server's layout
explicitly:

- replicas: data-parallel copies of the target (`vllm serve --data-parallel-size N`, or N servers);
- tensor-parallel size: GPUs one replica is split over (`--tensor-parallel-size T`);
- requests in flight per replica: the client (`data.regenerate_concurrency` threads) sends
  replicas x this many at once.

A decode step of one replica reads its weights once from memory, split over its T GPUs, and
emits one token for each of its `c` requests in flight, so a step takes at least

    max(weight bytes / (T x bandwidth), c x 2 x params / (T x peak FLOP/s x utilisation))

and the server writes replicas x c / step tokens per second: while the weights' read bounds the
step, the time falls as 1/replicas and 1/c; past that, compute caps it. Prefill, the KV cache's
reads (which grow with c and the context) and scheduling are left out, so the figure is a
prediction that errs low, more so at many requests in flight. The defaults are the server the
page starts: one replica, on one GPU when the weights take at most half of its memory (the rest
holds the KV cache), else split over the node's GPUs (the 70B line); the client's own
`data.regenerate_concurrency` requests in flight.

No torch at import.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from draftsmith.errors import DraftsmithError

WEIGHT_SHARE = 0.5  # of one GPU's memory the weights may take on a single-GPU server (the rest: the KV cache)
PORT = 8000  # the page's server


def add_arguments(p: argparse.ArgumentParser, whole: type) -> None:
    """`draftsmith plan`'s flags for the regeneration server; `whole` parses a count >= 1."""
    p.add_argument(
        "--regen-replicas",
        type=whole,
        default=1,
        help="data-parallel replicas of the target serving the replies (vllm serve --data-parallel-size N; "
        "default 1: the page's one server)",
    )
    p.add_argument(
        "--regen-tp",
        type=whole,
        default=None,
        help="GPUs each replica is split over (--tensor-parallel-size; default: 1 when the target's weights take "
        "at most half of a GPU's memory, else --gpus)",
    )
    p.add_argument(
        "--regen-concurrency",
        type=whole,
        default=None,
        help="requests in flight per replica (default: the recipe's data.regenerate_concurrency over the replicas, "
        "what the client sends)",
    )


@dataclass
class Layout:
    """The server the replies are decoded on."""

    replicas: int
    tensor_parallel_size: int
    concurrency: float  # requests in flight per replica
    requests_in_flight: int  # what the client sends: data.regenerate_concurrency
    weights_per_gpu: float  # bytes
    fits: bool  # the weights take at most the plan's headroom of each GPU

    @property
    def gpus(self) -> int:
        return self.replicas * self.tensor_parallel_size


def layout(
    weight_bytes: float,
    gpu_memory: float,
    gpus: int,
    world: int,
    client_concurrency: int,
    *,
    replicas: int = 1,
    tp: int | None = None,
    concurrency: int | None = None,
    headroom: float = 0.9,
) -> Layout:
    """The regeneration server: the flags given, else the page's (the module docstring)."""
    if tp is None:
        tp = 1 if weight_bytes <= WEIGHT_SHARE * gpu_memory else gpus
    if replicas * tp > world:
        raise DraftsmithError(
            f"--regen-replicas {replicas} x --regen-tp {tp} = {replicas * tp} GPUs, more than the plan's {world} "
            "(--gpus x --nodes)"
        )
    total = client_concurrency if concurrency is None else replicas * concurrency
    return Layout(
        replicas=replicas,
        tensor_parallel_size=tp,
        concurrency=total / replicas,
        requests_in_flight=total,
        weights_per_gpu=weight_bytes / tp,
        fits=weight_bytes / tp <= headroom * gpu_memory,
    )


def tokens_per_s(lay: Layout, params: float, weight_bytes: float, bandwidth: float, flops: float) -> tuple[float, str]:
    """(reply tokens/s the server writes, what bounds a step: "bandwidth" or "compute");
    `flops`: one GPU's usable FLOP/s (peak x utilisation)."""
    tp = lay.tensor_parallel_size
    read_s = weight_bytes / (tp * bandwidth)
    compute_s = lay.concurrency * 2 * params / (tp * flops)
    step_s = max(read_s, compute_s)
    return lay.replicas * lay.concurrency / step_s, "bandwidth" if read_s >= compute_s else "compute"


def estimate(recipe, lay: Layout, replies: float, params: float, weight_bytes: float, bandwidth: float,
             flops: float, recipe_path: str = "") -> dict:  # fmt: skip
    """Hours to decode `replies` tokens on `lay`, with the layout, the rate and the commands
    (`recipe_path`: the recipe as the regeneration line names it)."""
    rate, bound = tokens_per_s(lay, params, weight_bytes, bandwidth, flops)
    return {
        **asdict(lay),
        "gpus": lay.gpus,
        "tokens_per_s": rate,
        "bound": bound,
        "reply_tokens": replies,
        "hours": replies / rate / 3600,
        "serve": serve_line(recipe, lay),
        "client": client_line(recipe, lay, recipe_path),
    }


def serve_line(recipe, lay: Layout) -> str:
    """The `vllm serve` line that starts `lay` (its served name: the recipe's data.regenerate_model)."""
    target = recipe.model.target
    line = f"vllm serve {target}"
    if lay.tensor_parallel_size > 1:
        line += f" --tensor-parallel-size {lay.tensor_parallel_size}"
    if lay.replicas > 1:
        line += f" --data-parallel-size {lay.replicas}"
    name = recipe.data.regenerate_model
    if name and name != target:
        line += f" --served-model-name {name}"
    return line + f" --port {PORT}"


def client_line(recipe, lay: Layout, recipe_path: str = "") -> str:
    """The line that regenerates through it (the recipe's own concurrency unless the layout needs more)."""
    line = f"draftsmith train {recipe_path or 'RECIPE'} --data-only"
    line += f" --data.regenerate_endpoint http://127.0.0.1:{PORT}/v1"
    if lay.requests_in_flight != recipe.data.regenerate_concurrency:
        line += f" --data.regenerate_concurrency {lay.requests_in_flight}"
    return line


def render(r: dict, bandwidth: float) -> list[str]:
    """The plan's lines for the regeneration: the layout it assumed, the prediction, the commands."""
    per = f"{r['concurrency']:g}"
    lines = [
        f"  regeneration server: {r['replicas']} replica(s) x {r['tensor_parallel_size']} GPU(s) (tensor parallel), "
        f"{per} request(s) in flight per replica ({r['requests_in_flight']} in all: data.regenerate_concurrency), "
        f"{bandwidth / 1e12:g} TB/s per GPU",
        f"  regeneration (prediction, errs low: prefill and KV-cache reads left out): ~{r['hours']:.2f} h, "
        f"{r['reply_tokens'] / 1e6:.1f}M reply tokens at ~{r['tokens_per_s']:,.0f} tokens/s ({r['bound']}-bound)",
    ]
    if not r["fits"]:
        lines.append(
            f"  regeneration server: {r['weights_per_gpu'] / 1e9:.1f} GB of weights per GPU do not fit: "
            "raise --regen-tp"
        )
    lines += [f"    serve:      {r['serve']}", f"    regenerate: {r['client']}"]
    return lines


__all__ = ["Layout", "add_arguments", "estimate", "layout", "render", "serve_line", "tokens_per_s"]
