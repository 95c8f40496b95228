"""`--cpu-matmul` and `--draft-dtype` (infer/kernels.py, Target.use_cpu_matmul): the candidate
kernels compute the same products, greedy speculative decoding stays equal to plain decoding
under each, the choice is measured once per machine and recorded with its reason, and a draft
that runs alone changes dtype without touching the target."""

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer import kernels
from draftsmith.infer.engine import Engine
from draftsmith.models import Target, load_drafter


@pytest.fixture
def target(tiny_cache):
    """A private target: the kernels patch its modules, which the session's tiny_target shares."""
    return Target.load("tiny-random", dtype="float32", device="cpu")


@pytest.mark.parametrize("rows", [1, 2, 5, 17])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", [80, 81])  # 81: split's blocks cannot be one per thread
def test_every_kernel_computes_the_linear_product(rows, bias, out):
    layer = torch.nn.Linear(48, out, bias=bias)
    x = torch.randn(3, rows, 48)
    want = layer(x)
    for name in kernels.KERNELS:
        kernels.use_linear_kernel(layer, name)
        got = layer(x)
        assert got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_onednn_takes_one_row_too_and_repacks_a_changed_weight():
    layer = torch.nn.Linear(32, 24)
    kernels.use_linear_kernel(layer, "onednn")
    packed = kernels._kernel_weight(layer, kernels.KERNELS["onednn"])
    x = torch.randn(1, 32)
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    with torch.no_grad():
        layer.weight.mul_(2)  # an in-place update: the packed copy is stale
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert kernels._kernel_weight(layer, kernels.KERNELS["onednn"]) is not packed
    kernels.use_linear_kernel(layer, "linear")  # switching back frees the copy
    assert "_kernel_weights" not in layer.__dict__ and "forward" not in layer.__dict__


def test_split_views_the_weight_in_one_block_per_thread(monkeypatch):
    """No copy: the blocks are the weight's own storage, one block of rows per thread (fewer
    where the rows do not divide), made again when the thread count changes."""
    layer = torch.nn.Linear(32, 24)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    kernels.use_linear_kernel(layer, "split")
    split = kernels.KERNELS["split"]
    blocks = kernels._kernel_weight(layer, split)
    assert blocks.shape == (4, 6, 32) and blocks.data_ptr() == layer.weight.data_ptr()
    x = torch.randn(1, 32)
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 5)  # 24 rows: 4 blocks of 6
    layer(x)
    assert kernels._kernel_weight(layer, split).shape == (4, 6, 32)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    x = torch.randn(5, 32)
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert kernels._kernel_weight(layer, split).shape == (3, 8, 32)


def test_a_dtype_onednn_cannot_pack_is_refused_by_name(monkeypatch):
    def cannot(w):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx512bw")

    monkeypatch.setitem(kernels.KERNELS, "onednn", kernels.Kernel(kernels._onednn, cannot, True))
    with pytest.raises(DraftsmithError, match="--cpu-matmul onednn cannot take a bfloat16 weight on this CPU"):
        kernels.use_linear_kernel(torch.nn.Linear(8, 8, dtype=torch.bfloat16), "onednn")


@pytest.fixture
def recording(monkeypatch):
    """A kernel "recording" that notes the rows of every product it is given: the rows list."""
    calls = []
    kernel = kernels.Kernel(lambda x, w, b: calls.append(x.shape[0]) or torch.nn.functional.linear(x, w, b))
    monkeypatch.setitem(kernels.KERNELS, "recording", kernel)
    return calls


def test_one_row_and_prefill_keep_the_library_path(recording):
    layer = torch.nn.Linear(16, 8)
    kernels.use_linear_kernel(layer, "recording")
    for rows in (1, 5, kernels.MAX_ROWS, kernels.MAX_ROWS + 1):
        layer(torch.randn(1, rows, 16))
    assert recording == [5, kernels.MAX_ROWS]


