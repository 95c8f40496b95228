"""Engine runners and the cross-check, without the engines: the JSON-lines protocol against a
stand-in runner, and the agreement rules on hand-made decodes. (The real engines: test_engines_real.py.)"""

import json
import math
import sys
import textwrap

import pytest

from draftsmith.errors import DraftsmithError
from draftsmith.shipping.crosscheck import Decoded, agreement, first_difference, format_crosscheck, summarize
from draftsmith.shipping.engines.protocol import RunnerProcess

STAND_IN = textwrap.dedent("""
    import json, sys, time
    out = sys.stdout
    config = json.loads(sys.stdin.readline())
    print("a library printing to stdout", flush=True)  # not a protocol line: skipped
    print("loading...", file=sys.stderr, flush=True)
    if config.get("fail_load"):
        out.write(json.dumps({"error": "RuntimeError: no such model"}) + "\\n"); out.flush(); sys.exit(1)
    if config.get("die_load"):
        sys.exit(3)
    out.write(json.dumps({"ready": True, "versions": {"engine": "0"}}) + "\\n"); out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if req.get("sleep"):
            time.sleep(req["sleep"])
        if req.get("crash"):
            sys.exit(4)
        if req.get("bad"):
            out.write(json.dumps({"error": "ValueError: bad request"}) + "\\n"); out.flush(); continue
        ids = req["prompt_ids"]
        out.write(json.dumps({"output_ids": ids[::-1][: req["max_tokens"]], "elapsed_s": 0.5}) + "\\n"); out.flush()
""")


