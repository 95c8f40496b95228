"""docs/your-target.md walked end to end on the built-in tiny target, with the page's own command
lines (read from the page, as tests/test_docs.py reads them) and only what a laptop cannot run
swapped: the recipe for a tiny one, the served target for a stand-in OpenAI-compatible server,
vLLM for a stand-in that decodes with our runtime, the prompt counts and lengths for tiny ones.
A renamed flag, a moved path or a changed step on the page breaks this test.

The walk: regenerate the replies through the served target (`train --data-only`), write the
feature cache through (stand-in) vLLM with the page's `draftsmith features` line, train on exactly
those replies, `bench` the checkpoint, `crosscheck` it against (stand-in) vLLM, and `publish
--dry-run`; then the 70B lines, which must carry their parallel arguments; and the page's
`scripts/plan_check.py --random-target` calibration line.

The README's "Train a drafter for your own model" block is walked the same way, line by line in its
order, with one rule for what is swapped: the 8B recipe for the tiny one (except `plan`, which runs
as written: it builds the 8B on the meta device), the served target's URL for the stand-in's,
eight processes for one, the MT-Bench/HumanEval sets for the built-in chat/code ones at tiny counts,
vLLM for the stand-in, and `publish` staged with `--dry-run` instead of uploading.

What is swapped, on both pages:

- GPU-only values for CPU ones (GPU_SWAPS): `--device cuda` runs as `--device cpu` and
  `--dtype bfloat16` as `--dtype float32`; every other token of such a line runs as written.
- The 8B and 70B recipes for the tiny one; `plan_check.py` runs the tiny smoke recipe
  (configs/tiny/eagle3.yaml) with the page's `--random-target` and every other argument as
  written, since random 8B weights (32 GB in fp32) do not fit a laptop.
- vLLM for stand-ins: crosscheck's engines decode with our runtime (draftsmith.testing.stub_vllm),
  `draftsmith features --engine vllm`'s extractor writes the connector files of vLLM's format from
  the tiny target's own forward; each records the `--vllm` it was handed, which must be the GPU
  vLLM the page's install line puts in place (`.engines/vllm-gpu/bin/python`).
- The install line (`bash scripts/install_engines.sh vllm-gpu`) is not run (it downloads GBs): the
  walk checks that the script installs that engine name into the folder the `--vllm` lines name."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
from types import SimpleNamespace

import pytest
import yaml
from test_docs import FENCE, check_command, fenced_commands
from test_regenerate import StandIn, reply_for
from test_regenerated_data import SWITCHES, write_recipe

import draftsmith.train.data as data_mod
from draftsmith.cli import main as cli
from draftsmith.models.sources import load_tokenizer
from draftsmith.train.__main__ import main as train_main

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "your-target.md"
README = ROOT / "README.md"
RECIPE = "configs/llama-3.1-8b-instruct/eagle3.yaml"  # the page's 8B recipe, swapped for a tiny one
RUN = "runs/llama-3.1-8b-eagle3"  # the page's run folder: the walk runs in a folder holding it
SEVENTY = "configs/llama-3.3-70b-instruct/eagle3.yaml"  # the page's 70B recipe, swapped for a tiny one too
GPU_SWAPS = {"cuda": "cpu", "bfloat16": "float32"}  # a GPU-only value -> the CPU one the walk runs
GPU_VLLM = ".engines/vllm-gpu/bin/python"  # the vLLM `bash scripts/install_engines.sh vllm-gpu` installs


def fenced_lines(text: str) -> list[str]:
    """Every line of the page's fenced blocks: the draftsmith and accelerate lines as
    tests/test_docs.py reads them, then the others (python scripts/..., bash scripts/...)."""
    commands = fenced_commands(text)
    others = [line.strip() for block in FENCE.findall(text) for line in re.sub(r"\\\n\s*", " ", block).splitlines()]
    return commands + [line for line in others if line.startswith(("python ", "bash "))]


def page_lines(*needles: str, page: pathlib.Path = PAGE) -> list[list[str]]:
    """The page's fenced command lines holding every needle, split as a shell would."""
    return [shlex.split(c) for c in fenced_lines(page.read_text()) if all(n in c for n in needles)]


def page_line(*needles: str, page: pathlib.Path = PAGE) -> list[str]:
    (line,) = page_lines(*needles, page=page)  # one line per step: a second one means the page changed
    return line