def test_a_kernel_takes_a_prefill_only_where_it_measured_faster_there(recording):
    layer = torch.nn.Linear(16, 8)
    kernels.use_linear_kernel(layer, "recording", prompt_rows=True)
    for rows in (1, 5, kernels.MAX_ROWS + 1, 300):
        layer(torch.randn(1, rows, 16))
    kernels.rows_linear(layer)(torch.randn(300, 16))  # the fused forward's bound product, 2-D rows
    assert recording == [5, kernels.MAX_ROWS + 1, 300, 300]
    faster = {"linear_prompt_s": 1.0, "onednn_prompt_s": 0.6}
    assert kernels.takes_prompt_rows("onednn", faster)
    assert not kernels.takes_prompt_rows("onednn", {**faster, "onednn_prompt_s": 0.95})  # within MIN_GAIN
    assert not kernels.takes_prompt_rows("linear", faster) and not kernels.takes_prompt_rows("onednn", None)
    assert not kernels.takes_prompt_rows("transposed", faster)  # never timed at a prefill's rows


def test_greedy_speculative_equals_plain_under_each_kernel(target):
    drafter = load_drafter("truncated:2", target)
    prompt = target.tokenizer("The quick brown fox")["input_ids"]
    plain = Engine(target).generate(prompt, 24)
    for name in kernels.KERNELS:
        chosen = target.use_cpu_matmul(name, 5, drafter, "float32")
        assert chosen["target"]["kernel"] == name and chosen["draft"]["kernel"] == name
        spec = Engine(target, drafter, 4).generate(prompt, 24)
        assert spec.tokens == plain.tokens, name


def test_auto_measures_once_per_machine_and_says_why(target, tmp_path, monkeypatch):
    """Each row count takes its fastest kernel: the verify's rows one, one row another; a
    kernel that copies the weights must beat the fastest copy-free one by MIN_GAIN, and any
    kernel must beat linear by it."""
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    # onednn: the fastest verify by a little (it copies the weights), a slower row than linear's
    timings = {"one_row_s": 1.0, "linear_s": 4.0, "transposed_s": 1.4, "onednn_s": 1.3, "onednn_one_row_s": 1.5}
    measured = []
    monkeypatch.setattr(kernels, "measure", lambda w, rows: measured.append(rows) or dict(timings))
    name, why, got = kernels.choose_linear_kernel(target.model, 5, "cpu")
    assert (name, got, measured) == ("transposed", timings, [5]) and kernels.choose_one_row_kernel(got) == "linear"
    assert "5 rows" in why and "linear 4.00x" in why and "transposed 1.40x" in why
    assert "onednn 1.30x (one row 1.50x)" in why
    assert kernels.choose_linear_kernel(target.model, 5, "cpu")[0] == "transposed" and measured == [5]  # cached
    timings.update(onednn_s=1.2, onednn_one_row_s=0.5)  # oneDNN well ahead at both row counts
    name, _, got = kernels.choose_linear_kernel(target.model, 4, "cpu")
    assert name == "onednn" and kernels.choose_one_row_kernel(got) == "onednn" and measured == [5, 4]
    # the verify's rows within MIN_GAIN of linear, onednn cannot pack, split takes the one row
    timings.update(transposed_s=3.8, onednn_s=None, onednn_one_row_s=None, split_s=3.9, split_one_row_s=0.6)
    name, why, got = kernels.choose_linear_kernel(target.model, 3, "cpu")
    assert name == "linear" and kernels.choose_one_row_kernel(got) == "split" and measured == [5, 4, 3]
    assert "onednn" not in why and "split 3.90x (one row 0.60x)" in why
    assert kernels.choose_one_row_kernel(None) is None  # no measurement (CUDA, a kernel asked for)


