"""The command line end to end on tiny-random, and its errors on bad input."""

import json
import pathlib
import shutil

import pytest

from draftsmith.cli import main
from draftsmith.evaluation.prompts import load_prompts
from draftsmith.infer.kernels import KERNELS

SUMMARY_KEYS = {
    "drafts",
    "drafted_tokens",
    "accepted_tokens",
    "draft_acceptance_rate",
    "mean_acceptance_length",
    "per_position_acceptance",
    "tokens_per_s",
    "speedup",
    "speedup_vs_hf_assisted",
    "predicted_speedup",
    "plain_vs_hf_plain",
    "greedy_outputs_match",
    "target",
    "draft",
    "dtype",
    "device",
    "temperature",
    "versions",
}
TINY = ["--target", "tiny-random", "--quiet"]


def test_bench_writes_json_table_and_plot(tiny_cache, tmp_path, capsys):
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    rc = main(
        [
            "bench",
            *TINY,
            "--draft",
            "truncated:4",
            "--num-prompts",
            "2",
            "--max-new-tokens",
            "12",
            "-k",
            "3",
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert rc == 0
    r = json.loads(out.read_text())
    assert SUMMARY_KEYS <= set(r)
    assert r["greedy_outputs_match"] is True  # fp32, T=0: exact
    assert set(r["methods"]) == {"plain", "speculative", "hf_plain", "hf_assisted"}
    assert all(m["outputs_match_plain"] for m in r["methods"].values())
    assert r["speedup"] > 0 and r["speedup_vs_hf_assisted"] > 0 and r["predicted_speedup"] > 0
    assert len(r["per_position_acceptance"]) == 3
    assert r["mean_acceptance_length"] == pytest.approx(1 + r["accepted_tokens"] / r["drafts"])
    assert png.stat().st_size > 1000
    # measured here, with its reason: which kernel wins depends on the CPU (oneDNN on AMX machines)
    assert r["cpu_matmul"]["target"]["kernel"] in KERNELS
    assert r["cpu_matmul"]["draft_dtype"]["dtype"] in ("float32", "bfloat16")
    printed = capsys.readouterr().out
    shapes = r["cpu_matmul"]["target"]["shapes"]  # auto: each weight shape's choice, printed on its own line
    assert "mean_acceptance_length" in printed and all(
        f"target {key}: {c['kernel']}" in printed for key, c in shapes.items()
    )


def test_bench_prompt_lookup_has_no_hf_assisted_baseline(tiny_cache, tmp_path):
    out = tmp_path / "b.json"
    assert (
        main(
            [
                "bench",
                *TINY,
                "--draft",
                "prompt_lookup",
                "--num-prompts",
                "1",
                "--max-new-tokens",
                "8",
                "--no-hf",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert r["speedup_vs_hf_assisted"] is None and r["plain_vs_hf_plain"] is None
    assert set(r["methods"]) == {"plain", "speculative", "speculative_fixed_k"}  # adaptive K beside the fixed K


def test_eval_reports_acceptance_by_domain(tiny_cache, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "hello there", "domain": "a"})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "hi"}], "domain": "b"})
        + "\n"
    )
    out = tmp_path / "e.json"
    assert (
        main(
            [
                "eval",
                *TINY,
                "--draft",
                "truncated:6",
                "--prompts",
                str(prompts),
                "--max-new-tokens",
                "10",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert set(r["by_domain"]) == {"a", "b"}
    assert r["drafts"] == r["by_domain"]["a"]["drafts"] + r["by_domain"]["b"]["drafts"]


def test_generate_marks_drafted_tokens(tiny_cache, capsys):
    assert main(["generate", *TINY, "--draft", "truncated:6", "--max-new-tokens", "24", "--show-draft", "abcabc"]) == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.err.strip().splitlines()[-1])
    assert stats["tokens"] == 24
    assert ("[[" in captured.out) == (stats["accepted_tokens"] > 0)


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "no prompts"),
        ("\n\n", "no prompts"),
        ('{"prompt": "ok"}\n{not json\n', ":2: not valid JSON"),
        ('{"text": "x"}\n', "needs a 'prompt'"),
    ],
)
def test_bad_prompt_files_are_one_clear_error(tiny_cache, tmp_path, capsys, content, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert main(["eval", *TINY, "--draft", "truncated:2", "--prompts", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_prompt_file_and_bad_draft_spec(tiny_cache, capsys):
    assert main(["eval", *TINY, "--draft", "truncated:2", "--prompts", "nope.jsonl"]) == 2
    assert "prompt file not found" in capsys.readouterr().err
    assert main(["eval", *TINY, "--draft", "truncated:x"]) == 2
    assert "truncated:N" in capsys.readouterr().err
    assert main(["eval", *TINY, "--draft", "truncated:99"]) == 2
    assert "has 8 layers" in capsys.readouterr().err


def test_draft_with_another_tokenizer_is_refused(tiny_cache, tmp_path, capsys):
    from draftsmith.models.sources import load_tokenizer, resolve_model

    folder = tmp_path / "other-draft"
    shutil.copytree(resolve_model("tiny-random").path, folder)
    tok = load_tokenizer(str(folder))
    tok.add_tokens(["<extra_token>"])
    tok.save_pretrained(folder)
    assert main(["eval", *TINY, "--draft", str(folder), "--num-prompts", "1"]) == 2
    err = capsys.readouterr().err
    assert "tokenizer" in err.lower() and "other-draft" in err


def test_builtin_prompt_sets_render_through_the_chat_template(tiny_cache):
    from draftsmith.models.sources import load_tokenizer

    tok = load_tokenizer("tiny-random")
    for name in ("chat", "code"):
        prompts = load_prompts(name, tok)
        assert len(prompts) >= 20 and {p.domain for p in prompts} == {name}
        assert all(p.text.rstrip().endswith("assistant") for p in prompts)  # generation prompt added


def test_prompts_from_a_datasets_source(tiny_cache, tmp_path):
    """A `datasets` source (here a local folder, loaded by `datasets.load_dataset`) with a chat
    column whose last assistant turn is dropped so the target writes it."""
    from draftsmith.models.sources import load_tokenizer

    (tmp_path / "test.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "how are you"}]})
        + "\n"
    )
    prompts = load_prompts(str(tmp_path), load_tokenizer("tiny-random"), split="test")
    assert len(prompts) == 2
    assert "yo" not in prompts[0].text and prompts[0].text.rstrip().endswith("assistant")


@pytest.fixture
def medusa_folder(tiny_target, tmp_path):
    """An untrained 3-head Medusa checkpoint for tiny-random, as the trainer lays it out."""
    from draftsmith.models import write_drafter_meta
    from draftsmith.models.medusa import MedusaHeads

    folder = tmp_path / "medusa"
    MedusaHeads.from_target(tiny_target.model, num_heads=3, target_name="tiny-random").save_pretrained(folder)
    tiny_target.tokenizer.save_pretrained(folder)
    write_drafter_meta(folder, "medusa", "tiny-random", medusa_version=1)
    return folder


def test_bench_medusa_chain_and_tree_from_a_checkpoint(medusa_folder, tmp_path, capsys):
    """The target comes from drafter.json; a tree is reported as a tree; greedy stays exact."""
    for extra in (["-k", "3"], ["--tree-topk", "2", "--tree-depth", "3", "--tree-num-draft-tokens", "7"]):
        out = tmp_path / "m.json"
        assert (
            main(
                [
                    "bench",
                    "--quiet",
                    "--draft",
                    str(medusa_folder),
                    "--num-prompts",
                    "1",
                    "--max-new-tokens",
                    "10",
                    "--no-hf",
                    "--no-adaptive-k",  # the tree's shape is the subject: every step drafts it
                    "--json",
                    str(out),
                    *extra,
                ]
            )
            == 0
        )
        r = json.loads(out.read_text())
        assert r["target"] == "tiny-random" and r["drafter_kind"] == "medusa" and r["greedy_outputs_match"] is True
        if "--tree-topk" in extra:
            assert r["tree"] == {"topk": 2, "depth": 3, "num_draft_tokens": 7, "children": "topk"}
            # 6 nodes chosen by the greedy search (prior accuracies: untrained heads) within depth 3
            assert r["drafted_tokens"] == 6 * r["drafts"] and 1 <= len(r["per_position_acceptance"]) <= 3
        else:
            assert r["tree"] is None and r["drafted_tokens"] == 3 * r["drafts"]
    assert "tree {'topk': 2" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["-k", "5"], "drafts at most 3 tokens per step"),
        (["--tree-depth", "4"], "at most 3 tokens ahead"),
        (["--tree-choices", "TREE"], "no parent [1]"),
        (["--tree-children", "sampled"], "applies to trees"),
        (["--tree-topk", "2", "--tree-children", "sampled"], "temperature > 0"),
    ],
)
def test_bad_medusa_requests_are_one_line_errors(medusa_folder, tmp_path, capsys, args, message):
    tree = tmp_path / "tree.json"
    tree.write_text("[[0], [1, 0]]")
    args = [str(tree) if a == "TREE" else a for a in args]
    assert main(["generate", "--quiet", "--draft", str(medusa_folder), "--max-new-tokens", "4", *args, "hi"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # (progress bars aside)
    assert len(errors) == 1 and errors[0].startswith("draftsmith: error:") and message in errors[0]


def test_typical_acceptance_must_be_asked_for_by_name(medusa_folder, capsys):
    with pytest.raises(SystemExit):  # argparse: only lossless | typical-lossy exist
        main(["generate", "--quiet", "--draft", str(medusa_folder), "--verification", "typical", "hi"])
    assert (
        main(
            [
                "generate",
                "--quiet",
                "--draft",
                str(medusa_folder),
                "--verification",
                "typical-lossy",
                "--temperature",
                "0.8",
                "--max-new-tokens",
                "6",
                "hi",
            ]
        )
        == 0
    )


def test_finished_results_survive_an_output_that_fails_at_the_end(tiny_cache, tmp_path, capsys, monkeypatch):
    """Issue 16 item 3: the paths are checked before the run, and if writing still fails at the
    end (disk full, folder removed meanwhile), the results go to a temporary file named in the error."""
    import os

    from draftsmith.evaluation import bench_report  # save_outputs' module: where it looks its writers up

    real, out, png = bench_report.write_json, tmp_path / "r.json", tmp_path / "r.png"

    def disk_full(result, path):
        if str(path) == str(out):
            raise OSError(28, "No space left on device")
        return real(result, path)

    monkeypatch.setattr(bench_report, "write_json", disk_full)
    assert (
        main(
            ["eval", *TINY, "--draft", "truncated:4", "--num-prompts", "1", "--max-new-tokens", "6", "--json", str(out)]
        )
        == 2
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("draftsmith: error:")]
    assert len(lines) == 1 and f"could not write --json {out} (No space left on device)" in lines[0]
    kept = lines[0].split("the results are saved in ")[1]
    assert json.loads(open(kept).read())["num_prompts"] == 1 and not out.exists()
    os.unlink(kept)

    monkeypatch.setattr(
        bench_report, "write_json", real
    )  # the JSON is written, the plot fails: the error points at the JSON
    monkeypatch.setattr(
        bench_report, "plot_acceptance", lambda *a: (_ for _ in ()).throw(ValueError("Format 'png' is not supported"))
    )
    assert (
        main(
            [
                "bench",
                *TINY,
                "--draft",
                "truncated:4",
                "--num-prompts",
                "1",
                "--max-new-tokens",
                "6",
                "--no-hf",
                "--json",
                str(out),
                "--plot",
                str(png),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"could not write --plot {png} (Format 'png' is not supported); the results are saved in {out}" in err
    assert json.loads(out.read_text())["num_prompts"] == 1


def test_ctrl_c_is_one_line_not_a_traceback(capsys):
    from draftsmith.errors import run_command

    def interrupted():
        raise KeyboardInterrupt

    assert run_command(interrupted) == 130
    err = capsys.readouterr().err
    assert err.startswith("draftsmith: interrupted") and "Traceback" not in err and err.count("\n") == 1


# --- one parser tree: every command through draftsmith/cli.py -------------------------------------

TINY_RECIPE = str(pathlib.Path(__file__).resolve().parents[1] / "configs" / "tiny" / "eagle3.yaml")


@pytest.mark.parametrize("command", ["train", "features", "plan"])
def test_recipe_commands_take_the_same_override_tail(command, tmp_path, capsys):
    """train, features and plan hand the tokens no option claims to the recipe loader: an unknown
    key is one line with a "did you mean", whichever command reads the recipe."""
    extra = ["--output-dir", str(tmp_path / "feats")] if command == "features" else []
    assert main([command, TINY_RECIPE, *extra, "--optim.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'optim.lrr' (did you mean 'optim.lr'?)" in err and "Traceback" not in err


def test_python_dash_m_train_is_draftsmith_train(capsys):
    """`python -m draftsmith.train` (what accelerate launches) goes through the same parser and command."""
    from draftsmith.train.__main__ import main as train_main

    argv = [TINY_RECIPE, "--print-config", "--optim.lr", "1e-3", "--data.max_rows=7"]
    assert main(["train", *argv]) == 0
    through_cli = capsys.readouterr().out
    assert train_main(argv) == 0
    assert capsys.readouterr().out == through_cli and "max_rows: 7" in through_cli
    with pytest.raises(SystemExit) as e:  # the subcommand's own usage line, as before
        train_main([])
    assert e.value.code == 2 and "usage: draftsmith train" in capsys.readouterr().err


def test_commands_without_a_recipe_refuse_unknown_tokens(capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval", "--draft", "truncated:2", "--optim.lr=1"])
    assert e.value.code == 2 and "unrecognized arguments: --optim.lr=1" in capsys.readouterr().err


def test_the_features_options_name_the_cache_dtypes():
    """train/cli_options.py declares the features options without torch: its dtype names are the cache's."""
    from draftsmith.train.cli_options import CACHE_DTYPE_NAMES
    from draftsmith.train.features import CACHE_DTYPES

    assert CACHE_DTYPE_NAMES == tuple(CACHE_DTYPES)
