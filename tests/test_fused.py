"""models/fused.py: the fused decode forward computes transformers' forward (logits and hidden
states, prefill, decode, chains and trees, after rollbacks) for every model type it takes, and
refuses the ones it does not."""

import pytest
import torch

from draftsmith.infer.cache import KVCache
from draftsmith.infer.tree import Tree
from draftsmith.models import Target
from draftsmith.models.fused import FusedForward, why_not_fused


def _tiny(model_type: str, **extra):
    """A seeded random causal LM of `model_type` (2 layers, GQA, small vocabulary)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kw = dict(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    kw.update(extra)
    config = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # biases and norms away from their init, so a wrong one shows
        for name, p in model.named_parameters():
            if "bias" in name or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _target(model, forward: str) -> Target:
    t = Target(model, None, f"random {model.config.model_type}")
    t.forward_impl = forward
    return t


def _steps(target: Target, layers=(0, 2, -1)):
    """Logits and hidden states of a prefill, two decode steps, a rolled-back chain, a chain
    after it and a tree, through one cache."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, target.vocab_size, (1, 24), generator=g)
    cache = KVCache(target.config, 64)
    out = [target.forward_hidden(ids[:, :12], cache, logits_to_keep=1, hidden_layers=layers)]
    for j in (12, 13):
        out.append(target.forward_hidden(ids[:, j : j + 1], cache, hidden_layers=layers))
    target.forward_hidden(ids[:, 14:18], cache, hidden_layers=layers)
    cache.crop(15)  # two of the chain's rows rejected
    out.append(target.forward_hidden(ids[:, 15:19], cache, hidden_layers=layers))
    tree = Tree([(0,), (1,), (0, 0), (0, 1)])
    past = cache.length
    drafted = ids[:, 19:24]
    mask = tree.attention_mask(past, cache.kv_length(5), target.dtype, "cpu")
    out.append(target.forward_hidden(drafted, cache, tree.position_ids(past, "cpu"), mask, hidden_layers=layers))
    cache.compact(past, torch.tensor([past, past + 1, past + 3]))
    out.append(target.forward_hidden(ids[:, 5:6], cache, hidden_layers=layers))
    return out


@pytest.mark.parametrize(
    "model_type,extra",
    [
        ("llama", {}),
        ("llama", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}),
        ("mistral", {"sliding_window": None}),
        ("qwen2", {}),  # biased q/k/v
        ("qwen3", {"head_dim": 32}),  # per-head q/k norms, head_dim * heads != hidden
        ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    ],
)
def test_fused_forward_equals_transformers(model_type, extra):
    model = _tiny(model_type, **extra)
    assert why_not_fused(model) is None
    with torch.inference_mode():
        want = _steps(_target(model, "transformers"))
        fused = _target(model, "fused")
        got = _steps(fused)
    assert fused.fused_forward() is not None and fused.forward_why.startswith("fused")
    assert len(got) == len(want) == 6
    for (lw, hw), (lg, hg) in zip(want, got):
        assert lg.shape == lw.shape and hg.shape == hw.shape
        torch.testing.assert_close(lg, lw, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(hg, hw, rtol=1e-5, atol=1e-5)


def test_fused_forward_in_bfloat16_stays_close():
    model = _tiny("qwen2").to(torch.bfloat16)
    with torch.inference_mode():
        want = _steps(_target(model, "transformers"))
        got = _steps(_target(model, "fused"))
    for (lw, _), (lg, _) in zip(want, got):
        assert lg.dtype == torch.bfloat16
        torch.testing.assert_close(lg.float(), lw.float(), rtol=0.05, atol=0.05)


def test_fusing_adds_no_memory_and_keeps_transformers_forward():
    model = _tiny("llama")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        before = model(ids).logits
    params = sum(p.numel() for p in model.parameters())
    fused = FusedForward(model)
    attn = model.model.layers[0].self_attn
    qkv = fused.layers[0][1].weight
    # the projections' weights are views of the fused one: one storage
    assert attn.q_proj.weight.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr()
    assert attn.v_proj.weight.data_ptr() == qkv.data_ptr() + (64 + 32) * 64 * qkv.element_size()
    assert sum(p.numel() for p in model.parameters()) == params
    with torch.inference_mode():
        torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=0)
    with torch.no_grad():  # an in-place change of a projection is the fused weight's change
        attn.k_proj.weight.mul_(2)
    assert torch.equal(qkv[64 : 64 + 32], attn.k_proj.weight)


