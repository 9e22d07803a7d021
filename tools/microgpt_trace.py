"""Where microgpt_numba's reference engine and microgpt.cu part: both programs trace every device
write of chosen training steps, and the C's trace is replayed op by op on our kernels.

  patch      an instrumented copy of microgpt.cu with --trace FILE and --trace-steps A:B. The C's
             arithmetic is untouched: each launch_* (and zero_device, copy_device) is renamed
             orig_* and a wrapper under the old name calls it, then, in a traced step, waits and
             records it. Without --trace the program prints what the seed prints.
  ours       the same trace from the reference engine (same data, shuffle, init and schedule)
  replay     each op of a trace on our kernels from the trace's exact inputs, outputs compared bit
             for bit, then overwritten with the trace's so the next op starts from its state again
  fit        every cuBLAS call of a trace against candidate summation orders, in numpy
  compare    two traces: the first differing parameter element, printed loss and op
  forensics  all of it in one command on a GPU machine: DIR/report.md and four JSON files

Trace file, little-endian (the C writes it with fwrite, numpy reads it):
  header  b"MGTRACE1", int32 version (1), int32 vocab_size, int32 num_steps, int64 floats in the
          param, cache and scratch arenas (microgpt.cu's FloatArenas; microgpt_numba.arena's layout)
  records, each an int32 type, then:
    1 STATE     int32 step (0-based), float32 the step's mean loss (as printed), float32[param]: the
                param arena after the step's Adam update. Every step.
    2 SNAPSHOT  int32 step, float32[param], float32[cache], float32[scratch]: the arenas at the start
                of the step. Traced steps only, before their OPs.
    3 OP        char[24] name (the C function without launch_, NUL-padded; `memset` is one of
                zero_attention_accums' cudaMemsets), int32 n_ptrs, n_ints, n_floats, n_outs;
                n_ptrs x (int32 arena 0 param / 1 cache / 2 scratch, int64 float offset); int32[n_ints];
                float32[n_floats]; n_outs x (int32 arena, int64 offset, int64 count, float32[count]):
                what the op wrote, read back after it ran. The arguments of each kind are in the C's
                order (OPS). Every device write of a traced step is an OP, in program order, so the
                snapshot plus the outputs give every state of the step.
    0 END
fit's byte alignments are 4 * offset mod 16 and 128 (cudaMalloc'd arena bases are 256-byte aligned).
--out never names one of the command's inputs, and replaces a file (forensics: writes into a
folder that holds files) only with --force; missing folders above it are made.
Errors: one line `microgpt_trace.py: error: ...`; exit 2 for a usage error (an unknown, malformed
or meaningless option), 1 for a bad input file, an --out it may not write, or a failed build, run
or engine.
"""
import argparse
import json
import mmap
import re
import struct
import subprocess
import sys
import tempfile
import time
from bisect import bisect_right
from collections import Counter, defaultdict
from contextlib import contextmanager
from itertools import zip_longest
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cudakit.arrays import address, is_device_array  # noqa: E402
from cudakit.gpu import quiet, unavailable_reason  # noqa: E402
from microgpt_numba import launch as ours_launch  # noqa: E402
from microgpt_numba.arena import (KV_FIELDS, LAYER_CACHE_FIELDS, FloatArena, Model, Scratch, TrainCache,  # noqa: E402
                                  model_param_shapes, param_storage_count, position_cache_fields, scratch_fields,
                                  scratch_storage_count, train_cache_storage_count)
from microgpt_numba.constants import BLOCK_SIZE, N_EMBD, N_HEAD, N_LAYER  # noqa: E402
from microgpt_numba.dataset import InputError, load_dataset, read_input, tokenize_doc, trained_positions  # noqa: E402
from microgpt_numba.glibc_rand import GlibcRand  # noqa: E402
from tool_cli import (OneLineParser, UsageError, made, not_a_file, path_arg, positive_int, same_paths,  # noqa: E402
                      unwritable)

PROG = "microgpt_trace.py"
MAGIC, VERSION = b"MGTRACE1", 1
END, STATE, SNAPSHOT, OP = 0, 1, 2, 3
ARENAS = ("param", "cache", "scratch")
SEED = 42  # microgpt.cu's srand(42)
NVCC = ["nvcc", "-O3", "-arch=sm_90"]  # then -o BIN FILE.cu -lcublas, as the anchor logs were built

# C name: "pointers | ints | floats", each kind in the C's argument order. A pointer is name[extent],
# the extent an expression valid in C and here; '!' marks what the op writes (its OP's outputs).
OPS = {
    "vec_add": "a[n] b[n] out[n]! | n |",
    "vec_add_inplace": "dst[n]! src[n] | n |",
    "relu_forward": "x[n] y[n]! | n |",
    "relu_backward": "x[n] grad_y[n] grad_x[n]! | n |",
    "matvec": "w[rows*cols] x[cols] y[rows]! | rows cols |",
    "linear_backward": "w[rows*cols] x[cols] grad_out[rows] grad_w[rows*cols]! grad_x[cols]! | rows cols |",
    "rmsnorm_forward": "x[n] y[n]! | n |",
    "rmsnorm_backward": "x[n] grad_y[n] grad_x[n]! | n |",
    "scaled_softmax": "logits[n] probs[n]! | n | scale",
    "cross_entropy_backward": "probs[n] grad_logits[n]! | target_id n | loss_scale",
    "attention_forward": "q[N_EMBD] keys[BLOCK_SIZE*N_EMBD] values[BLOCK_SIZE*N_EMBD] attn_logits[N_HEAD*BLOCK_SIZE]! "
                         "attn_weights[N_HEAD*BLOCK_SIZE]! attn_out[N_EMBD]! | pos_id |",
    "attention_backward": "q[N_EMBD] keys[BLOCK_SIZE*N_EMBD] values[BLOCK_SIZE*N_EMBD] attn_weights[N_HEAD*BLOCK_SIZE] "
                          "grad_attn_out[N_EMBD] grad_q[N_EMBD]! grad_keys[BLOCK_SIZE*N_EMBD]! "
                          "grad_values[BLOCK_SIZE*N_EMBD]! | pos_id |",
    "adam_update": "data[n]! grad[n]! m[n]! v[n]! | n | lr_t beta1_corr beta2_corr",
    "row_add": "row_grad[n]! grad[n] | n |",
    "zero_device": "x[n]! | n |",
    "copy_device": "dst[n]! src[n] | n |",
    "memset": "dst[n]! | n |",  # n = bytes / 4
}
ELEMENTWISE = {"vec_add", "vec_add_inplace", "relu_forward", "relu_backward", "cross_entropy_backward", "adam_update",
               "row_add", "zero_device", "copy_device", "memset"}
CONSTANTS = {"N_EMBD": N_EMBD, "BLOCK_SIZE": BLOCK_SIZE, "N_HEAD": N_HEAD}


class RunError(Exception):
    """A build, a program or an engine failed: exit 1."""


class DataError(Exception):
    """A bad input file (trace, seed, corpus), or an --out that would replace a file or cannot be
    written: exit 1, as the README's rule for every tool has it."""


class Spec(NamedTuple):
    ptrs: tuple
    extents: tuple
    written: tuple
    ints: tuple
    floats: tuple


def _spec(text):
    ptrs, ints, floats = (part.split() for part in text.split("|"))
    args = [re.fullmatch(r"(\w+)\[([\w*]+)\](!?)", p).groups() for p in ptrs]
    return Spec(*zip(*[(name, size, mark == "!") for name, size, mark in args]), tuple(ints), tuple(floats))


SPECS = {name: _spec(text) for name, text in OPS.items()}


