"""Train an EAGLE-3 draft with vllm-project/speculators 0.9 on CPU, from the data
convert_to_speculators.py wrote, with our recipe's hyperparameters, under a wall-clock or token
budget. Runs under speculators' own venv (never draftsmith's):

    .engines/speculators/bin/python scripts/peer/speculators_train.py --data DATA --output OUT \
        [--budget-s SECONDS] [--max-tokens N] [--max-steps N] [--threads N] [-- EXTRA SPECULATORS FLAGS]

speculators is not edited: the CPU blockers are patched at runtime, here (see PATCHES below),
then speculators' own `train` entry (speculators.train.cli.main(TrainConfig.resolve(argv))) runs.

Writes OUT/checkpoints/final/ (config.json with speculators_config + model.safetensors, float32:
vLLM loads it as an eagle3 draft), OUT/train_log.jsonl (one line per step: tokens, tokens/s,
loss, per-TTT-step full_acc_k) and OUT/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

PATCHES = """\
1. speculators.train.trainer.get_local_rank -> "cpu": the trainer does model.to(local_rank) and
   batch.to(local_rank) with the integer 0, which means cuda:0.
2. Trainer.device_type -> "cpu": with no accelerator it falls back to autocast("cuda"); on CPU we
   train in float32 (--hidden-states-dtype float32, as our recipe's mixed_precision "no"), and
   autocast("cpu", float32) is a documented no-op.
3. torch.accelerator.synchronize -> no-op when no accelerator exists (its step timer calls it
   unguarded and it raises "Cannot access accelerator device when none is available").
4. AdamW betas -> our recipe's (0.9, 0.95) (speculators constructs AdamW with torch's default
   (0.9, 0.999)); --speculators-betas keeps theirs.
