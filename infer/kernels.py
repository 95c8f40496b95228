"""Which matmul a few-row forward runs on CPU: `--cpu-matmul auto` measures and chooses.

Speculative decoding pays only when verifying K+1 tokens costs little more than one decode step:
both stream every weight once (a 1.5B model in fp32 is 6 GB per forward). On CPUs without AMX or
AVX512-BF16 the library's default few-row matmul does not: measured on an AMD EPYC with AVX2
only (2 threads, torch 2.13, MKL 2024.2), `F.linear` on 5 rows of Qwen2.5-Coder-1.5B's MLP weight
took 2.9x its one-row time (a 5-token verify 3.05x a step),
because `x @ W.T` with the weight as the transposed right operand takes MKL's small-M path, while
one row takes its GEMV. The same product with the weight as the left operand, `(W @ x.T).T`, is
the skinny GEMM MKL streams well. Candidates (all exact fp32/bf16 products of the same weights,
only the summation order differs, so outputs equal up to argmax ties: the bench checks them):

    linear        torch's F.linear (the default everywhere; one-row calls take it unless the
                  kernel says otherwise)
    transposed    (W @ x.T).T through torch.mm: the weight as the left operand
    split         the weight as one block of rows per thread, [t, n/t, d], in one batched product
                  (torch.bmm; a view, no copy), one row and few rows alike. MKL runs a one-row
                  fp32 product on a single thread, its batched GEMM runs the blocks on all of
                  them: on the AVX2 EPYC (2 threads) SmolLM2-135M's 3072x576 fp32 weight took
                  0.55x F.linear's one-row time for one row and 1.02x for 5 rows (transposed
                  1.05x), where oneDNN's one-row product took 0.74x; on the 1.5B's 1536x8960
                  down projection, whose one-row product MKL already threads, it took 1.31x
                  (results/cpu-matmul/split-avx2.json). bf16 products gain nothing from it there.
    onednn        oneDNN's own linear (torch.ops.mkldnn._linear_pointwise, what inductor's
                  freezing pass emits) on a copy of the weight reordered once into oneDNN's
                  blocked layout, one row and few rows alike. On the AVX2 EPYC above it took
                  0.59x F.linear's one-row time on the 8960x1536 fp32 weight and 1.03x for 5
                  rows (scripts/bench_cpu_matmul.py; the real 1.5B's decode step 0.77x). The
                  copy doubles the linear weights' memory; oneDNN packs bf16 only on CPUs with
                  AVX512-BF16 or AVX-NE-CONVERT (elsewhere it is not a candidate).

A draft that runs alone (a draft LM: no target features) mostly decodes one row, a pure weight
stream, so bf16 (half the bytes) may pay: `choose_draft_dtype` prices a generation's worth of its
largest weight's products, a prefill and the one-row drafts, in bf16 and in its own dtype (by
F.linear, split or onednn, the fastest). Without bf16 arithmetic the prefill decides against it (6x
slower on the AVX2 EPYC). Either way only what the draft proposes changes, never the output
(the target verifies every token).

`choose_by_shape` times each kernel on copies of every weight shape the forward calls (enough
copies to exceed the caches, as a forward streams its weights; `choose_linear_kernel` for one
shape) at the verify's row count and at one row, and keeps for each shape the fastest at the
verify's rows for few-row products and, apart (`choose_one_row_kernel`), the fastest at one row
for one-row products (a decode step, a one-row draft); a kernel that copies the weights (onednn)
must also beat the fastest copy-free one by MIN_GAIN. The LM head is timed and chosen on its own
(`output_head`): on the AVX2 EPYC its one-row product took 8.2 ms on oneDNN against 15.2 ms with
`F.linear` (SmolLM2's 49152x576 fp32 head) where the layers' choice was `transposed`. A
prefill's many rows (more than MAX_ROWS) stay on the library's GEMM unless the chosen kernel's
PROMPT_ROWS_MEASURED-row product measured faster too (`takes_prompt_rows`). The measurement is
cached per CPU, threads, torch version, shape and dtype like `--dtype auto`'s
(infer/hardware.py), and every report records the choice with its timings.
CUDA always keeps `linear`. A forward that torch.compile traces (`--compile on`) always takes
F.linear, whichever kernel was chosen: the compiler lowers and packs the plain product itself
(inductor cannot lower oneDNN's packed weight), so the choice applies to the eager forwards.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from draftsmith.fileio import first_line

from .hardware import cpu_info, measurement_cache


def _transposed(x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if bias is None:
        return torch.mm(weight, x2d.t()).t().contiguous()
    return torch.addmm(bias.unsqueeze(1), weight, x2d.t()).t().contiguous()


def _split(x2d: torch.Tensor, blocks: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The product as one batched matmul over the weight's row blocks (`_split_blocks`): MKL's
    batched GEMM runs the blocks on separate threads, where its one-row GEMV runs on one."""
    rows, (t, n, d) = x2d.shape[0], blocks.shape
    xt = x2d.t().expand(t, d, rows)
    y = torch.bmm(blocks, xt) if bias is None else torch.baddbmm(bias.view(t, n, 1), blocks, xt)
    return y.view(1, t * n) if rows == 1 else y.view(t * n, rows).t().contiguous()


