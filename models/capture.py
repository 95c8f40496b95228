"""The target's hidden states a drafter reads, caught by hooks on those layers alone.

transformers returns hidden states through `output_hidden_states=True`: the first such call
installs a forward hook on every decoder layer (and attention module) for good, and each call
then collects every layer's output. For a drafter that reads three layers of thirty, that made
each decode step about 3% slower on a small target (SmolLM2-135M, 2 CPU cores), and the hooks
left behind slowed plain decoding on the same model by about 1% too, which flattered every
speedup measured beside it. Here a hook sits only on the layers asked for, does nothing outside
a forward that asks, and the whole-model hooks are never installed.

The indices are transformers' `hidden_states` indices, so the two ways agree exactly: 0 is the
input of the first decoder layer (the embeddings), i in 1..L-1 the output of layer i-1, L (or
-1) the base model's `last_hidden_state` (after the final norm). A model whose decoder layers
cannot be found the way transformers records them (its `_can_record_outputs`) gets None from
`HiddenCapture.of`, and the caller keeps `output_hidden_states`.
"""

from __future__ import annotations

import contextlib

import torch


class HiddenCapture:
    """Forward hooks on the modules whose outputs are hidden states `indices`, idle unless a
    forward runs inside `collect(indices)`."""

    def __init__(self, decoder: torch.nn.Module, layers: list[torch.nn.Module]):
        self.decoder, self.layers = decoder, layers
        self.num_states = len(layers) + 1  # the embeddings, then one per layer (the last normed)
        self._hooked: set[int] = set()
        self._want: dict[int, torch.Tensor | None] | None = None  # index -> state, during collect

    @classmethod
    def of(cls, model: torch.nn.Module) -> HiddenCapture | None:
        """The capture for a transformers causal LM, or None where its decoder layers cannot be
        found as transformers records them (the caller then asks for `output_hidden_states`)."""
        get_decoder = getattr(model, "get_decoder", None)
        decoder = get_decoder() if callable(get_decoder) else None
        recorded = getattr(type(decoder), "_can_record_outputs", None) or {}
        layer_cls = recorded.get("hidden_states")
        config = getattr(model, "config", None)
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        if not isinstance(layer_cls, type) or getattr(config, "tie_last_hidden_states", True) is False:
            return None
        layers = [m for m in decoder.modules() if isinstance(m, layer_cls)]
        if not layers or len(layers) != getattr(config, "num_hidden_layers", None):
            return None
        return cls(decoder, layers)

    def _hook(self, index: int) -> None:
        """Hook the module whose output (or, for 0, input) is hidden state `index`, once."""
        if index in self._hooked:
            return
        if index == 0:
            self.layers[0].register_forward_pre_hook(
                lambda module, args, kwargs: self._keep(0, args[0] if args else kwargs["hidden_states"]),
                with_kwargs=True,
            )
        elif index < self.num_states - 1:
            self.layers[index - 1].register_forward_hook(
                lambda module, args, out: self._keep(index, out[0] if isinstance(out, tuple) else out)
            )
        else:
            self.decoder.register_forward_hook(lambda module, args, out: self._keep(index, out.last_hidden_state))
        self._hooked.add(index)

    def _keep(self, index: int, state: torch.Tensor) -> None:
        if self._want is not None and index in self._want:
            self._want[index] = state

    @contextlib.contextmanager
    def collect(self, indices):
        """Inside: a forward records hidden states `indices` (negative ones count from the end);
        yields a dict that holds them, by the index as given, once the forward has run."""
        resolved = {}
        for i in indices:
            if not -self.num_states <= i < self.num_states:
                raise IndexError(i)
            resolved[i] = i % self.num_states
            self._hook(resolved[i])
        self._want = dict.fromkeys(resolved.values())
        got: dict[int, torch.Tensor] = {}
        try:
            yield got
            missing = [i for i, r in resolved.items() if self._want[r] is None]
            if missing:
                raise RuntimeError(f"hidden states {missing} were not produced by the forward")
            got.update({i: self._want[r] for i, r in resolved.items()})
        finally:
            self._want = None