def extent(expr, ints):
    return int(eval(expr, {"__builtins__": {}}, {**CONSTANTS, **ints}))


def hexf(value):
    return float(np.float32(value)).hex()


def bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


# ---- trace files

class Out(NamedTuple):
    arena: int
    offset: int
    values: np.ndarray
    at: int  # byte position of the values in the file


class Op(NamedTuple):
    index: int  # in the trace, from 0
    step: int
    name: str
    ptrs: list  # [(arena, offset)], SPECS order
    ints: dict
    floats: dict
    outs: list  # [Out], the written pointers in SPECS order


class State(NamedTuple):
    loss: np.float32
    param: np.ndarray
    at: int  # byte position of param


class Trace:
    """A trace file, mapped: states[step], snapshots[step] (three arrays), ops[step] (list of Op)."""

    def __init__(self, path):
        self.path, self.pos = Path(path), 0
        kind = not_a_file(self.path)
        if kind:  # mmap needs a regular file; a FIFO would block the open
            raise DataError(f"cannot read trace {path}: it is {kind}; pass a file written by --trace or `ours`")
        try:
            with open(self.path, "rb") as f:
                self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.path.stat().st_size else b""
        except OSError as exc:
            raise DataError(f"cannot read trace {path} ({exc.strerror}); pass a file written by --trace or `ours`")
        if self._take(8) != MAGIC:
            raise DataError(f"{path} is not a microgpt trace (no {MAGIC.decode()} magic); pass a file written by "
                             "--trace or `ours`")
        version, self.vocab_size, self.num_steps, *counts = self._unpack("iiiqqq")
        if version != VERSION:
            raise DataError(f"{path} is trace version {version}, this tool reads {VERSION}; write it again")
        self.counts = tuple(counts)
        self.states, self.snapshots, self.ops = {}, {}, {}
        self._records()

    def _fail(self, what):
        raise DataError(f"{self.path} is truncated or corrupt ({what} at byte {self.pos}); "
                         "rerun the program that wrote it")

    def _take(self, size):
        if size < 0 or self.pos + size > len(self.buf):
            self._fail("the file ends inside a record")
        self.pos += size
        return self.buf[self.pos - size:self.pos]

    def _unpack(self, fmt):
        return struct.unpack("<" + fmt, self._take(struct.calcsize("<" + fmt)))

    def _floats(self, count):
        self._take(4 * count)
        return np.frombuffer(self.buf, "<f4", count, self.pos - 4 * count)

    def _location(self, fmt="iq"):
        arena, offset, *count = self._unpack(fmt)
        if not (0 <= arena < 3 and 0 <= offset and offset + (count or [1])[0] <= self.counts[arena]):
            self._fail(f"arena {arena} offset {offset} count {count} outside the arenas")
        return arena, offset, *count

    def _records(self):
        step, index = None, 0
        while True:
            (kind,) = self._unpack("i")
            if kind == END:
                return
            if kind == STATE:
                s, loss = self._unpack("if")
                self.states[s] = State(np.float32(loss), self._floats(self.counts[0]), self.pos - 4 * self.counts[0])
                step = None
            elif kind == SNAPSHOT:
                (step,) = self._unpack("i")
                self.snapshots[step] = [self._floats(count) for count in self.counts]
                self.ops[step] = []
            elif kind == OP and step is not None:
                self.ops[step].append(self._op(index, step))
                index += 1
            else:
                self._fail(f"record type {kind}")

    def _op(self, index, step):
        name = self._take(24).split(b"\0", 1)[0].decode("ascii", "replace")
        spec, counts = SPECS.get(name), self._unpack("iiii")
        if spec is None or counts != (len(spec.ptrs), len(spec.ints), len(spec.floats), sum(spec.written)):
            self._fail(f"op {name!r} with {counts} arguments")
        ptrs = [self._location() for _ in spec.ptrs]
        ints = dict(zip(spec.ints, (int(i) for i in self._unpack("i" * len(spec.ints)))))
        floats = dict(zip(spec.floats, self._floats(len(spec.floats))))
        outs = []
        for _ in range(counts[3]):
            arena, offset, count = self._location("iqq")
            outs.append(Out(arena, offset, self._floats(count), self.pos - 4 * count))
        return Op(index, step, name, ptrs, ints, floats, outs)


class TraceWriter:
    def __init__(self, path, vocab_size, num_steps, counts):
        self.f = open(path, "wb")
        self.f.write(MAGIC + struct.pack("<iiiqqq", VERSION, vocab_size, num_steps, *counts))

    def state(self, step, loss, param):
        self.f.write(struct.pack("<iif", STATE, step, loss) + param.astype("<f4").tobytes())

    def snapshot(self, step, arenas):
        self.f.write(struct.pack("<ii", SNAPSHOT, step) + b"".join(a.astype("<f4").tobytes() for a in arenas))

    def op(self, name, ptrs, ints, floats, outs):
        parts = [struct.pack("<i24siiii", OP, name.encode(), len(ptrs), len(ints), len(floats), len(outs))]
        parts += [struct.pack("<iq", arena, offset) for arena, offset in ptrs]
        parts += [struct.pack(f"<{len(ints)}i", *ints), np.array(floats, "<f4").tobytes()]
        parts += [struct.pack("<iqq", arena, offset, len(values)) + values.astype("<f4").tobytes()
                  for arena, offset, values in outs]
        self.f.write(b"".join(parts))

    def close(self):
        self.f.write(struct.pack("<i", END))
        self.f.close()


class Layout:
    """Names for arena offsets, in the C's carving order (microgpt_numba.arena's field tables)."""

    def __init__(self, trace):
        self.fields = ([], [], [])  # per arena: (offset, label, columns)
        ends = [0, 0, 0]

        def add(arena, label, count, cols=1):
            self.fields[arena].append((ends[arena], label, cols))
            ends[arena] += count

        def layered(field, layer):
            return field if N_LAYER == 1 else f"layers[{layer}].{field}"

        for name, rows, cols in model_param_shapes(trace.vocab_size):
            for field in ("data", "grad", "m", "v"):
                add(0, f"{name}.{field}", rows * cols, cols)
        for layer in range(N_LAYER):
            for field in KV_FIELDS:
                add(1, layered(field, layer), BLOCK_SIZE * N_EMBD, N_EMBD)
        for pos in range(BLOCK_SIZE):
            for field, count in position_cache_fields(trace.vocab_size):
                add(1, f"pos[{pos}].{field}", count)
            for layer in range(N_LAYER):
                for field, count in LAYER_CACHE_FIELDS:  # attention rows are per head
                    add(1, f"pos[{pos}].{layered(field, layer)}", count,
                        BLOCK_SIZE if field in ("attn_logits", "attn_weights") else 1)
        for field, count in scratch_fields(trace.vocab_size):
            add(2, field, count)
        if tuple(ends) != trace.counts:
            raise DataError(f"{trace.path}'s arenas hold {trace.counts} floats, microgpt_numba.arena's layout "
                             f"{tuple(ends)}; the trace is from another model")
        self.starts = [[f[0] for f in fields] for fields in self.fields]

    def _field(self, arena, offset):
        return self.fields[arena][bisect_right(self.starts[arena], offset) - 1]

    def label(self, arena, offset):
        start, name, cols = self._field(arena, offset)
        i = offset - start
        return f"{name}[{i // cols},{i % cols}]" if cols > 1 else f"{name}[{i}]"

    def position(self, arena, offset):
        m = re.match(r"pos\[(\d+)\]", self._field(arena, offset)[1]) if arena == 1 else None
        return int(m[1]) if m else None