def _split_blocks(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [n, d] as [t, n/t, d]: one block of rows per thread (t the most threads, up to
    torch's, that divide n); a view, so no memory is added."""
    n, d = weight.shape
    t = torch.get_num_threads()
    while n % t:
        t -= 1
    return weight.detach().reshape(t, n // t, d)


def _onednn(x2d: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x2d.contiguous(), packed, bias, "none", [], "")


def _onednn_pack(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's layout of `weight`, tuned for one row (decode); RuntimeError where oneDNN cannot
    pack this dtype on this CPU."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


@dataclass(frozen=True)
class Kernel:
    fn: Callable | None  # (x [rows, in], the weight as `pack` keeps it, bias) -> [rows, out]; None: F.linear
    pack: Callable | None = None  # weight -> the kernel's own copy (made once per weight)
    one_row: bool = False  # also takes the one-row products of decode steps
    copies: bool = False  # `pack` makes a copy of the weight (memory), not a view


KERNELS = {
    "linear": Kernel(None),
    "transposed": Kernel(_transposed),
    "split": Kernel(_split, _split_blocks, True),
    "onednn": Kernel(_onednn, _onednn_pack, True, copies=True),
}
CHOICES = ("auto", *KERNELS)
MIN_GAIN = 0.9  # a candidate must take at most this fraction of linear's time to be chosen
MAX_ROWS = 64  # verify and tree sizes; longer inputs (prefill) keep the library's GEMM unless measured slower
PROMPT_ROWS_MEASURED = 128  # the prefill a kernel is timed at against the library's GEMM (`prompt_rows`)


def _kernel_weight(module: torch.nn.Module, kernel: Kernel) -> torch.Tensor:
    """The weight as `kernel` reads it: packed once per kernel, again only if the weight changed
    (dtype, storage or an in-place update) or, for split's blocks, the thread count."""
    if kernel.pack is None:
        return module.weight
    w = module.weight
    key = (w.data_ptr(), w.dtype, w._version, torch.get_num_threads())
    packed = module.__dict__.get("_kernel_weights")
    if packed is None:
        packed = module.__dict__["_kernel_weights"] = {}
    got = packed.get(kernel.pack)
    if got is None or got[0] != key:
        with torch.no_grad():
            got = packed[kernel.pack] = (key, kernel.pack(w))
    return got[1]


def _pick(kernel: Kernel, one: Kernel, rows: int) -> Kernel:
    return one if rows == 1 else kernel


def _forward(kernel: Kernel, one: Kernel):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        k = _pick(kernel, one, rows)
        prefill = rows > MAX_ROWS and not self.__dict__.get("_prompt_rows")
        # a prefill, a product left to the library, or a compiled forward (the compiler picks and
        # packs its own)
        if prefill or k.fn is None or torch.compiler.is_compiling():
            return F.linear(x, self.weight, self.bias)
        y = k.fn(x.reshape(rows, x.shape[-1]), _kernel_weight(self, k), self.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    return forward


def rows_linear(module: torch.nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
    """`module`'s product for 2-D inputs [rows, in], routed as its forward routes them (the
    kernel `use_linear_kernel` put it on, its packed copy kept fresh) without the forward's
    per-call reshapes and checks: ~13 us of a 54 us one-row call on a 1536x576 weight (2-core
    EPYC), which a fused forward (models/fused.py) pays ~120 times a step. Read the routing
    again after `use_linear_kernel` runs (`routing_generation`)."""
    kernel, one = module.__dict__.get("_kernel"), module.__dict__.get("_one_row_kernel")
    if kernel is None:
        return module.forward  # F.linear, or a forward someone else put there
    limit = float("inf") if module.__dict__.get("_prompt_rows") else MAX_ROWS

    def product(x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        k = _pick(kernel, one, rows)
        if rows > limit or k.fn is None:
            return F.linear(x, module.weight, module.bias)
        return k.fn(x, _kernel_weight(module, k), module.bias)

    return product


_generation = 0
ROUTING_ATTRS = ("forward", "_kernel", "_one_row_kernel", "_kernel_weights", "_prompt_rows")  # what routing sets


def routing_generation() -> int:
    """Counts `use_linear_kernel` calls: a forward that keeps `rows_linear` products rebinds them
    when it changes."""
    return _generation


def use_linear_kernel(model: torch.nn.Module, name: str, prompt_rows: bool = False, one_row: str | None = None) -> int:
    """Route every nn.Linear of `model` through kernel `name` for its few-row products, and its
    one-row ones through `one_row` (None: `name` where that kernel takes one-row products, else
    F.linear); with `prompt_rows`, a prefill's many rows take `name` too. "linear" restores the
    default; -> how many layers now use it. A kernel that keeps its own copy of the weights makes
    it here, so a dtype it cannot pack on this CPU is refused at once, not in the middle of a decode."""
    from draftsmith.errors import DraftsmithError

    for asked in (name, one_row):
        if asked is not None and asked not in KERNELS:
            raise DraftsmithError(f"unknown CPU matmul {asked!r}: choose one of {', '.join(CHOICES)}")
    global _generation
    _generation += 1
    kernel = KERNELS[name]
    one_name = one_row or (name if kernel.one_row else "linear")
    one, count = KERNELS[one_name], 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            for attr in ROUTING_ATTRS:  # a previous choice
                module.__dict__.pop(attr, None)
            for n, k in ((name, kernel), (one_name, one)):
                if k.pack is None:
                    continue
                if module.weight.device.type != "cpu":  # its own copy of the weight, made now
                    raise DraftsmithError(
                        f"--cpu-matmul {n} is a CPU kernel; this model is on {module.weight.device.type}"
                    )
                try:
                    _kernel_weight(module, k)
                except RuntimeError as e:
                    raise DraftsmithError(
                        f"--cpu-matmul {n} cannot take a {str(module.weight.dtype).removeprefix('torch.')} "
                        f"weight on this CPU ({first_line(e)}); choose linear or transposed"
                    ) from None
            if kernel.fn is not None or one.fn is not None:
                module.forward = _forward(kernel, one).__get__(module)
                module.__dict__.update(_kernel=kernel, _one_row_kernel=one, _prompt_rows=prompt_rows)
            count += 1
    return count


def _largest_weight(model: torch.nn.Module) -> torch.Tensor:
    """The biggest decoder-layer weight (an MLP projection): the LM head is excluded, its shape
    is one per model while the layers' repeat, and they make up most of a step."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_w = getattr(head, "weight", None)
    best = None
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight is not head_w and module.weight.device.type != "meta":
            if best is None or module.weight.numel() > best.numel():
                best = module.weight
    if best is None:
        raise ValueError("the model has no linear layer to measure")
    return best


STREAM_BYTES = 512 * 2**20  # more than a last-level cache holds: each timed product reads from memory
MAX_COPIES = 64


def stream_copies(weight: torch.Tensor) -> list[torch.Tensor]:
    """Copies of `weight` that together exceed the caches: a model's forward streams every weight
    from memory, and one weight timed again and again would sit in L3 (a 0.5B draft's 4864x896
    fp32 weight, 17 MB, measured 2x faster warm than in the model)."""
    n = min(MAX_COPIES, max(1, -(-STREAM_BYTES // (weight.numel() * weight.element_size()))))
    return [weight] + [weight.clone() for _ in range(n - 1)]


def _time(kernel, x: torch.Tensor, weights: list[torch.Tensor], repeats: int) -> float:
    """Median seconds of one product, each repeat cycling through every copy in `weights`."""
    times = []
    with torch.inference_mode():
        for i in range(repeats + 2):  # the first calls create the library's primitives
            t = time.perf_counter()
            for w in weights:
                kernel(x, w, None) if kernel is not None else F.linear(x, w)
            if i >= 2:
                times.append(time.perf_counter() - t)
    return statistics.median(times) / len(weights)


def measure(weight: torch.Tensor, rows: int, repeats: int = 9) -> dict:
    """Seconds per product of `weight` [n, d] with 1 row (linear) and with `rows` rows (each
    kernel; `{name}_one_row_s` too for a kernel that takes one-row products, None for a kernel
    that cannot pack this weight here), fresh random inputs in the weight's dtype, the weight
    read from memory (`stream_copies`)."""
    g = torch.Generator().manual_seed(0)
    one = torch.randn(1, weight.shape[1], generator=g).to(weight.dtype)
    many = torch.randn(rows, weight.shape[1], generator=g).to(weight.dtype)
    weights = stream_copies(weight)
    prompt = torch.randn(PROMPT_ROWS_MEASURED, weight.shape[1], generator=g).to(weight.dtype)
    out = {"one_row_s": _time(None, one, weights, repeats)}
    for name, kernel in KERNELS.items():
        try:
            ws = [kernel.pack(w) for w in weights] if kernel.pack else weights
        except RuntimeError:
            out[f"{name}_s"] = None
            continue
        out[f"{name}_s"] = _time(kernel.fn, many, ws, repeats)
        if kernel.one_row:
            out[f"{name}_one_row_s"] = _time(kernel.fn, one, ws, repeats)
        if kernel.one_row or kernel.fn is None:  # a prefill GEMM is compute-bound: a few copies, a few repeats
            out[f"{name}_prompt_s"] = _time(kernel.fn, prompt, ws[:4], 3)
    return out


def takes_prompt_rows(name: str, timings: dict | None) -> bool:
    """Whether kernel `name` also takes a prefill's rows: its PROMPT_ROWS_MEASURED-row product
    measured at most MIN_GAIN of the library's GEMM (oneDNN's packed weight, fp32: 0.61-0.65x on
    Qwen2.5-Coder-1.5B's weights on the AVX512-BF16 EPYC; bf16 0.88-0.95x)."""
    mine, library = ((timings or {}).get(f"{n}_prompt_s") for n in (name, "linear"))
    return name != "linear" and bool(mine and library) and mine <= MIN_GAIN * library


def _machine_key(w: torch.Tensor, what) -> str:
    """The cache key of a measurement on `w`: CPU model and flags, threads, torch, shape, dtype."""
    cpu = cpu_info()
    flags = sorted(k for k, v in (cpu["flags"] or {}).items() if v)
    # v2: the kernels' one-row timings and the draft's prefill joined the measurement, which now
    # streams from memory; v3: a prefill's rows per kernel (`takes_prompt_rows`); v4: the split
    # kernel joined the candidates
    return f"{cpu['model']}|{flags}|{torch.get_num_threads()}|{torch.__version__}|{tuple(w.shape)}|{w.dtype}|{what}|v4"


def output_head(model: torch.nn.Module, routed: torch.nn.Module | None = None) -> torch.nn.Linear | None:
    """`model`'s LM head where it is a linear layer (among `routed`'s modules, when given): the
    one product whose shape is unlike the layers' (49152x576 against SmolLM2's largest 3072x576),
    so `choose_linear_kernel(..., weight=)` times it on its own."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear) or head.weight.device.type == "meta":
        return None
    if routed is not None and not any(m is head for m in routed.modules()):
        return None
    return head


def choose_linear_kernel(
    model: torch.nn.Module, rows: int, device, weight: torch.Tensor | None = None
) -> tuple[str, str, dict | None]:
    """(kernel name, why, timings) for `model`'s forwards of `rows` rows on `device`, timed on
    its largest layer weight, or on `weight` (one shape: `choose_by_shape`; the LM head's)."""
    device = torch.device(device)
    if device.type != "cpu":
        return "linear", f"{device.type}: the library's own kernels", None
    w = _largest_weight(model) if weight is None else weight
    key = _machine_key(w, rows)
    with measurement_cache("cpu_matmul.json") as cached:
        if key not in cached:
            cached[key] = measure(w, rows)
        timings = cached[key]
    few = {n: timings[f"{n}_s"] for n in KERNELS if timings.get(f"{n}_s") is not None}
    shape, one = shape_key(w), timings["one_row_s"]
    per = ", ".join(
        f"{n} {timings[f'{n}_s'] / one:.2f}x"
        + (f" (one row {timings[f'{n}_one_row_s'] / one:.2f}x)" if timings.get(f"{n}_one_row_s") else "")
        for n in few
    )
    why = f"{rows} rows of a {shape} {str(w.dtype).removeprefix('torch.')} weight vs one row of linear: {per}"
    return _fastest(few), why, timings


def choose_one_row_kernel(timings: dict | None) -> str | None:
    """The kernel of one-row products (decode steps, one-row drafts) from `choose_linear_kernel`'s
    timings, chosen apart from the few-row kernel: each row count has its own fastest kernel, and
    a cost of both together let a 5-row verify keep Qwen2.5-Coder-1.5B's LM head on `transposed`
    (1.21x F.linear's one-row time for 5 rows, 1x for one) over oneDNN (1.57x, 0.70x), which made
    every plain step slower (docs/results.md). None without timings (the few-row kernel decides)."""
    if timings is None:
        return None
    one = {n: timings.get(f"{n}_one_row_s") for n in KERNELS}
    one = {"linear": timings["one_row_s"], **{n: t for n, t in one.items() if t is not None}}
    return _fastest(one)


def _fastest(times: dict[str, float]) -> str:
    """The fastest kernel of `times` (name -> seconds) where it took at most MIN_GAIN of
    linear's time, else linear; a kernel that copies the weights (memory) must also take at most
    MIN_GAIN of the fastest one that does not."""
    best = min(times, key=times.get)
    if KERNELS[best].copies:
        lean = min((n for n in times if not KERNELS[n].copies), key=times.get)
        best = best if times[best] <= MIN_GAIN * times[lean] else lean
    return best if times[best] <= MIN_GAIN * times["linear"] else "linear"


def shape_key(weight: torch.Tensor) -> str:
    return "x".join(map(str, weight.shape))


def choose_by_shape(model: torch.nn.Module, routed: torch.nn.Module, rows: int, device) -> dict:
    """`--cpu-matmul auto` for one role: each distinct weight shape among `routed`'s linears timed
    and chosen on its own, the verify's rows and one row apart, and the LM head (`output_head`).
    One kernel for every layer weight chose split's one row for Qwen2.5-Coder-1.5B's 17920x1536
    gate/up weight (0.66x F.linear) and ran its 1536x8960 down projection on it too, at 1.31x where
    oneDNN took 0.76x (results/cpu-matmul/split-avx2.json). -> the role's report: the largest
    layer weight's choice at the top level, each shape's under "shapes", the head's under "lm_head"
    (`route_as_chosen` routes by it)."""
    head = output_head(model, routed)
    weights = {}
    for m in routed.modules():
        if isinstance(m, torch.nn.Linear) and m is not head and m.weight.device.type != "meta":
            weights.setdefault(shape_key(m.weight), m.weight)
    if not weights:
        raise ValueError("the model has no linear layer to measure")

    def choice(w: torch.Tensor) -> dict:
        name, why, timings = choose_linear_kernel(model, rows, device, weight=w)
        one_row, prompt_rows = choose_one_row_kernel(timings), takes_prompt_rows(name, timings)
        return {"kernel": name, "one_row": one_row, "why": why, "timings": timings, "prompt_rows": prompt_rows}

    shapes = {key: choice(w) for key, w in weights.items()}
    largest = max(weights, key=lambda key: weights[key].numel())
    chosen = {**shapes[largest], "rows": rows, "shapes": shapes}
    if head is not None:
        chosen["lm_head"] = choice(head.weight)
    return chosen


def route_as_chosen(routed: torch.nn.Module, chosen: dict, head: torch.nn.Module | None = None) -> None:
    """Route `routed`'s linears as one role's `choose_by_shape` report says: each on its weight
    shape's choice (the top-level one for a shape not listed), `head` on the head's."""
    shapes = chosen.get("shapes") or {}
    for m in routed.modules():
        if isinstance(m, torch.nn.Linear):
            c = chosen["lm_head"] if m is head and chosen.get("lm_head") else shapes.get(shape_key(m.weight), chosen)
            use_linear_kernel(m, c["kernel"], bool(c.get("prompt_rows")), c.get("one_row"))


PROMPT_ROWS, DRAFTED_ROWS = 256, 64  # the generation the draft-dtype choice prices: its prefill, then its drafts


def choose_draft_dtype(model: torch.nn.Module, device) -> tuple[torch.dtype, str, dict | None]:
    """(dtype, why, timings) for a draft that runs alone: bfloat16 where a generation's worth of
    its largest weight's products (a PROMPT_ROWS-row prefill, then DRAFTED_ROWS one-row drafts)
    measured at most MIN_GAIN of the time in its current dtype, else unchanged. Both parts count:
    bf16 halves the bytes a one-row draft streams, but on a CPU without native bf16 arithmetic
    (no AMX/AVX512-BF16) its prefill GEMM is several times slower (5.5x measured on the AVX2 EPYC,
    seconds per prompt for a 0.5B draft), which one-row timings alone never see."""
    w = _largest_weight(model)
    device = torch.device(device)
    if device.type != "cpu" or w.dtype == torch.bfloat16:
        return w.dtype, f"kept in {str(w.dtype).removeprefix('torch.')}", None
    key = _machine_key(w, "draft")
    with measurement_cache("cpu_matmul.json") as cached:
        if key not in cached:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(1, w.shape[1], generator=g)
            prompt = torch.randn(PROMPT_ROWS, w.shape[1], generator=g)
            weights = stream_copies(w)
            few = weights[:4]  # a prefill GEMM is compute-bound: a few copies, a few repeats
            cached[key] = {"own_s": _time(None, x.to(w.dtype), weights, 9)}
            cached[key]["own_split_s"] = _time(_split, x.to(w.dtype), [_split_blocks(c) for c in weights], 9)
            try:  # oneDNN's packed layout may stream its own dtype faster than bf16 does
                cached[key]["own_onednn_s"] = _time(_onednn, x.to(w.dtype), [_onednn_pack(c) for c in weights], 9)
            except RuntimeError:
                cached[key]["own_onednn_s"] = None
            cached[key]["own_prompt_s"] = _time(None, prompt.to(w.dtype), few, 3)
            bf16 = [c.bfloat16() for c in weights]
            cached[key]["bfloat16_s"] = _time(None, x.bfloat16(), bf16, 9)
            cached[key]["bfloat16_prompt_s"] = _time(None, prompt.bfloat16(), bf16[:4], 3)
        timings = cached[key]
    own_row = min(t for n in ("own_s", "own_onednn_s", "own_split_s") if (t := timings.get(n)) is not None)
    own = timings["own_prompt_s"] + DRAFTED_ROWS * own_row
    bf16 = timings["bfloat16_prompt_s"] + DRAFTED_ROWS * timings["bfloat16_s"]
    how = "/".join(
        n for n, k in (("F.linear", "own_s"), ("split", "own_split_s"), ("onednn", "own_onednn_s")) if timings.get(k)
    )
    how = how if "/" not in how else f"the fastest of {how}"
    why = (
        f"a {PROMPT_ROWS}-row prefill + {DRAFTED_ROWS} one-row drafts of its {shape_key(w)} weight "
        f"in bfloat16: {bf16 / own:.2f}x the time in {w.dtype} (one row {timings['bfloat16_s'] / own_row:.2f}x "
        f"of {how}, the prefill {timings['bfloat16_prompt_s'] / timings['own_prompt_s']:.2f}x)"
    )
    return (torch.bfloat16 if bf16 <= MIN_GAIN * own else w.dtype), why.replace("torch.", ""), timings


__all__ = [
    "CHOICES",
    "KERNELS",
    "Kernel",
    "stream_copies",
    "choose_draft_dtype",
    "choose_by_shape",
    "choose_linear_kernel",
    "choose_one_row_kernel",
    "measure",
    "output_head",
    "route_as_chosen",
    "routing_generation",
    "rows_linear",
    "shape_key",
    "use_linear_kernel",
]