def readme_block() -> list[str]:
    """The README's "Train a drafter for your own model" block, its lines in order."""
    section = README.read_text().split("## Train a drafter for your own model", 1)[1].split("\n## ", 1)[0]
    return [line.split("   #")[0].strip() for line in section.split("```bash\n", 1)[1].split("```")[0].splitlines()]


def swapped(tokens: list[str], swaps: dict[str, str], extra: tuple[str, ...] = ()) -> list[str]:
    """The page's tokens with each `swaps` key (which the line must hold) replaced, plus `extra`."""
    missing = [old for old in swaps if old not in tokens]
    assert not missing, f"the page's line {shlex.join(tokens)} no longer holds {missing}"
    return [swaps.get(t, t) for t in tokens] + list(extra)


def check_install_line(line: str) -> str:
    """An install line, checked rather than run: scripts/install_engines.sh installs the engine it
    names into .engines/<name>, the folder whose python the walked `--vllm` lines name. -> the name."""
    tokens = shlex.split(line)
    assert tokens[:2] == ["bash", "scripts/install_engines.sh"] and len(tokens) == 3, line
    script = (ROOT / "scripts" / "install_engines.sh").read_text()
    name = tokens[2]
    assert f"\n    {name}) install_" in script, f"scripts/install_engines.sh installs no engine {name!r}"
    assert f"local dir=$ROOT/{name} " in script and GPU_VLLM == f".engines/{name}/bin/python"
    return name


def named_vllm(tokens: list[str]) -> str:
    """The `--vllm` a line names (the page's GPU vLLM)."""
    assert "--vllm" in tokens, f"the line {shlex.join(tokens)} names no vLLM: it would run the CPU build"
    return tokens[tokens.index("--vllm") + 1]


def tiny_recipe(tmp_path) -> str:
    """tests/test_regenerated_data.py's regeneration recipe (12 chats, replies from an endpoint)
    with the tiny EAGLE-3 drafter (the page's kind) and the page's run folder."""
    path = pathlib.Path(write_recipe(tmp_path))
    recipe = yaml.safe_load(path.read_text())
    recipe["drafter"] = yaml.safe_load((ROOT / "configs" / "tiny" / "eagle3.yaml").read_text())["drafter"]
    recipe["checkpoint"]["output_dir"] = str(tmp_path / RUN)
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


@pytest.fixture
def vllm_stand_in(monkeypatch, tiny_target, tmp_path):
    """crosscheck's vLLM, installed and decoding with our runtime (draftsmith.testing.stub_vllm):
    `.chosen` the --vllm values crosscheck resolved, `.started` what each engine was started with."""
    from draftsmith.shipping import engines
    from draftsmith.shipping.engines import vllm_engine
    from draftsmith.testing import stub_vllm, stub_vllm_install

    seen = SimpleNamespace(chosen=[], started=[])
    monkeypatch.setattr(engines, "resolve_vllm", stub_vllm_install(tmp_path, seen.chosen))
    monkeypatch.setattr(
        vllm_engine, "VLLMEngine", stub_vllm(tmp_path / RUN / "final", tiny_target, started=seen.started)
    )
    return seen


def assert_started_the_named_vllm(seen, named: str, dtype: str) -> None:
    """Both engines crosscheck started (the target alone, and with the draft) ran the vLLM the line
    named, in the dtype the line (swapped) asked for."""
    assert seen.chosen == [named]
    assert len(seen.started) == 2 and {o.get("draft_dir") is None for o in seen.started} == {True, False}
    assert [(str(o["vllm"].python), o["vllm"].origin, o["dtype"]) for o in seen.started] == [
        (named, "--vllm", dtype)
    ] * 2


@pytest.fixture
def features_stand_in(monkeypatch, tiny_target):
    """`draftsmith features --engine vllm`'s extractor: vLLM's connector files, written from the
    tiny target's own forward (tests/test_vllm_features.py's format); the list holds what each
    extractor was started with."""
    import torch
    from safetensors.torch import save_file
    from test_vllm_features import connector_states

    from draftsmith.shipping.engines import vllm_extract

    started = []

    class Extractor:
        def __init__(self, target_dir, *, aux_layers, storage, vllm=None, **kwargs):
            started.append({"vllm": vllm, **kwargs})
            self.aux, self.storage, self.calls = aux_layers, pathlib.Path(storage), 0
            self.versions = {"vllm": "0.0-stub", "vllm_python": str(vllm)}  # as the real one records

        def __call__(self, rows):
            self.calls += 1
            self.storage.mkdir(parents=True, exist_ok=True)
            paths = []
            for i, ids in enumerate(rows):
                path = self.storage / f"{self.calls}-{i}.safetensors"
                states = connector_states(tiny_target, list(ids), self.aux).contiguous()
                save_file({"hidden_states": states, "token_ids": torch.tensor(list(ids))}, str(path))
                paths.append(str(path))
            return paths

        def close(self):
            pass

    monkeypatch.setattr(vllm_extract, "VLLMFeatureExtractor", Extractor)
    return started