def walk(trace):
    """(step, op, state) for every OP of every traced step, state being the three arenas just before
    it (the snapshot with every earlier output of the step written in), then (step, None, state) at
    the step's end. The state arrays change in place after each yield."""
    for step in sorted(trace.snapshots):
        state = [np.array(a) for a in trace.snapshots[step]]
        for op in trace.ops[step]:
            yield step, op, state
            for out in op.outs:
                state[out.arena][out.offset:out.offset + len(out.values)] = out.values
        yield step, None, state


def region(state, op, name):
    """The memory op's pointer `name` covers, in state."""
    spec = SPECS[op.name]
    i = spec.ptrs.index(name)
    arena, offset = op.ptrs[i]
    return state[arena][offset:offset + extent(spec.extents[i], op.ints)]


# ---- patch: the instrumented microgpt.cu

TRACE_C = r"""
/* ---- microgpt_trace (tools/microgpt_trace.py, whose docstring has the format): --trace FILE writes
   a trace; --trace-steps A:B adds the SNAPSHOT and OP records of steps A..B-1. */
#include <stdint.h>

static FILE *g_trace = NULL;
static int g_trace_from = 0, g_trace_to = 0, g_tracing = 0;
static uintptr_t g_trace_base[3];
static size_t g_trace_count[3];
static float *g_trace_host = NULL; /* room for the largest arena */

static void trace_fail(const char *what) {
    fprintf(stderr, "trace: %s\n", what);
    exit(1);
}
static void trace_write(const void *data, size_t size) {
    if (fwrite(data, 1, size, g_trace) != size) trace_fail("write failed");
}
static void trace_int(int value) { trace_write(&value, sizeof value); }
static void trace_i64(long long value) { trace_write(&value, sizeof value); }
static void trace_float(float value) { trace_write(&value, sizeof value); }

static void trace_device(const float *device, size_t n) {
    CHECK_CUDA(cudaMemcpy(g_trace_host, device, n * sizeof(float), cudaMemcpyDeviceToHost));
    trace_write(g_trace_host, n * sizeof(float));
}

static void trace_ptr(const float *p) { /* as arena id and float offset */
    uintptr_t at = (uintptr_t)p;
    int a = 0;
    while (a < 3 && !(at >= g_trace_base[a] && at < g_trace_base[a] + g_trace_count[a] * sizeof(float))) ++a;
    if (a == 3) trace_fail("a pointer outside the arenas");
    trace_int(a);
    trace_i64((long long)((at - g_trace_base[a]) / sizeof(float)));
}

static void trace_out(const float *p, long long n) {
    trace_ptr(p);
    trace_i64(n);
    trace_device(p, (size_t)n);
}

/* Takes --trace FILE and --trace-steps A:B out of argv before the seed's parse_options reads it. */
static void trace_options(int *argc, char **argv) {
    int kept = 1;
    for (int i = 1; i < *argc; ++i) {
        char extra;
        if (strcmp(argv[i], "--trace") == 0 && i + 1 < *argc) {
            if ((g_trace = fopen(argv[++i], "wb")) == NULL) trace_fail("cannot open the --trace file");
        } else if (strcmp(argv[i], "--trace-steps") == 0 && i + 1 < *argc) {
            if (sscanf(argv[++i], "%d:%d%c", &g_trace_from, &g_trace_to, &extra) != 2 || g_trace_from < 0 ||
                g_trace_to < g_trace_from) trace_fail("--trace-steps must be A:B with 0 <= A <= B");
        } else {
            argv[kept++] = argv[i];
        }
    }
    *argc = kept;
}

static void trace_start(int vocab_size, int num_steps, const FloatArena *param, const FloatArena *cache,
                        const FloatArena *scratch) {
    const FloatArena *arenas[3] = {param, cache, scratch};
    size_t largest = 0;
    if (g_trace == NULL) return;
    trace_write("MGTRACE1", 8);
    trace_int(1);
    trace_int(vocab_size);
    trace_int(num_steps);
    for (int a = 0; a < 3; ++a) {
        g_trace_base[a] = (uintptr_t)arenas[a]->base;
        g_trace_count[a] = arenas[a]->count;
        largest = arenas[a]->count > largest ? arenas[a]->count : largest;
        trace_i64((long long)arenas[a]->count);
    }
    g_trace_host = (float *)xmalloc(largest * sizeof(float));
}

/* SNAPSHOT before a traced step's forward, STATE after every step's Adam update, END before sampling. */
static void trace_step_start(int step) {
    g_tracing = g_trace != NULL && step >= g_trace_from && step < g_trace_to;
    if (!g_tracing) return;
    CHECK_CUDA(cudaDeviceSynchronize());
    trace_int(2);
    trace_int(step);
    for (int a = 0; a < 3; ++a) trace_device((const float *)g_trace_base[a], g_trace_count[a]);
}

static void trace_step_end(int step, float loss) {
    g_tracing = 0;
    if (g_trace == NULL) return;
    trace_int(1);
    trace_int(step);
    trace_float(loss);
    trace_device((const float *)g_trace_base[0], g_trace_count[0]);
}

static void trace_finish(void) {
    if (g_trace == NULL) return;
    trace_int(0);
    if (fclose(g_trace) != 0) trace_fail("write failed");
    g_trace = NULL;
}

/* After an op was launched: waits for it and begins its OP record; 0 (nothing written) outside traced steps. */
static int trace_op(const char *name, int n_ptrs, int n_ints, int n_floats, int n_outs) {
    char padded[24] = {0};
    if (!g_tracing) return 0;
    CHECK_CUDA(cudaDeviceSynchronize());
    strncpy(padded, name, sizeof padded - 1);
    trace_int(3);
    trace_write(padded, sizeof padded);
    trace_int(n_ptrs);
    trace_int(n_ints);
    trace_int(n_floats);
    trace_int(n_outs);
    return 1;
}

static void trace_memset(float *dst, size_t bytes) { /* zero_attention_accums' cudaMemset */
    CHECK_CUDA(cudaMemset(dst, 0, bytes));
    if (!trace_op("memset", 1, 1, 0, 1)) return;
    trace_ptr(dst);
    trace_int((int)(bytes / sizeof(float)));
    trace_out(dst, (long long)(bytes / sizeof(float)));
}

/* Each wrapper: the renamed original, then, in a traced step, its OP record. */
"""


def c_params(source, fn, spec, seed):
    """fn's parameters in the seed ("const float *a", ...), checked against SPECS: the wrappers rely on them."""
    found = re.findall(rf"static void {fn}\(([^)]*)\)\s*\{{", source)
    params = [" ".join(p.split()) for p in found[0].split(",")] if len(found) == 1 else []
    parsed = [re.fullmatch(r"(?:const )?(float|int) (\*?)(\w+)", p) for p in params]
    kinds = [tuple(m[3] for m in parsed if m and ("ptr" if m[2] else m[1]) == kind) for kind in ("ptr", "int", "float")]
    if None in parsed or kinds != [spec.ptrs, spec.ints, spec.floats]:
        raise DataError(f"{seed} does not look like microgpt.cu: {fn} takes ({', '.join(params)}), expected "
                         f"pointers {spec.ptrs}, ints {spec.ints}, floats {spec.floats}; pass the seed to --seed")
    return params


def c_wrapper(name, fn, params):
    """fn under its own name: the renamed original, then the OP record (arguments by kind, outputs)."""
    spec = SPECS[name]
    names = [p.split("*")[-1].split()[-1] for p in params]
    return "\n".join([
        f"static void {fn}({', '.join(params)}) {{", f"    orig_{fn}({', '.join(names)});",
        f'    if (!trace_op("{name}", {len(spec.ptrs)}, {len(spec.ints)}, {len(spec.floats)}, {sum(spec.written)})) '
        "return;",
        *[f"    trace_ptr({p});" for p in spec.ptrs], *[f"    trace_int({i});" for i in spec.ints],
        *[f"    trace_float({f});" for f in spec.floats],
        *[f"    trace_out({p}, (long long)({e}));" for p, e, w in zip(spec.ptrs, spec.extents, spec.written) if w],
        "}", ""])


