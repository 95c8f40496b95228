"""`tiny-random`: a seeded random Llama with a download-free tokenizer, built in about a second.

What the tests and the quickstart decode with when no real model is at hand; built once into
the cache folder (models/cache_folder.py) like a converted GGUF.
"""

from __future__ import annotations

import pathlib

import torch

from .cache_folder import cache_dir, finish, is_complete, locked, save_here, temp_dir_beside

TINY_RECIPE = 1  # bump when the recipe below changes, so cached copies rebuild
TINY_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 as in SmolLM2
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_tokenizer():
    """Byte-level BPE with the 256 byte tokens and no merges: deterministic, no training, no
    download, and every string round-trips. Specials come first so their ids are 0, 1, 2."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_chars = [bytes_to_unicode()[b] for b in range(256)]  # byte b gets id 3 + b
    vocab = {s: i for i, s in enumerate(TINY_SPECIALS)}
    vocab.update({c: len(TINY_SPECIALS) + i for i, c in enumerate(byte_chars)})
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in TINY_SPECIALS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHATML_TEMPLATE,
        model_max_length=2048,
    )


def build_tiny_random() -> pathlib.Path:
    """8 layers, 2048 positions, hidden 64: big enough to exercise caches and layer selection,
    small enough to build in about a second.

    Embedding and LM head use std 0.4, so next-token distributions are peaky (median top-1
    probability ~0.37, > 0.2 at ~90% of positions) rather than near-uniform. Layers use std 0.05:
    large enough that the context matters (a different prefix changes the argmax ~25% of the
    time, so KV-cache bugs show), small enough that a copy truncated to its first 2 layers still
    agrees on the argmax ~55% of the time: speculative tests see acceptances and rejections.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    dest = cache_dir() / "models" / "tiny-random"
    if is_complete(dest, recipe=TINY_RECIPE):
        return dest
    with locked(dest):
        if is_complete(dest, recipe=TINY_RECIPE):
            return dest
        tok = tiny_tokenizer()
        ids = {s: tok.convert_tokens_to_ids(s) for s in TINY_SPECIALS}
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=8,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            initializer_range=0.05,
            tie_word_embeddings=False,
            rms_norm_eps=1e-6,
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            dtype="float32",
        )
        with torch.random.fork_rng(devices=[]):  # seed without disturbing the caller's RNG
            torch.manual_seed(0)
            model = LlamaForCausalLM(config)
            with torch.no_grad():
                model.model.embed_tokens.weight.normal_(0.0, 0.4)
                model.lm_head.weight.normal_(0.0, 0.4)
        model.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
        )
        with temp_dir_beside(dest) as tmp:
            save_here(model, tmp / "hf")
            tok.save_pretrained(tmp / "hf")
            finish(tmp / "hf", dest, {"kind": "tiny-random", "recipe": TINY_RECIPE})
    return dest