def test_the_page_walked_on_the_tiny_target(
    tmp_path, tiny_cache, monkeypatch, capsys, vllm_stand_in, features_stand_in, fresh_accelerate
):
    monkeypatch.chdir(tmp_path)  # the page's runs/... paths, as written, land here
    monkeypatch.setenv("DRAFTSMITH_ENGINES", str(tmp_path / "no-engines"))  # no llama.cpp: no GGUF staged
    recipe = tiny_recipe(tmp_path)

    # 3. Regenerate the replies with the (stand-in) served target, and stop.
    server = StandIn()
    try:
        # the node's line: 8 data-parallel replicas fed 512 requests (the one-GPU line is the same without it)
        line = page_line("draftsmith train", RECIPE, "--data-only", "--data.regenerate_concurrency")
        assert train_main(swapped(line[2:], {RECIPE: recipe, "http://127.0.0.1:8000/v1": server.url})) == 0
    finally:
        server.close()
    assert server.requests and not (tmp_path / RUN / "final").exists()  # --data-only trains nothing
    saved = [json.loads(x) for x in (tmp_path / "regenerated.jsonl").read_text().splitlines()]
    assert len(saved) == 12

    # 4. The feature cache through (stand-in) vLLM: the page's 70B line, the GPU vLLM it installs first.
    (install,) = {line for line in map(shlex.join, page_lines("install_engines.sh"))}
    assert check_install_line(install) == "vllm-gpu"
    line = page_line("draftsmith features", SEVENTY, "--engine vllm")
    assert named_vllm(line) == GPU_VLLM
    assert cli(swapped(line[1:], {SEVENTY: recipe})) == 0
    ((started),) = features_stand_in
    assert started["vllm"] == GPU_VLLM and started["engine_args"] == {"tensor_parallel_size": 8}
    manifest = json.loads((tmp_path / line[line.index("--output-dir") + 1] / "manifest.json").read_text())
    assert manifest["extracted_by"]["engine"] == "vllm" and manifest["extracted_by"]["vllm_python"] == GPU_VLLM
    assert manifest["target"] == "tiny-random"

    # 5. Train on exactly those replies (one process here; the page launches eight).
    built, real = [], data_mod.build_data
    monkeypatch.setattr(data_mod, "build_data", lambda *a, **kw: built.append(real(*a, **kw)) or built[-1])
    line = page_line("accelerate launch", "ddp.yaml", f"-m draftsmith.train {RECIPE}")
    argv = line[line.index("draftsmith.train") + 1 :]
    assert train_main(swapped(argv, {RECIPE: recipe})) == 0  # the server is gone: the file is read
    (data,) = built
    assert data.stats["regenerated_from_file"] == 12
    assert manifest["num_rows"] == len(data.train)  # the cache of step 4 holds the rows training reads
    tok = load_tokenizer("tiny-random")
    trained = [tok.decode(row[mask.bool()]) for row, mask in zip(data.train.input_ids, data.train.loss_mask)]
    replies = {
        reply_for(s["messages"][:i]) for s in saved for i, m in enumerate(s["messages"]) if m["role"] == "assistant"
    }
    assert all(r.startswith("R") for r in replies)
    # every trained token is a regenerated reply (none of the dataset's own "answer ..."), and every
    # reply but the held-out row's two is trained on
    assert not any("answer" in t for t in trained)
    assert len({r for r in replies if any(r in t for t in trained)}) == len(replies) - 2
    ckpt = tmp_path / RUN / "final"
    assert (ckpt / "drafter.json").is_file()

    # 6. Evaluate: bench's acceptance, with τ and K in its JSON.
    line = page_line("draftsmith bench", f"{RUN}/final")
    swaps = {"meta-llama/Llama-3.1-8B-Instruct": "tiny-random", "mt-bench": "chat", "80": "2"}
    assert cli(swapped(line[1:], swaps, ("--max-new-tokens", "8", "-k", "3", "--quiet"))) == 0
    bench = json.loads((tmp_path / RUN / "bench.json").read_text())
    assert bench["num_speculative_tokens"] == 3 and bench["mean_acceptance_length"] >= 1.0

    # 6. The same token ids through vLLM (the stand-in) and our runtime; the record lands in the checkpoint.
    line = page_line("draftsmith crosscheck", f"{RUN}/final")
    assert named_vllm(line) == GPU_VLLM  # the page's GPU vLLM (docs/engines.md), installed above
    quick = ("--num-prompts", "1", "--max-new-tokens", "8", "-k", "3", "--quiet")
    assert cli(swapped(line[1:], GPU_SWAPS, quick)) == 0  # --device cuda --dtype bfloat16, run as cpu/float32
    result = json.loads((tmp_path / RUN / "crosscheck.json").read_text())
    assert result["runtimes"]["vllm"]["agreement"]["agrees"] and result["device"] == "cpu"
    assert_started_the_named_vllm(vllm_stand_in, GPU_VLLM, "float32")
    # the recipe trained with thinking off: bench and crosscheck rendered their prompts the same way
    for report in (bench, result):
        assert (report["chat_template_kwargs"], report["chat_template_kwargs_from"]) == (SWITCHES, "checkpoint")
    assert all(result.get(k) for k in ("machine", "date", "commit", "command"))  # a report the results pages can cite
    record = json.loads((ckpt / "crosscheck.json").read_text())["engines"]
    assert set(record) == {"vllm"} and record["vllm"]["agrees"]
    assert (record["vllm"]["device"], record["vllm"]["dtype"]) == ("cpu", "float32")
    assert record["vllm"]["hardware"] == result["hardware"] == result["cpu"]["model"]

    # 7. Publish, dry: the card's table is bench's, and it claims only the engine that decoded it.
    from draftsmith.shipping.hub import _staged_formats, proofs

    capsys.readouterr()
    line = page_line("draftsmith publish", "--dry-run")
    assert cli(swapped(line[1:], {}, ("--stage-dir", str(tmp_path / "staged")))) == 0
    out = capsys.readouterr().out
    card = (tmp_path / "staged" / "README.md").read_text()
    assert card in out and "results: bench.json" in out and "Nothing was measured" not in card
    assert set(proofs(ckpt)) == {"vllm"}
    for fmt in _staged_formats():
        section = card.split(f"### {fmt.engine}\n", 1)[1].split("\n### ", 1)[0]
        assert ("Proven with" in section) == (fmt.name == "vllm"), fmt.name
    assert f"draftsmith's runtime on {result['hardware']}, cpu, float32" in card