def patch(source, seed="microgpt.cu"):
    def checked(pattern, replacement, times, text):
        text, n = re.subn(pattern, replacement, text)
        if n != times:
            raise DataError(f"{seed} does not look like microgpt.cu: /{pattern}/ matched {n} times, expected "
                             f"{times}; pass the seed microgpt.cu to --seed")
        return text

    wrappers = [TRACE_C]
    for name in SPECS:
        if name != "memset":
            fn = c_function(name)
            params = c_params(source, fn, SPECS[name], seed)
            source = checked(rf"static void {fn}(?=\([^)]*\)\s*\{{)", f"static void orig_{fn}", 1, source)
            wrappers.append(c_wrapper(name, fn, params))
    for pattern, replacement, times in [
        (r"CHECK_CUDA\(cudaMemset\((cache->grad_(?:keys|values)\[layer\]), 0, ([^;]*)\)\);", r"trace_memset(\1, \2);",
         2),
        (r"(?=static int tokenize_doc\()", lambda _: "\n".join(wrappers) + "\n", 1),  # after the launch_* and helpers
        (r"( *)(Options opts = parse_options\(argc, argv\);)", r"\1trace_options(&argc, argv);\n\1\2", 1),
        (r"( *)(init_scratch\(&scratch, dataset\.vocab_size, &scratch_arena\);)",
         r"\1\2\n\1trace_start(dataset.vocab_size, opts.num_steps, &param_arena, &cache_arena, &scratch_arena);", 1),
        (r"( *)(float loss = forward_sequence\(&model, &cache, &dataset, tokens, n\);)",
         r"\1trace_step_start(step);\n\1\2", 1),
        (r"( *)(adam_update_model\(&model, step, opts\.num_steps\);)", r"\1\2\n\1trace_step_end(step, loss);", 1),
        (r"( *)(generate_samples\(&model, &cache, &dataset, opts\.num_samples, opts\.temperature\);)",
         r"\1trace_finish();\n\1\2", 1),
    ]:
        source = checked(pattern, replacement, times, source)
    return source


def c_function(name):
    return name if name in ("zero_device", "copy_device") else "launch_" + name


def read_seed(path):
    kind = not_a_file(path)
    if kind:  # a FIFO would block the read, a device never end it
        raise DataError(f"cannot read the seed {path}: it is {kind}; pass microgpt.cu to --seed")
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the seed {path} ({getattr(exc, 'strerror', exc)}); pass microgpt.cu to --seed")


# ---- ours: the reference engine's trace

class Recorder:
    """Stands in for the launches microgpt_numba.model calls: each runs the real launch and, during
    a traced step, waits for it and writes the C's OP for it (the C's name and arguments)."""

    def __init__(self, writer, arenas):
        self.writer, self.bases = writer, [a.base for a in arenas]
        self.addresses = [address(a.base) for a in arenas]
        self.step = self.tokens = self.schedule = None
        self.in_zero_attention_accums = False

    def locate(self, view):
        for arena, (base, start) in enumerate(zip(self.bases, self.addresses)):
            if 0 <= address(view) - start < 4 * base.size:
                return arena, (address(view) - start) // 4
        return None

    def token_row(self, table, pos_id):
        arena, offset = self.locate(table)
        return arena, offset + self.tokens[pos_id] * N_EMBD

    def describe(self, launch, args):
        """The C's (name, pointers, ints, floats) for one of our launches; None where the C writes nothing."""
        loc = self.locate
        if launch == "launch_target_prob" or (launch == "zero_device" and loc(args[0]) is None):
            return None  # the C copies the probability to the host; StepValues is outside the arenas
        if launch == "zero_device":
            return "memset" if self.in_zero_attention_accums else "zero_device", [loc(args[0])], [args[0].size], []
        if launch == "copy_device":
            return "copy_device", [loc(args[0]), loc(args[1])], [args[0].size], []
        if launch == "launch_token_embed":  # the C's vec_add of the token's wte row and the position's wpe row
            wte, pos_emb, _, pos_id, out, n = args
            return "vec_add", [self.token_row(wte, pos_id), loc(pos_emb), loc(out)], [n], []
        if launch == "launch_token_row_add":
            wte_grad, _, pos_id, grad, n = args
            return "row_add", [self.token_row(wte_grad, pos_id), loc(grad)], [n], []
        if launch == "launch_cross_entropy_backward":
            probs, grad_logits, _, pos_id, loss_scale, n = args
            return "cross_entropy_backward", [loc(probs), loc(grad_logits)], [self.tokens[pos_id + 1], n], [loss_scale]
        if launch == "launch_adam_update":
            return "adam_update", [loc(a) for a in args[:4]], [args[5]], list(self.schedule)
        # the others take the C's arguments: pointers, ints and floats each in the C's order
        return (launch.removeprefix("launch_"), [loc(a) for a in args if is_device_array(a)],
                [a for a in args if isinstance(a, (int, np.integer))],
                [a for a in args if isinstance(a, (float, np.floating))])

    def record(self, name, ptrs, ints, floats):
        from numba import cuda

        spec = SPECS.get(name)
        if spec is None or None in ptrs or (len(ptrs), len(ints), len(floats)) != (len(spec.ptrs), len(spec.ints),
                                                                                   len(spec.floats)):
            raise RunError(f"microgpt_numba.model launched {name} with {ptrs}, {ints}, {floats}, which {PROG} does "
                           "not map to a C operation; extend Recorder.describe")
        cuda.synchronize()
        named = dict(zip(spec.ints, ints))
        outs = [(arena, offset, self.bases[arena][offset:offset + extent(size, named)].copy_to_host())
                for (arena, offset), size, written in zip(ptrs, spec.extents, spec.written) if written]
        self.writer.op(name, ptrs, [int(i) for i in ints], floats, outs)

    def wrap(self, launch, fn):
        def traced(*args):
            fn(*args)
            if self.step is not None and (described := self.describe(launch, args)) is not None:
                self.record(*described)
        return traced


@contextmanager
def recording(recorder):
    """microgpt_numba.model's launches replaced by the recorder's for the duration."""
    from microgpt_numba import model as engine

    names = [n for n in vars(engine) if n.startswith("launch_") or n in ("zero_device", "copy_device")]
    saved = {n: getattr(engine, n) for n in names + ["zero_attention_accums"]}

    def zero_attention_accums(cache):  # the C's raw cudaMemsets, not zero_device
        recorder.in_zero_attention_accums = True
        try:
            saved["zero_attention_accums"](cache)
        finally:
            recorder.in_zero_attention_accums = False

    for n in names:
        setattr(engine, n, recorder.wrap(n, saved[n]))
    engine.zero_attention_accums = zero_attention_accums
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(engine, n, fn)


def require_kernels():
    reason = unavailable_reason()
    if reason is not None:
        raise RunError(f"{reason}; run on a GPU machine, or set NUMBA_ENABLE_CUDASIM=1 for the (slow) simulator")
    quiet()


