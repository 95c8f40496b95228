"""The runner side of protocol.py's JSON lines: the loop every script that runs inside an engine's
own Python speaks (vllm_runner.py, vllm_features.py, scripts/plain_vs_vllm_worker.py).

Standard library only, and never imported as part of draftsmith by a runner: a runner runs in
isolated mode (`python -I`), where neither draftsmith nor the runner's own folder is on sys.path
(nothing of draftsmith may shadow the engine's modules), so it loads this file by its path:

    serve = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner_protocol.py"))["serve"]
"""

import json
import os
import sys
import traceback


def protocol_stream():
    """Keep the real stdout for protocol lines; point fd 1 (the engine's logs, any child's prints) at stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def error(e) -> dict:
    """An exception as the one-line answer the host turns into a DraftsmithError (the traceback goes to the log)."""
    text = str(e).strip()
    return {"error": f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"}


def serve(start, answer) -> int:
    """Speak the protocol until `{"quit": true}` or the end of input. The first line is the config:
    `start(config)` -> (state, the ready message); every later line is a request: `answer(state,
    request)` -> its answer. A failure is answered with `error`; one in `start` ends the runner (1)."""
    out = protocol_stream()

    def send(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        state, ready = start(json.loads(sys.stdin.readline()))
        send(ready)
    except Exception as e:  # noqa: BLE001 - reported to the host as one line plus the log
        traceback.print_exc()
        send(error(e))
        return 1

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("quit"):
            break
        try:
            send(answer(state, request))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            send(error(e))
    return 0
