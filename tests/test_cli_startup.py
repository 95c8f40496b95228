"""The CLI starts at once: building its parser and answering --help import no torch,
transformers or datasets (the kind registry is lazy; each command loads what it needs when it runs)."""

import json
import subprocess
import sys

from draftsmith.cli import COMMANDS
from draftsmith.kinds import KINDS

HEAVY = ("torch", "transformers", "datasets", "accelerate", "safetensors")

PROBE = """
import contextlib, io, json, sys
from draftsmith.cli import build_parser, main
parser = build_parser()
commands = sorted(parser._subparsers._group_actions[0].choices)
helps = {}
for argv in [["--help"]] + [[name, "--help"] for name in commands]:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv)
        except SystemExit:
            pass
    helps[" ".join(argv)] = out.getvalue()
heavy = sorted(m for m in {HEAVY} if m in sys.modules)
print(json.dumps({"heavy": heavy, "helps": helps, "commands": commands}))
"""


def test_parser_and_every_help_import_no_heavy_library():
    code = PROBE.replace("{HEAVY}", repr(HEAVY))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [], f"building the parser or answering --help imported {result['heavy']}"
    assert "usage: draftsmith" in result["helps"]["--help"]
    for name in result["commands"]:  # every command's own --help, through the one parser tree
        assert f"usage: draftsmith {name} " in result["helps"][f"{name} --help"], name
    assert result["commands"] == sorted(COMMANDS)  # every command, each declared once in the table


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
    assert names and names == sorted(KINDS)  # the registry is the one list of kinds
    assert heavy == [] and models == []