def run_ours(input_path, num_steps, traced, out_path):
    """cli.py's reference loop with a wait and a param-arena copy per step; traced steps run eagerly,
    each launch waited for, the others replay their CUDA graphs."""
    from microgpt_numba.graphs import StepGraphs
    from microgpt_numba.model import StepTable, StepValues, adam_schedule, sequence_loss, train_step

    require_kernels()
    gen = GlibcRand(SEED)
    try:
        dataset = load_dataset(read_input(input_path), gen)
    except InputError as exc:
        raise DataError(str(exc)) from None
    v = dataset.vocab_size
    arenas = [FloatArena(param_storage_count(v)), FloatArena(train_cache_storage_count(v)),
              FloatArena(scratch_storage_count(v))]
    model, cache, scratch = Model(arenas[0], v, gen), TrainCache(arenas[1], v), Scratch(arenas[2], v)
    doc_tokens = [tokenize_doc(dataset, doc) for doc in dataset.docs[:num_steps]]
    token_lists = [doc_tokens[step % len(doc_tokens)] for step in range(num_steps)]
    sv, graphs, table = StepValues(), StepGraphs(num_steps), StepTable(token_lists, num_steps)
    writer = TraceWriter(made(out_path), v, num_steps, [a.count for a in arenas])
    recorder = Recorder(writer, arenas)
    with recording(recorder):
        for step, tokens in enumerate(token_lists):
            n = trained_positions(len(tokens))

            def launches():
                train_step(model, cache, scratch, dataset, sv, n)

            if step in traced:
                writer.snapshot(step, [a.base.copy_to_host() for a in arenas])
                recorder.step, recorder.tokens, recorder.schedule = step, tokens, adam_schedule(step, num_steps)
                sv.set_step(table, step)
                launches()
                recorder.step = None
                loss = sv.mean_loss(n)
            else:
                graphs.step(sv, table, step, n, launches)
                graphs.wait()
                loss = sequence_loss(graphs.target_probs[step], n)
            writer.state(step, loss, arenas[0].base.copy_to_host())
    writer.close()


# ---- replay: the C's ops on our kernels

def launch_ours(op, views):
    """Our launch for one C op, on device views at its recorded pointers."""
    from numba import cuda

    p, i, f = [views[name] for name in SPECS[op.name].ptrs], op.ints, op.floats
    if op.name == "cross_entropy_backward":  # ours reads the target as tokens[pos_id + 1]
        tokens = cuda.to_device(np.array([0, i["target_id"]], dtype=np.int32))
        ours_launch.launch_cross_entropy_backward(*p, tokens, 0, f["loss_scale"], i["n"])
    elif op.name == "adam_update":  # ours reads (lr_t, beta1_corr, beta2_corr) from device memory
        ours_launch.launch_adam_update(*p, cuda.to_device(np.array(list(f.values()), dtype=np.float32)), i["n"])
    elif op.name in ("zero_device", "memset"):
        ours_launch.zero_device(*p)
    elif op.name == "copy_device":
        ours_launch.copy_device(*p)
    else:  # the C's arguments: pointers, floats, ints
        getattr(ours_launch, "launch_" + op.name)(*p, *f.values(), *i.values())


