"""`draftsmith plan`: its figures against hand calculations, its verdicts, the CLI and train's summary line."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest

from draftsmith import cli
from draftsmith.errors import DraftsmithError
from draftsmith.plan import HEADROOM, build_meta, make_plan, parse_bytes
from draftsmith.train.config import load_recipe
from draftsmith.train.trainer.flops import SHAPES, draft_lm_flops, eagle3_flops, module_flops, target_flops

ROOT = pathlib.Path(__file__).resolve().parents[1]
L8 = ROOT / "configs" / "llama-3.1-8b-instruct"
L70 = ROOT / "configs" / "llama-3.3-70b-instruct"

# Llama-3.1-8B and Llama-3.3-70B shapes (their config.json): d, ffn, kv width, vocabulary
D8, I8, KV8, V = 4096, 14336, 1024, 128256
D70, I70, KV70 = 8192, 28672, 1024
P8 = 8_030_261_248  # tests/test_recipes.py works these out from the configs
P70 = 70_553_706_496
E8 = 424_689_664  # the 8B EAGLE-3 draft
E70 = 1_403_027_456


def eagle3_activations_per_token(d, ffn, kv, s, steps=7, vocab=32000):
    """Inputs + outputs of every matmul the draft runs per token, in elements: fc once, then per TTT
    step q/k/v over [embedding; hidden] (2d in), o, gate, up, down, and the LM head at scored rows."""
    fc = 3 * d + d
    step = (2 * d + d) + 2 * (2 * d + kv) + (d + d) + 2 * (d + ffn) + (ffn + d) + (d + vocab) * s
    return fc + steps * step


def test_8b_eagle3_plan_matches_a_hand_calculation():
    recipe = load_recipe(L8 / "eagle3.yaml")  # bf16, batch 1 x 2048 tokens, 8 GPUs
    s, T = 0.5, 2048
    plan = make_plan(recipe, gpus=8, gpu_memory=80e9, gpu_tflops=989, utilisation=0.4, scored=s, epoch_tokens=1e8)
    assert (plan.target_params, plan.drafter_params) == (P8, E8)
    ddp, zero2, zero3, fsdp = plan.memory
    assert ddp.target_weights == P8 * 2  # bf16 target, whole on every GPU
    assert (ddp.drafter_weights, ddp.gradients, ddp.optimizer) == (E8 * 4, E8 * 4, E8 * 8)  # fp32 + AdamW
    assert (zero2.drafter_weights, zero2.gradients, zero2.optimizer) == (E8 * 4, E8 * 4 / 8, E8 * 8 / 8)
    assert (zero3.drafter_weights, zero3.gradients, zero3.optimizer) == (E8 * 4 / 8, E8 * 4 / 8, E8 * 8 / 8)
    assert fsdp.total == zero3.total
    # Activations per token: matmul inputs/outputs in bf16, the draft's log-softmax and the target's
    # probabilities (fp32, kept for backward) at every TTT step, plus the step being scored's fp32
    # logits and gathered target rows, and the target's full-vocabulary logits (bf16 + an fp32 copy).
    per_token = eagle3_activations_per_token(D8, I8, KV8, s) * 2 + 7 * 32000 * s * 8 + 32000 * s * 8 + V * (2 + 4)
    assert ddp.activations == pytest.approx(T * per_token, rel=1e-9)
    assert ddp.features == T * 4 * D8 * 2  # layers 2, 16, 29 and the last, bf16
    # FLOPs: the closed forms (scripts/flop_bound.py's), not the module count the plan uses.
    target = target_flops(SHAPES["llama-3.1-8b"], T, s)[1]
    draft = eagle3_flops(SHAPES["llama-3.1-8b"], T, s, 7, 32000)
    assert plan.flops_per_token["training"] == pytest.approx(target + 3 * draft, rel=1e-9)
    rate = 8 * 989e12 * 0.4 / (target + 3 * draft)
    assert plan.tokens_per_s == pytest.approx(rate, rel=1e-9)
    assert plan.epoch_hours == pytest.approx(1e8 / rate / 3600, rel=1e-9)
    assert plan.feature_cache_bytes == 1e8 * 4 * D8 * 2
    assert plan.fitting == ["ddp", "zero2", "zero3", "fsdp"]


def test_70b_eagle3_plan_trains_beside_the_feature_readers_only():
    recipe = load_recipe(L70 / "eagle3.yaml")  # features from a cache vLLM wrote
    s, T = 0.5, 2048
    plan = make_plan(recipe, gpus=8, gpu_memory=80e9, gpu_tflops=989, utilisation=0.4, scored=s, epoch_tokens=1e8)
    assert (plan.target_params, plan.drafter_params) == (P70, E70)
    ddp = plan.memory[0]
    readers = 2 * V * D70 + D70  # embedding, LM head, final norm: all the trainer holds of the target
    assert ddp.target_weights == readers * 2
    per_token = eagle3_activations_per_token(D70, I70, KV70, s) * 2 + 7 * 32000 * s * 8 + 32000 * s * 8 + V * (2 + 4)
    assert ddp.activations == pytest.approx(T * per_token, rel=1e-9)
    assert ddp.total == pytest.approx(readers * 2 + E70 * 16 + T * per_token + T * 4 * D70 * 2, rel=1e-9)
    # Training FLOPs: no target forward, only its LM head on the cached last layer at scored rows.
    draft = eagle3_flops(SHAPES["llama-3.3-70b"], T, s, 7, 32000)
    assert plan.flops_per_token["training"] == pytest.approx(2 * V * D70 * s + 3 * draft, rel=1e-9)
    assert plan.fitting == ["ddp", "zero2", "zero3", "fsdp"]
    # Online (the whole 70B target on every GPU: 141 GB) fits nowhere.
    online = make_plan(
        load_recipe(L70 / "eagle3.yaml", ["--drafter.features=online", "--model.target_parts=whole"]),
        gpus=8,
        gpu_memory=80e9,
    )
    assert online.memory[0].target_weights == P70 * 2 and online.fitting == []
    assert "features from vLLM" in online.advice and "--model.target_parts=readers" in online.advice
    # A cache, but the whole target loaded beside it: the same 141 GB, and the advice says what to drop.
    whole = make_plan(load_recipe(L70 / "eagle3.yaml", ["--model.target_parts=whole"]), gpus=8, gpu_memory=80e9)
    assert whole.memory[0].target_weights == P70 * 2 and whole.fitting == []
    assert whole.flops_per_token["training"] == plan.flops_per_token["training"]  # still no target forward
    assert whole.advice.startswith("load only the target's embedding, final norm and LM head")


def test_readers_only_refuses_what_needs_the_whole_target():
    base = ["--model.target_parts=readers"]
    with pytest.raises(DraftsmithError, match="drafter.features=DIR"):
        load_recipe(L70 / "eagle3.yaml", [*base, "--drafter.features=online"])
    with pytest.raises(DraftsmithError, match="logging.eval_every=0"):
        load_recipe(L70 / "eagle3.yaml", [*base, "--logging.eval_every=100"])
    with pytest.raises(DraftsmithError, match="logging.acceptance_prompts=0"):
        load_recipe(L70 / "eagle3.yaml", [*base, "--logging.acceptance_prompts=4"])
    with pytest.raises(DraftsmithError, match="regenerate_with=endpoint"):
        load_recipe(L70 / "eagle3.yaml", [*base, "--data.regenerate_with=batched"])
    with pytest.raises(DraftsmithError, match="target_parts.*not one of"):
        load_recipe(L70 / "eagle3.yaml", ["--model.target_parts=half"])


def test_module_count_equals_the_closed_forms():
    """The generic count (any module tree) against scripts/flop_bound.py's formulas."""
    for T, s in ((512, 0.5), (2048, 1.0)):
        built = build_meta(load_recipe(L8 / "eagle3.yaml", [f"--data.max_length={T}"]), "cuda", s)
        assert built.target_cost.flops == pytest.approx(target_flops(SHAPES["llama-3.1-8b"], T, s)[1], rel=1e-12)
        assert built.target_floor == pytest.approx(target_flops(SHAPES["llama-3.1-8b"], T, s)[0], rel=1e-12)
        assert built.draft_cost.flops == pytest.approx(eagle3_flops(SHAPES["llama-3.1-8b"], T, s, 7, 32000), rel=1e-12)
    built = build_meta(load_recipe(L8 / "draft_lm.yaml"), "cuda", 0.5)
    assert built.draft_cost.flops == pytest.approx(draft_lm_flops(SHAPES["llama-3.2-1b"], 2048, 0.5), rel=1e-12)