def test_the_70b_lines_parse_with_their_parallel_arguments():
    """A 70B target runs split over the node's GPUs: the page's features and serve-bench lines
    say so, and the checker of tests/test_docs.py (the CLI's own parsers) accepts them."""
    from draftsmith.cli import build_parser
    from draftsmith.train.features.cli import build_parser as features_parser

    seventy = "llama-3.3-70b"
    features = page_line("draftsmith features", seventy, "--engine vllm")
    assert check_command(shlex.join(features)) == []
    args, _ = features_parser().parse_known_args(features[2:])
    assert args.engine == "vllm" and args.tensor_parallel_size == 8

    serve = page_line("draftsmith serve-bench", seventy)
    assert check_command(shlex.join(serve)) == []
    assert build_parser().parse_args(serve[1:]).tensor_parallel_size == 8

    regenerate = page_line("draftsmith train", seventy, "--data-only")
    assert check_command(shlex.join(regenerate)) == []
    text = PAGE.read_text()
    assert "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 8" in text  # the server it reads


def test_the_readme_block_walked_on_the_tiny_target(tmp_path, tiny_cache, monkeypatch, capsys, vllm_stand_in):
    """Each line of the README's block, in its order, does what the block says on the tiny target:
    training without the regeneration step is refused before the target loads, and with it trains."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DRAFTSMITH_ENGINES", str(tmp_path / "no-engines"))
    recipe = tiny_recipe(tmp_path)
    block = readme_block()
    steps = ["draftsmith plan", "vllm serve", "--data-only", "accelerate launch", "draftsmith eval"]
    steps += ["install_engines.sh", "draftsmith crosscheck", "draftsmith publish"]
    assert [next(i for i, line in enumerate(block) if s in line) for s in steps] == list(range(len(block)))

    # plan, as written: the 8B recipe on the meta device
    line = shlex.split(block[0])
    assert cli(swapped(line[1:], {RECIPE: str(ROOT / RECIPE)})) == 0  # the walk runs outside the repository
    assert "meta-llama/Llama-3.1-8B-Instruct 8.03B frozen" in capsys.readouterr().out

    # the training line before the regeneration step: one line naming the step, nothing loaded
    launch = shlex.split(block[3])
    argv = swapped(launch[launch.index("draftsmith.train") + 1 :], {RECIPE: recipe})
    assert train_main(argv) == 2
    assert "regenerate first" in capsys.readouterr().err and not (tmp_path / RUN).exists()

    # the served target (the stand-in: block[1] names the model it serves), then the regeneration
    assert shlex.split(block[1])[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    server = StandIn()
    try:
        line = shlex.split(block[2])
        assert train_main(swapped(line[2:], {RECIPE: recipe, "http://127.0.0.1:8000/v1": server.url})) == 0
    finally:
        server.close()
    assert len((tmp_path / "regenerated.jsonl").read_text().splitlines()) == 12

    # the training line again, as written but for the recipe: it trains on the written file
    assert train_main(argv) == 0
    run = tmp_path / RUN
    assert (run / "final" / "drafter.json").is_file()

    # eval on the run folder (its best/), with the acceptance JSON publish reads
    line = shlex.split(block[4])
    swaps = {"mt-bench,humaneval": "chat,code"}
    extra = ("--num-prompts", "1", "--max-new-tokens", "8", "-k", "3", "--quiet")
    assert cli(swapped(line[1:], swaps, extra)) == 0
    evaluation = json.loads((run / "eval.json").read_text())
    assert evaluation["mean_acceptance_length"] >= 1.0

    # the GPU vLLM's install (checked, not run), then crosscheck against it (the stand-in), GPU
    # values swapped for CPU ones: the record lands beside the checkpoint
    assert check_install_line(block[5]) == "vllm-gpu"
    line = shlex.split(block[6])
    assert named_vllm(line) == GPU_VLLM
    quick = ("--num-prompts", "1", "--max-new-tokens", "8", "-k", "3", "--quiet")
    assert cli(swapped(line[1:], GPU_SWAPS, quick)) == 0
    assert_started_the_named_vllm(vllm_stand_in, GPU_VLLM, "float32")
    (record,) = [json.loads(p.read_text())["engines"]["vllm"] for p in run.glob("*/crosscheck.json")]
    assert record["agrees"] and (record["device"], record["dtype"]) == ("cpu", "float32")

    # publish, staged: the card quotes eval's table
    line = shlex.split(block[7])
    assert cli(swapped(line[1:], {}, ("--dry-run", "--stage-dir", str(tmp_path / "staged")))) == 0
    card = (tmp_path / "staged" / "README.md").read_text()
    out = capsys.readouterr().out
    assert "Nothing was measured" not in card and "results: eval.json" in out


def test_the_plan_check_line_walked_on_the_tiny_recipe(tmp_path, tiny_cache, monkeypatch, capsys, fresh_accelerate):
    """The page's calibration line (`scripts/plan_check.py RECIPE --random-target ...`) with the 8B
    recipe swapped for the tiny smoke recipe: it trains over random weights of the recipe's target
    and writes the plan beside the measured run, as the page says."""
    import importlib.util

    monkeypatch.chdir(tmp_path)
    line = page_line("scripts/plan_check.py", "--random-target")
    assert line[:2] == ["python", "scripts/plan_check.py"]
    spec = importlib.util.spec_from_file_location("plan_check", ROOT / line[1])
    plan_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan_check)
    assert plan_check.main(swapped(line[2:], {RECIPE: str(ROOT / "configs" / "tiny" / "eagle3.yaml")})) == 0
    report = json.loads((tmp_path / line[line.index("--json") + 1]).read_text())
    assert report["random_target"] and report["steps"] == int(line[line.index("--steps") + 1])
    for part in ("memory", "tokens_per_s"):
        assert report[part]["planned" if part == "tokens_per_s" else "planned_bytes"] > 0
        assert report[part]["measured" if part == "tokens_per_s" else "measured_bytes"] > 0
    assert "memory: plan" in capsys.readouterr().out
