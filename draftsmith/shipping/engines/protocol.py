"""The host side of an engine runner: a process in the engine's own Python, spoken to in JSON lines.

The engines (vLLM, llama.cpp) pin their own torch, transformers and compilers; draftsmith never
imports them. A runner script (e.g. vllm_runner.py) runs under the engine's interpreter, reads one
JSON object per line on stdin and answers one per line on stdout; its logs go to a file. The
first line configures and loads the engine, every later line is one request (runner_protocol.py
is that loop, the runners' side). An answer carrying "error" becomes one DraftsmithError naming
the engine and its log file.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import subprocess
import threading
from collections import deque

from draftsmith.errors import DraftsmithError

LOAD_TIMEOUT_S = 900.0  # a first vLLM start compiles kernels and profiles memory: minutes on 2 cores
REQUEST_TIMEOUT_S = 1800.0


class RunnerProcess:
    """`argv` started with `config` as its first line; `request(obj)` -> the runner's answer."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        config: dict,
        log_path,
        env: dict | None = None,
        load_timeout_s: float = LOAD_TIMEOUT_S,
    ):
        self.name, self.log_path = name, pathlib.Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError as e:
            self._log.close()
            raise DraftsmithError(f"{name}: could not start {argv[0]}: {e.strerror}") from None
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready = self._call(config, load_timeout_s, "loading")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # end of output: the process exited

    def _call(self, obj: dict, timeout_s: float, what: str) -> dict:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._failure(f"exited before {what}") from None
        while True:
            try:
                line = self._lines.get(timeout=timeout_s)
            except queue.Empty:  # a runner that stopped answering is killed, not left behind
                self.proc.kill()
                self.proc.wait()
                raise self._failure(f"gave no answer within {timeout_s:.0f} s while {what}") from None
            if line is None:
                raise self._failure(f"exited while {what} (exit status {self.proc.wait()})")
            try:
                answer = json.loads(line)
            except json.JSONDecodeError:
                continue  # not a protocol line (a library printing to stdout): skip it
            if isinstance(answer, dict) and "error" in answer:
                raise self._failure(f"failed while {what}: {answer['error']}")
            return answer

    def request(self, obj: dict, timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
        return self._call(obj, timeout_s, "decoding")

    def _failure(self, what: str) -> DraftsmithError:
        if not self._log.closed:
            self._log.flush()
        tail = _last_lines(self.log_path, 3)
        return DraftsmithError(
            f"{self.name} {what}; its log: {self.log_path}" + (f" (last lines: {tail})" if tail else "")
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"quit": true}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _last_lines(path: pathlib.Path, n: int) -> str:
    try:
        with open(path, "rb") as f:
            lines = deque((raw.decode(errors="replace").strip() for raw in f), maxlen=50)
    except OSError:
        return ""
    return " | ".join([line for line in lines if line][-n:])[:400]