def test_module_flops_counts_a_plain_linear_stack():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 100))
    assert module_flops(model, T=4, scored=0.5, vocab_sizes=(100,)) == 2 * 8 * 16 + 2 * 16 * 100 * 0.5


def _plan_cli(*args, capsys):
    code = cli.main(["plan", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_names_the_smallest_change_that_fits(capsys, tmp_path):
    recipe = L8 / "eagle3.yaml"
    # 30 GB: DDP (29.6 GB) is over 90% of it, ZeRO-2 (25.2 GB) is not: the plan fits, DDP does not.
    assert _plan_cli(recipe, "--gpu-memory", "30GB", capsys=capsys)[0] == 0
    code, out, err = _plan_cli(recipe, "--gpu-memory", "30GB", "--strategy", "ddp", capsys=capsys)
    assert (
        code == 2 and "does not fit with ddp" in err and "use zero2" in err and "configs/accelerate/zero2.yaml" in err
    )
    assert err.count("\n") == 1
    # 24 GB: no strategy holds the 16 GB target beside the draft at batch 1: features from vLLM.
    code, out, err = _plan_cli(recipe, "--gpu-memory", "24GB", "--json", tmp_path / "p.json", capsys=capsys)
    assert code == 2 and "draftsmith features" in err and "--engine vllm" in err
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["fitting"] == [] and saved["memory"][0]["strategy"] == "ddp"
    # The recipe's overrides are planned: 8 rows of 2048 no longer fit DDP on 40 GB; 2 rows do, accumulated.
    code, out, err = _plan_cli(recipe, "--gpu-memory", "40GB", "--optim.batch_size=8", capsys=capsys)
    assert code == 2 and "--optim.batch_size=" in err and "--optim.grad_accum=" in err


def test_cli_plan_that_fits_prints_the_table(capsys, tmp_path):
    code, out, err = _plan_cli(L8 / "eagle3.yaml", "--gpus", "4", "--nodes", "2", "--json", tmp_path / "p.json",
                               capsys=capsys)  # fmt: skip
    assert code == 0 and "| ddp |" in out and "| zero3 |" in out and out.strip().splitlines()[-1].startswith("plan: ")
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["world"] == 8 and saved["tokens_per_step"] == 8 * 2048
    mem = {m["strategy"]: m["total"] for m in saved["memory"]}
    assert mem["zero3"] < mem["zero2"] < mem["ddp"] <= 80e9 * HEADROOM


def test_parse_bytes():
    assert parse_bytes("80GB") == 80e9 and parse_bytes("141gb") == 141e9 and parse_bytes("16GiB") == 16 * 2**30


def test_plan_module_imports_without_torch():
    code = "import sys, draftsmith.plan, draftsmith.train.trainer.flops; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_train_prints_the_plan_line_or_says_it_cannot(tiny_target, capsys, monkeypatch):
    from draftsmith.train.__main__ import print_plan

    recipe = load_recipe(ROOT / "configs" / "tiny" / "eagle3.yaml")
    print_plan(recipe)
    line = capsys.readouterr().out.strip()
    assert line.startswith("plan: tiny-random ") and "eagle3" in line and "tokens/s" in line

    def broken(*a, **k):
        raise RuntimeError("no config")

    monkeypatch.setattr("draftsmith.plan.make_plan", broken)
    print_plan(recipe)  # must not raise
    assert capsys.readouterr().out.strip() == "plan: not available (RuntimeError: no config)"


def test_dflash_draft_runs_on_its_block_positions_not_on_every_row_token():
    """Llama-3.1-8B DFlash: 336 anchors x 16 block positions per 2048-token row, by hand."""
    recipe = load_recipe(L8 / "dflash.yaml")
    built = build_meta(recipe, "cuda", 0.5)
    d, H, KV, hd, ffn, V, T = 4096, 32, 8, 128, 14336, 128256, 2048
    per_position = 5 * (2 * d * (2 * H * hd + 2 * KV * hd) + 2 * 3 * d * ffn + 4 * T * H * hd) + 2 * d * V
    fc = 2 * (5 * d) * d  # the five target layers fused, once per row token
    assert built.draft_cost.flops == pytest.approx(fc + 336 * 16 / T * per_position, rel=1e-12)
    # More anchors than trained positions: only those are drawn (sample_anchors).
    few = build_meta(load_recipe(L8 / "dflash.yaml", ["--data.max_length=256"]), "cuda", 0.5)
    per_position = 5 * (2 * d * (2 * H * hd + 2 * KV * hd) + 2 * 3 * d * ffn + 4 * 256 * H * hd) + 2 * d * V
    assert few.draft_cost.flops == pytest.approx(fc + 128 * 16 / 256 * per_position, rel=1e-12)


def test_the_plan_tells_the_whole_job_70b():
    """Regeneration (memory-bound decoding, 8 chats in flight), feature extraction (one target forward
    per epoch token) and training (the recipe's epochs in steps), by hand; the total is their sum."""
    recipe = load_recipe(L70 / "eagle3.yaml")  # regenerated data, features from a cache
    plan = make_plan(recipe, gpus=8, gpu_tflops=989, utilisation=0.4, epoch_tokens=1e8, bandwidth=3.35e12)
    peak, job = 8 * 989e12 * 0.4, plan.job
    step_s = max(P70 * 2 / (8 * 3.35e12), 8 * 2 * P70 / peak)  # bf16 weights read once per decode step
    assert job["regeneration_hours"] == pytest.approx(1e8 * 0.5 / (8 / step_s) / 3600, rel=1e-9)
    floor = plan.flops_per_token["target_forward_floor"]
    assert job["feature_extraction_hours"] == pytest.approx(1e8 * floor / peak / 3600, rel=1e-9)
    steps = math.ceil(recipe.optim.epochs * 1e8 / (8 * 2048))  # the recipe's epochs of the data's tokens
    assert plan.steps == steps and plan.epochs == pytest.approx(recipe.optim.epochs, rel=1e-3)
    training = steps * 8 * 2048 / plan.tokens_per_s / 3600
    assert job["training_hours"] == pytest.approx(training, rel=1e-9)
    assert job["total_hours"] == pytest.approx(
        training + job["feature_extraction_hours"] + job["regeneration_hours"], rel=1e-9
    )
    assert "Llama 3" in job["utilisation_source"] and "whole job" in plan.summary()
    assert "feature cache" in plan.summary()  # the disk the cache needs, on the line train prints


def test_the_plan_leaves_out_phases_that_do_not_run(tmp_path):
    saved = tmp_path / "regenerated.jsonl"
    saved.write_text("")
    recipe = load_recipe(L8 / "eagle3.yaml", [f"--data.regenerated_path={saved}"])  # online features
    job = make_plan(recipe, epoch_tokens=1e8).job
    assert job["regeneration_hours"] is None and job["feature_extraction_hours"] is None
    assert job["total_hours"] == job["training_hours"]


def test_cli_plan_prints_each_phase_and_the_utilisation_source(capsys):
    code, out, err = _plan_cli(L70 / "eagle3.yaml", "--gpu-bandwidth", "4.8TB", capsys=capsys)
    assert code == 0
    for words in ("regeneration (", "4.8 TB/s", "feature extraction (", "training (", "whole job: ~", "38-43%"):
        assert words in out, words


# --- regeneration: the server's layout (draftsmith/plan_regen.py) ----------------------------------

PAGE = ROOT / "docs" / "your-target.md"


def _regen_rate(replicas=1, tp=1, concurrency=8, params=P8, gpu_memory=80e9, flops=989e12 * 0.4):
    from draftsmith import plan_regen

    lay = plan_regen.layout(2 * params, gpu_memory, 8, 8, 8, replicas=replicas, tp=tp, concurrency=concurrency)
    return plan_regen.tokens_per_s(lay, params, 2 * params, 3.35e12, flops)


def test_regeneration_scales_with_replicas_and_requests_while_the_weights_bound_it():
    base, bound = _regen_rate()
    assert bound == "bandwidth"
    assert base == pytest.approx(8 / (2 * P8 / 3.35e12), rel=1e-12)  # 8 tokens per read of the 16 GB
    for replicas in (2, 4, 8):
        rate, bound = _regen_rate(replicas=replicas)
        assert bound == "bandwidth" and rate == pytest.approx(replicas * base, rel=1e-12)
    for concurrency in (1, 16, 64):
        rate, bound = _regen_rate(concurrency=concurrency)
        assert bound == "bandwidth" and rate == pytest.approx(concurrency / 8 * base, rel=1e-12)
    # tensor parallelism splits the read: 2 GPUs per replica, each step half as long
    assert _regen_rate(tp=2)[0] == pytest.approx(2 * base, rel=1e-12)


def test_regeneration_reaches_the_compute_cap():
    flops = 989e12 * 0.4
    cap = flops / (2 * P8)  # tokens/s one GPU's usable FLOP/s allow
    rate, bound = _regen_rate(concurrency=4096, flops=flops)
    assert bound == "compute" and rate == pytest.approx(cap, rel=1e-12)
    rate, bound = _regen_rate(replicas=4, tp=2, concurrency=4096, flops=flops)
    assert bound == "compute" and rate == pytest.approx(8 * cap, rel=1e-12)
    # the crossing: where c tokens' FLOPs take as long as one read of the weights
    crossing = (2 * P8 / 3.35e12) * flops / (2 * P8)
    assert _regen_rate(concurrency=math.floor(crossing))[1] == "bandwidth"
    assert _regen_rate(concurrency=math.ceil(crossing))[1] == "compute"


def test_the_default_regeneration_server_is_the_pages():
    """8B: one replica on one GPU with the recipe's 8 requests in flight, started and fed by the
    page's own two lines; 70B: split over the node (the page's tensor-parallel line). The hours by
    hand: 12.8M reply tokens (half of ShareGPT's 25.6M) at 8 tokens per read of the weights."""
    text = PAGE.read_text()
    path = "configs/llama-3.1-8b-instruct/eagle3.yaml"
    plan = make_plan(load_recipe(ROOT / path), recipe_path=path, gpus=8)
    r = plan.job["regeneration"]
    assert (r["replicas"], r["tensor_parallel_size"], r["concurrency"], r["requests_in_flight"]) == (1, 1, 8, 8)
    assert r["serve"] == "vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000" and f"\n{r['serve']}\n" in text
    assert f"\n{r['client']}\n" in text and "--data.regenerate_concurrency" not in r["client"]
    step_s = 2 * P8 / 3.35e12
    assert r["hours"] == pytest.approx(25.6e6 * 0.5 / (8 / step_s) / 3600, rel=1e-9)
    assert 2.0 < r["hours"] < 2.3  # "about 2 hours", as the page says
    big = make_plan(load_recipe(L70 / "eagle3.yaml"), gpus=8).job["regeneration"]
    assert (big["replicas"], big["tensor_parallel_size"]) == (1, 8) and big["fits"]
    assert big["serve"] + "\n" in text  # vllm serve ... --tensor-parallel-size 8 --port 8000


def test_the_pages_data_parallel_lines_are_what_plan_prints_for_them(capsys):
    """The page's plan line for a node of 8 GPUs: its flags give 8 replicas x 64 requests, and the
    serve and regeneration lines the plan prints for that layout are the page's."""
    from draftsmith.cli import build_parser

    (line,) = [ln for ln in PAGE.read_text().splitlines() if ln.startswith("draftsmith plan") and "--regen-" in ln]
    args = build_parser().parse_known_args(line.split()[1:])[0]
    assert (args.regen_replicas, args.regen_tp, args.regen_concurrency) == (8, None, 64)
    code, out, err = _plan_cli(ROOT / args.recipe, "--regen-replicas", "8", "--regen-concurrency", "64", capsys=capsys)
    assert code == 0
    serve = next(ln.split("serve:", 1)[1].strip() for ln in out.splitlines() if ln.strip().startswith("serve:"))
    client = next(ln.split("regenerate:", 1)[1].strip() for ln in out.splitlines() if "regenerate: " in ln)
    assert serve == "vllm serve meta-llama/Llama-3.1-8B-Instruct --data-parallel-size 8 --port 8000"
    text = PAGE.read_text()
    assert f"\n{serve}\n" in text
    assert f"\n{client.replace(str(ROOT) + '/', '')}\n" in text and "--data.regenerate_concurrency 512" in client
    assert "8 replica(s) x 1 GPU(s)" in out and "64 request(s) in flight per replica (512 in all" in out
    assert "prediction" in out
    # 64x the one-GPU rate: 8 replicas, 8x the requests each, still bound by the weights' read
    one = make_plan(load_recipe(L8 / "eagle3.yaml"), gpus=8).job["regeneration"]
    node = make_plan(load_recipe(L8 / "eagle3.yaml"), gpus=8, regen_replicas=8, regen_concurrency=64).job
    assert node["regeneration"]["bound"] == "bandwidth"
    assert node["regeneration_hours"] == pytest.approx(one["hours"] / 64, rel=1e-9)


def test_a_regeneration_server_larger_than_the_plan_is_refused(capsys):
    code, out, err = _plan_cli(L8 / "eagle3.yaml", "--gpus", "4", "--regen-replicas", "4", "--regen-tp", "2",
                               capsys=capsys)  # fmt: skip
    assert code == 2 and "--regen-replicas 4 x --regen-tp 2 = 8 GPUs, more than the plan's 4" in err
    assert err.count("\n") == 1 and "Traceback" not in err