5. Trainer.run_training -> the same epoch loop, stopping at the wall-clock / token budget
   (a step callback lowers max_steps to the current step, which speculators' loop honours),
   then one validation pass and a float32 save to OUT/checkpoints/final (speculators saves bf16
   per epoch; the intermediate per-epoch saves are kept as speculators does them).
6. A forward pre-hook on the draft counts the real tokens of each training batch
   (document_ids != -1) and loss tokens, for tokens/s.
"""


def parse():
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=PATCHES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", required=True, help="folder convert_to_speculators.py wrote")
    ap.add_argument("--output", required=True)
    ap.add_argument("--budget-s", type=float, default=None, help="stop after this much training wall time")
    ap.add_argument("--max-tokens", type=int, default=None, help="stop after this many real training tokens")
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps")
    ap.add_argument(
        "--save-at-s",
        type=float,
        action="append",
        default=[],
        help="also save a float32 checkpoint OUT/checkpoints/at-<S>s once this much training time has passed "
        "(repeatable; the save's own time is not counted)",
    )
    ap.add_argument("--lr", type=float, default=None, help="default: the recipe's optim.lr")
    ap.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="rows per step (default: the recipe's); speculators packs batch_size * max_length tokens",
    )
    ap.add_argument(
        "--schedule-steps",
        type=int,
        default=None,
        help="cosine schedule length (default: the recipe's optim.max_steps)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: cores available)")
    ap.add_argument(
        "--optimizer",
        default="adamw",
        choices=["adamw", "muon"],
        help="adamw (default: as our recipe) or muon (speculators' own default)",
    )
    ap.add_argument("--speculators-betas", action="store_true", help="keep torch's AdamW betas (0.9, 0.999)")
    ap.add_argument("--no-final-val", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more speculators train flags")
    return ap.parse_args()


def main() -> int:
    args = parse()
    extra = [a for a in args.extra if a != "--"]
    data = pathlib.Path(args.data).resolve()
    out = pathlib.Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads((data / "meta.json").read_text())
    threads = args.threads or len(os.sched_getaffinity(0))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("WANDB_DISABLED", "true")

    import torch

    torch.set_num_threads(threads)
    import speculators.train.optimizers as spec_opt
    import speculators.train.trainer as spec_trainer
    from speculators.train.cli import main as spec_main
    from speculators.train.config import TrainConfig

    # --- patches 1-3: CPU ---------------------------------------------------------------------
    spec_trainer.get_local_rank = lambda: "cpu"
    real_sync = torch.accelerator.synchronize

    def synchronize(*a, **k):
        if torch.accelerator.current_accelerator() is None:
            return None
        return real_sync(*a, **k)

    torch.accelerator.synchronize = synchronize
    Trainer = spec_trainer.Trainer
    real_init = Trainer.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        self.device_type = "cpu"

    Trainer.__init__ = init

    # --- patch 4: our AdamW betas ---------------------------------------------------------------
    if not args.speculators_betas:
        base = torch.optim.AdamW

        class AdamW(base):
            def __init__(self, params, lr=1e-3, betas=(0.9, 0.95), **kw):
                super().__init__(params, lr=lr, betas=betas, **kw)

        spec_opt.torch = type(sys)("torch_shim")  # the module's `torch` name, with AdamW swapped
        spec_opt.torch.__dict__.update(torch.__dict__)
        spec_opt.torch.optim = type(sys)("optim_shim")
        spec_opt.torch.optim.__dict__.update(torch.optim.__dict__)
        spec_opt.torch.optim.AdamW = AdamW

    # --- patches 5-6: budget, token counting, final save -----------------------------------------
    log_path = out / "train_log.jsonl"
    log_file = open(log_path, "a", buffering=1)
    state = {"tokens": 0, "loss_tokens": 0, "steps": 0, "t0": None, "stop": None, "last": None}
    state["saves"] = sorted(args.save_at_s)

    def count_tokens(module, a, kw):
        if module.training:
            doc = kw.get("document_ids")
            lm = kw.get("loss_mask")
            state["last"] = (
                int((doc != -1).sum()) if doc is not None else 0,
                int((lm != 0).sum()) if lm is not None else 0,
            )
        return None

    def run_training(self):
        self.model.register_forward_pre_hook(count_tokens, with_kwargs=True)
        real_log = spec_trainer.metric_logger.info

        def metric_info(msg, *a, **k):  # speculators' per-step metrics, mirrored into our log
            if isinstance(msg, dict) and "train" in msg and state["t0"] is not None:
                state["metrics"] = msg["train"]
            return real_log(msg, *a, **k)

        spec_trainer.metric_logger.info = metric_info

        def step_callback():
            now = time.perf_counter()
            n, nl = state["last"] or (0, 0)
            state["tokens"] += n
            state["loss_tokens"] += nl
            state["steps"] += 1
            el = now - state["t0"]
            m = state.pop("metrics", {}) or {}
            rec = {
                "step": self.global_step,
                "elapsed_s": round(el, 3),
                "tokens": state["tokens"],
                "loss_tokens": state["loss_tokens"],
                "tokens_per_s": round(state["tokens"] / el, 2) if el > 0 else None,
                "loss": m.get("loss"),
                **{k: v for k, v in m.items() if k.startswith(("full_acc_", "cond_acc_"))},
            }
            log_file.write(json.dumps(rec) + "\n")
            print(
                f"[peer] step {self.global_step} tokens {state['tokens']} {rec['tokens_per_s']} tok/s "
                f"loss {rec['loss']}",
                flush=True,
            )
            while state["saves"] and el >= state["saves"][0]:  # a mid-run draft, measured like the final one
                at = state["saves"].pop(0)
                t_save = time.perf_counter()
                self.checkpointer.save_checkpoint(self.model, self.optimizers, f"at-{at:g}s", float_dtype=torch.float32)
                state["t0"] += time.perf_counter() - t_save
                log_file.write(json.dumps({"saved": f"at-{at:g}s", "step": self.global_step, **rec}) + "\n")
                print(f"[peer] saved at-{at:g}s at step {self.global_step} ({el:.0f} s)", flush=True)
            why = None
            if args.budget_s is not None and el >= args.budget_s:
                why = f"wall-clock budget {args.budget_s:g} s"
            elif args.max_tokens is not None and state["tokens"] >= args.max_tokens:
                why = f"token budget {args.max_tokens}"
            elif args.max_steps is not None and state["steps"] >= args.max_steps:
                why = f"step budget {args.max_steps}"
            if why:
                state["stop"] = why
                # speculators' loop breaks on global_step >= max_steps (TrainerConfig is a NamedTuple)
                self.config = self.config._replace(max_steps=self.global_step)

        epoch = self.current_epoch
        state["t0"] = time.perf_counter()
        while epoch < self.config.num_epochs and state["stop"] is None:
            self.train_epoch(epoch, step_callback=step_callback)
            epoch += 1
        train_s = time.perf_counter() - state["t0"]
        val = None if args.no_final_val or self.val_loader is None else self.val_epoch(epoch - 1)
        self.checkpointer.save_checkpoint(self.model, self.optimizers, "final", float_dtype=torch.float32)
        summary = {
            "stopped_by": state["stop"] or "epochs done",
            "train_s": round(train_s, 2),
            "steps": state["steps"],
            "tokens": state["tokens"],
            "loss_tokens": state["loss_tokens"],
            "tokens_per_s": round(state["tokens"] / train_s, 2) if train_s > 0 else None,
            "val": val,
            "final": str(self.checkpointer.path / "final"),
            "threads": threads,
            "data": str(data),
            "argv": argv,
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(
            "[peer] "
            + json.dumps(
                {k: summary[k] for k in ("stopped_by", "train_s", "steps", "tokens", "tokens_per_s", "final")}
            ),
            flush=True,
        )

    Trainer.run_training = run_training

    # --- speculators' own train entry, with our recipe's settings --------------------------------
    opt = meta["recipe_optim"]
    dr = meta["recipe_drafter"]
    if dr["divergence"] != "fkl":
        print(
            f"[peer] warning: recipe divergence {dr['divergence']}; speculators trains kl_div (= our fkl)", flush=True
        )
    batch = args.batch_size or opt["batch_size"]
    max_steps = (
        args.max_steps
        if args.max_steps is not None
        else (10**9 if (args.budget_s or args.max_tokens) else opt["max_steps"])
    )
    if args.max_steps is None and not (args.budget_s or args.max_tokens):
        args.max_steps = opt["max_steps"]
    argv = [
        "--speculator-type",
        "eagle3",
        "--verifier-name-or-path",
        meta["target_dir"],
        "--data-path",
        str(data),
        "--target-layer-ids",
        *map(str, meta["target_layer_ids"]),
        "--draft-vocab-size",
        str(meta["draft_vocab_size"]),
        "--d2t-path",
        str(data / meta["d2t"]),
        "--t2d-path",
        str(data / meta["t2d"]),
        "--num-layers",
        "1",
        "--ttt-steps",
        str(dr["ttt_steps"]),
        "--ttt-step-loss-decay",
        str(dr["ttt_decay"]),
        "--loss-fn",
        "kl_div",
        "--loss-implementation",
        "eager",
        "--draft-attn-impl",
        "sdpa",
        "--total-seq-len",
        str(batch * meta["max_length"]),
        "--train-data-ratio",
        repr(meta["train_data_ratio"]),
        "--hidden-states-dtype",
        "float32",
        "--on-missing",
        "raise",
        "--num-workers",
        "0",
        "--lr",
        str(args.lr or opt["lr"]),
        "--optimizer",
        args.optimizer,
        "--weight-decay",
        "0.0",
        "--scheduler-type",
        "cosine",
        "--scheduler-warmup-steps",
        str(opt["warmup_steps"]),
        "--scheduler-total-steps",
        str(args.schedule_steps or opt["max_steps"]),
        "--epochs",
        "1000000",
        "--max-steps",
        str(max_steps),
        "--checkpoint-freq",
        "1000000",
        "--save-path",
        str(out / "checkpoints"),
        "--log-dir",
        str(out / "logs"),
        "--log-freq",
        "1",
        "--seed",
        str(args.seed),
        *extra,
    ]
    print("[peer] speculators train " + " ".join(argv), flush=True)
    spec_main(TrainConfig.resolve(argv))
    log_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
