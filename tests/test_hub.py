"""`draftsmith publish`: the exact folder and model card it would upload, and its upload requests
against a local stand-in for the Hub (never the real one)."""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from draftsmith.errors import DraftsmithError
from draftsmith.shipping.hub import build_card, find_results, load_results, main, publish, stage
from draftsmith.testing import stub_vllm, stub_vllm_install

FAKE_TOKEN = "hf_fakeTokenForTheStandInServer0123456789"
REPO = "test-org/tiny-eagle3"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, tiny_cache):
    """A tiny EAGLE-3 drafter trained 4 steps on tiny-random: run folder with recipe.yaml,
    train_summary.json and final/."""
    from draftsmith.train.config import load_recipe
    from draftsmith.train.trainer.loop import train

    run = tmp_path_factory.mktemp("run")
    r = load_recipe(
        "configs/tiny/eagle3.yaml",
        [
            "--optim.max_steps=4",
            "--logging.eval_every=1000",
            "--logging.acceptance_prompts=0",
            "--logging.progress=false",
            "--checkpoint.save_every=100",
        ],
    )
    r.checkpoint.output_dir = str(run)
    train(r)
    return run / "final"


@pytest.fixture(autouse=True)
def no_engines(tmp_path_factory, monkeypatch):
    """As on CI: no llama.cpp install, so no GGUF is staged (the card says how to make one)."""
    monkeypatch.setenv("DRAFTSMITH_ENGINES", str(tmp_path_factory.mktemp("no-engines")))


