"""The trainer and its parts: the accelerate loop (loop.py), atomic checkpoints (checkpoint.py), the
data order and learning-rate schedule (schedule.py), fault handling and the heartbeat (faults.py),
training curves (curves.py) and the FLOP model (flops.py)."""