@pytest.fixture
def runner(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(STAND_IN)

    def start(**config):
        return RunnerProcess(
            "stand-in", [sys.executable, str(script)], config, tmp_path / "runner.log", load_timeout_s=30
        )

    return start


def test_runner_answers_requests_in_order(runner):
    with runner() as r:
        assert r.ready["versions"] == {"engine": "0"}
        assert r.request({"prompt_ids": [1, 2, 3], "max_tokens": 2})["output_ids"] == [3, 2]
        assert r.request({"prompt_ids": [7], "max_tokens": 5})["output_ids"] == [7]
        assert r.proc.poll() is None
    assert r.proc.poll() == 0  # closed cleanly by the quit line


def test_runner_failure_to_load_is_one_error_naming_the_log(runner, tmp_path):
    with pytest.raises(
        DraftsmithError, match=r"stand-in failed while loading: RuntimeError: no such model; its log: .*runner.log"
    ):
        runner(fail_load=True)
    with pytest.raises(DraftsmithError, match=r"exited while loading \(exit status 3\).*last lines: loading"):
        runner(die_load=True)


def test_runner_request_errors_and_crashes(runner):
    r = runner()
    with pytest.raises(DraftsmithError, match="failed while decoding: ValueError: bad request"):
        r.request({"bad": True})
    assert r.request({"prompt_ids": [1, 2], "max_tokens": 4})["output_ids"] == [
        2,
        1,
    ]  # still usable after an error answer
    with pytest.raises(DraftsmithError, match=r"exited while decoding \(exit status 4\)"):
        r.request({"crash": True})
    r.close()


def test_runner_timeout(runner):
    r = runner()
    with pytest.raises(DraftsmithError, match="gave no answer within 1 s while decoding"):
        r.request({"sleep": 5, "prompt_ids": [1], "max_tokens": 1}, timeout_s=1)
    assert r.proc.poll() is not None  # a runner that stopped answering is killed, not left behind


def test_missing_interpreter_is_one_error(tmp_path):
    with pytest.raises(DraftsmithError, match="could not start"):
        RunnerProcess("ghost", [str(tmp_path / "no-python"), "x.py"], {}, tmp_path / "ghost.log")


def test_engine_not_installed_says_how(tmp_path, monkeypatch):
    from draftsmith.shipping import engines

    monkeypatch.setenv(engines.ENGINES_ENV, str(tmp_path))
    assert engines.installed("vllm") is None
    with pytest.raises(
        DraftsmithError, match=r"vllm is not installed in .*: run `bash scripts/install_engines.sh vllm`"
    ):
        engines.require("vllm")
    (tmp_path / "llama.cpp").mkdir()
    assert engines.installed("llamacpp") is None  # a half-finished install (no stamp) does not count
    (tmp_path / "llama.cpp" / "INSTALLED").write_text("x")
    assert engines.installed("llamacpp") == tmp_path / "llama.cpp"


# --- agreement -------------------------------------------------------------------------------------


def d(out, drafts=0, drafted=0, accepted=0, per_pos=(), elapsed=1.0):
    return Decoded(list(out), elapsed, drafts, drafted, accepted, list(per_pos))


def test_agreement_exact():
    plain = [d([5, 6, 7]), d([1, 2])]
    ours = [d([5, 6, 7], 2, 6, 1, [1, 0, 0]), d([1, 2], 1, 3, 1, [1])]
    engine = [d([5, 6, 7], 2, 6, 1, [1]), d([1, 2], 1, 3, 1, [1, 0, 0])]  # trailing zeros do not count
    ag = agreement(ours, plain, engine)
    assert ag["agrees"] and ag["outputs_equal_plain"] == 2 and ag["counts_equal_ours"] == 2 and not ag["issues"]


def test_agreement_counts_differ_with_equal_outputs_is_a_disagreement():
    plain = [d([5, 6, 7])]
    ag = agreement([d([5, 6, 7], 2, 6, 1, [1])], plain, [d([5, 6, 7], 2, 6, 2, [1, 1])])
    assert not ag["agrees"]
    assert ag["issues"] == [
        {"prompt": 0, "counts": {"ours": [2, 6, 1, [1]], "engine": [2, 6, 2, [1, 1]]}, "explained": False}
    ]


def test_agreement_output_difference_explained_only_by_a_near_tie():
    plain, ours = [d([5, 6, 7])], [d([5, 6, 7], 2, 6, 1, [1])]
    engine = [d([5, 9, 9], 2, 6, 0, [])]
    near = agreement(ours, plain, engine, explain=lambda i, pos: 2e-5)
    assert near["agrees"] and near["issues"][0]["first_differing_token"] == 1 and near["issues"][0]["explained"]
    far = agreement(ours, plain, engine, explain=lambda i, pos: 0.7)
    assert not far["agrees"]


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_summarize_pools_acceptance():
    s = summarize([d([1] * 4, 2, 6, 3, [2, 1], elapsed=2.0), d([1] * 6, 3, 9, 0, [], elapsed=1.0)])
    assert s["mean_acceptance_length"] == pytest.approx(1 + 3 / 5)
    assert s["draft_acceptance_rate"] == pytest.approx(3 / 15)
    assert s["per_position_acceptance"] == pytest.approx([2 / 5, 1 / 5])
    assert s["tokens_per_s"] == pytest.approx((2.0 + 6.0) / 2)
    # τ's standard error, each prompt a cluster: sqrt(n/(n-1) * sum((a_i - r d_i)^2)) / sum(d_i)
    r = 3 / 5
    assert s["mean_acceptance_length_se"] == pytest.approx(math.sqrt(2 * ((3 - 2 * r) ** 2 + (0 - 3 * r) ** 2)) / 5)
    assert summarize([d([1] * 4, 2, 6, 3, [2, 1])])["mean_acceptance_length_se"] is None  # one prompt: no estimate
    assert summarize([d([1] * 4), d([1] * 4)])["mean_acceptance_length_se"] is None  # nothing drafted


def test_format_crosscheck_names_disagreements():
    plain = [d([5, 6, 7])]
    rows = {
        "ours plain": summarize(plain),
        "ours": summarize([d([5, 6, 7], 2, 6, 1, [1])]),
        "vllm": summarize([d([5, 6, 7], 2, 6, 2, [1, 1])]),
    }
    for r in rows.values():
        r["outputs_equal_plain"] = 1
    rows["vllm"]["agreement"] = agreement([d([5, 6, 7], 2, 6, 1, [1])], plain, [d([5, 6, 7], 2, 6, 2, [1, 1])])
    rows["vllm"]["reference"] = "ours"
    result = {
        "kind": "draft_lm",
        "checkpoint": "ck",
        "target": "t",
        "dtype": "float32",
        "num_speculative_tokens": 3,
        "num_prompts": 1,
        "prompts": "chat",
        "max_new_tokens": 3,
        "runtimes": rows,
        "cpu": {"model": "cpu", "flags": {"avx512f": True}, "threads": 2, "cores": 2},
    }
    text = format_crosscheck(result)
    assert "tau (± se)" in text and "1.50" in text.splitlines()[4] and "±" not in text.splitlines()[4]  # one prompt
    rows["ours"]["mean_acceptance_length_se"] = 0.125
    assert "1.50 ± 0.12" in format_crosscheck(result).splitlines()[4]
    assert "vllm DISAGREES with ours" in text and "ours [2, 6, 1, [1]] vs engine [2, 6, 2, [1, 1]]" in text
    assert "ours on cpu (cpu), float32" in text  # a result written before --device: our side ran on the CPU
    json.dumps(result)
    result.update(device="cuda:0", hardware="NVIDIA H200", dtype="bfloat16")
    assert "ours on cuda:0 (NVIDIA H200), bfloat16" in format_crosscheck(result).splitlines()[1]


# --- crosscheck --device: where our side decodes ---------------------------------------------------


def test_crosscheck_device_flag_parses_and_defaults_to_the_cpu():
    from draftsmith.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["crosscheck", "ckpt"]).device == "cpu"
    args = parser.parse_args(["crosscheck", "ckpt", "--device", "cuda:1", "--dtype", "bfloat16"])
    assert (args.device, args.dtype) == ("cuda:1", "bfloat16")