@pytest.fixture(scope="module")
def eval_json(ckpt):
    """A real `draftsmith eval --json` written into the run folder, where publish finds it."""
    from draftsmith.cli import main as cli

    out = ckpt.parent / "eval.json"
    assert (
        cli(
            [
                "eval",
                "--target",
                "tiny-random",
                "--quiet",
                "--draft",
                str(ckpt),
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "8",
                "-k",
                "3",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    return out


def _metadata(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def _expected_files(ckpt, tmp_path, results: list[str], kind: str = "eagle3") -> set[str]:
    """The repo as published: the vLLM export at the root (its id is what vLLM loads), the
    checkpoint under draftsmith/, every other engine's export in its folder."""
    from draftsmith.shipping.export import export, formats_for

    files = {f"draftsmith/{p.relative_to(ckpt).as_posix()}" for p in ckpt.rglob("*") if p.is_file()}
    for fmt in formats_for(kind):
        if fmt not in ("hf", "gguf"):  # gguf: only where llama.cpp's converter is installed
            d = export(ckpt, fmt, tmp_path / "exports" / fmt)
            where = "" if fmt == "vllm" else f"{fmt}/"
            files |= {f"{where}{p.relative_to(d).as_posix()}" for p in d.rglob("*") if p.is_file()}
    return files | {"README.md", "recipe.yaml", "train_summary.json"} | {f"results/{r}" for r in results}


def test_dry_run_without_results_lists_files_and_says_nothing_was_measured(ckpt, tmp_path, capsys, monkeypatch):
    def no_network(*args):
        raise AssertionError(f"a dry run opened a connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)  # offline, and with no token:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    stage_dir = tmp_path / "staged"
    assert main([str(ckpt), "--repo-id", REPO, "--dry-run", "--stage-dir", str(stage_dir)]) == 0
    out = capsys.readouterr().out
    staged = {p.relative_to(stage_dir).as_posix() for p in stage_dir.rglob("*") if p.is_file()}
    assert staged == _expected_files(ckpt, tmp_path, [])
    assert all(f in out for f in staged)
    assert {"config.json", "model.safetensors", "draftsmith/drafter.json", "sglang/config.json"} <= staged
    card = (stage_dir / "README.md").read_text()
    assert "### llama.cpp" in card and "No GGUF in this repo: llama.cpp's converter is not installed" in card
    assert "Not run: SGLang's CPU path" in card
    # No engine decoded this checkpoint's exports here (no crosscheck.json): the card claims none.
    assert "Proven with" not in card
    assert "Export written; not decoded by an engine here" in card.split("### vLLM")[1].split("###")[0]
    assert card in out
    assert "Nothing was measured" in card and "results: none" in out
    meta = _metadata(card)
    assert "base_model" not in meta  # tiny-random has no Hub id
    assert meta["library_name"] == "draftsmith" and meta["license"] == "apache-2.0"
    assert {"speculative-decoding", "eagle3"} <= set(meta["tags"])
    assert "datasets" not in meta and "no Hugging Face Hub dataset id" in card  # chitchat: PyPI only
    assert (stage_dir / "recipe.yaml").read_text() == (ckpt.parent / "recipe.yaml").read_text()
    assert "vllm serve" in card and "sglang.launch_server" in card and "draftsmith generate" in card


def test_dry_run_with_results_shows_the_measured_table(ckpt, eval_json, tmp_path):
    assert find_results(ckpt) == [eval_json]
    bench = json.loads(eval_json.read_text()) | {"speedup": 1.234, "hardware": "Stand-in GPU", "temperature": 0.0}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    found = load_results(find_results(ckpt))
    info = publish(ckpt, REPO, dry_run=True, results=found + load_results([tmp_path / "bench.json"]))
    assert set(info["files"]) == _expected_files(ckpt, tmp_path, ["eval.json", "bench.json"])
    card = info["card"]
    ev = found[0]
    assert "Nothing was measured" not in card
    rows = [line for line in card.splitlines() if line.startswith("| eval.json") or line.startswith("| bench.json")]
    assert len(rows) == 2
    assert f"{ev['mean_acceptance_length']:.2f}" in rows[0] and "K=3" in rows[0]
    assert " / ".join(f"{a:.2f}" for a in ev["per_position_acceptance"]) in rows[0]
    assert "1.23×" in rows[1] and "Stand-in GPU" in rows[1] and ev["dtype"] in rows[1]
    assert "--speculative-num-steps 3" in card  # serving flags follow the measured K


def test_card_maps_builtin_targets_to_hub_ids_and_notes_the_gguf(ckpt, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ckpt, run / "final")
    meta = json.loads((run / "final" / "drafter.json").read_text())
    (run / "final" / "drafter.json").write_text(json.dumps(meta | {"target": "smollm2-135m-instruct"}))
    recipe = yaml.safe_load((ckpt.parent / "recipe.yaml").read_text())
    recipe["data"]["path"] = "HuggingFaceH4/ultrachat_200k"
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    card = build_card(run / "final", [], "me/smol-eagle3")
    meta = _metadata(card)
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert meta["datasets"] == ["HuggingFaceH4/ultrachat_200k"]
    assert meta["license"] == "apache-2.0" and "speculative-decoding" in meta["tags"]
    assert "dequantised from a Q4_1 GGUF" in card
    assert "hf download me/smol-eagle3 --local-dir drafter" in card


def test_the_card_serves_with_the_switches_the_checkpoint_trained_with(ckpt, tmp_path):
    """A checkpoint trained with thinking off (Qwen3's recipes): the card's vLLM lines make that the
    server's default, and it says to send them in each request with another server; a checkpoint
    that recorded none gets none."""
    off = {"enable_thinking": False}
    run = tmp_path / "run"
    shutil.copytree(ckpt.parent, run)
    meta = json.loads((run / "final" / "drafter.json").read_text())
    (run / "final" / "drafter.json").write_text(json.dumps(meta | {"chat_template_kwargs": off}))
    card = publish(run / "final", REPO, dry_run=True, stage_dir=tmp_path / "staged")["card"]
    served = [line for line in card.splitlines() if line.startswith("vllm serve")]
    assert served and all(
        line.endswith(" --default-chat-template-kwargs '{\"enable_thinking\": false}'") for line in served
    )
    assert '`{"messages": [...], "chat_template_kwargs": {"enable_thinking": false}}`' in card
    assert "`data.chat_template_kwargs`" in card
    (sglang,) = [line for line in card.splitlines() if line.startswith("python -m sglang.launch_server")]
    assert "chat-template" not in sglang  # SGLang takes them in the request, as the note says
    from draftsmith.shipping.card import _template_call  # transformers' snippet (causal-LM drafts) renders with them

    assert _template_call(off) == ", enable_thinking=False" and _template_call({"a-b": 1}) == ", **{'a-b': 1}"

    plain = publish(ckpt, REPO, dry_run=True, stage_dir=tmp_path / "plain")["card"]
    assert "vllm serve" in plain and '"chat_template_kwargs"' not in plain and "--default-chat-template" not in plain


def test_staging_refuses_a_non_empty_folder_and_non_checkpoints(ckpt, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "old.txt").write_text("stale")
    with pytest.raises(DraftsmithError, match="not empty"):
        stage(ckpt, REPO, [], tmp_path / "x")
    with pytest.raises(DraftsmithError, match="not a draftsmith checkpoint"):
        publish(tmp_path, REPO, dry_run=True)
    with pytest.raises(DraftsmithError, match="ORG/NAME"):
        publish(ckpt, "a/b/c", dry_run=True)


def test_missing_token_is_one_clear_error(ckpt, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert main([str(ckpt), "--repo-id", REPO]) == 2
    err = capsys.readouterr().err
    assert "no Hugging Face token" in err and "hf auth login" in err and "Traceback" not in err


class _StandIn(BaseHTTPRequestHandler):
    """Answers the four calls an upload makes, like the Hub does; records each request."""

    requests: list = []

    def do_POST(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while (size := int(self.rfile.readline().strip(), 16)) > 0:
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.requests.append((self.command, self.path, self.headers.get("Authorization"), body))
        base = f"http://127.0.0.1:{self.server.server_port}"
        if self.path == "/api/repos/create":
            p = json.loads(body)
            reply = {"url": f"{base}/{p['organization']}/{p['name']}", "name": f"{p['organization']}/{p['name']}"}
        elif self.path == "/api/validate-yaml":
            reply = {"errors": [], "warnings": []}
        elif "/preupload/" in self.path:  # "regular" for every file: no LFS/Xet upload step follows
            reply = {
                "files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                    for f in json.loads(body)["files"]
                ]
            }
        elif "/commit/" in self.path:
            oid = "0123456789abcdef0123456789abcdef01234567"
            reply = {
                "success": True,
                "commitOid": oid,
                "commitUrl": f"{base}/{REPO}/commit/{oid}",
                "pullRequestUrl": None,
            }
        else:
            self.send_error(404)
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST

    def log_message(self, *args):
        pass


def test_upload_requests_against_a_local_stand_in_hub(ckpt, eval_json, tmp_path):
    """A STAND-IN for the Hub, not the Hub: a tiny http.server on 127.0.0.1 that records requests.
    publish runs in a subprocess because huggingface_hub reads HF_ENDPOINT and offline mode at
    import. Expected: create repo -> validate-yaml -> preupload -> commit, with the token only in
    the Authorization header (never in output, card or files)."""
    _StandIn.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_OIDC_RESOURCE")
    }
    env.update(
        HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
        HF_TOKEN=FAKE_TOKEN,
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_DISABLE_TELEMETRY="1",
        NO_PROXY="127.0.0.1",
        no_proxy="127.0.0.1",
    )
    staged = tmp_path / "staged"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "draftsmith.shipping.hub",
                str(ckpt),
                "--repo-id",
                REPO,
                "--private",
                "--stage-dir",
                str(staged),
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert FAKE_TOKEN not in proc.stdout + proc.stderr
    calls = [(m, p) for m, p, _, _ in _StandIn.requests]
    assert calls == [
        ("POST", "/api/repos/create"),
        ("POST", "/api/validate-yaml"),
        ("POST", f"/api/models/{REPO}/preupload/main"),
        ("POST", f"/api/models/{REPO}/commit/main"),
    ]
    assert all(auth == f"Bearer {FAKE_TOKEN}" for _, _, auth, _ in _StandIn.requests)
    create = json.loads(_StandIn.requests[0][3])
    assert (create["organization"], create["name"]) == ("test-org", "tiny-eagle3")
    assert create.get("visibility") == "private" or create.get("private") is True
    lines = [json.loads(line) for line in _StandIn.requests[3][3].decode().splitlines()]
    assert lines[0]["key"] == "header"
    files = {ln["value"]["path"]: base64.b64decode(ln["value"]["content"]) for ln in lines[1:] if ln["key"] == "file"}
    assert set(files) == _expected_files(ckpt, tmp_path, ["eval.json"])
    assert {f["path"] for f in json.loads(_StandIn.requests[2][3])["files"]} == set(files)
    card = files["README.md"].decode()
    assert json.loads(_StandIn.requests[1][3])["content"] == card
    assert "eval.json" in card and "Nothing was measured" not in card
    assert all(FAKE_TOKEN.encode() not in content for content in files.values())
    assert all(FAKE_TOKEN.encode() not in p.read_bytes() for p in staged.rglob("*") if p.is_file())
    assert f"commit/{'0123456789abcdef' * 2}" in proc.stdout


# --- what the card claims: only what `draftsmith crosscheck` proved for this checkpoint ------------


def _crosscheck(ckpt, tmp_path, monkeypatch, tiny_target, **stub):
    from draftsmith.shipping import engines
    from draftsmith.shipping.crosscheck import crosscheck
    from draftsmith.shipping.engines import vllm_engine

    monkeypatch.setattr(engines, "resolve_vllm", stub_vllm_install(tmp_path))
    monkeypatch.setattr(vllm_engine, "VLLMEngine", stub_vllm(ckpt, tiny_target, **stub))
    return crosscheck(
        ckpt, ["vllm"], "chat", k=3, max_new_tokens=8, num_prompts=2, workdir=tmp_path / "cc", progress=False
    )


def test_the_card_claims_an_engine_only_from_a_passing_crosscheck_of_this_checkpoint(
    ckpt, tmp_path, monkeypatch, tiny_target
):
    from draftsmith.models import checkpoint_identity
    from draftsmith.shipping.crosscheck import read_records

    mine = tmp_path / "final"
    shutil.copytree(ckpt, mine)
    (tmp_path / "recipe.yaml").write_text((ckpt.parent / "recipe.yaml").read_text())

    def vllm_section(stage_dir):
        stage(mine, REPO, [], stage_dir)
        card = (stage_dir / "README.md").read_text()
        return card.split("### vLLM")[1].split("###")[0], card

    section, card = vllm_section(tmp_path / "s0")
    assert "Proven with" not in card and "Export written; not decoded by an engine here" in section

    result = _crosscheck(mine, tmp_path, monkeypatch, tiny_target)
    assert result["runtimes"]["vllm"]["agreement"]["agrees"]
    record = read_records(mine)["vllm"]
    assert record["format"] == "vllm" and record["kind"] == "eagle3" and record["num_speculative_tokens"] == 3
    assert record["num_prompts"] == 2 and record["outputs_equal_plain"] == 2 and record["counts_equal_ours"] == 2
    assert record["versions"] == {"vllm": "0.0-stub", "torch": "stub"} and record["dtype"] == "float32"
    assert record["checkpoint_sha256"] == checkpoint_identity(mine)["sha256"] and record["cpu"]["model"]
    # where our side showed agreement: the device (--device, the CPU by default), its name, the dtype
    assert result["device"] == record["device"] == "cpu" and record["hardware"] == record["cpu"]["model"]
    assert result["hardware"] == record["hardware"]
    section, card = vllm_section(tmp_path / "s1")
    assert "Proven with vllm 0.0-stub, torch stub: `draftsmith crosscheck` decoded this export" in section
    assert f"draftsmith's runtime on {record['hardware']}, cpu, float32)" in section
    assert "outputs equal plain decoding on 2/2" in section and "not decoded by an engine" not in section
    assert "Proven with" not in card.split("### SGLang")[1].split("###")[0]  # SGLang: never decoded here
    assert (tmp_path / "s1" / "draftsmith" / "crosscheck.json").is_file()  # the evidence is uploaded with the card
    # ... and is in the card's metadata: the share of prompts whose outputs equal plain decoding
    import huggingface_hub

    (agreement,) = [
        e for e in huggingface_hub.ModelCard(card).data.eval_results if e.metric_type == "outputs_equal_plain"
    ]
    assert agreement.metric_value == 1.0 and agreement.metric_args["num_prompts"] == 2

    # A record of other weights (the checkpoint retrained in place) proves nothing about these.
    meta = mine / "drafter.json"  # hashed with the weights: a changed byte is another checkpoint
    meta.write_text(meta.read_text() + " ")
    assert "Proven with" not in vllm_section(tmp_path / "s2")[1]
    meta.write_text(meta.read_text()[:-1])
    assert "Proven with" in vllm_section(tmp_path / "s3")[0]

    # An engine that then disagrees loses its record: the card goes back to claiming nothing.
    result = _crosscheck(mine, tmp_path, monkeypatch, tiny_target, off_by_one=True)
    assert not result["runtimes"]["vllm"]["agreement"]["agrees"]
    assert "vllm" not in read_records(mine)
    assert "Proven with" not in vllm_section(tmp_path / "s4")[1]


def test_crosscheck_times_our_side_on_the_kernel_asked_for(ckpt, tmp_path, monkeypatch, tiny_target):
    """--cpu-matmul in crosscheck: our target and draft run on that kernel, and the report says so,
    so that our side times what bench times."""
    from draftsmith.shipping import engines
    from draftsmith.shipping.crosscheck import crosscheck, format_crosscheck
    from draftsmith.shipping.engines import vllm_engine

    mine = tmp_path / "final"  # crosscheck keeps a record in the checkpoint: not in the shared one
    shutil.copytree(ckpt, mine)
    monkeypatch.setattr(engines, "resolve_vllm", stub_vllm_install(tmp_path))
    monkeypatch.setattr(vllm_engine, "VLLMEngine", stub_vllm(mine, tiny_target))
    result = crosscheck(
        mine, ["vllm"], "chat", k=3, max_new_tokens=8, num_prompts=2, workdir=tmp_path / "cc", progress=False,
        cpu_matmul="transposed",
    )  # fmt: skip
    assert {role: c["kernel"] for role, c in result["cpu_matmul"].items()} == {
        "target": "transposed",
        "draft": "transposed",
    }
    assert all(c["why"] == "asked for" and c["rows"] == 4 for c in result["cpu_matmul"].values())
    assert "ours, target: transposed (asked for)" in format_crosscheck(result).splitlines()
    assert result["runtimes"]["ours"]["outputs_equal_plain"] == 2  # the kernel changes no greedy output here


def test_the_sampled_crosscheck_takes_no_kernel_choice(tmp_path, capsys):
    from draftsmith.cli import main

    missing = tmp_path / "no-checkpoint"  # refused before the checkpoint is opened
    assert main(["crosscheck", str(missing), "--temperature", "1", "--cpu-matmul", "auto"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--cpu-matmul" in err and "Traceback" not in err


def test_the_card_names_the_gpu_and_dtype_agreement_was_shown_on():
    """A record of `crosscheck --device cuda --dtype bfloat16` (written by hand: no GPU here), and
    one written before --device existed (our side on the CPU, the record naming only the CPU)."""
    from draftsmith.shipping.export.format import get_format
    from draftsmith.shipping.hub import _proven_line

    record = {
        "engine": "vllm", "versions": {"vllm": "0.9"}, "format": "vllm", "num_prompts": 4,
        "num_speculative_tokens": 3, "outputs_equal_plain": 4, "counts_equal_ours": 4, "date": "2026-01-02T00:00",
        "dtype": "bfloat16", "device": "cuda:0", "hardware": "NVIDIA H200", "cpu": {"model": "AMD EPYC"},
    }  # fmt: skip
    line = _proven_line(get_format("vllm"), record, "eagle3")
    assert "draftsmith's runtime on NVIDIA H200, cuda, bfloat16)" in line and "AMD EPYC" not in line
    old = {k: v for k, v in record.items() if k not in ("device", "hardware")} | {"dtype": "float32"}
    assert "draftsmith's runtime on AMD EPYC, cpu, float32)" in _proven_line(get_format("vllm"), old, "eagle3")


# --- the repo vLLM loads by id: its root is the vLLM export ----------------------------------------


def _eval(ckpt, out):
    from draftsmith.cli import main as cli

    argv = ["eval", "--target", "tiny-random", "--quiet", "--draft", str(ckpt), "--num-prompts", "2"]
    assert cli([*argv, "--max-new-tokens", "8", "-k", "3", "--json", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def draft_lm_ckpt(tmp_path_factory, tiny_cache):
    """A tiny draft LM (2 layers of tiny-random) trained 2 steps, its eval JSON in the run folder."""
    from draftsmith.train.config import load_recipe
    from draftsmith.train.trainer.loop import train

    run = tmp_path_factory.mktemp("run-draft-lm")
    quick = ["--optim.max_steps=2", "--data.max_rows=40", "--data.max_length=64", "--logging.eval_every=1000"]
    r = load_recipe(
        "configs/tiny/draft_lm.yaml", [*quick, "--logging.acceptance_prompts=0", "--logging.progress=false"]
    )
    r.checkpoint.output_dir = str(run)
    train(r)
    _eval(run / "final", run / "eval.json")
    return run / "final"


@pytest.mark.parametrize("kind", ["eagle3", "draft_lm"])
def test_the_repo_root_is_what_vllm_loads_by_id(kind, request, tmp_path, monkeypatch):
    """`--speculative-config '{"model": "ORG/REPO"}'` names the repo's root: there lies the vLLM
    export (the same files `draftsmith export --format vllm` writes, passing its contract check),
    draftsmith's checkpoint in draftsmith/; the card leads with that one line, and its metadata
    (as huggingface_hub parses it) carries the tags and τ from the eval JSON beside the checkpoint."""
    import huggingface_hub

    from draftsmith.kinds import KINDS
    from draftsmith.models.checkpoint import Checkpoint
    from draftsmith.shipping.export import EXPORT_META, check, export

    ckpt = request.getfixturevalue("ckpt") if kind == "eagle3" else request.getfixturevalue("draft_lm_ckpt")
    if kind == "eagle3":
        request.getfixturevalue("eval_json")

    def no_network(*args):
        raise AssertionError(f"a dry run opened a connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    repo, staged = f"test-org/tiny-{kind.replace('_', '-')}", tmp_path / "staged"
    info = publish(ckpt, repo, dry_run=True, stage_dir=staged)
    assert set(info["files"]) == _expected_files(ckpt, tmp_path, ["eval.json"], kind)
    assert check(staged, "vllm", kind) == []  # the root passes vLLM's layout check
    fresh = export(ckpt, "vllm", tmp_path / "fresh", num_speculative_tokens=3)  # the K the eval measured
    for p in (p for p in fresh.rglob("*") if p.is_file() and p.name != EXPORT_META):
        assert (staged / p.relative_to(fresh)).read_bytes() == p.read_bytes(), p.name
    assert Checkpoint.of(staged / "draftsmith").kind == kind  # draftsmith's own checkpoint, whole
    published = json.loads((staged / EXPORT_META).read_text())
    assert published["source_checkpoint"] == "draftsmith" and str(tmp_path) not in json.dumps(published)

    card = info["card"]
    (line,) = [ln for ln in card.splitlines() if ln.startswith("vllm serve") and "--speculative-config" in ln]
    spec = json.loads(line.split("--speculative-config ", 1)[1].strip("'"))
    assert spec["model"] == repo and spec["method"] == published["method"]
    assert card.index(line) < card.index(f"hf download {repo}")  # the id first; downloads for the others
    assert "drafter/vllm" not in card and "--draft drafter/draftsmith" in card

    data = huggingface_hub.ModelCard(card).data
    speculators = ["speculators"] if kind == "eagle3" else []
    assert data.tags == ["speculative-decoding", KINDS[kind].tag, *speculators, "vllm", "draftsmith"]
    assert data.base_model is None  # tiny-random is not on the Hub (a built-in with a Hub id: below)
    measured = json.loads((ckpt.parent / "eval.json").read_text())
    (tau,) = data.eval_results
    assert tau.metric_type == "mean_acceptance_length" and tau.metric_value == measured["mean_acceptance_length"]
    assert tau.dataset_type == measured["prompts"] and tau.metric_args["num_prompts"] == measured["num_prompts"] == 2
    assert tau.metric_args["drafts"] == measured["drafts"] and tau.metric_args["num_speculative_tokens"] == 3


def test_the_card_metadata_names_the_base_model_and_each_prompt_sets_tau(ckpt, eval_json, tmp_path):
    """A target with a Hub id is the base_model; a bench over two prompt sets gives one τ per set
    (its `by_set` split, each with its own number of prompts)."""
    import huggingface_hub

    run = tmp_path / "run"
    shutil.copytree(ckpt, run / "final")
    meta = json.loads((run / "final" / "drafter.json").read_text())
    (run / "final" / "drafter.json").write_text(json.dumps(meta | {"target": "smollm2-135m-instruct"}))
    r = json.loads(eval_json.read_text())
    split = {
        "mt-bench": {**r, "mean_acceptance_length": 2.5, "num_prompts": 80},
        "humaneval": {**r, "num_prompts": 164},
    }
    mixed = r | {"prompts": "mt-bench,humaneval", "by_set": split, "_source": "bench.json"}
    data = huggingface_hub.ModelCard(build_card(run / "final", [mixed], "me/smol-eagle3")).data
    assert data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    got = {e.dataset_type: (e.metric_value, e.metric_args["num_prompts"]) for e in data.eval_results}
    assert got == {"mt-bench": (2.5, 80), "humaneval": (r["mean_acceptance_length"], 164)}
