"""The GPU branches of the timing scripts, run on the CPU through stand-ins: CUDA work is
asynchronous, so every clock read there must follow a synchronisation (or the figures time kernel
launches), and a path that only a GPU takes must not be first run on the GPU."""

import json
import pathlib
import runpy
import types

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _record_syncs(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    return calls


def test_bench_train_synchronises_around_every_timed_part_on_cuda(monkeypatch):
    """time_steps with an accelerator that says cuda (the tensors stay on the CPU): each of the
    target forward, the training step's target forward, backward and optimizer is closed by a
    synchronisation before the clock is read."""
    syncs = _record_syncs(monkeypatch)
    bench = runpy.run_path(str(ROOT / "scripts" / "bench_train.py"))
    torch.manual_seed(0)
    target, draft = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    class FakeTarget:  # called as the script calls it: `target(...)` goes through `.forward`
        def forward(self, input_ids=None, attention_mask=None, use_cache=False):
            return target(input_ids)

        def __call__(self, **k):
            return self.forward(**k)

    model = FakeTarget()

    def loss(draft, batch, step):  # the task's loss runs the target's forward, then the draft's
        model(input_ids=batch["input_ids"])
        return draft(batch["input_ids"]).square().mean(), {}

    task = types.SimpleNamespace(target=types.SimpleNamespace(model=model), loss=loss)
    opt = torch.optim.SGD(draft.parameters(), lr=0.1)
    acc = types.SimpleNamespace(device=torch.device("cuda"), backward=lambda loss: loss.backward())
    trainer = types.SimpleNamespace(
        acc=acc, task=task, model=draft, optimizer=opt, loss=lambda batch, step: loss(draft, batch, step)
    )
    batch = {"input_ids": torch.randn(2, 4), "attention_mask": torch.ones(2, 4)}
    args = types.SimpleNamespace(warmup=1, steps=2, profile=False)
    fwd, step, parts, n = bench["time_steps"](trainer, iter([batch] * 3), args)
    assert len(fwd) == len(step) == len(parts) == 2 and n == 8
    # per batch: around the forward (2), around the step's target forward (2), before backward,
    # after backward, after the optimizer
    assert len(syncs) == 3 * 7 and all(d == torch.device("cuda") for d in syncs)
    assert all(p["target_forward"] > 0 and p["backward"] > 0 for p in parts)


def test_bench_train_on_cpu_with_its_flop_count(tmp_path):
    """The whole script on the tiny recipe, and scripts/flop_bound.py's formula redoing
    FlopCounterMode's count of that real training step."""
    bench = runpy.run_path(str(ROOT / "scripts" / "bench_train.py"))
    out = tmp_path / "train.json"
    argv = [str(ROOT / "configs/tiny/eagle3.yaml"), "--steps", "2", "--warmup", "1", "--max-rows", "40"]
    assert bench["main"]([*argv, "--data.path=stdlib", "--json", str(out)]) == 0
    train = json.loads(out.read_text())
    assert 0 < train["train_over_forward"] and 0 < train["flop_bound"] < 1
    flop_bound = runpy.run_path(str(ROOT / "scripts" / "flop_bound.py"))
    assert flop_bound["main"](["--check", str(out), "--json", str(tmp_path / "bound.json")]) == 0
    check = json.loads((tmp_path / "bound.json").read_text())["checks"][0]
    assert abs(check["formula"] - check["counted"]) < 0.05 * check["counted"], check


def test_bench_train_compares_modes_for_several_recipes_in_one_run(tmp_path, monkeypatch):
    """--modes before,auto on two tiny recipes: four runs in one process, the precision each
    resolved to, DFlash's target logits over every position before and at the scored rows
    after, and one comparison table."""
    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "bfloat16")  # auto as on a CPU with fast bf16
    bench = runpy.run_path(str(ROOT / "scripts" / "bench_train.py"))
    out = tmp_path / "modes.json"
    recipes = [str(ROOT / "configs/tiny/dflash.yaml"), str(ROOT / "configs/tiny/eagle3.yaml")]
    argv = [*recipes, "--modes", "before,auto", "--steps", "1", "--warmup", "0", "--max-rows", "40"]
    argv += ["--data.max_length=48", "--optim.batch_size=2", "--data.eval_rows=4"]
    assert bench["main"]([*argv, "--data.path=stdlib", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert [(r["drafter"], r["mode"], r["mixed_precision"], r["target_dtype"]) for r in runs] == [
        ("dflash", "before", "no", "float32"),
        ("dflash", "auto", "bf16", "bfloat16"),
        ("eagle3", "before", "no", "float32"),
        ("eagle3", "auto", "bf16", "bfloat16"),
    ]
    assert [r["dflash_target_logits"] for r in runs[:2]] == ["every position", "scored rows"]
    # the target's LM head over every position costs FLOPs the scored rows do not
    assert runs[0]["flops_per_batch"]["train_step"] > runs[1]["flops_per_batch"]["train_step"]
    assert result["modes"] == ["before", "auto"] and len(result["comparison"]) == 2
    for row in result["comparison"]:
        assert row["modes"]["before"]["over_first"] == 1.0 and row["modes"]["auto"]["over_first"] > 0
    flop_bound = runpy.run_path(str(ROOT / "scripts" / "flop_bound.py"))
    assert flop_bound["main"](["--check", str(out)]) == 0  # each run of a several-run JSON


def test_measure_tflops_on_cuda_times_many_large_products_per_sync(monkeypatch):
    """On CUDA: 8192^3 products by default, 16 of them between two synchronisations (the
    stand-in hands back small CPU tensors whatever the size asked)."""
    from draftsmith.train.trainer.flops import measure_tflops

    syncs, sizes = _record_syncs(monkeypatch), []
    randn = torch.randn

    def small(*shape, dtype=None, device=None):
        sizes.append(shape)
        return randn(8, 8, dtype=dtype)

    monkeypatch.setattr(torch, "randn", small)
    products = []
    real_matmul = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: products.append(1) or real_matmul(a, b))
    rate = measure_tflops("float32", seconds=0.0, device="cuda")
    assert rate > 0 and sizes == [(8192, 8192), (8192, 8192)]
    timed = len(syncs) - 1  # one after the warm-up
    assert timed >= 5 and len(products) == 2 + 16 * timed


def test_bench_compiled_drafting_asks_for_step_times_and_survives_untimed_runs(tiny_target):
    """On CUDA the engine times steps only with time_steps (set on every engine the bench
    builds); results without step times (what CUDA gives otherwise) report n/a, never crash."""
    from draftsmith.evaluation.benchkit import comparison

    bench = runpy.run_path(str(ROOT / "scripts" / "bench_compiled_drafting.py"))
    engines, compiled = bench["build"](tiny_target, ["truncated:1"], 2, None)
    assert set(engines) == {"plain", "draft_lm eager", "draft_lm compiled"}
    assert all(e.time_steps for e in engines.values())
    outs = {}
    for name, engine in engines.items():
        result = engine.generate([5, 6, 7, 8], 8, eos_token_ids=())
        result.extra.pop("step_times_s", None)  # as an untimed CUDA run returns it
        outs[name] = [result]
    rows = bench["rows_of"](outs, comparison(outs), compiled, {name: 0.0 for name in engines})
    c = rows["draft_lm compiled"]
    assert c["draft_s"] is None and c["draft_over_eager"] is None and c["outputs_match_plain"]
    cells = bench["table_row"]("draft_lm compiled", c)
    assert cells[1] == "n/a" and cells[2] == "n/a" and cells[3] == "n/a"


def test_bench_train_comes_round_the_data_again_and_names_empty_data():
    """A recipe whose --max-rows make fewer batches than the timed, profiled and counted steps
    need gets the same batches again instead of dying in the middle of a run (StopIteration
    lost every recipe measured before it); data that gives no batch at all is a one-line error."""
    from draftsmith.errors import DraftsmithError

    bench = runpy.run_path(str(ROOT / "scripts" / "bench_train.py"))
    batches = bench["endless"](["a", "b"], "medusa2.yaml")
    assert [next(batches) for _ in range(5)] == ["a", "b", "a", "b", "a"]
    with pytest.raises(DraftsmithError, match="medusa2.yaml: the data gave no training batch; raise --max-rows"):
        next(bench["endless"]([], "medusa2.yaml"))
