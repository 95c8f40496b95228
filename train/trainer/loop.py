"""One accelerate training loop for every drafter kind.

The loop knows nothing of a drafter's internals: a task (`KINDS[kind].task`, declared in
draftsmith/kinds.py; the TrainingTask base class in train/tasks/base.py) gives it the trainable module, a
loss over a batch, how to save a loadable drafter and how to run it in the engine.
The frozen target is loaded once, outside DeepSpeed's `zero.Init`, never `prepare`d and never
saved into a checkpoint; only the drafter is trained and sharded.

Single process, DDP, DeepSpeed ZeRO-2/3 and FSDP are the same code, chosen by the accelerate
config the job is launched with (configs/accelerate/*.yaml). On CPU the process group uses gloo.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import socket
import threading
import time

import torch
from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.infer.proposal import speculative_cap
from draftsmith.kinds import KINDS
from draftsmith.train.config import Recipe, dump_recipe
from draftsmith.train.distributed import (
    fingerprint,
    init_trackers,
    is_zero3,
    load_target,
    make_accelerator,
    outside_zero_init,
    shutdown,
)
from draftsmith.train.losses import expected_acceptance_length
from draftsmith.train.preflight import acceptance_during_training, check_before_loading, zero3_acceptance_refusal
from draftsmith.train.tasks.base import TrainingTask
from draftsmith.train.trainer import checkpoint, faults
from draftsmith.train.trainer.curves import CURVES, plot_curves
from draftsmith.train.trainer.schedule import EpochShuffle, lr_lambda, param_groups, run_length

log = logging.getLogger("draftsmith.train")


class Trainer:
    """One training run, read top to bottom: __init__ checks and takes the output dir, _setup
    builds the run (and resumes a killed one), train() runs the loop. Every write to the output
    dir is one event of its checkpoint.RunFolder: resume, save, keep_if_best."""

    def __init__(self, recipe: Recipe, resume: bool | None = None, data=None):
        """`data`: training rows built by the caller (a train/data TrainData) in place of the
        recipe's data section, e.g. exact token sequences a text round trip would not keep."""
        self.recipe = r = recipe
        self._given_data = data
        self.out = pathlib.Path(r.checkpoint.output_dir)
        self.resume = r.checkpoint.resume if resume is None else resume
        # Every check that needs no model runs first, on every rank alike, and writes nothing:
        # a refused run (a read-only or busy folder, another kind's checkpoints) leaves it as it was.
        check_before_loading(r)  # the data and feature files, before the target loads on every GPU
        self.folder = checkpoint.RunFolder(self.out, r.drafter.kind, self.resume, r.checkpoint.keep_last)
        # the prompts' template switches (Qwen3's enable_thinking): eval, bench and crosscheck render with them
        self.folder.meta = {"chat_template_kwargs": dict(r.data.chat_template_kwargs)}
        self.acc = acc = make_accelerator(r)
        if is_zero3(acc) and acceptance_during_training(r):  # however the launch chose ZeRO-3
            raise DraftsmithError(zero3_acceptance_refusal(r))
        self.main = acc.is_main_process
        self.folder.lock(acc)  # one run per output dir; its checkpoints checked again under the lock
        # SIGTERM: _terminate asks the loop to checkpoint and stop; _raise_on_term (only inside the
        # acceptance measurement) makes the handler abandon the measurement where it is.
        self._terminate = self._raise_on_term = False
        self._old_sigterm = None
        try:
            self._setup(r)
        except BaseException:
            self.folder.close()  # a run that wrote nothing removes the folder it created
            raise

    def _setup(self, r: Recipe) -> None:
        from accelerate.utils import set_seed

        from draftsmith.train.data import build_data, collate

        acc = self.acc
        set_seed(r.optim.seed)

        # The target and the drafter's initial weights are built outside zero.Init: the target
        # must stay whole and unsharded; the drafter is partitioned by deepspeed.initialize.
        with outside_zero_init(acc):
            self.target = load_target(r, acc)
            self.task: TrainingTask = KINDS[r.drafter.kind].task(r.drafter, self.target, seed=r.optim.seed)
        if self._given_data is not None:
            self.data = self._given_data
        else:
            with acc.main_process_first():  # regeneration/tokenising caches are written once
                self.data = build_data(
                    r.data, self.target.tokenizer, target=self.target, progress=self.main and r.logging.progress
                )
        self.task.bind_data(self.data, r.data)  # e.g. an offline feature cache, EAGLE-3's draft vocabulary
        self.task.acceptance_k = r.logging.acceptance_k  # the chain length its evaluation simulates
        world, bs = acc.num_processes, r.optim.batch_size
        if len(self.data.train) < bs * world:
            raise DraftsmithError(
                f"{len(self.data.train)} training rows < batch_size {bs} x {world} processes: use more data or a "
                "smaller batch"
            )
        o = r.optim
        o.max_steps, o.warmup_steps, epochs = run_length(o, len(self.data.train), world)
        self.epochs_per_step = epochs / o.max_steps  # the summary's epochs for the steps taken
        if self.main:
            log.info(
                "%d optimizer steps (%d warm-up): %.2f epochs of %d training rows at %d process(es) x %d rows x %d "
                "accumulated",
                o.max_steps,
                o.warmup_steps,
                epochs,
                len(self.data.train),
                world,
                bs,
                o.grad_accum,
            )
        self.sampler = EpochShuffle(len(self.data.train), r.data.seed)
        loader = torch.utils.data.DataLoader(
            self.data.train, batch_size=bs, sampler=self.sampler, collate_fn=collate, drop_last=True
        )
        eval_loader = torch.utils.data.DataLoader(self.data.eval, batch_size=bs, collate_fn=collate)
        plugin = acc.state.deepspeed_plugin
        if plugin is not None and plugin.deepspeed_config.get("gradient_clipping", "auto") == "auto":
            plugin.deepspeed_config["gradient_clipping"] = r.optim.max_grad_norm  # else accelerate's 1.0
        params = param_groups(self.task.trainable_parameters(), r.optim.lr)
        optimizer = torch.optim.AdamW(
            params, lr=r.optim.lr, betas=tuple(r.optim.betas), weight_decay=r.optim.weight_decay
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(o.warmup_steps, o.max_steps, o.min_lr_ratio))
        self.model, self.optimizer, self.loader, self.eval_loader, self.scheduler = acc.prepare(
            self.task.model, optimizer, loader, eval_loader, scheduler
        )
        self.step, self.epoch, self.batch_in_epoch, self.tokens = 0, 0, 0, 0
        # Training wall time of earlier runs of this job: optim.max_minutes is a budget for the
        # whole job, so a resumed run gets only what the killed one left.
        self.train_seconds, self._t_start = 0.0, time.monotonic()
        self.history: list[dict] = []
        self.last_eval: dict = {}  # the latest evaluate() metrics, saved with checkpoints (Medusa's head accuracies)
        state = self.folder.resume(dump_recipe(r))  # a killed run's state back, then the run's first writes
        if state is not None:
            self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
            self.tokens, self.history = state.get("tokens", 0), state.get("history", [])
            self.train_seconds = float(state.get("train_seconds", 0.0))
            for record in self.history:  # the latest eval metrics, which later checkpoints carry
                self.last_eval.update({k: v for k, v in record.items() if k.startswith("eval/")})
        if r.logging.trackers:
            init_trackers(acc, r)

    def close(self) -> None:
        """Release the output dir (the process's exit releases it too) and give SIGTERM back to
        whoever handled it before train() (an in-process caller)."""
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
        self.folder.close()

    # --- the loop --------------------------------------------------------------------------------

    def train(self) -> dict:
        """Train to optim.max_steps; on SIGTERM (preemption, `kill`), checkpoint the step in
        progress and return {"interrupted": True, ...}: --resume continues from there."""
        r, acc = self.recipe, self.acc
        self._terminate = False
        if threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        bar = tqdm(
            total=r.optim.max_steps,
            initial=self.step,
            desc="train",
            disable=not (self.main and r.logging.progress),
            dynamic_ncols=True,
        )
        checkpoint.warm_imports()  # else the first save imports them, inside SIGTERM's grace period
        self.model.train()
        window = _new_window()
        self._t_start = time.monotonic()
        deadline = self._t_start + r.optim.max_minutes * 60 - self.train_seconds if r.optim.max_minutes else None
        out_of_time = False
        if self.step == 0 and r.logging.acceptance_every > 0:
            # step 0: what the drafter does before training, so the curve shows what training added
            # (and best/ starts from it: a later step must beat it beyond the noise)
            if r.logging.eval_every > 0:
                self.evaluate()
            self._keep_if_best(self.measure_acceptance())
        while self.step < r.optim.max_steps and not out_of_time:
            bs_global = r.optim.batch_size * acc.num_processes
            self.sampler.skip_next(self.epoch, self.batch_in_epoch * bs_global)
            self.loader.set_epoch(self.epoch)
            for batch in self.loader:
                self.batch_in_epoch += 1
                grad_norm = self._train_on(batch, window)
                if not acc.sync_gradients:
                    continue
                self.scheduler.step()
                self.step += 1
                bar.update(1)
                if _every(self.step, r.logging.log_every) or self.step == r.optim.max_steps:
                    self._log_train(window, grad_norm, bar)
                    window = _new_window()
                if _every(self.step, r.logging.eval_every) and self.step < r.optim.max_steps:
                    self.evaluate()
                if _every(self.step, r.logging.acceptance_every) and self.step < r.optim.max_steps:
                    self._keep_if_best(self.measure_acceptance())
                saved = _every(self.step, r.checkpoint.save_every) and self.step < r.optim.max_steps
                if saved:
                    self.save()
                stop, out_of_time = self._stop_requested(deadline)
                if stop:
                    bar.close()
                    return self._preempted(saved)
                if out_of_time:
                    log.info(
                        "optim.max_minutes (%g) reached at step %d of %d: evaluating and saving",
                        r.optim.max_minutes,
                        self.step,
                        r.optim.max_steps,
                    )
                if self.step >= r.optim.max_steps or out_of_time:
                    break
            else:
                self.epoch += 1
                self.batch_in_epoch = 0
        bar.close()
        final_eval = self.evaluate()
        acceptance = self.measure_acceptance()
        if self._stop_requested()[0]:  # SIGTERM during the final measurements: --resume measures again
            return self._preempted(saved=False)
        self._keep_if_best(acceptance)  # the end of the run is a candidate too
        measured = (
            {"tau": acceptance["mean_acceptance_length"], "acceptance": self._acceptance_meta()} if acceptance else {}
        )
        final = self.save(final=measured)  # this step's checkpoint, then final/
        return self._finish(final, final_eval, acceptance)

    def _train_on(self, batch: dict, window: dict):
        """One micro-batch: forward, backward and (once gradients sync) the clipped optimizer step;
        its tokens and the task's numeric stats go into `window`. -> the gradient norm, if clipped."""
        r, acc = self.recipe, self.acc
        with acc.accumulate(self.model):
            loss, stats = self.loss(batch, self.step)
            acc.backward(loss)
            grad_norm = None
            if acc.sync_gradients and r.optim.max_grad_norm > 0:
                grad_norm = acc.clip_grad_norm_(self.model.parameters(), r.optim.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        n_tok = batch["input_ids"].numel() * acc.num_processes
        self.tokens += n_tok
        window["tokens"] += n_tok
        for key, value in stats.items():  # every numeric stat the task reports is averaged
            if key != "num_tokens" and isinstance(value, (int, float)):
                window["sums"][key] = window["sums"].get(key, 0.0) + float(value)
        window["n"] += 1
        return grad_norm

    def loss(self, batch: dict, step: int | None):
        """The task's (loss, stats) under the run's autocast. accelerate autocasts the prepared
        model's forward only; a task also computes outside it (EAGLE's and DFlash's LM heads are
        called on the unwrapped draft), and those matmuls must run in the autocast dtype too. The
        losses take their softmaxes in fp32 themselves (train/losses.py)."""
        with self.acc.autocast():
            return self.task.loss(self.model, batch, step=step)

    def _log_train(self, window: dict, grad_norm, bar) -> None:
        n = max(1, window["n"])
        dt = time.perf_counter() - window["t0"]
        metrics = {f"train/{key}": total / n for key, total in window["sums"].items()}
        metrics |= {
            "train/lr": self.scheduler.get_last_lr()[0],
            "train/tokens_per_s": window["tokens"] / max(dt, 1e-9),
            "train/tokens": self.tokens,
        }
        if grad_norm is not None:
            metrics["train/grad_norm"] = float(grad_norm)
        bar.set_postfix(
            loss=f"{metrics['train/loss']:.4f}",
            tok_s=f"{metrics['train/tokens_per_s']:.0f}",
            lr=f"{metrics['train/lr']:.2e}",
        )
        self._record(metrics)

    def _record(self, metrics: dict) -> None:
        metrics = {k: float(v) for k, v in metrics.items()}
        self.history.append({"step": self.step, "tokens": self.tokens, **metrics})  # tokens: the curves' x axis
        if self.recipe.logging.trackers:
            self.acc.log(metrics, step=self.step)
        if self.main and not self.recipe.logging.progress:
            log.info("step %d %s", self.step, " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Held-out loss and token-level acceptance proxies; the expected acceptance length at
        K=acceptance_k assumes i.i.d. per-token acceptance (Leviathan et al. 2023, eq. 1)."""
        if self.target.parts == "readers":  # held-out rows have no cached features, and the target cannot run
            return {}
        self.model.eval()
        # Every numeric stat the task reports, weighted by num_tokens. The key set is the first
        # batch's (a task reports the same keys for every batch, so all ranks agree on the order).
        keys: list[str] | None = None
        sums = None
        for i, batch in enumerate(self.eval_loader):
            if i >= self.recipe.logging.eval_batches:
                break
            if self._stop_requested()[0]:  # SIGTERM: abandon (all ranks agree), the checkpoint comes first
                self.model.train()
                log.warning("evaluation at step %d abandoned after %d batches: SIGTERM", self.step, i)
                return {}
            _, stats = self.loss(batch, None)
            if keys is None:
                keys = sorted(k for k, v in stats.items() if k != "num_tokens" and isinstance(v, (int, float)))
                sums = torch.zeros(len(keys) + 1, dtype=torch.float64, device=self.acc.device)
            n = stats["num_tokens"]
            sums += torch.tensor(
                [stats.get(key, 0.0) * n for key in keys] + [n], dtype=torch.float64, device=self.acc.device
            )
        keys = keys or ["loss"]
        sums = sums if sums is not None else torch.zeros(len(keys) + 1, dtype=torch.float64, device=self.acc.device)
        sums = self.acc.reduce(sums, reduction="sum")
        self.model.train()
        n = max(float(sums[-1]), 1.0)
        k = self.recipe.logging.acceptance_k
        metrics = {f"eval/{key}": float(total) / n for key, total in zip(keys, sums[:-1])}
        if "eval/token_acceptance" in metrics:
            metrics["eval/expected_acceptance_length"] = expected_acceptance_length(metrics["eval/token_acceptance"], k)
        if "eval/top1_agreement" in metrics:
            metrics["eval/expected_acceptance_length_greedy"] = expected_acceptance_length(
                metrics["eval/top1_agreement"], k
            )
        self._record(metrics)
        self.last_eval = metrics
        return metrics

    def measure_acceptance(self) -> dict | None:
        """Real mean_acceptance_length from the inference engine on held-out prompts (greedy)."""
        r, acc = self.recipe.logging, self.acc
        if r.acceptance_prompts <= 0 or not self.data.eval_prompts:
            return None
        if is_zero3(acc):
            if acceptance_during_training(self.recipe):  # best/ would silently be final/
                raise DraftsmithError(zero3_acceptance_refusal(self.recipe))
            if self.main:  # the end-of-run measurement only: the documented ZeRO-3 launch leaves it to eval
                log.info(
                    "acceptance through the runtime is skipped under ZeRO-3 (weights are sharded); run draftsmith "
                    "eval on the checkpoint"
                )
            return None
        result = None
        if self.main:
            from draftsmith.evaluation.bench import run_eval
            from draftsmith.infer.sampling import GREEDY

            unwrapped = acc.unwrap_model(self.model)
            drafter = self.task.runtime_drafter(unwrapped)
            unwrapped.eval()
            try:
                try:
                    # A SIGTERM from here on abandons the measurement wherever the decoding is
                    # (one decoding step, not the whole measurement, stands between it and the checkpoint).
                    self._raise_on_term = True
                    if self._terminate:
                        raise faults.Preempted
                    with torch.inference_mode():
                        # the recipe's acceptance_k within what the drafter drafts (Medusa: its heads;
                        # None: no cap) -- the recipe's measurement setting, not a user's -k
                        cap = speculative_cap(drafter)
                        k = r.acceptance_k if cap is None else min(r.acceptance_k, cap)
                        result = run_eval(
                            self.target,
                            drafter,
                            self.data.eval_prompts[: r.acceptance_prompts],
                            k,
                            r.acceptance_max_new_tokens,
                            GREEDY,
                            seed=self.recipe.optim.seed,
                            # a large target takes minutes over these prompts: show them going by
                            progress=r.progress,
                        )
                finally:
                    self._raise_on_term = False
                    unwrapped.train()
            except faults.Preempted:
                result = None
                log.warning("acceptance measurement at step %d abandoned: SIGTERM", self.step)
            if result is not None:
                per_pos = {f"eval/acceptance_pos{j + 1}": a for j, a in enumerate(result["per_position_acceptance"])}
                se = result.get("mean_acceptance_length_se")
                self._record(
                    {
                        "eval/mean_acceptance_length": result["mean_acceptance_length"],
                        **({"eval/mean_acceptance_length_se": se} if se is not None else {}),
                        "eval/draft_acceptance_rate": result["draft_acceptance_rate"],
                        **per_pos,
                    }
                )
        acc.wait_for_everyone()
        return result

    def _keep_if_best(self, result: dict | None) -> None:
        """best/ if this step's measured τ beats best/'s beyond the noise (collective: the main
        process measured)."""
        tau = None if result is None else float(result["mean_acceptance_length"])
        se = None if result is None else result.get("mean_acceptance_length_se")
        meta = self._acceptance_meta()
        self.folder.keep_if_best(self.task, self.model, tau, self._position(), self.last_eval, meta, se)

    def _acceptance_meta(self) -> dict:
        """Which prompts τ was measured on (a checkpoint's τ means little without them)."""
        r = self.recipe.logging
        prompts = self.data.eval_prompts[: r.acceptance_prompts]
        domains: dict[str, int] = {}
        for p in prompts:
            domains[p.domain] = domains.get(p.domain, 0) + 1
        return {
            "num_prompts": len(prompts),
            "domains": domains,
            "k": r.acceptance_k,
            "max_new_tokens": r.acceptance_max_new_tokens,
            "greedy": True,
        }

    def save(self, final: dict | None = None) -> pathlib.Path:
        """A resumable checkpoint of this step; `final` (the end of the run): final/ too."""
        return self.folder.save(self.task, self.model, self._position(), self.last_eval, final=final)

    def _position(self) -> dict:
        """Where training stands: the trainer state a checkpoint keeps and a resume continues from."""
        return {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "tokens": self.tokens,
            "world_size": self.acc.num_processes,
            "history": self.history[-200:],
            "train_seconds": self.train_seconds + time.monotonic() - self._t_start,
        }

    def _stop_requested(self, deadline: float | None = None) -> tuple[bool, bool]:
        """(any rank got SIGTERM, any rank is past the time budget): all ranks must agree, since
        saving is collective."""
        late = deadline is not None and time.monotonic() >= deadline
        if self.acc.num_processes == 1:
            return self._terminate, late
        flags = torch.tensor([float(self._terminate), float(late)], device=self.acc.device)
        flags = self.acc.reduce(flags, reduction="sum")
        # one rank's SIGTERM stops every rank: the phases after this (the main process's acceptance
        # measurement) are skipped on all of them too
        agreed = bool(flags[0].item() > 0)  # what every rank returns (a signal landing now counts next time)
        self._terminate = self._terminate or agreed
        return agreed, bool(flags[1].item() > 0)

    def _on_sigterm(self, signum, frame) -> None:
        self._terminate = True
        if self._raise_on_term:
            self._raise_on_term = False
            raise faults.Preempted

    def _preempted(self, saved: bool) -> dict:
        """Stop on SIGTERM: a resumable checkpoint of the last finished step (unless this step's
        was just written), then {"interrupted": True}; the CLI exits 143."""
        if not saved:
            self.save()
        log.warning("stopped by SIGTERM at step %d; checkpoint saved: --resume continues", self.step)
        return {"interrupted": True, "steps": self.step, "output_dir": str(self.out)}

    def _finish(self, final: pathlib.Path, final_eval: dict, acceptance: dict | None) -> dict:
        acc = self.acc
        prints = (
            acc.gather_for_metrics([fingerprint(acc.unwrap_model(self.model))], use_gather_object=True)
            if not is_zero3(acc)
            else []
        )
        # which machine each process ran on (torchrun's GROUP_RANK is the machine's rank)
        where = {
            "rank": acc.process_index,
            "machine_rank": int(os.environ.get("GROUP_RANK", 0)),
            "host": socket.gethostname(),
        }
        processes = acc.gather_for_metrics([where], use_gather_object=True) if acc.num_processes > 1 else [where]
        summary = {
            "final_checkpoint": str(final),
            "steps": self.step,
            "epochs": round(self.step * self.epochs_per_step, 3),
            "tokens": self.tokens,
            "train_seconds": round(self.train_seconds + time.monotonic() - self._t_start, 1),
            "world_size": acc.num_processes,
            "num_machines": len({p["machine_rank"] for p in processes}),
            "processes": processes,
            "distributed_type": str(acc.distributed_type),
            "mixed_precision": acc.mixed_precision,
            "mixed_precision_reason": getattr(acc, "mixed_precision_reason", "asked for"),
            "target_dtype": str(self.target.dtype).removeprefix("torch."),
            "param_fingerprints": prints,
            "eval": final_eval,
            "acceptance": {k: v for k, v in (acceptance or {}).items() if k != "by_domain"},
            "best": self.folder.best and {**self.folder.best, "checkpoint": str(self.out / checkpoint.BEST)},
            "data": self.data.stats,
            "history": self.history,
        }
        if self.main:
            (self.out / "train_summary.json").write_text(json.dumps(summary, indent=2, default=str))
            plot_curves(self.history, self.out / CURVES, self.folder.best)
            tau = final_eval.get(
                "eval/expected_acceptance_length", final_eval.get("eval/expected_acceptance_length_greedy", 1.0)
            )
            held_out = (  # none when only the target's feature readers were loaded
                f"eval loss {final_eval['eval/loss']:.4f}, expected τ(K={self.recipe.logging.acceptance_k}) {tau:.2f}"
                if "eval/loss" in final_eval
                else "no held-out evaluation (model.target_parts readers)"
            )
            log.info(
                "done: %d steps, final checkpoint %s; %s%s",
                self.step,
                final,
                held_out,
                f", measured mean_acceptance_length {acceptance['mean_acceptance_length']:.2f}" if acceptance else "",
            )
        if self.recipe.logging.trackers:
            acc.end_training()
        return summary


def _every(step: int, interval: int) -> bool:
    """Whether a periodic action runs at `step`; interval 0 switches it off (see LoggingConfig)."""
    return interval > 0 and step % interval == 0


def _new_window() -> dict:
    return {"sums": {}, "n": 0, "tokens": 0, "t0": time.perf_counter()}


def train(recipe: Recipe, resume: bool | None = None, data=None) -> dict:
    """Run `recipe` to the end -> the run's summary; `data`: see Trainer."""
    import tqdm as tqdm_module

    # tqdm's monitor is a daemon thread that nothing joins (a disabled bar starts it too): none at
    # interpreter exit. The bars here redraw on their own updates.
    tqdm_module.tqdm.monitor_interval = 0
    beat = faults.Heartbeat.from_env()  # multi-process runs: names a lost process (train/trainer/faults.py)
    trainer = None
    try:
        trainer = Trainer(recipe, resume=resume, data=data)
        try:
            summary = trainer.train()
        finally:
            trainer.close()
        # A process lost after the last collective: named now, not waited for at the launcher's exit barrier.
        lost = beat.finish() if beat is not None else []
        if lost:
            raise DraftsmithError(faults.lost_at_end_message(lost, beat.world, trainer.step))
        return summary
    except Exception as e:
        # Another process died or hangs: one line naming it instead of a collective's traceback.
        if beat is None or isinstance(e, DraftsmithError) or not faults.is_comm_failure(e):
            raise
        hint = checkpoint.resume_hint(pathlib.Path(recipe.checkpoint.output_dir))
        raise DraftsmithError(faults.lost_process_message(e, beat, trainer and trainer.step, hint)) from None
    finally:
        if beat is not None:
            beat.stop()
        shutdown()


__all__ = ["Trainer", "train"]