def test_a_changed_model_is_fused_again(tiny_target):
    t = Target(_tiny("llama"), None, "random llama")
    first = t.fused_forward()
    assert first is not None and t.fused_forward() is first
    t.model.to(torch.bfloat16)  # new weight tensors: the old fusion no longer reads them
    t.dtype = torch.bfloat16
    second = t.fused_forward()
    assert second is not None and second is not first
    assert second.layers[0][1].weight.dtype == torch.bfloat16


def test_peft_wrapped_and_unsupported_models_keep_transformers_forward():
    from peft import LoraConfig, inject_adapter_in_model

    model = _tiny("llama")
    t = Target(model, None, "random llama")
    assert t.fused_forward() is not None
    inject_adapter_in_model(LoraConfig(r=2, target_modules=["q_proj", "v_proj"]), model)
    assert t.fused_forward() is None  # the LoRA layers are read: transformers' forward
    assert "not a plain nn.Linear" in t.forward_why
    sliding = _tiny("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=0)
    assert "sliding" in why_not_fused(sliding)
    assert "model type" in why_not_fused(_tiny("gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=97))
    with pytest.raises(Exception, match="unknown target forward"):
        bad = _target(_tiny("llama"), "fastest")
        bad.fused_forward()


def test_transformers_forward_after_fused_steps_and_rollbacks(tiny_target):
    """The cache's write pointers follow a fused forward's rollbacks: transformers' forward
    picks up where the fused one left off."""
    ids = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10, 11]])
    cache = KVCache(tiny_target.config, 32)
    assert tiny_target.fused_forward() is not None  # the tiny target (llama) decodes fused on CPU
    with torch.inference_mode():
        tiny_target.forward(ids[:, :5], cache)
        tiny_target.forward(torch.tensor([[50, 51, 52]]), cache)
        cache.crop(5)
        tiny_target.forward_impl = "transformers"
        try:
            a = tiny_target.forward(ids[:, 5:], cache)
        finally:
            tiny_target.forward_impl = "auto"
        ref = tiny_target.model(ids).logits[0]
    torch.testing.assert_close(a, ref[5:], rtol=1e-4, atol=1e-4)


def test_a_long_prefill_takes_the_causal_path_and_agrees():
    """Prompts longer than GROUPED_ROWS attend through SDPA's causal GQA path."""
    from draftsmith.models.fused import GROUPED_ROWS

    model = _tiny("qwen2")
    ids = torch.randint(0, 97, (1, GROUPED_ROWS + 17), generator=torch.Generator().manual_seed(2))
    got = []
    for forward in ("transformers", "fused"):
        t = _target(model, forward)
        cache = KVCache(t.config, 128)
        with torch.inference_mode():
            first = t.forward_hidden(ids[:, :-1], cache, hidden_layers=(1,))
            last = t.forward(ids[:, -1:], cache)
        got.append((first[0], first[1], last))
    for w, g in zip(*got):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_fused_at_the_first_forward_in_inference_mode_takes_a_packed_kernel():
    """The engine's first forward runs in inference mode and builds the fusion there: its weights
    stay ordinary tensors that a kernel can pack and keep fresh."""
    from draftsmith.infer.kernels import use_linear_kernel

    t = _target(_tiny("llama"), "fused")
    with torch.inference_mode():
        fused = t.fused_forward()
    assert not fused.layers[0][1].weight.is_inference()
    use_linear_kernel(t.linear_modules(), "onednn")  # packs each weight, keyed on its version counter
    with torch.inference_mode():
        t.forward(torch.tensor([[1, 2, 3]]), KVCache(t.config, 8))


