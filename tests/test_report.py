"""Every benchmark JSON says where, when and how it was measured (draftsmith/evaluation/report.py)."""

import json
import subprocess

from draftsmith.evaluation.report import commit, stamp, write_report


def test_stamp_names_machine_commit_date_and_command(tmp_path):
    out = write_report({"speedup": 1.25}, tmp_path / "sub" / "r.json", argv=["scripts/bench_x.py", "--k", "a b"])
    on_disk = json.loads((tmp_path / "sub" / "r.json").read_text())
    assert on_disk == out
    assert on_disk["speedup"] == 1.25
    assert on_disk["command"] == "scripts/bench_x.py --k 'a b'"
    machine = on_disk["machine"]
    assert machine["device"] in ("cpu", "cuda")
    if machine["device"] == "cpu":
        assert machine["cpu"]["model"] and "avx512f" in machine["cpu"]["flags"]
    assert on_disk["date"].endswith("UTC")
    assert not list((tmp_path / "sub").glob(".*tmp"))


def test_commit_is_the_checkout_s_head():
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    got = commit()
    if head:
        assert got is not None and got.split("+")[0] == head
    assert stamp({"commit": "given"})["commit"] == "given"  # the result's own keys win


def test_write_json_makes_its_folder(tmp_path):
    from draftsmith.evaluation.bench import write_json

    out = tmp_path / "runs" / "sub" / "r.json"  # `--json runs/x.json` on a fresh clone: no runs/ yet
    write_json({"a": 1}, str(out))
    assert json.loads(out.read_text()) == {"a": 1}
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]  # no temporary file left beside it


def test_a_rewritten_results_file_does_not_mark_the_source_dirty(tmp_path, monkeypatch):
    """A series of benchmarks rewrites tracked results files as it goes: the next run's stamp must
    still name a clean commit; a change to the source marks it dirty."""
    import subprocess

    from draftsmith.evaluation import report

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    monkeypatch.setattr(report, "REPO", tmp_path)
    assert not report.commit().endswith("+dirty")
    (tmp_path / "results" / "a.json").write_text('{"b": 1}')
    assert not report.commit().endswith("+dirty")
    (tmp_path / "code.py").write_text("x = 2\n")
    assert report.commit().endswith("+dirty")