def test_one_row_products_take_their_own_kernel(monkeypatch):
    calls = []

    def recording(tag):
        return kernels.Kernel(
            lambda x, w, b: calls.append((tag, x.shape[0])) or torch.nn.functional.linear(x, w, b), one_row=True
        )

    monkeypatch.setitem(kernels.KERNELS, "few", recording("few"))
    monkeypatch.setitem(kernels.KERNELS, "one", recording("one"))
    layer = torch.nn.Linear(16, 8)
    kernels.use_linear_kernel(layer, "few", one_row="one")
    for rows in (1, 5, kernels.MAX_ROWS + 1):
        layer(torch.randn(1, rows, 16))
    kernels.rows_linear(layer)(torch.randn(1, 16))  # the fused forward's bound product
    kernels.rows_linear(layer)(torch.randn(3, 16))
    assert calls == [("one", 1), ("few", 5), ("one", 1), ("few", 3)]
    kernels.use_linear_kernel(layer, "few", one_row="linear")  # one-row products back on F.linear
    layer(torch.randn(1, 16))
    kernels.rows_linear(layer)(torch.randn(1, 16))
    layer(torch.randn(2, 16))
    assert calls[4:] == [("few", 2)]
    kernels.use_linear_kernel(layer, "few")  # no one-row choice: a kernel that takes one row takes it
    layer(torch.randn(1, 16))
    assert calls[-1] == ("few", 1)
    with pytest.raises(DraftsmithError, match="unknown CPU matmul 'fast'"):
        kernels.use_linear_kernel(layer, "few", one_row="fast")


def test_auto_chooses_the_lm_head_on_its_own(target, tmp_path, monkeypatch):
    """The head's shape is unlike the layers': auto times it apart and may put it on another
    kernel; a kernel asked for by name takes every product, the head's too."""
    from draftsmith.evaluation.bench_report import kernel_lines

    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    head = kernels.output_head(target.model)
    assert head is not None and any(m is head for m in target.linear_modules().modules())
    layers = {"one_row_s": 1.0, "linear_s": 4.0, "transposed_s": 1.4, "onednn_s": 1.3, "onednn_one_row_s": 1.5}
    at_head = {**layers, "onednn_s": 1.0, "onednn_one_row_s": 0.5}  # oneDNN streams the tall head faster
    measured = []

    def measure(w, rows):
        measured.append(tuple(w.shape))
        return dict(at_head if w is head.weight else layers)

    monkeypatch.setattr(kernels, "measure", measure)
    drafter = load_drafter("truncated:2", target)
    prompt = target.tokenizer("The quick brown fox")["input_ids"]
    plain = Engine(target).generate(prompt, 24)
    chosen = target.use_cpu_matmul("auto", 5, drafter, "float32")
    assert chosen["target"]["kernel"] == "transposed" and chosen["target"]["lm_head"]["kernel"] == "onednn"
    assert {c["kernel"] for c in chosen["target"]["shapes"].values()} == {"transposed"}
    assert "x".join(map(str, head.weight.shape)) in chosen["target"]["lm_head"]["why"]
    assert tuple(head.weight.shape) in measured
    # each weight shape the forward calls is timed on its own (the fused q/k/v and gate/up
    # weights, not the projections they join); the top level reports the largest's choice
    routed = [m.weight for m in target.linear_modules().modules() if isinstance(m, torch.nn.Linear) and m is not head]
    largest = tuple(max(routed, key=torch.Tensor.numel).shape)
    assert set(measured) == {tuple(w.shape) for w in routed} | {tuple(head.weight.shape)}
    gate = target.model.model.layers[0].mlp.gate_proj.weight
    assert largest == (2 * gate.shape[0], gate.shape[1])  # the fused gate/up weight
    assert set(chosen["target"]["shapes"]) == {"x".join(map(str, w.shape)) for w in routed}
    assert "x".join(map(str, largest)) in chosen["target"]["why"]
    assert head.__dict__["_kernel"] is kernels.KERNELS["onednn"]
    layer = next(m for m in target.linear_modules().modules() if isinstance(m, torch.nn.Linear) and m is not head)
    assert layer.__dict__["_kernel"] is kernels.KERNELS["transposed"]
    assert layer.__dict__["_one_row_kernel"] is kernels.KERNELS["linear"] and chosen["target"]["one_row"] == "linear"
    assert head.__dict__["_one_row_kernel"] is kernels.KERNELS["onednn"]
    assert Engine(target, drafter, 4).generate(prompt, 24).tokens == plain.tokens
    assert any(line.startswith("target LM head: onednn (") for line in kernel_lines(chosen))
    largest_key = "x".join(map(str, largest))
    assert any(line.startswith(f"target {largest_key}: transposed, one row linear (") for line in kernel_lines(chosen))
    chosen = target.use_cpu_matmul("transposed", 5, drafter, "float32")
    assert "lm_head" not in chosen["target"] and head.__dict__["_kernel"] is kernels.KERNELS["transposed"]


