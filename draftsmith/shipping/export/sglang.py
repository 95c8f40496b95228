"""`sglang`: SGLang's EAGLE-3 draft layout (`--speculative-algorithm EAGLE3
--speculative-draft-model-path DIR`).

Checked against SGLang main as stored in late 2026:
- python/sglang/srt/models/llama_eagle3.py (LlamaForCausalLMEagle3: fc [d, 3*target_hidden]
  (bias only with config.bias), midlayer.* with q/k/v over 2d, input_layernorm on the embedding,
  hidden_norm on the hidden state, the residual taken *before* hidden_norm; norm; lm_head with
  draft_vocab_size rows -- the target's only when draft_vocab_size is None, and the embedding
  itself when tie_word_embeddings is true; d2t read as offsets (hot_token_id = d2t + arange);
  t2d skipped; unknown names ignored silently);
- python/sglang/srt/speculative/eagle_worker.py (the embedding always comes from the target;
  eagle_config.use_aux_hidden_state, default true);
- python/sglang/srt/model_executor/model_runner.py (aux layer ids from the *draft's*
  `eagle_config["eagle_aux_hidden_state_layer_ids"]`, None -> the target's default) and
  python/sglang/srt/models/llama.py (set_eagle3_layers_to_capture: None -> [2, L//2, L-3] as is;
  given ids -> +1 each, and since sgl-project/sglang#25454 (May 2026) +1 only when the first id
  is 1; the capture loop records hidden_states + residual *before* layer i).

Where the engines' published format notes and the sources disagree or say less, the sources win:
- the notes name `eagle_config.eagle_aux_hidden_state_layer_ids` for vLLM as well; the two
  engines read that key differently (vLLM: the id is the layer whose input is captured, SGLang:
  the id is the layer whose output is captured). This export writes SGLang's reading there and
  vLLM's at the top level, which vLLM reads first, so the folder means the same layers in both.
- `tie_word_embeddings` must be false (SGLang would use the embedding as the LM head), and
  `draft_vocab_size` must be present (its absence makes SGLang load the target's LM head).
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import write_json
from draftsmith.shipping.export import hf, vllm
from draftsmith.shipping.export.common import (
    Layout,
    check_folder,
    copy_tokenizer,
    dtype_name,
    layout,
    llama_layer_config,
    save_weights,
)
from draftsmith.shipping.export.format import Format, late

if TYPE_CHECKING:
    from draftsmith.models.checkpoint import Checkpoint

ENGINE = "SGLang"
CHECKED_AGAINST = (
    "SGLang main, late 2026: srt/models/llama_eagle3.py, srt/models/llama.py "
    "(set_eagle3_layers_to_capture after sgl-project/sglang#25454), srt/model_executor/model_runner.py, "
    "srt/speculative/eagle_worker.py"
)

REQUIRED_KEYS = (
    "architectures",
    "model_type",
    "num_hidden_layers",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "max_position_embeddings",
    "rope_theta",
    "draft_vocab_size",
    "target_hidden_size",
    "tie_word_embeddings",
    "eagle_config",
)
EAGLE_CONFIG_KEYS = ("eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state")
ARCHITECTURE = "LlamaForCausalLMEagle3"


@dataclass(frozen=True)
class SglangLayout(Layout):
    """A kind's SGLang layout. write: (checkpoint, out, k, verifier) -> notes; required_keys and
    shapes: the config keys and weights SGLang reads; check: the exported folder -> problems."""

    write: object = None
    required_keys: tuple[str, ...] = ()
    shapes: object = None
    check: object = None


WEIGHTS = hf.EAGLE3_WEIGHTS  # fc, midlayer.*, norm, lm_head, d2t, t2d: SGLang reads our own names


def aux_layer_ids(hf_ids: list[int]) -> list[int]:
    """SGLang's eagle_aux_hidden_state_layer_ids for transformers hidden_states indices `hf_ids`
    (ascending): SGLang captures before layer id+1, except (since #25454) when the first id is
    not 1, where it captures before layer id. Ids starting at 1 mean the same in both versions."""
    if hf_ids[0] == 2:
        return [i - 1 for i in hf_ids]  # first id 1: every SGLang version adds 1
    if hf_ids[0] == 1:
        raise DraftsmithError(
            f"this eagle3 draft reads hidden states {hf_ids}; SGLang cannot name hidden_states[1] "
            "unambiguously as the first aux layer (id 0 or 1 both mean another layer in some "
            "version); retrain with aux_layers not starting at 1"
        )
    return list(hf_ids)  # read as is by SGLang since #25454 (earlier versions add 1)


def write(ckpt: Checkpoint, out: pathlib.Path, *, num_speculative_tokens: int, verifier: str) -> dict:
    return layout(ckpt.kind, "sglang").write(ckpt, out, num_speculative_tokens, verifier)


def check(folder, kind: str = "eagle3") -> list[str]:
    """Problems with an sglang export of a `kind` checkpoint ([] when it matches the contract)."""
    from draftsmith.kinds import KINDS

    if kind not in KINDS or "sglang" not in KINDS[kind].exports:
        return [f"no sglang layout for {kind} drafts"]
    return layout(kind, "sglang").check(pathlib.Path(folder))


def _eagle3(ckpt: Checkpoint, out: pathlib.Path, num_speculative_tokens: int, verifier: str) -> dict:
    cfg = ckpt.config
    tensors, ids, _ = vllm.eagle3_tensors(ckpt, prefix="midlayer.")
    save_weights(tensors, out)
    dtype = dtype_name(tensors)
    config = llama_layer_config(cfg, vocab_size=int(cfg["vocab_size"]), dtype=dtype)
    sglang_ids = aux_layer_ids(ids)
    config.update(
        {
            "architectures": [ARCHITECTURE],
            "draft_vocab_size": int(cfg.get("draft_vocab_size") or cfg["vocab_size"]),
            "target_hidden_size": int(cfg.get("target_hidden_size") or cfg["hidden_size"]),
            "norm_before_residual": False,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": sglang_ids, "use_aux_hidden_state": True},
            # vLLM loads this layout too and reads the top-level key first, with its own convention.
            "eagle_aux_hidden_state_layer_ids": ids,
        }
    )
    write_json(out / "config.json", config)
    copy_tokenizer(ckpt, out)
    k = num_speculative_tokens
    serve = (
        f"python -m sglang.launch_server --model {verifier} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path DIR --speculative-num-steps {k} --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens {k + 1}"
    )
    note = (
        None
        if ids[0] == 2
        else (
            "aux layer ids not starting at hidden_states[2]: SGLang before #25454 (May 2026) reads them one layer later"
        )
    )
    return {
        "serve": serve,
        "num_speculative_tokens": k,
        "aux_layer_ids": sglang_ids,
        **({"note": note} if note else {}),
    }


def expected_weights(config: dict) -> dict:
    """Name -> shape of what SGLang's LlamaForCausalLMEagle3 reads for this `config`."""
    return hf.eagle_shapes(config, prefix="midlayer.", eagle3=True)


def _check_eagle3(folder: pathlib.Path) -> list[str]:
    problems = check_folder(folder, REQUIRED_KEYS, None)
    if problems:
        return problems
    config = json.loads((folder / "config.json").read_text())
    if config.get("architectures") != [ARCHITECTURE]:
        problems.append(f"architectures must be [{ARCHITECTURE!r}]")
    if config.get("num_hidden_layers") != 1:
        problems.append("num_hidden_layers must be 1")
    if config.get("tie_word_embeddings") is not False:
        problems.append("tie_word_embeddings must be false (SGLang would use the embedding as the LM head)")
    if config.get("draft_vocab_size") is None:
        problems.append("draft_vocab_size must be set (SGLang would load the target's LM head)")
    problems += [f"eagle_config lacks {k!r}" for k in EAGLE_CONFIG_KEYS if k not in config["eagle_config"]]
    if problems:
        return problems
    return check_folder(folder, (), expected_weights(config))


def _dflash(ckpt: Checkpoint, out: pathlib.Path, num_speculative_tokens: int, verifier: str) -> dict:
    """SGLang's DFlashDraftModel (srt/models/dflash.py, srt/speculative/dflash_utils.py
    parse_dflash_draft_config) reads vLLM's DFlash folder as it is: block_size at the top level,
    dflash_config.{target_layer_ids, mask_token_id}, weights fc/hidden_norm/layers.*/norm with no
    embedding or LM head (the target's). One layout, written by export/vllm.py."""
    notes = vllm.dflash_folder(ckpt, out, num_speculative_tokens, verifier)
    copy_tokenizer(ckpt, out)
    k = notes.pop("k")
    serve = (
        f"python -m sglang.launch_server --model-path {verifier} --speculative-algorithm DFLASH "
        f"--speculative-draft-model-path DIR --speculative-num-draft-tokens {k + 1}"
    )  # the pending token + k
    return {"serve": serve, "num_speculative_tokens": k, **notes}


def _check_dflash(folder: pathlib.Path) -> list[str]:
    return vllm.check(folder, "dflash")


# The layouts SGLang loads, one per kind (named by draftsmith/kinds.py's Kind.exports); check takes the folder.
EAGLE3 = SglangLayout(_eagle3, REQUIRED_KEYS, shapes=expected_weights, check=_check_eagle3)
DFLASH = SglangLayout(_dflash, check=_check_dflash)

FORMAT = Format(
    name="sglang",
    engine=ENGINE,
    help="SGLang's speculative layout",
    layout_type=SglangLayout,
    write=late(write),
    check=late(check),
    checked_against=CHECKED_AGAINST,
    not_proven="Not run: SGLang's CPU path needs sgl-kernel CPU builds that the package index does not have; "
    "the layout is checked against SGLang's sources (draftsmith_export.json names them).",
)