@pytest.mark.parametrize(
    ("device", "says"),
    [("tpu9", "not a device name torch knows"), ("cuda:64", "cuda")],
)
def test_crosscheck_bad_device_is_one_line_before_anything_loads(device, says, tmp_path, capsys):
    from draftsmith.cli import main

    missing = tmp_path / "no-checkpoint"  # the device is refused first: the checkpoint is never opened
    assert main(["crosscheck", str(missing), "--device", device]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device" in err and device in err and says in err and "Traceback" not in err


def test_hardware_name_is_the_cpu_model_on_the_cpu():
    from draftsmith.evaluation.bench import cpu_info
    from draftsmith.shipping.crosscheck import hardware_name

    assert hardware_name("cpu") == cpu_info()["model"]


# --- llama.cpp: what its programs print, and the GGUF contract -------------------------------------


def test_llamacpp_steps_counted_over_our_budget():
    from draftsmith.shipping.engines.llamacpp_engine import count_steps, steps_from_log

    log = "\n".join(
        [
            "llama_decode: ...",
            "accepted 2/3 draft tokens, the last target token is: (17)",
            "accepted 0/3 draft tokens, the last target token is: (5)",
            "accepted 3/3 draft tokens, the last target token is: (9)",
            "accepted 1/3 draft tokens, the last target token is: (2)",
        ]
    )
    steps = steps_from_log(log)
    assert steps == [(2, 3, 17), (0, 3, 5), (3, 3, 9), (1, 3, 2)]
    # budget 4: steps emit 3, 1 (4 out: stop) -> the first two steps only
    assert count_steps(steps, 4, {2}) == ([(2, 3), (0, 3)], 4)
    # budget 5: a third step is needed (it emits 4 tokens, past the budget, as our engine does)
    assert count_steps(steps, 5, {2}) == ([(2, 3), (0, 3), (3, 3)], 8)
    # EOS (id 2) ends it even with budget left
    assert count_steps(steps, 100, {2}) == ([(2, 3), (0, 3), (3, 3), (1, 3)], 10)


def test_llamacpp_printed_text():
    from draftsmith.shipping.engines.llamacpp_engine import _decode_seconds, _generated_text

    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert _generated_text("\n\n" + prompt + "Hello there.\n\n\n\n", prompt, echoed=True) == "Hello there."
    assert (
        _generated_text("\n\n" + prompt + "Hello\n\n\n\n\n", prompt, echoed=True) == "Hello\n"
    )  # its own newline kept
    assert _generated_text("Hello there. [end of text]\n\n\n", prompt, echoed=False) == "Hello there."  # EOS
    assert _generated_text("Hello there\n\n", prompt, echoed=False) == "Hello there"  # stopped by -n
    assert _generated_text("Hello\n\n\n", prompt, echoed=False) == "Hello\n"
    assert _decode_seconds(
        "encoded   12 tokens in    0.250 seconds, speed: 48 t/s\ndecoded   32 tokens in    1.750 seconds, speed: 18 t/s"
    ) == pytest.approx(2.0)
    assert _decode_seconds(
        "llama_perf_context_print: prompt eval time =     100.00 ms /    12 tokens\n"
        "llama_perf_context_print:        eval time =     900.00 ms /    31 runs"
    ) == pytest.approx(1.0)


def test_text_outputs_compared_as_text():
    from draftsmith.shipping.crosscheck import output_difference

    pieces = {1: "Hel", 2: "lo", 3: " world", 9: "<eos>"}

    def decode(ids):
        return "".join(pieces[i] for i in ids if i != 9)

    base = d([1, 2, 3, 9])
    assert output_difference(Decoded([], 1.0, text="Hello world"), base, decode) is None
    assert output_difference(Decoded([], 1.0, text="Hello world and on", text_may_continue=True), base, decode) is None
    assert output_difference(Decoded([], 1.0, text="Hello world and on"), base, decode) == 3
    assert output_difference(Decoded([], 1.0, text="Help"), base, decode) == 1  # "Hel" matches, "Hello" does not
    assert output_difference(Decoded([], 1.0, text="Hello, world"), base, decode) == 2


def _write_gguf(path, arch, with_tensor=True):
    import numpy as np
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    if with_tensor:
        w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_export_contract(tmp_path):
    from draftsmith.shipping.export import gguf

    ok = tmp_path / "ok"
    ok.mkdir()
    _write_gguf(ok / "draft.gguf", "eagle3")
    assert gguf.check(ok, "eagle3") == []
    assert gguf.check(ok, "draft_lm") == []  # a draft LM may be any architecture llama.cpp reads
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    _write_gguf(wrong / "draft.gguf", "llama")
    assert gguf.check(wrong, "eagle3") == ["draft.gguf: architecture 'llama', llama.cpp's draft-eagle3 needs 'eagle3'"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "draft.gguf").write_bytes(b"GGUF\x03\x00\x00\x00truncated")
    assert "not a readable GGUF file" in gguf.check(bad, "draft_lm")[0]
    assert gguf.check(tmp_path / "ok", "eagle3") == [] and "found 0" in gguf.check(tmp_path, "eagle3")[0]


def test_gguf_export_without_llamacpp_says_how(tmp_path, monkeypatch, tiny_target):
    from draftsmith.shipping import engines
    from draftsmith.shipping.export.gguf import write

    monkeypatch.setenv(engines.ENGINES_ENV, str(tmp_path / "none"))

    class Ckpt:  # write() needs llama.cpp's converter before it reads anything of the checkpoint
        kind, target, path = "draft_lm", "tiny-random", tmp_path

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DraftsmithError, match=r"llamacpp is not installed .*install_engines.sh llamacpp"):
        write(Ckpt(), out, num_speculative_tokens=3, verifier="tiny-random", gguf_type="f32")


