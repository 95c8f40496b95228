"""The CLI starts at once: building its parser and answering --help import no torch,
transformers or datasets (the kind registry is lazy; each command loads what it needs when it runs)."""

import json
import subprocess
import sys

HEAVY = ("torch", "transformers", "datasets", "accelerate", "safetensors")

PROBE = """
import contextlib, io, json, sys
from draftsmith.cli import build_parser, main
parser = build_parser()
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(["--help"])
    except SystemExit:
        pass
commands = sorted(parser._subparsers._group_actions[0].choices)
heavy = sorted(m for m in {HEAVY} if m in sys.modules)
print(json.dumps({"heavy": heavy, "help": out.getvalue(), "commands": commands}))
"""


def test_parser_and_help_import_no_heavy_library():
    code = PROBE.replace("{HEAVY}", repr(HEAVY))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [], f"building the parser imported {result['heavy']}"
    assert "usage: draftsmith" in result["help"]
    for command in ("train", "bench", "eval", "generate", "export", "publish", "crosscheck"):
        assert command in result["commands"]


def test_registry_import_is_lazy():
    code = (
        "import sys, json; from draftsmith.kinds import KINDS; "
        "names = sorted(KINDS); "
        f"print(json.dumps([names, sorted(m for m in {HEAVY!r} if m in sys.modules), "
        "sorted(m for m in sys.modules if m.startswith('draftsmith.models'))]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names, heavy, models = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"draft_lm", "medusa", "eagle", "eagle3", "dflash", "pard"} <= set(names)
    assert heavy == [] and models == []
