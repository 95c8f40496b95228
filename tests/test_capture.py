"""The hidden states a drafter reads, caught by hooks on those layers alone (models/capture.py),
equal transformers' `output_hidden_states` exactly on every architecture family tried, and
leave transformers' whole-model hooks uninstalled (they slow every later forward)."""

import pytest
import torch
import transformers as T

from draftsmith.errors import DraftsmithError
from draftsmith.infer.cache import KVCache
from draftsmith.models import Target
from draftsmith.models.capture import HiddenCapture
from draftsmith.models.tiny_random import tiny_tokenizer

SIZES = dict(
    vocab_size=320,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
ARCHS = {  # families whose layouts differ: qk-norm, embedding scaling, sliding windows, parallel blocks
    "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, {}),
    "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, {"head_dim": 8}),
    "mistral": (T.MistralConfig, T.MistralForCausalLM, {}),
    "phi3": (T.Phi3Config, T.Phi3ForCausalLM, {"pad_token_id": 0, "eos_token_id": 1}),
    "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, {"head_dim": 8}),
    "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM, {"head_dim": 8}),
    "gpt_neox": (T.GPTNeoXConfig, T.GPTNeoXForCausalLM, {"num_key_value_heads": None, "eos_token_id": 1}),
}


def _target(arch: str) -> Target:
    config_cls, model_cls, extra = ARCHS[arch]
    sizes = {k: v for k, v in {**SIZES, **extra}.items() if v is not None}
    torch.manual_seed(0)
    return Target(model_cls(config_cls(**sizes)), tiny_tokenizer(), arch)


def _both_ways(target: Target, layers, ids):
    """forward_hidden through the hooks and through output_hidden_states, prefill then a decode
    step, each on its own cache."""
    capture, out = target._capture, []
    with torch.inference_mode():
        for way in (capture, None):
            target._capture = way
            cache = KVCache(target.config, 64, "static")
            out.append([*target.forward_hidden(ids, cache, hidden_layers=layers)])
            out[-1] += target.forward_hidden(ids[:, -1:], cache, hidden_layers=layers)
    target._capture = capture
    return out


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_hooks_equal_output_hidden_states(arch):
    target = _target(arch)
    assert target._capture is not None, f"{arch}: its decoder layers should be found"
    n = target.config.num_hidden_layers
    layers = (0, 1, n // 2, n - 1, n, -1, -n - 1)  # the embeddings, each middle layer, the normed last
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(1))
    hooked, recorded = _both_ways(target, layers, ids)
    for a, b in zip(hooked, recorded):
        assert a.shape == b.shape and torch.equal(a, b)
    assert hooked[1].shape == (9, len(layers) * target.config.hidden_size)


def test_tiny_target_keeps_transformers_hooks_off(tiny_cache, tiny):
    """Decoding with a drafter that reads hidden states installs no transformers hook, so a plain
    forward on the same model afterwards runs as fast as before any draft was used. A target of
    its own: a forward with output_hidden_states=True elsewhere (online training features) leaves
    transformers' hooks on the model it ran."""
    from draftsmith.infer.engine import Engine
    from draftsmith.models import Target

    target = Target.load("tiny-random", dtype="float32", device="cpu")
    drafter = tiny("eagle3")[0]
    assert target._capture is not None and drafter.hidden_layers
    assert not [m for m in target.model.modules() if m._forward_hooks or m._forward_pre_hooks]
    Engine(target, drafter, 3).generate([1, 5, 9, 4], 6)
    hooked = [m for m in target.model.modules() if m._forward_hooks or m._forward_pre_hooks]
    assert len(hooked) <= len(set(drafter.hidden_layers)), hooked
    assert not getattr(target.model.get_decoder(), "_output_capturing_hooks_installed", False)


def test_idle_hooks_record_nothing(tiny_target):
    capture = tiny_target._capture
    with torch.inference_mode():
        with capture.collect([1]) as got:
            tiny_target.model(input_ids=torch.tensor([[1, 2]]))
        kept = got[1]
        tiny_target.model(input_ids=torch.tensor([[3, 4, 5]]))  # outside collect: not recorded
    assert kept.shape[1] == 2 and got[1] is kept


def test_out_of_range_layer_is_a_clear_error(tiny_target):
    n = tiny_target.config.num_hidden_layers + 1
    with torch.inference_mode(), pytest.raises(DraftsmithError, match=rf"hidden layers \[{n}\].*{n} hidden states"):
        tiny_target.forward_hidden(torch.tensor([[1, 2]]), KVCache(tiny_target.config, 8, "static"), hidden_layers=(n,))


def test_unknown_layout_falls_back_to_output_hidden_states():
    """A model without transformers' record of its decoder layers gets no capture: the target
    then asks for output_hidden_states, which every model answers."""

    class Bare(torch.nn.Module):
        def get_decoder(self):
            return torch.nn.Linear(2, 2)

    assert HiddenCapture.of(Bare()) is None


def test_compiled_target_keeps_output_hidden_states():
    """CUDA graphs were traced with transformers' own hidden states: a compiled target adds no hooks."""
    eager = _target("qwen2")
    assert eager._capture is not None
    assert Target(eager.model, eager.tokenizer, "qwen2", compile=True)._capture is None