def test_draft_first_schedule_keeps_the_output(tiny_target):
    """llama.cpp's schedule (Engine(draft_first=True)): the first new token is drafted too; the
    output is plain greedy decoding's either way, and only the steps differ."""
    from draftsmith.infer import Engine
    from draftsmith.models import load_drafter

    drafter = load_drafter("truncated:6", tiny_target)
    ids = tiny_target.tokenizer("The quick brown fox jumps over")["input_ids"]
    plain = Engine(tiny_target).generate(ids, 24)
    usual = Engine(tiny_target, drafter, 3).generate(ids, 24)
    first = Engine(tiny_target, drafter, 3, draft_first=True).generate(ids, 24)
    assert usual.tokens == plain.tokens == first.tokens
    one = Engine(tiny_target, drafter, 3, draft_first=True).generate(ids, 1)
    assert one.metrics.drafts == 1 and one.metrics.drafted_tokens == 3  # the first token came from a verify step
    assert Engine(tiny_target, drafter, 3).generate(ids, 1).metrics.drafts == 0  # ... here from the prefill


def test_reduced_precision_near_ties_are_units_in_the_last_place_of_the_top_logit():
    from draftsmith.shipping.crosscheck import NEAR_TIE, near_tie

    assert near_tie("float32", 20.0) == NEAR_TIE
    assert near_tie("bfloat16", 20.0) == 4 * 2.0 ** (4 - 7)  # bf16 holds 20 to 1/8: four ulps, 0.5
    assert near_tie("float16", 20.0) == 4 * 2.0 ** (4 - 10)
    assert near_tie("bfloat16", 0.0) == NEAR_TIE
    plain, ours = [d([5, 6, 7])], [d([5, 6, 7], 2, 6, 1, [1])]
    engine = [d([5, 9, 9], 2, 6, 1, [1])]
    one_ulp = agreement(ours, plain, engine, explain=lambda i, pos: (0.125, near_tie("bfloat16", 20.0)), exact=False)
    assert one_ulp["agrees"] and one_ulp["issues"][0]["near_tie_limit"] == 0.5
    far = agreement(ours, plain, engine, explain=lambda i, pos: (0.75, near_tie("bfloat16", 20.0)), exact=False)
    assert not far["agrees"]


def test_reduced_precision_compares_tau_over_the_run_not_counts_per_prompt():
    plain = [d([5, 6, 7]), d([1, 2, 3])]
    ours = [d([5, 6, 7], 10, 40, 30, [10, 9, 7, 4]), d([1, 2, 3], 10, 40, 30, [10, 8, 7, 5])]
    close = [d([5, 6, 7], 10, 40, 31, [10, 9, 8, 4]), d([1, 2, 3], 10, 40, 29, [10, 8, 6, 5])]  # same tau
    ag = agreement(ours, plain, close, exact=False)
    assert ag["agrees"] and ag["tau_ours"] == ag["tau_engine"] == 4.0
    assert all(i["counts_differ_by_rounding"] and i["explained"] for i in ag["issues"])
    assert not agreement(ours, plain, close)["agrees"]  # float32: counts must match prompt by prompt
    apart = [d([5, 6, 7], 10, 40, 25, [10, 8, 5, 2]), d([1, 2, 3], 10, 40, 25, [10, 8, 5, 2])]  # tau 3.5 vs 4.0
    ag = agreement(ours, plain, apart, exact=False)
    assert not ag["agrees"] and ag["tau_engine"] == 3.5