def _draft_pair(pard: bool = False):
    """Two draft LMs (or PARD drafters) on copies of one random qwen2 model: the first drafts on
    transformers' forward (its target's forward asked for), the second on the fused one."""
    import copy

    from draftsmith.models.draft_lm import DraftLM
    from draftsmith.models.pard import Pard

    model = _tiny("qwen2")
    drafts = []
    for forward in ("transformers", "auto"):
        target = _target(_tiny("llama"), forward)
        name = f"random qwen2 ({forward})"
        draft = copy.deepcopy(model)
        drafts.append(Pard(draft, target, name, mask_token_id=96) if pard else DraftLM(draft, target, name))
    return drafts


def _draft_steps(draft, seed: int = 3):
    """Proposals (tokens, probabilities) over a prefill, drafted steps, partial acceptances and a
    plain step between them (accept without a propose), sampled at temperature 1."""
    from draftsmith.infer.sampling import SamplingConfig

    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(seed))
    sampling, gen = SamplingConfig(temperature=1.0), torch.Generator().manual_seed(seed)
    draft.start(ids[:, :10], 64)
    out = []
    with torch.inference_mode():
        for n, accepted in ((11, 2), (14, 0), (15, None), (17, 4), (22, 1)):
            if accepted is None:  # a plain step: the next propose catches up on two tokens
                draft.accept(0)
                continue
            p = draft.propose(ids[:, :n], 4, sampling, gen)
            out.append((p.tokens, p.probs))
            draft.accept(accepted)
    return out


def test_a_draft_lm_drafts_on_the_fused_forward_as_on_transformers():
    slow, fast = _draft_pair()
    assert slow.forward_why.startswith("transformers") and fast.forward_why.startswith("fused")
    for (ta, pa), (tb, pb) in zip(_draft_steps(slow), _draft_steps(fast), strict=True):
        assert torch.equal(ta, tb)
        torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)
    # A draft vocabulary swaps the LM head after the first fusion: the fused forward follows it.
    vocab = torch.arange(0, 97, 3)
    for d in (slow, fast):
        d.set_draft_vocab(vocab)
    for (ta, pa), (tb, pb) in zip(_draft_steps(slow, 4), _draft_steps(fast, 4), strict=True):
        assert torch.equal(ta, tb) and bool(torch.isin(tb, vocab).all())
        torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)
    assert fast.fused_forward().lm_head is fast.model.get_output_embeddings()


def test_pard_drafts_on_the_fused_forward_as_on_transformers():
    slow, fast = _draft_pair(pard=True)
    assert fast.forward_why.startswith("fused")
    for (ta, pa), (tb, pb) in zip(_draft_steps(slow), _draft_steps(fast), strict=True):
        assert torch.equal(ta, tb)
        torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)
    assert slow.forwards == fast.forwards


def test_the_draft_kernel_routes_the_fused_products_and_training_keeps_transformers():
    from draftsmith.models.draft_lm import DraftLM

    _, fast = _draft_pair()
    chosen = fast.target.use_cpu_matmul("transposed", 5, fast, draft_dtype="float32")
    assert chosen["draft"]["kernel"] == "transposed"
    linears = fast.fused_forward().linears
    assert all(m.__dict__.get("_kernel") is not None for m in linears)  # the products the draft calls
    live = DraftLM(_tiny("qwen2"), fast.target, "training", freeze=False)
    assert live.fused_forward() is None and "training" in live.forward_why


def test_fusing_a_model_twice_copies_nothing():
    """A draft sharing the target's model (or a rebuild) finds the fused weights and reuses them,
    so neither fusion moves the other's weights and neither goes stale."""
    model = _tiny("llama", attention_bias=True)
    first = FusedForward(model)
    second = FusedForward(model)
    assert second.layers[0][1].weight.data_ptr() == first.layers[0][1].weight.data_ptr()
    assert second.layers[0][1].bias.data_ptr() == first.layers[0][1].bias.data_ptr()
    assert not first.stale and not second.stale