def test_auto_routes_each_weight_shape_on_its_own(target, tmp_path, monkeypatch):
    """A shape whose one-row product another kernel streams faster (a long down projection that
    MKL already threads) gets that kernel; the other shapes keep theirs; outputs stay equal."""
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    down = target.model.model.layers[0].mlp.down_proj
    others = {"one_row_s": 1.0, "linear_s": 4.0, "transposed_s": 1.4, "split_s": 1.5, "split_one_row_s": 0.5}
    at_down = {**others, "split_one_row_s": 1.3, "onednn_s": 2.0, "onednn_one_row_s": 0.6}
    monkeypatch.setattr(kernels, "measure", lambda w, rows: dict(at_down if w.shape == down.weight.shape else others))
    prompt = target.tokenizer("The quick brown fox")["input_ids"]
    plain = Engine(target).generate(prompt, 24)
    chosen = target.use_cpu_matmul("auto", 5)["target"]
    shapes = chosen["shapes"]
    assert shapes[kernels.shape_key(down.weight)]["one_row"] == "onednn"
    assert {c["one_row"] for key, c in shapes.items() if key != kernels.shape_key(down.weight)} == {"split"}
    assert {c["kernel"] for c in shapes.values()} == {"transposed"}
    layers = [m for m in target.linear_modules().modules() if isinstance(m, torch.nn.Linear)]
    routed_down = [m for m in layers if m.weight.shape == down.weight.shape]
    assert routed_down and all(m.__dict__["_one_row_kernel"] is kernels.KERNELS["onednn"] for m in routed_down)
    assert all(m.__dict__["_one_row_kernel"] is kernels.KERNELS["split"] for m in layers if m not in routed_down)
    assert Engine(target).generate(prompt, 24).tokens == plain.tokens


def test_cuda_keeps_the_library_kernels(target):
    assert kernels.choose_linear_kernel(target.model, 5, "cuda")[0] == "linear"


def test_unknown_kernel_is_named(target):
    with pytest.raises(DraftsmithError, match="unknown CPU matmul 'fast'.*auto, linear, transposed, split, onednn"):
        target.use_cpu_matmul("fast", 5)


def test_a_draft_that_runs_alone_takes_its_own_dtype(target):
    drafter = load_drafter("truncated:2", target)
    chosen = target.use_cpu_matmul("linear", 5, drafter, "bfloat16")
    assert chosen["draft_dtype"]["dtype"] == "bfloat16" and drafter.model.dtype == torch.bfloat16
    assert target.model.dtype == torch.float32  # the target is untouched: outputs stay its own
    prompt = target.tokenizer("Hello there")["input_ids"]
    assert Engine(target, drafter, 3).generate(prompt, 16).tokens == Engine(target).generate(prompt, 16).tokens


def test_draft_dtype_auto_follows_the_measurement(target, tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    drafter = load_drafter("truncated:2", target)
    # own dtype: one row by F.linear, by split, by onednn, a prefill; then bfloat16: one row, a prefill
    times = iter([1.0, 1.1, 1.2, 64.0, 0.5, 64.0])  # 64 + 64 x 0.5 vs 64 + 64 x 1
    monkeypatch.setattr(kernels, "_time", lambda *a: next(times))
    dtype, why, _ = kernels.choose_draft_dtype(drafter.model, "cpu")
    assert dtype == torch.bfloat16 and "0.75x" in why and "one row 0.50x" in why
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path / "other"))
    times = iter([1.0, 1.1, 0.5, 64.0, 0.5, 64.0])  # onednn streams fp32 as fast as bf16: the draft stays fp32
    dtype, why, _ = kernels.choose_draft_dtype(drafter.model, "cpu")
    assert dtype == torch.float32 and "1.00x" in why and "of the fastest of F.linear/split/onednn" in why
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path / "split"))
    times = iter([1.0, 0.5, 1.2, 64.0, 0.5, 64.0])  # split's blocks on every thread: as fast as bf16 too
    assert kernels.choose_draft_dtype(drafter.model, "cpu")[0] == torch.float32
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path / "third"))
    times = iter([1.0, 1.5, 20.0, 0.5, 110.0])  # faster rows, but a bf16 prefill without native bf16 arithmetic
    monkeypatch.setattr(kernels, "_onednn_pack", lambda w: (_ for _ in ()).throw(RuntimeError("no")))
    dtype, why, _ = kernels.choose_draft_dtype(drafter.model, "cpu")
    assert (
        dtype == torch.float32
        and "the prefill 5.50x" in why
        and "one row 0.50x of the fastest of F.linear/split," in why
    )


