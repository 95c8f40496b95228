"""What every benchmark's JSON carries, written one way: the machine (CPU model and the flags
that change its figures, or the GPU), the commit, the date and the command that produced it.

The benchmark scripts (scripts/bench_*.py, through draftsmith/evaluation/benchkit.py) and `draftsmith
bench/eval --json` share this, so a table in docs/results.md can always say where, when and how
its figures were measured.

    result = stamp({...figures...})      # or write_report(result, path)
"""

from __future__ import annotations

import datetime
import pathlib
import shlex
import subprocess
import sys

from draftsmith.fileio import write_json

REPO = pathlib.Path(__file__).resolve().parents[2]


def commit() -> str | None:
    """The source's git commit (with "+dirty" when the work tree has changes outside results/:
    a run that rewrites a results file it is recording does not make the next one's source
    dirty), or None outside a git checkout (an installed wheel)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def machine() -> dict:
    """The GPU where torch sees one, else the CPU (model, AVX-512/AMX flags, threads)."""
    import torch

    from draftsmith.infer.hardware import cpu_info, format_cpu

    if torch.cuda.is_available():
        return {"device": "cuda", "gpu": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
    cpu = cpu_info()
    return {"device": "cpu", "cpu": cpu, "summary": format_cpu(cpu)}


def stamp(result: dict, argv: list[str] | None = None) -> dict:
    """`result` with machine, commit, date (UTC) and the command line added (existing keys win)."""
    argv = sys.argv if argv is None else argv
    meta = {
        "machine": machine(),
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(shlex.quote(a) for a in argv),
    }
    return {**meta, **result}


def write_report(result: dict, path, argv: list[str] | None = None) -> dict:
    """Stamp `result` and write it atomically (a reader sees the old file or the new one)."""
    return write_json_atomic(stamp(result, argv), path)


def write_json_atomic(result: dict, path) -> dict:
    """Write `result` as indented JSON, its folder made, atomically (draftsmith/fileio.py): a
    reader (or a resumed run) sees the old file or the new one, never half of one."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, result)
    return result


__all__ = ["commit", "machine", "stamp", "write_json_atomic", "write_report"]
