"""Times tf_numba/matmul.py's kernels at GPT-2's shapes (T=64) under candidate tiles, on a GPU, and
checks that every tile gives the same bits (a tile only groups outputs; each output's sum keeps
its order, so any difference is a bug). This is how the tiles in matmul.py were chosen. The
operand a pass streams from memory (a weight, or the weight gradient written) cycles through
copies past the L2, as in a pass; each shape class gets its own candidates. With --row it times
the one-row kernel (build_row: generation's decode step) under candidate row tiles.

    python3 tools/tf_matmul_sweep.py [--row] [--fp-model fma|nofma] [--l2-resident] [--out FILE.json [--force]]

--l2-resident keeps one copy of the streamed operand, which stays in the L2 from launch to launch:
what a product would take with its weights read into the L2 ahead of it.

Exit status: 0 done; 1 a tile that gives other bits, an --out that cannot be written, or no GPU; 2 a usage error.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from numba import cuda  # noqa: E402

from cudakit import sharedmem  # noqa: E402
from cudakit.gpu import quiet, unavailable_reason  # noqa: E402
from cudakit.sharedmem import opt_in  # noqa: E402
from cudakit.stream import Recorded, Target  # noqa: E402
from tf_numba import matmul as M  # noqa: E402
from tf_numba.arena import padded  # noqa: E402
from tf_numba.fp import FP_MODELS, is_fused  # noqa: E402
from tool_cli import OneLineParser, made, parsed, path_arg, positive_int, unwritable  # noqa: E402

T, D, V = 64, 768, 50257
# (kind, rows, cols, sum length, a's shape, b's shape, how many a GPT-2 step runs)
SHAPES = []
for n_in, n_out in ((D, 3 * D), (D, D), (D, 4 * D), (4 * D, D)):  # c_attn, attn.c_proj, c_fc, mlp.c_proj
    SHAPES += [("tf_fc", T, n_out, n_in, (T, n_in), (n_in, n_out), 12),
               ("tf_fc_back_din", T, n_in, n_out, (T, n_out), (n_in, n_out), 12),
               ("tf_fc_back_dweight", n_in, n_out, T, (T, n_in), (T, n_out), 12)]
SHAPES += [("tf_unembedding", T, V, D, (T, D), (V, D), 1),
           ("tf_unembedding", 1, V, D, (T, D), (V, D), 0),  # one generated token
           ("tf_unembedding_back_din", T, D, V, (T, padded(V)), (V, D), 1),  # dL/dlogits: the arena's padded rows
           ("tf_unembedding_back_dwte", V, D, T, (T, padded(V)), (T, D), 1)]
def _tile(label):
    """A tile from its label TMxTN/RTxCT/BK/ST, with /q for the quad lane layout."""
    parts = label.split("/")
    (tm, tn), (rt, ct) = (map(int, parts[i].split("x")) for i in (0, 1))
    tile = M.Tile(tm, tn, rt, ct, int(parts[2]), int(parts[3]), parts[4:] == ["q"])
    if min(tile[:6]) < 1:  # 0x0/0x0/0/0 parsed, and only failed on the GPU
        raise ValueError(label)
    return tile


CANDIDATES = {"wide": M.WIDE, "mid": M.MID, "unembed": M.UNEMBED, "unembed_nofma": M.UNEMBED_NOFMA, "t_wide": M.T_WIDE,
              "t_warp": M.T_WARP, "t_tall": M.T_TALL, "row": M.ROW, "t_deep": M.T_DEEP}
# Many outputs (weight gradients, the training unembedding): big tiles, whose loads serve more fmas;
# rows of 32 threads (x32), whose warps share their rows of A: one address a warp's A load.
MANY_OUTPUTS = ["wide", "mid", "unembed", "unembed_nofma", "8x4/8x16/32/3/q", "8x2/8x16/32/2/q", "4x2/8x16/32/2",
                "4x2/8x16/64/2", "4x4/8x16/32/2/q", "2x2/8x16/64/3/q", "4x2/4x32/32/2", "8x2/4x32/32/2",
                "4x4/4x32/32/2", "8x1/4x32/32/2", "8x2/2x32/32/3"]
# T rows: more outputs a thread against blocks few and small enough to spread over every
# multiprocessor; the quad lane layout (/q) against the plain one, and rows of 32 threads.
T_ROWS = ["t_wide", "2x2/8x12/64/6/q", "t_warp", "t_tall", "2x2/8x12/64/4/q", "2x2/8x8/64/4/q", "2x2/8x16/64/3",
          "2x2/8x8/64/4", "2x1/8x16/64/4/q", "4x1/8x16/32/4/q", "4x2/4x16/64/3/q", "4x2/8x8/64/3/q", "2x4/8x8/64/3/q",
          "2x2/4x16/64/4/q", "2x2/4x32/64/3", "2x2/2x32/64/4", "4x2/4x32/64/3", "4x2/2x32/64/3", "8x2/2x32/64/3",
          "4x1/4x32/64/3", "2x1/4x32/64/4", "4x4/2x32/64/3", "8x1/2x32/64/3", "2x1/2x32/64/4"]
# the unembedding's input gradient: 50,257-step sums, many chunks in flight
DEEP = ["t_deep", "2x2/8x16/64/10", "2x2/8x8/64/10/q", "2x2/4x32/64/10", "2x1/4x32/64/10", "4x1/4x32/64/10",
        "2x2/2x32/64/10", "2x1/8x16/64/10/q", "1x2/8x16/64/10/q"]
CANDIDATES.update({label: _tile(label) for label in MANY_OUTPUTS + T_ROWS + DEEP if label not in CANDIDATES})


def kind_list(text):
    """argparse type of --kinds: names of matmul.KINDS, comma-separated."""
    kinds = text.split(",")
    unknown = [k for k in kinds if k not in M.KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kind {unknown[0]!r}; the kinds are {', '.join(M.KINDS)}")
    return kinds


def tile_list(text):
    """argparse type of --tiles: tile labels (TMxTN/RTxCT/BK/ST[/q] or a CANDIDATES name), comma-separated."""
    labels = text.split(",")
    for label in labels:
        if label not in CANDIDATES:
            try:
                CANDIDATES[label] = _tile(label)
            except (ValueError, IndexError):
                raise argparse.ArgumentTypeError(f"bad tile {label!r}; write TMxTN/RTxCT/BK/ST, /q for quads, "
                                                 "e.g. 2x2/4x8/64/4/q") from None
    return labels


def candidates(kind, rows, cols, chosen, tiles=None):
    """The tiles worth timing at a shape: big ones where there are millions of outputs (weight
    gradients, the training unembedding), small ones for T rows, or `tiles`; and the tile
    tile_for picks."""
    labels = tiles if tiles else ["row"] if rows == 1 else MANY_OUTPUTS if rows * cols > 1 << 20 else \
        DEEP if kind == "tf_unembedding_back_din" else T_ROWS
    chosen_label = next((k for k, v in CANDIDATES.items() if v == chosen), None)
    if chosen_label is None:  # a tile_for tile not among the named ones
        chosen_label = f"{chosen.TM}x{chosen.TN}/{chosen.RT}x{chosen.CT}/{chosen.BK}/{chosen.ST}" + \
            ("/q" if chosen.QUAD else "")
        CANDIDATES[chosen_label] = chosen
    return chosen_label, list(dict.fromkeys([chosen_label] + labels))


# the operand a pass streams from memory (a weight, or the weight gradient it writes), which the
# sweep cycles through copies of, past the L2, as a pass does; the rest stays in L2 as in a pass
STREAMED = {"tf_fc": "b", "tf_fc_back_din": "b", "tf_unembedding": "b", "tf_unembedding_back_din": "b",
            "tf_fc_back_dweight": "out", "tf_unembedding_back_dwte": "out"}


# the decode step's one-row products: (kind, cols, sum length, b's shape, launches per decode step)
ROW_SHAPES = [("tf_fc", n_out, n_in, (n_in, n_out), 12) for n_in, n_out in ((D, 3 * D), (D, D), (D, 4 * D), (4 * D, D))]
ROW_SHAPES += [("tf_unembedding", V, D, (V, D), 1)]
L2_SPILL = 160 << 20  # bytes of copies of a streamed operand that both sweeps cycle through


def copies_past_l2(nbytes):
    """How many copies of an array of nbytes make up L2_SPILL (at least one)."""
    return max(1, -(-L2_SPILL // nbytes))
ROW_CANDIDATES = {  # (BN, KC, NT) by kind
    "tf_fc": [M.RowTile(*t) for t in ((8, 256, 256), (8, 128, 256), (8, 128, 128), (4, 256, 128), (4, 512, 256),
                                      (16, 128, 256), (4, 128, 128))],
    "tf_unembedding": [M.RowTile(*t) for t in ((32, 64, 256), (32, 128, 256), (16, 128, 256), (64, 64, 512),
                                               (32, 64, 128))]}


def time_kernel(kernel, grid, block, args, repeats=20, replays=10, nbytes=0):
    """GPU time of one launch: a CUDA graph of `repeats` launches, replayed `replays` times after
    three warm replays that bring the clocks up. Launched one by one from Python, a kernel shorter
    than Numba's launch overhead (tens of microseconds) would time the overhead instead. `args` is
    one argument tuple, or a list of them that the launches take in turn (weights that do not fit
    in L2 together, as in a pass)."""
    arg_sets = args if isinstance(args, list) else [args]

    def record():
        for r in range(repeats):
            kernel[grid, block, Target.stream, nbytes](*arg_sets[r % len(arg_sets)])

    recorded = Recorded(record)
    for _ in range(3):
        recorded()
    t = time.perf_counter()
    for _ in range(replays):
        recorded.launch()
    recorded.sync()
    return (time.perf_counter() - t) / (replays * repeats) * 1e6


def sweep_rows(fused, resident=False):
    """The one-row kernel at the decode step's shapes under every row tile that fits shared memory
    (the weights cycled past the L2, or one copy of them `resident` in it)."""
    rng = np.random.default_rng(0)
    results, total_chosen, total_best = [], 0.0, 0.0
    for kind, cols, S, b_shape, per_step in ROW_SHAPES:
        s_max = M.row_s_max(S)
        a = cuda.to_device(rng.standard_normal((4, S), dtype=np.float32))
        # copies of the weights past the H200's 50 MB L2, as a pass streams every layer's from memory
        host_b = rng.standard_normal(b_shape, dtype=np.float32)
        bs = [cuda.to_device(host_b) for _ in range(1 if resident else copies_past_l2(host_b.nbytes))]
        start = cuda.to_device(rng.standard_normal(cols, dtype=np.float32))
        row_range = cuda.to_device(np.array([2, 3], dtype=np.int64))
        chosen = M.row_tile_for(cols, s_max)
        times, bits = {}, None
        for tile in dict.fromkeys([chosen] + ROW_CANDIDATES[kind]):
            if M.row_shared_bytes(tile, s_max) > M.SHARED_BYTES:
                continue
            out = cuda.to_device(np.zeros((4, cols), dtype=np.float32))
            kernel = M.build_row(kind, tile, fused, s_max)
            grid = -(-cols // tile.BN)
            launch_args = [(a, b, start, out, row_range, S, np.float32(1.0), out, out) for b in bs]
            kernel[grid, tile.NT](*launch_args[0])
            got = out.copy_to_host()
            label = f"{tile.BN}/{tile.KC}/{tile.NT}"
            times[label] = round(time_kernel(kernel, grid, tile.NT, launch_args, repeats=4 * len(bs)), 2)
            if bits is None:
                bits = got
            elif not np.array_equal(got.view(np.uint32), bits.view(np.uint32)):
                raise SystemExit(f"tf_matmul_sweep: error: {kind} 1x{cols}x{S}: row tile {label} gives other bits")
        best = min(times, key=times.get)
        chosen_label = f"{chosen.BN}/{chosen.KC}/{chosen.NT}"
        total_chosen += per_step * times[chosen_label]
        total_best += per_step * times[best]
        gbs = 4.0 * cols * S / times[best] / 1e3
        results.append({"kind": kind, "rows": 1, "cols": cols, "sum": S, "per_step": per_step, "us": times,
                        "chosen": chosen_label, "best": best, "best_GB_per_s": round(gbs, 1)})
        print(f"{kind:16} 1x{cols:5}x{S:5}  chosen {chosen_label} {times[chosen_label]:7.2f} us  best {best} "
              f"{times[best]:7.2f} us ({gbs:.0f} GB/s)  " + " ".join(f"{k}={v}" for k, v in times.items()), flush=True)
    print(f"one decode step's matrix kernels: {total_chosen / 1e3:.3f} ms as chosen, "
          f"{total_best / 1e3:.3f} ms with the best tile per shape")
    return {"shapes": results, "step_ms_chosen": total_chosen / 1e3, "step_ms_best": total_best / 1e3}


def shape_operands(index):
    """SHAPES[index]'s operands, the same in every process (seeded by the shape): a, the copies of
    b, start, the row range, the outputs' start values and how many copies of the streamed
    operand to cycle through."""
    kind, rows, cols, S, a_shape, b_shape, _ = SHAPES[index]
    rng = np.random.default_rng(index)
    a = rng.standard_normal(a_shape, dtype=np.float32)
    host_b = rng.standard_normal(b_shape, dtype=np.float32)
    start = rng.standard_normal(max(cols, 1), dtype=np.float32)
    init = rng.standard_normal((max(rows, T), cols), dtype=np.float32)
    first = rows - 1 if rows == 1 else 0
    streamed = host_b if STREAMED[kind] == "b" else init
    return a, host_b, start, np.array([first, first + rows], dtype=np.int64), init, copies_past_l2(streamed.nbytes)


_gpu_lock = None  # the pool's workers compile side by side, and time one at a time


def _init_worker(lock):
    global _gpu_lock
    _gpu_lock = lock
    quiet()  # small grids are what the sweep times: no occupancy warnings


def time_tile(job):
    """(index, label, fused, resident) -> (index, label, µs a launch, sha256 of the output's bits), in a
    worker: its own CUDA context; the kernel compiled beside the other workers, timed while this
    worker alone holds the GPU. A tile that fails to compile or launch gives (index, label,
    None, the error), so that one bad candidate costs no other's figure."""
    try:
        return _time_tile(*job)
    except Exception as exc:  # noqa: BLE001 (reported with the candidate's figures)
        return job[0], job[1], None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _time_tile(index, label, fused, resident):
    import hashlib
    import contextlib

    kind, rows, cols, S, *_ = SHAPES[index]
    tile = CANDIDATES[label] if label in CANDIDATES else _tile(label)  # a spawned worker knows only the named ones
    a, host_b, start, row_range, init, copies = shape_operands(index)
    copies = 1 if resident else copies
    a, start, row_range = cuda.to_device(a), cuda.to_device(start), cuda.to_device(row_range)
    bs = [cuda.to_device(host_b) for _ in range(copies if STREAMED[kind] == "b" else 1)]
    outs = [cuda.to_device(init) for _ in range(1 if STREAMED[kind] == "b" else copies)]
    grid = (-(-cols // (tile.TN * tile.CT)), -(-rows // (tile.TM * tile.RT)))
    kernel = M.tiled(kind, tile, fused, a, bs[0])
    launch_args = [(a, bs[r % len(bs)], start, outs[r % len(outs)], row_range, S, np.float32(0.5),
                    outs[r % len(outs)], outs[r % len(outs)]) for r in range(copies)]
    nbytes = M.dynamic_bytes(tile, kind)
    opt_in(kernel, launch_args[0], nbytes)
    kernel[grid, (tile.CT, tile.RT), 0, nbytes](*launch_args[0])  # compiles it, and gives the bits (from a clean out)
    digest = hashlib.sha256(outs[0].copy_to_host().tobytes()).hexdigest()
    with _gpu_lock if _gpu_lock is not None else contextlib.nullcontext():
        us = time_kernel(kernel, grid, (tile.CT, tile.RT), launch_args, repeats=4 * copies, nbytes=nbytes)
    return index, label, round(us, 1), digest


def sweep_tiles(fused, jobs, kinds=None, tiles=None, resident=False):
    """The tiled kernel at a training step's shapes (those of `kinds`, or all) under the candidates
    of each shape's class (or `tiles`), compiled by `jobs` processes side by side (each with its own CUDA
    context), timed one at a time; the streamed operand cycled past the L2, or `resident` in it."""
    import multiprocessing

    work, chosen = [], {}
    for index, (kind, rows, cols, S, *_) in enumerate(SHAPES):
        if rows == 1 or (kinds and kind not in kinds):
            continue
        chosen[index], labels = candidates(kind, rows, cols, M.tile_for(kind, rows, cols, S, fused), tiles)
        work += [(index, label, fused, resident) for label in labels
                 if CANDIDATES[label].ST * M.stage_bytes(CANDIDATES[label], kind) <= sharedmem.H200_OPTIN]
    def report(results):
        for result in results:  # as each finishes, so that a sweep cut short keeps its figures
            index, label, us, error = result
            kind, rows, cols, S, *_ = SHAPES[index]
            print(f"  {kind} {rows}x{cols}x{S} {label}: {us} us" if us is not None else
                  f"  {kind} {rows}x{cols}x{S} {label}: {error}", flush=True)
            yield result

    if jobs == 1:
        done = list(report(map(time_tile, work)))
    else:
        ctx = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable: each worker makes its own
        with ctx.Pool(jobs, initializer=_init_worker, initargs=(ctx.Lock(),)) as pool:
            done = list(report(pool.imap_unordered(time_tile, work, chunksize=1)))
    results, total_chosen, total_best = [], 0.0, 0.0
    for index in chosen:
        kind, rows, cols, S, _, _, per_step = SHAPES[index]
        times = {label: us for i, label, us, _ in done if i == index and us is not None}
        digests = {label: d for i, label, us, d in done if i == index and us is not None}
        for i, label, us, error in done:
            if i == index and us is None:
                print(f"  {kind} {rows}x{cols}x{S} {label}: failed: {error}", flush=True)
        if chosen[index] not in times:
            raise SystemExit(f"tf_matmul_sweep: error: {kind} {rows}x{cols}x{S}: the chosen tile {chosen[index]} "
                             "failed")
        other = [label for label, d in digests.items() if d != digests[chosen[index]]]
        if other:
            raise SystemExit(f"tf_matmul_sweep: error: {kind} {rows}x{cols}x{S}: tile {other[0]} gives other bits")
        best = min(times, key=times.get)
        total_chosen += per_step * times[chosen[index]]
        total_best += per_step * times[best]
        flop = 2.0 * rows * cols * S
        results.append({"kind": kind, "rows": rows, "cols": cols, "sum": S, "per_step": per_step, "us": times,
                        "chosen": chosen[index], "best": best, "best_tflops": round(flop / times[best] / 1e6, 2),
                        "chosen_tflops": round(flop / times[chosen[index]] / 1e6, 2)})
        print(f"{kind:26} {rows:5}x{cols:5}x{S:5}  chosen {chosen[index]} {times[chosen[index]]:8.1f} us  "
              f"best {best} {times[best]:8.1f} us  ({results[-1]['best_tflops']} TFLOP/s)  "
              + " ".join(f"{k}={v}" for k, v in sorted(times.items(), key=lambda kv: kv[1])), flush=True)
    print(f"the swept shapes' matrix kernels, a training step: {total_chosen / 1e3:.3f} ms as chosen, "
          f"{total_best / 1e3:.3f} ms with the best tile per shape")
    return {"shapes": results, "step_ms_chosen": total_chosen / 1e3, "step_ms_best": total_best / 1e3}


def main(argv=None):
    ap = OneLineParser(prog="tf_matmul_sweep.py", description=__doc__.splitlines()[0])
    ap.add_argument("--row", action="store_true", help="the one-row kernel at the decode step's shapes")
    ap.add_argument("--fp-model", choices=FP_MODELS, default="fma")
    ap.add_argument("--l2-resident", action="store_true",
                    help="one copy of the streamed operand (a weight), left in the L2 between launches")
    ap.add_argument("--out", type=path_arg, help="write the table as JSON here")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                    help="processes compiling the tiled kernels side by side (default: one a core)")
    ap.add_argument("--kinds", type=kind_list, help="only these kinds, comma-separated (default: all)")
    ap.add_argument("--tiles", type=tile_list,
                    help="time these tiles (TMxTN/RTxCT/BK/ST[/q], comma-separated) beside the chosen one, "
                         "in place of each shape's candidates")
    args = parsed(ap.parse_args, argv, "tf_matmul_sweep")
    if args is None:
        return 2
    problem = args.out and (unwritable(args.out) or (args.out.exists() and not args.force and "it exists (pass "
                                                                "--force to replace it)"))
    if problem:  # before the sweep, not after it
        print(f"tf_matmul_sweep: error: cannot write --out {args.out}: {problem}; pick another --out", file=sys.stderr)
        return 1
    reason = unavailable_reason(simulator_ok=False)
    if reason is not None:  # else every tile "failed", and the chosen one's failure was the one line
        print(f"tf_matmul_sweep: error: {reason}; the sweep times kernels, so run it on a machine with a CUDA GPU",
              file=sys.stderr)
        return 1
    quiet()
    fused = is_fused(args.fp_model)
    table = sweep_rows(fused, args.l2_resident) if args.row else \
        sweep_tiles(fused, args.jobs, args.kinds, args.tiles, args.l2_resident)
    if args.out:
        made(args.out).write_text(json.dumps({"fp_model": args.fp_model, "l2_resident": args.l2_resident, **table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