def related(op, out_name, index):
    """{pointer: indices} of the inputs that element `index` of output out_name reads (None: all)."""
    spec, rows, cols = SPECS[op.name], op.ints.get("rows"), op.ints.get("cols")
    if op.name in ELEMENTWISE:
        return {p: [index] for p in spec.ptrs}
    if op.name.startswith("attention"):  # key and value rows 0..pos_id
        used = list(range((op.ints["pos_id"] + 1) * N_EMBD))
        return {p: used if e == "BLOCK_SIZE*N_EMBD" else None for p, e in zip(spec.ptrs, spec.extents)}
    if op.name == "matvec":
        return {"w": list(range(index * cols, (index + 1) * cols)), "x": None}
    if op.name == "linear_backward" and out_name == "grad_x":
        return {"w": list(range(index, rows * cols, cols)), "grad_out": None, "grad_x": [index]}
    if op.name == "linear_backward":
        return {"x": [index % cols], "grad_out": [index // cols], "grad_w": [index]}
    return {p: None for p in spec.ptrs}


def example(op, position, layout, state, got, diffs):
    """One mismatching call, small enough to read: its inputs and both outputs as hex floats."""
    spec = SPECS[op.name]
    out_names = [p for p, w in zip(spec.ptrs, spec.written) if w]
    inputs = {}
    for name, indices in related(op, out_names[diffs[0][0]], diffs[0][1]).items():
        values = region(state, op, name)
        inputs[name] = [hexf(x) for x in values] if indices is None else {j: hexf(values[j]) for j in indices}
    return {"op_index": op.index, "step": op.step, "position": position,
            "pointers": {n: layout.label(*ptr) for n, ptr in zip(spec.ptrs, op.ptrs)}, "ints": op.ints,
            "floats": {k: hexf(x) for k, x in op.floats.items()}, "inputs_before": inputs,
            "mismatched_elements": len(diffs),
            "mismatches": [{"element": layout.label(op.outs[o].arena, op.outs[o].offset + j), "ours": hexf(got[o][j]),
                            "c": hexf(op.outs[o].values[j])} for o, j in diffs[:16]]}


def replay_op(op, device, state):
    """Runs op on the device arenas and puts the trace's state after it back there.
    Returns our outputs, the mismatching (output, index) pairs and the elements written elsewhere."""
    from numba import cuda

    spec = SPECS[op.name]
    launch_ours(op, {name: device[arena][offset:offset + extent(size, op.ints)]
                     for name, (arena, offset), size in zip(spec.ptrs, op.ptrs, spec.extents)})
    cuda.synchronize()
    arenas = [d.copy_to_host() for d in device]
    got = [arenas[out.arena][out.offset:out.offset + len(out.values)] for out in op.outs]
    diffs = [(o, int(j)) for o, out in enumerate(op.outs) for j in np.flatnonzero(bits(got[o]) != bits(out.values))]
    stray = 0
    for a in range(3):
        expected, written = state[a].copy(), np.zeros(len(state[a]), dtype=bool)
        for out in op.outs:
            if out.arena == a:
                expected[out.offset:out.offset + len(out.values)] = out.values
                written[out.offset:out.offset + len(out.values)] = True
        differ = bits(arenas[a]) != bits(expected)
        stray += int(np.count_nonzero(differ & ~written))
        if differ.any():
            device[a].copy_to_device(expected)
    return got, diffs, stray


def replay(trace, only=None, examples_per_class=3):
    """Every op of the trace (or those named in only) on our kernels, each from the trace's state before it."""
    from numba import cuda

    require_kernels()
    layout = Layout(trace)
    classes, steps, first, stray = {}, [], None, 0
    device, stale, position = None, False, None
    for step, op, state in walk(trace):
        if op is None:
            steps.append(step_check(trace, step, state, layout))
            device = None
            continue
        cache_pos = [p for p in (layout.position(*ptr) for ptr in op.ptrs) if p is not None]
        position = None if op.name == "adam_update" else (cache_pos[0] if cache_pos else position)
        if only is not None and op.name not in only:
            stale = True  # the device arenas lack this op's outputs
            continue
        if device is None:
            device = [cuda.to_device(a) for a in state]
        elif stale:
            for d, a in zip(device, state):
                d.copy_to_device(a)
        stale = False
        got, diffs, op_stray = replay_op(op, device, state)
        stray += op_stray
        shape = [v for k, v in op.ints.items() if k != "target_id"]
        c = classes.setdefault((op.name, tuple(shape)), {"op": op.name, "shape": shape, "calls": 0, "elements": 0,
                                                         "mismatched_calls": 0, "mismatched_elements": 0,
                                                         "examples": []})
        c["calls"] += 1
        c["elements"] += sum(len(out.values) for out in op.outs)
        if diffs:
            c["mismatched_calls"] += 1
            c["mismatched_elements"] += len(diffs)
            if first is None or len(c["examples"]) < examples_per_class:
                shown = example(op, position, layout, state, got, diffs)
                first = first or shown
                c["examples"] += [shown][:examples_per_class - len(c["examples"])]
    calls = list(classes.values())
    return {"trace": str(trace.path), "only": sorted(only) if only else None, "ops": sum(c["calls"] for c in calls),
            "mismatched_ops": sum(c["mismatched_calls"] for c in calls), "stray_writes": stray,
            "first_mismatch": first, "steps": steps, "by_op": calls}


def step_check(trace, step, state, layout):
    """Whether the snapshot plus the recorded outputs give the step's STATE (and the next snapshot):
    if not, the trace misses a write."""
    check = {"step": step, "ops": len(trace.ops[step]), "unrecorded_writes": []}
    later = [(0, trace.states[step].param)] if step in trace.states else []
    later += list(enumerate(trace.snapshots.get(step + 1, [])))
    for arena, values in later:
        differ = np.flatnonzero(bits(state[arena]) != bits(values))
        if len(differ):
            check["unrecorded_writes"].append({"arena": ARENAS[arena], "elements": len(differ),
                                               "first": layout.label(arena, int(differ[0]))})
    return {**check, "complete": not check["unrecorded_writes"]}


# ---- fit: cuBLAS's summation order

def fma32(a, b, c):
    """Correctly rounded float32 fma, elementwise: a float32 product is exact in float64, so only a
    float64 sum that lands exactly on a float32 tie can round wrong; TwoSum's error term decides it."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c = np.asarray(c, dtype=np.float64)
    s = p + c
    r = s.astype(np.float32)
    d = s - r
    tie = (d != 0) & (np.abs(d) == np.ldexp(1.0, np.maximum(np.frexp(s)[1] - 25, -150)))
    if tie.any():
        t = s - p
        err = (p - (s - t)) + (c - t)
        r = np.where(tie & (err != 0) & ((err > 0) == (d > 0)), (s + d).astype(np.float32), r)
    return r


def partial_sums(a, b, parts, chunked, fused):
    """(N, parts) sums of a * b over K (a, b: (N, K)): partial p takes k = p mod parts (strided) or
    the p-th run of ceil(K / parts) terms (chunked), each in ascending k; padding adds exact zeros."""
    n, k = a.shape
    length = -(-k // parts)
    a, b = (np.pad(x, ((0, 0), (0, parts * length - k))) for x in (a, b))
    shape = (n, parts, length) if chunked else (n, length, parts)
    a, b = a.reshape(shape), b.reshape(shape)
    acc = np.zeros((n, parts), dtype=np.float32)
    for j in range(length):
        x, y = (a[:, :, j], b[:, :, j]) if chunked else (a[:, j, :], b[:, j, :])
        acc = fma32(x, y, acc) if fused else acc + x * y
    return acc


def candidates(a, b, init):
    """{order: (N,) float32} for each candidate summation order (sequential ascending fma first)."""
    found = {}
    for tag, fused in (("fma", True), ("mul", False)):
        found[f"seq_asc_{tag}"] = partial_sums(a, b, 1, False, fused)[:, 0]
        found[f"seq_desc_{tag}"] = partial_sums(a[:, ::-1], b[:, ::-1], 1, False, fused)[:, 0]
        for parts in (2, 4, 8, 16, 32):
            for kind in ("stride", "chunk"):
                part = partial_sums(a, b, parts, kind == "chunk", fused)
                tree, pairs, width = part.copy(), part.copy(), parts // 2
                while width:  # halving (shfl_down-style): part[l] += part[l + width], width = parts/2 .. 1
                    tree[:, :width] += tree[:, width:2 * width]
                    width //= 2
                width = 1
                while width < parts:  # neighbours: part[l] += part[l + width] for l = 0, 2 width, ..., width = 1 ..
                    pairs[:, ::2 * width] += pairs[:, width::2 * width]
                    width *= 2
                found[f"{kind}{parts}_tree_{tag}"] = tree[:, 0]
                found[f"{kind}{parts}_pairs_{tag}"] = pairs[:, 0]
                found[f"{kind}{parts}_seq_{tag}"] = np.add.accumulate(part, axis=1, dtype=np.float32)[:, -1]
    return found if init is None else {name: y + init for name, y in found.items()}  # beta 1: acc + y


def fit(trace):
    layout = Layout(trace)
    groups = {}
    for _, op, state in walk(trace):
        if op is None or op.name not in ("matvec", "linear_backward"):
            continue
        spec, rows, cols = SPECS[op.name], op.ints["rows"], op.ints["cols"]
        outs = dict(zip([p for p, w in zip(spec.ptrs, spec.written) if w], op.outs))
        weight = layout.label(*op.ptrs[0]).split("[")[0]

        def add(call, ptrs, a, b, init, got):  # cuBLAS's m = cols, n = rows, lda = cols in every call
            align = {p: [4 * op.ptrs[spec.ptrs.index(p)][1] % m for m in (16, 128)] for p in ptrs}
            g = groups.setdefault((call, cols, rows, json.dumps(align)), {
                "call": call, "m": cols, "n": rows, "lda": cols, "align": align, "weights": set(), "calls": 0,
                "data": []})
            g["weights"].add(weight)
            g["calls"] += 1
            g["data"].append(tuple(None if x is None else np.array(x) for x in (a, b, init, got)))  # state changes

        if op.name == "matvec":
            add("sgemv_T", ("w", "x", "y"), region(state, op, "w").reshape(rows, cols),
                np.broadcast_to(region(state, op, "x"), (rows, cols)), None, outs["y"].values)
            continue
        grad_out = region(state, op, "grad_out")
        add("sger", ("x", "grad_out", "grad_w"), np.tile(region(state, op, "x"), rows)[:, None],
            np.repeat(grad_out, cols)[:, None], region(state, op, "grad_w"), outs["grad_w"].values)
        add("sgemv_N", ("w", "grad_out", "grad_x"), region(state, op, "w").reshape(rows, cols).T,
            np.broadcast_to(grad_out, (cols, rows)), region(state, op, "grad_x"), outs["grad_x"].values)
    classes = []
    for g in groups.values():
        a, b, init, got = (None if x[0] is None else np.concatenate(x) for x in zip(*g.pop("data")))
        if g["call"] == "sger":  # one fma(x[c], y[r], A) per element, or a rounded product added
            found = {"fma": fma32(a[:, 0], b[:, 0], init), "mul_add": init + a[:, 0] * b[:, 0]}
        else:
            found = candidates(a, b, init)
        g["matches"] = {name: int(np.count_nonzero(bits(y) == bits(got))) for name, y in found.items()}
        g["best"] = max(g["matches"], key=g["matches"].get)  # the first of equals: sequential ascending fma
        classes.append({**g, "weights": sorted(g["weights"]), "outputs": len(got)})
    return {"trace": str(trace.path), "classes": classes, "summary": fit_summary(classes)}


def fit_summary(classes):
    """Per (call, m, n), over every alignment class: the fraction of outputs each candidate reproduces."""
    groups = defaultdict(list)
    for c in classes:
        groups[c["call"], c["m"], c["n"]].append(c)
    summary = []
    for (call, m, n), group in groups.items():
        outputs = sum(c["outputs"] for c in group)
        matches = {name: sum(c["matches"][name] for c in group) for name in group[0]["matches"]}
        best = max(matches, key=matches.get)
        summary.append({"call": call, "m": m, "n": n, "classes": len(group), "outputs": outputs, "best": best,
                        "best_fraction": round(matches[best] / outputs, 4),
                        "seq_asc_fma": round(matches.get("seq_asc_fma", matches.get("fma")) / outputs, 4),
                        "classes_best_not_all": sum(c["matches"][best] < c["outputs"] for c in group),
                        "own_best_of_each_class": dict(Counter(c["best"] if c["matches"][c["best"]] == c["outputs"]
                                                               else "none reproduces all" for c in group))})
    return summary


# ---- compare two traces

def compare(a, b):
    if (a.vocab_size, a.counts) != (b.vocab_size, b.counts):
        raise DataError(f"{a.path} and {b.path} are traces of different models (vocab {a.vocab_size} vs "
                         f"{b.vocab_size}, arenas {a.counts} vs {b.counts}); compare runs on the same input")
    layout = Layout(a)
    steps = sorted(set(a.states) & set(b.states))
    result = {"a": str(a.path), "b": str(b.path), "steps_compared": len(steps), "first_state_difference": None,
              "first_loss_difference": None, "max_loss_difference": 0.0, "first_op_difference": None}
    for s in steps:
        differ = np.flatnonzero(bits(a.states[s].param) != bits(b.states[s].param))
        if len(differ):
            j = int(differ[0])
            result["first_state_difference"] = {"step": s, "element": layout.label(0, j), "differing_elements":
                                                len(differ), "a": hexf(a.states[s].param[j]),
                                                "b": hexf(b.states[s].param[j])}
            break
    for s in steps:
        la, lb = a.states[s].loss, b.states[s].loss
        if result["first_loss_difference"] is None and f"{la:.4f}" != f"{lb:.4f}":
            result["first_loss_difference"] = {"step": s, "a": f"{la:.4f}", "b": f"{lb:.4f}"}
        result["max_loss_difference"] = max(result["max_loss_difference"], abs(float(la) - float(lb)))
    for s in sorted(set(a.ops) & set(b.ops)):
        result["first_op_difference"] = first_op_difference(a.ops[s], b.ops[s], layout)
        if result["first_op_difference"]:
            break
    return result


def first_op_difference(ops_a, ops_b, layout):
    def summary(op):
        return {"op_index": op.index, "name": op.name, "ints": op.ints, "pointers": [layout.label(*p) for p in op.ptrs],
                "floats": {k: hexf(x) for k, x in op.floats.items()}}

    for oa, ob in zip(ops_a, ops_b):
        if summary(oa) | {"op_index": 0} != summary(ob) | {"op_index": 0}:
            return {"kind": "operation", "step": oa.step, "a": summary(oa), "b": summary(ob)}
        for out_a, out_b in zip(oa.outs, ob.outs):
            differ = np.flatnonzero(bits(out_a.values) != bits(out_b.values))
            if len(differ):
                j = int(differ[0])
                return {"kind": "output", "step": oa.step, **summary(oa), "differing_elements": len(differ),
                        "element": layout.label(out_a.arena, out_a.offset + j), "a": hexf(out_a.values[j]),
                        "b": hexf(out_b.values[j])}
    if len(ops_a) != len(ops_b):
        return {"kind": "count", "step": ops_a[0].step if ops_a else None, "a": len(ops_a), "b": len(ops_b)}
    return None



# ---- forensics: everything, on a GPU machine

def run_program(cmd, what):
    try:
        done = subprocess.run([str(c) for c in cmd], capture_output=True)
    except OSError as exc:
        raise RunError(f"cannot run {cmd[0]} ({exc.strerror}); is it built and on PATH?") from None
    if done.returncode:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise RunError(f"{what} exited with status {done.returncode}: {last}")
    return done.stdout


def build(pairs):
    """nvcc on each (source, binary), all at once."""
    cmds = [[*NVCC, "-o", str(binary), str(source), "-lcublas"] for source, binary in pairs]
    try:
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in cmds]
    except OSError as exc:
        raise RunError(f"cannot run nvcc ({exc.strerror}); install the CUDA toolkit or put nvcc on PATH") from None
    for (source, _), proc in zip(pairs, procs):
        err = proc.communicate()[1]
        if proc.returncode:
            raise RunError(f"nvcc failed on {source}: {next((x for x in err.splitlines() if 'error' in x), err[:300])}")
    return {"commands": [" ".join(cmd) for cmd in cmds]}


FORENSICS_FILES = ("compare.json", "replay.json", "fit.json", "forensics.json", "report.md")  # what forensics writes


def forensics(seed, input_path, steps, traced, out, work):
    """Each stage's failure goes into the report, and the stages that do not need its output still run."""
    out.mkdir(parents=True, exist_ok=True)
    for name in FORENSICS_FILES:  # an earlier run's, which a stage failing now would leave beside this report
        (out / name).unlink(missing_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    c_trace, ours_trace, patched = work / "c.trace", work / "ours.trace", work / "microgpt_trace.cu"
    report = {"command": " ".join([PROG, *sys.argv[1:]]), "seed": str(seed), "input": str(input_path), "steps": steps,
              "trace_steps": [traced.start, traced.stop], "work": str(work), "stages": {}}
    results = {}

    def stage(name, needs, fn, json_name=None):
        failed = [n for n in needs if not report["stages"][n]["ok"]]
        if failed:
            report["stages"][name] = {"ok": False, "skipped": f"skipped: needs {' and '.join(failed)}"}
            return
        start = time.perf_counter()
        try:
            results[name] = fn()
            report["stages"][name] = {"ok": True}
            if json_name:
                (out / json_name).write_text(json.dumps(results[name], indent=1) + "\n")
        except Exception as exc:  # noqa: BLE001 (into the report; the next stages still run)
            report["stages"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        report["stages"][name]["seconds"] = round(time.perf_counter() - start, 1)

    def run_c():
        args = ["--input", input_path, "--steps", steps]
        return (run_program([work / "microgpt_seed", *args], "microgpt.cu (the seed's build)"),
                run_program([work / "microgpt_trace", *args, "--trace", c_trace, "--trace-steps",
                             f"{traced.start}:{traced.stop}"], "the instrumented microgpt.cu"))

    def same_stdout():
        lines = [x.replace(b"\r", b"\n").splitlines() for x in results["run_c"]]
        i = next((i for i, (x, y) in enumerate(zip_longest(*lines)) if x != y), None)
        if i is not None:
            raise RunError(f"the instrumented program's output differs from the seed's at line {i + 1}: "
                           f"{lines[0][i:i + 1]} against {lines[1][i:i + 1]}")

    for old in (c_trace, ours_trace):
        old.unlink(missing_ok=True)
    stage("patch", [], lambda: patched.write_text(patch(read_seed(seed), seed)))
    stage("build", ["patch"], lambda: build([(seed, work / "microgpt_seed"), (patched, work / "microgpt_trace")]))
    stage("run_c", ["build"], run_c)
    stage("stdout_check", ["run_c"], same_stdout)
    stage("ours", [], lambda: run_ours(input_path, steps, traced, ours_trace))
    stage("compare", ["run_c", "ours"], lambda: compare(Trace(c_trace), Trace(ours_trace)), "compare.json")
    stage("replay", ["run_c"], lambda: replay(Trace(c_trace)), "replay.json")
    stage("fit", ["run_c"], lambda: fit(Trace(c_trace)), "fit.json")
    (out / "forensics.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(render(report, results))
    failed = [name for name, s in report["stages"].items() if "error" in s]
    if failed:  # exit 1 says so in a line, as every error does; the report holds the rest
        print(f"{PROG}: error: forensics: stage {', '.join(failed)} failed ({report['stages'][failed[0]]['error']}); "
              f"see {out / 'report.md'}", file=sys.stderr)
        return 1
    return 0


def render(report, results):
    def fmt(value, limit=600):
        text = "none" if value is None else json.dumps(value)
        return text if len(text) <= limit else text[:limit] + " ..."

    lines = ["# microgpt.cu against microgpt_numba's reference engine: trace forensics", "", f"`{report['command']}`",
             "", f"seed {report['seed']}, input {report['input']}, {report['steps']} steps, --trace-steps "
             f"{report['trace_steps'][0]}:{report['trace_steps'][1]} (0-based, the last excluded; the printed step is "
             f"step + 1); builds and traces in {report['work']}", "",
             "| stage | result | seconds |", "| --- | --- | --- |"]
    lines += [f"| {name} | {'ok' if s['ok'] else s.get('error') or s.get('skipped')} | {s.get('seconds', '')} |"
              for name, s in report["stages"].items()]
    if c := results.get("compare"):
        first = c["first_state_difference"]
        lines += ["", "## The C (a) against ours (b): compare.json", "",
                  f"- first step whose parameters differ: {fmt(first)}",
                  f"- first printed loss differing at 4 decimals: {fmt(c['first_loss_difference'])}; largest loss "
                  f"difference {c['max_loss_difference']:.3g}",
                  f"- first differing op of a step both traced: {fmt(c['first_op_difference'])}"]
        if first and first["step"] not in range(*report["trace_steps"]):
            lines.append(f"- that step is not traced: rerun with --trace-steps {first['step']}:{first['step'] + 1}")
    if r := results.get("replay"):
        lines += ["", "## The C's ops on our kernels, each from the C's inputs: replay.json", "",
                  f"{r['ops']} ops, {r['mismatched_ops']} with outputs other than the C's; {r['stray_writes']} "
                  "elements "
                  "written outside the C's outputs; snapshot + outputs give the next state (else the trace misses a "
                  f"write): {fmt([(s['step'], s['complete']) for s in r['steps']])}", "",
                  f"First mismatching op: {fmt(r['first_mismatch'], 2000)}", "",
                  "| op | shape | calls | mismatched calls | elements | mismatched elements |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {b['op']} | {b['shape']} | {b['calls']} | {b['mismatched_calls']} | {b['elements']} | "
                  f"{b['mismatched_elements']} |" for b in r["by_op"]]
    if f := results.get("fit"):
        lines += ["", "## cuBLAS calls against candidate summation orders: fit.json", "",
                  "Fractions of outputs reproduced, over all pointer alignments (fit.json: per alignment class).", "",
                  "| call | m | n | classes | outputs | best | best fraction | seq_asc_fma | classes where best < 1 | "
                  "each class's own best (reproducing all its outputs) |", "| --- " * 10 + "|"]
        lines += [f"| {s['call']} | {s['m']} | {s['n']} | {s['classes']} | {s['outputs']} | {s['best']} | "
                  f"{s['best_fraction']} | {s['seq_asc_fma']} | {s['classes_best_not_all']} | "
                  f"{json.dumps(s['own_best_of_each_class'])} |" for s in f["summary"]]
    return "\n".join(lines) + "\n"


# ---- command line

def step_range(text):
    m = re.fullmatch(r"(\d+):(\d+)", text)
    if m is None or int(m[1]) > int(m[2]):
        raise argparse.ArgumentTypeError(f"must be A:B (0-based steps A..B-1), got {text!r}")
    return range(int(m[1]), int(m[2]))


def op_names(text):
    names = set(text.split(","))
    if not names <= set(OPS):
        raise argparse.ArgumentTypeError(f"unknown ops {sorted(names - set(OPS))}; the names are {', '.join(OPS)}")
    return names


def parse_args(argv):
    parser = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def run_options(p, traced_required):
        p.add_argument("--input", required=True, type=path_arg, help="the documents, one a line (names.txt)")
        p.add_argument("--steps", type=positive_int, default=1000)
        p.add_argument("--trace-steps", type=step_range, metavar="A:B", required=traced_required, default=range(0),
                       help="0-based steps A..B-1 that also get SNAPSHOT and OP records")

    p = sub.add_parser("patch", help="write the instrumented microgpt.cu")
    p.add_argument("--seed", required=True, type=path_arg, help="microgpt.cu (read only)")
    p.add_argument("--out", required=True, type=path_arg, help="the instrumented copy")
    p = sub.add_parser("ours", help="our engine's trace")
    run_options(p, False)
    p.add_argument("--out", required=True, type=path_arg, help="the trace")
    p = sub.add_parser("replay", help="a trace's ops on our kernels")
    p.add_argument("trace", type=path_arg)
    p.add_argument("--ops", type=op_names, help="only these (comma-separated C names); the others' outputs are "
                   "taken from the trace")
    p.add_argument("--out", type=path_arg, help="the JSON report (default: stdout)")
    p = sub.add_parser("fit", help="a trace's cuBLAS calls against candidate summation orders")
    p.add_argument("trace", type=path_arg)
    p.add_argument("--out", type=path_arg, help="the JSON report (default: stdout)")
    p = sub.add_parser("compare", help="where two traces first differ")
    p.add_argument("a", type=path_arg, help="normally the C's")
    p.add_argument("b", type=path_arg, help="normally ours")
    p.add_argument("--out", type=path_arg, help="the JSON report (default: stdout)")
    p = sub.add_parser("forensics", help="everything, on a GPU machine")
    p.add_argument("--seed", required=True, type=path_arg, help="microgpt.cu (read only)")
    run_options(p, True)
    p.add_argument("--out", required=True, type=path_arg, help="folder for report.md and the JSON files (small)")
    p.add_argument("--work", type=path_arg, help="builds and traces (large; default: a new folder in /tmp)")
    for p in sub.choices.values():
        p.add_argument("--force", action="store_true", help="replace what --out holds (never an input)")
    return parser.parse_args(argv)


def check_out(args):
    """Refuse, before a run or a replay of minutes, an --out that cannot be written, that is one of
    the command's inputs, or that holds a file (forensics: a folder with files) without --force."""
    if args.out is None:
        return
    for name in ("seed", "input", "trace", "a", "b"):
        given = getattr(args, name, None)
        if given is not None and same_paths([given, args.out]):
            raise DataError(f"--out {args.out} is the {name} this reads: pick another --out")
    if args.command == "forensics":
        if args.out.is_dir() and any(args.out.iterdir()) and not args.force:
            raise DataError(f"--out {args.out} is a folder that holds files: pass --force to write over them, "
                             "or pick another --out")
        return
    problem = unwritable(args.out)
    if problem:
        raise DataError(f"cannot write --out {args.out}: {problem}; pick another --out")
    if args.out.exists() and not args.force:
        raise DataError(f"--out {args.out} exists: pass --force to replace it, or pick another --out")


def main(argv=None):
    try:
        args = parse_args(argv)
        result = None
        check_out(args)
        if args.command == "patch":
            text = patch(read_seed(args.seed), args.seed)
            made(args.out).write_text(text)
        elif args.command == "ours":
            run_ours(args.input, args.steps, args.trace_steps, args.out)
        elif args.command == "forensics":
            read_seed(args.seed)
            return forensics(args.seed, args.input, args.steps, args.trace_steps, args.out,
                             args.work or Path(tempfile.mkdtemp(prefix="microgpt_trace.")))
        elif args.command == "replay":
            result = replay(Trace(args.trace), args.ops)
        elif args.command == "fit":
            result = fit(Trace(args.trace))
        else:
            result = compare(Trace(args.a), Trace(args.b))
        if result is not None:
            text = json.dumps(result, indent=1) + "\n"
            if args.out is None:
                sys.stdout.write(text)
            else:
                made(args.out).write_text(text)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (DataError, RunError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a full disk, a folder removed meanwhile
        where = f" {exc.filename}" if exc.filename else ""
        print(f"{PROG}: error: cannot read or write{where} ({exc.strerror or exc}); check the path and the disk",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