def test_a_draft_sharing_the_targets_weights_keeps_them(target):
    from draftsmith.models.draft_lm import DraftLM

    chosen = target.use_cpu_matmul("linear", 5, DraftLM(target.model, target, "self"), "bfloat16")
    assert "draft_dtype" not in chosen and target.model.dtype == torch.float32


def test_bench_records_the_choice(target):
    from draftsmith.evaluation.bench import environment

    drafter = load_drafter("truncated:2", target)
    target.use_cpu_matmul("transposed", 5, drafter, "float32")
    env = environment(target, drafter)
    assert env["cpu_matmul"]["target"]["kernel"] == "transposed" and env["cpu_matmul"]["draft_dtype"]["dtype"] == (
        "float32"
    )


def test_the_measurement_streams_the_weight_from_memory():
    """One weight timed again and again sits in the cache; the copies together exceed it (up to
    MAX_COPIES), each its own storage."""
    w = torch.randn(512, 256)  # 512 KiB
    copies = kernels.stream_copies(w)
    assert copies[0] is w and len(copies) == kernels.MAX_COPIES
    assert len({c.data_ptr() for c in copies}) == len(copies) and all(torch.equal(c, w) for c in copies)
    big = torch.empty(0).new_empty((1,)).expand(kernels.STREAM_BYTES // 4 + 1)  # one float beyond the budget
    assert len(kernels.stream_copies(big)) == 1


def test_the_cli_offers_exactly_the_kernels():
    from draftsmith.cli import build_parser

    action = next(
        a for a in build_parser()._subparsers._group_actions[0].choices["bench"]._actions if a.dest == "cpu_matmul"
    )
    assert tuple(action.choices) == kernels.CHOICES


def test_onednn_refuses_a_model_off_the_cpu():
    with pytest.raises(DraftsmithError, match="--cpu-matmul onednn is a CPU kernel; this model is on meta"):
        kernels.use_linear_kernel(torch.nn.Linear(8, 8, device="meta"), "onednn")


def _dtype_onednn_packs() -> torch.dtype:
    """bfloat16 where oneDNN packs it here (AVX512-BF16/AMX: what `--dtype auto` picks on such a
    CPU), else float32: the packed weight inductor cannot lower is the same either way."""
    try:
        kernels._onednn_pack(torch.zeros(8, 8, dtype=torch.bfloat16))
        return torch.bfloat16
    except RuntimeError:
        return torch.float32


def test_a_compiled_target_and_drafter_decode_under_the_onednn_kernel(tiny_cache, tmp_path):
    """`bench --compile on` on a CPU where auto picks bf16 and oneDNN: the compiled forwards take
    F.linear (inductor lowers and packs it itself) instead of failing to lower oneDNN's packed
    weight; the eager forwards keep the chosen kernel. Real inductor, tiny model, few tokens."""
    from draftsmith.kinds import KINDS
    from draftsmith.testing import tiny_drafter

    dtype = str(_dtype_onednn_packs()).removeprefix("torch.")
    target = Target.load("tiny-random", dtype=dtype, device="cpu", compile=True)
    drafter, _ = tiny_drafter(KINDS["eagle3"], target, tmp_path / "draft")
    chosen = target.use_cpu_matmul("onednn", 4, drafter, draft_dtype=dtype)
    assert chosen["target"]["kernel"] == "onednn"
    prompt = [5, 40, 41, 42, 43]
    plain = Engine(target, None).generate(prompt, 6, eos_token_ids=())
    spec = Engine(target, drafter, 3).generate(prompt, 6, eos_token_ids=())
    assert len(plain.tokens) == 6 and spec.tokens == plain.tokens
