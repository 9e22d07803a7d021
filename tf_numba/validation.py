"""What validation watches during a pass: tf.c's tf_validation_time and tf_validation_sum.

Passes call `validation.time(stage)` after each stage and `validation.sum(label, array, count)`
where tf.c checks a sum. Generation passes NO_VALIDATION, which does nothing (tf.c's
`tf_validation 0`), so it never waits on the device.
"""
import time

import numpy as np
from numba import cuda

# tf_validation_time's fields, in its order
STAGES = ("embedding", "ln_1", "attn.c_attn", "attn.z", "attn.c_proj", "res_1", "ln_2",
          "mlp.c_fc", "mlp.gelu", "mlp.c_proj", "res_2", "ln_f", "unembedding")


def sequential_sum(x) -> float:
    """tf_validation_sum: a double accumulated element by element in memory order."""
    return float(np.cumsum(np.asarray(x, dtype=np.float64).reshape(-1))[-1])


class NoValidation:
    def start(self):
        pass

    def time(self, stage):
        pass

    def sum(self, label, array, count):
        pass

    def finish(self, name):
        pass


NO_VALIDATION = NoValidation()


class Validation:
    """Records every checkpoint sum in order and per-stage times (the device is synchronised
    at each stage boundary, as tf.c's timer reads the clock after each stage)."""

    def __init__(self):
        self.sums = []  # [(label, count, sum)]
        self.timings = []  # [(pass name, {stage: seconds}, total seconds)]

    def start(self):
        cuda.synchronize()
        self.t_last = time.perf_counter()
        self.stages = dict.fromkeys(STAGES, 0.0)

    def time(self, stage):
        cuda.synchronize()
        t = time.perf_counter()
        self.stages[stage] += t - self.t_last
        self.t_last = t

    def sum(self, label, array, count):
        host = array.reshape(-1)[:count].copy_to_host()
        self.sums.append((label, count, sequential_sum(host)))
        # The copy to the host is ours, not the C's: keep it out of the next stage's time.
        self.t_last = time.perf_counter()

    def finish(self, name):
        """Close a pass; its total is the sum of its stages (checkpoint copies excluded)."""
        cuda.synchronize()
        self.timings.append((name, self.stages, sum(self.stages.values())))


def dump_time(name, stages, total, out):
    """Print one pass's times (seconds) like tf.c's __builtin_dump_struct of tf_validation_time."""
    print(f"struct tf_validation_time ({name}, seconds) {{", file=out)
    group = ""
    for stage, seconds in stages.items():
        head, _, field = stage.rpartition(".")
        if head != group:
            if group:
                print("  }", file=out)
            if head:
                print(f"  struct {head} = {{", file=out)
            group = head
        print(f"{'    ' if head else '  '}double {field} = {seconds:.6f}", file=out)
    if group:
        print("  }", file=out)
    print(f"  double total = {total:.6f}", file=out)
    print("}", file=out)
