"""Benchmarks on a GPU machine: python tools/bench.py microgpt|tf|all [options].

One named entry per program; `all` runs every entry in one command.

Each entry times our port beside the C program it ports, in the same call, and writes
bench_ENTRY.json and bench_ENTRY.md (plus the raw logs) into --out (default: a new temporary
folder, printed at the end). The command line that produced the numbers is recorded in both files.

microgpt: builds microgpt.cu with nvcc (-O3 -arch=sm_90 -lcublas), runs it and `python -m
microgpt_numba` on names.txt for each --steps, and compares every printed loss and sample. With
matplotlib installed it also saves losses_STEPS.png (tools/plot_losses.py: our curves over
microgpt.cu's) into --out; without it, it says so and skips the picture.
Training time is wall(N steps, 20 samples) - wall(1 step, no samples), each the median of
--repeat runs, for both programs: start-up, data loading and (for us) kernel loading cancel out,
sampling stays in. The marginal rate between two --steps values, (wall(N2) - wall(N1)) / (N2 - N1),
is the cost of one training step alone. A first run of ours (cold kernel cache, timed as
cold_start_s) warms the cache before ours are timed. The fast engine trains in one kernel, so
where ncu is on PATH its training is also timed directly (kernel_train_s: the kernel's GPU time
under `ncu --clock-control none`), against microgpt.cu's train_s and its marginal rate between
the two longest --steps x steps.

tf: tf_numba's forward, forward + backward (T=64) and generation (128 tokens after 64, the
oracle's, and after 512) on synthetic GPT-2 124M weights (--assets, or made in --out), both fp
models checked bit for bit against the oracle fixtures, beside PyTorch on the same weights and
tokens in the same call (eager, CUDA graph, torch.compile; HF generate with the dynamic and the
compiled static cache; llm.c's train_gpt2_fp32.cu from the shared peers folder, where --shared
has one: tools/bench_peers.py), with speed-ups over the fastest PyTorch variant and
over tf.c's own timers as the oracle fixtures recorded them on a CPU (tools/bench_tf.py).
"""
import gc
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_peers  # noqa: E402  (stdlib and numpy only: torch is imported where it is timed)
from cudakit.gpu import quiet, unavailable_reason  # noqa: E402
from logcompare import compare_runs  # noqa: E402
from microgpt_numba.cli import ENGINES  # noqa: E402
from ncu_summary import read as read_ncu  # noqa: E402
from tool_cli import OneLineParser, parsed, path_arg, positive_int  # noqa: E402


RUN_TIMEOUT_S = 300
ENGINE_NAMES = ("default", *ENGINES)  # no --engine, or one of python -m microgpt_numba's
PEER_PARTS = ("eager", "graph", "compile", "generate", "llmc")  # what bench_peers times


class BenchError(Exception):
    pass


def shared_dir(args):
    path = Path(args.shared or os.environ.get("MICROGPT_SHARED") or ROOT.parent / "shared")
    if not path.is_dir():
        raise BenchError(f"{path} is not a folder; pass --shared DIR holding seeds/ and data/")
    return path


def timed(cmd, out_dir, name, **kw):
    start = time.perf_counter()
    try:
        result = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT_S, **kw)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{shlex.join(map(str, cmd))} ran past {RUN_TIMEOUT_S} s")
    wall = time.perf_counter() - start
    (out_dir / f"{name}.log").write_bytes(result.stdout + result.stderr)
    if result.returncode != 0:
        raise BenchError(f"{shlex.join(map(str, cmd))} exited {result.returncode}; see {out_dir / name}.log")
    return wall, result.stdout


def bench_microgpt(args, out_dir, save):
    shared = shared_dir(args)
    seed, names = shared / "seeds" / "microgpt.cu", shared / "data" / "names.txt"
    for path in (seed, names):
        if not path.is_file():
            raise BenchError(f"{path} is missing; pass --shared DIR holding seeds/microgpt.cu and data/names.txt")
    exe = out_dir / "microgpt_cu"
    nvcc = ["nvcc", "-O3", "-arch=sm_90", "-o", str(exe), str(seed), "-lcublas"]
    try:
        build_s, _ = timed(nvcc, out_dir, "nvcc")
    except FileNotFoundError:
        raise BenchError("nvcc is not on PATH; run on a machine with the CUDA toolkit")

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    programs = {"microgpt.cu": [str(exe)]}
    for engine in args.engines:
        engine_flag = ["--engine", engine] if engine != "default" else []
        programs[f"numba-{engine}"] = [sys.executable, "-m", "microgpt_numba", *engine_flag]

    result = {"nvcc": shlex.join(nvcc), "nvcc_s": round(build_s, 2), "runs": {}}
    for prog, cmd in programs.items():
        try:
            time_program(result, prog, cmd, args, out_dir, shared, names, env)
        except BenchError as exc:  # one program failing still leaves the others' numbers
            result["runs"].setdefault(prog, {})["error"] = str(exc)
        save(result)
    result["loss_plots"] = loss_plots(programs, args.steps, out_dir)
    return result


def loss_plots(programs, steps_list, out_dir):
    """losses_STEPS.png in out_dir for each --steps: our engines' loss curves over microgpt.cu's on
    names.txt (tools/plot_losses.py), or a note when matplotlib is missing."""
    from plot_losses import PlotError, draw, import_pyplot

    try:
        import_pyplot()
    except PlotError as exc:
        print(f"bench: no loss picture: {exc}", file=sys.stderr)
        return {"skipped": str(exc)}
    plots = {}
    for steps in sorted(steps_list):
        logs = [out_dir / f"{prog.replace('.', '_')}_{steps}.log" for prog in programs]  # microgpt.cu's first
        logs = [log for log in logs if log.is_file()]
        if len(logs) < 2:
            continue
        png = out_dir / f"losses_{steps}.png"
        try:
            draw(logs, png, title=f"names.txt, {steps} steps: ours over microgpt.cu's", smooth=20)
            plots[str(steps)] = png.name
        except PlotError as exc:  # a log without losses: the runs' error says why
            plots[str(steps)] = f"error: {exc}"
    return plots


def kernel_seconds(cmd, kernel, out_dir, name, env):
    """The GPU time of every launch of `kernel` in one run of cmd, timed by ncu (None without ncu)."""
    if shutil.which("ncu") is None:
        return None
    log = out_dir / f"{name}.csv"
    timed(["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base",
           "-k", f"regex:{kernel}", "--log-file", str(log), *cmd], out_dir, name, env=env)
    return sum(ns for k, ns in read_ncu(log) if k == kernel) / 1e9


def median_wall(cmd, repeat, out_dir, name, env):
    """The median wall time of `repeat` runs (start-up varies by a few tenths of a second from run
    to run), and the last run's output (the runs are deterministic)."""
    walls = []
    for _ in range(repeat):
        wall, stdout = timed(cmd, out_dir, name, env=env)
        walls.append(wall)
    return statistics.median(walls), stdout


def time_program(result, prog, cmd, args, out_dir, shared, names, env):
    """Start-up (1 step and the samples; for us first with a cold kernel cache), then each --steps run."""
    tag = prog.replace(".", "_")
    entry = result["runs"].setdefault(prog, {})
    start_cmd = cmd + ["--input", str(names), "--steps", "1", "--samples", "0"]
    if prog != "microgpt.cu":
        entry["cold_start_s"] = round(timed(start_cmd, out_dir, f"{tag}_cold", env=env)[0], 3)
    base = median_wall(start_cmd, args.repeat, out_dir, f"{tag}_base", env)[0]
    entry["start_s"] = round(base, 3)
    prev = None
    for steps in sorted(args.steps):
        wall, stdout = median_wall(cmd + ["--input", str(names), "--steps", str(steps)], args.repeat, out_dir,
                                   f"{tag}_{steps}", env)
        train = wall - base
        r = entry[str(steps)] = {"wall_s": round(wall, 3), "train_s": round(train, 3),
                                 "ms_per_step": round(1e3 * train / steps, 4), "runs": args.repeat}
        if steps == 1000 and (shared / "anchors" / "microgpt_cu_names_1000.log").is_file():
            r["vs_anchor"] = compare_runs(stdout, (shared / "anchors" / "microgpt_cu_names_1000.log").read_bytes())
        if prev is not None:
            r["marginal_ms_per_step"] = round(1e3 * (wall - prev[1]) / (steps - prev[0]), 4)
        prev = steps, wall
        if prog in ("numba-fast", "numba-default"):
            k = kernel_seconds(cmd + ["--input", str(names), "--steps", str(steps), "--samples", "0"], "train_kernel",
                               out_dir, f"{tag}_{steps}_ncu", env)
            if k is not None:
                c = result["runs"]["microgpt.cu"]
                r["kernel_train_s"] = round(k, 4)
                r["kernel_train_ratio_vs_c_train"] = round(k / c[str(steps)]["train_s"], 4)
                if "marginal_ms_per_step" in c.get(str(max(args.steps)), {}):
                    c_steps = c[str(max(args.steps))]["marginal_ms_per_step"] * 1e-3 * steps
                    r["kernel_train_ratio_vs_c_marginal"] = round(k / c_steps, 4)
        if prog != "microgpt.cu":
            r["vs_microgpt_cu"] = compare_runs(stdout, (out_dir / f"microgpt_cu_{steps}.log").read_bytes())
            c = result["runs"]["microgpt.cu"][str(steps)]
            r["train_ratio_vs_c"] = round(train / c["train_s"], 4) if c["train_s"] > 0 else None
            r["wall_ratio_vs_c"] = round(wall / c["wall_s"], 4)
            if "marginal_ms_per_step" in r:
                r["marginal_ratio_vs_c"] = round(r["marginal_ms_per_step"] / c["marginal_ms_per_step"], 4)


def microgpt_markdown(result):
    lines = [f"nvcc: `{result['nvcc']}` ({result['nvcc_s']} s)", "",
             "| program | steps | wall s | train s | ms/step | marginal ms/step | train ratio vs C | marginal ratio vs C | "
             "wall ratio vs C | losses equal (4 dp) | max loss diff | samples identical |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for prog, runs in result["runs"].items():
        if "error" in runs:
            lines.append(f"| {prog} | error: {runs['error']} | | | | | | | | |")
        for steps, r in runs.items():
            if not steps.isdigit():
                continue
            cmp = r.get("vs_microgpt_cu") or r.get("vs_anchor") or {}
            lines.append(f"| {prog} | {steps} | {r['wall_s']} | {r['train_s']} | {r['ms_per_step']} | "
                         f"{r.get('marginal_ms_per_step', '')} | {r.get('train_ratio_vs_c', '')} | "
                         f"{r.get('marginal_ratio_vs_c', '')} | {r.get('wall_ratio_vs_c', '')} | "
                         f"{cmp.get('losses_equal', '')}/{cmp.get('steps', '')} | {cmp.get('max_loss_diff', '')} | "
                         f"{cmp.get('samples_identical', '')} |")
    plots = result.get("loss_plots", {})
    if "skipped" in plots:
        lines.append(f"\nNo loss picture: {plots['skipped']}")
    for steps, png in plots.items():
        if steps.isdigit():
            lines.append(f"\nLoss curves, {steps} steps: {png}" if png.startswith("error") else
                         f"\nLoss curves, {steps} steps: ![losses]({png})")
    for prog, runs in result["runs"].items():
        for steps, r in runs.items():
            if steps.isdigit() and "kernel_train_s" in r:
                lines.append(f"\n{prog}, {steps} steps: training kernel {r['kernel_train_s']} s (ncu), "
                             f"{r['kernel_train_ratio_vs_c_train']} of microgpt.cu's train s, "
                             f"{r.get('kernel_train_ratio_vs_c_marginal', '')} of its marginal rate "
                             "(longest runs) x steps")
    return "\n".join(lines)


def bench_tf(args, out_dir, save):
    """tf: tf_numba's forward, forward + backward (T=64) and generation on synthetic GPT-2 124M
    weights, both fp models, each checked bit for bit against the oracle fixtures; PyTorch's
    variants on the same weights, tokens and prompt beside it; tf.c's CPU times from the
    oracle's record."""
    from bench_tf import time_generation, time_tf
    from numba import cuda

    from tf_numba import assets
    from tf_numba.generate import GENERATE
    from tf_numba.model import TFModel

    reason = unavailable_reason(simulator_ok=False)
    if reason:  # before the synthetic weights' 500 MB are written
        raise BenchError(f"tf: {reason}; the bench times kernels, so run it on a machine with a CUDA GPU")
    assets_dir = Path(args.assets) if args.assets else out_dir / "assets"
    if not args.assets:
        from tf_assets import ToolError, UsageError, write_synthetic
        from tf_numba.config import GPT2

        if assets_dir.exists():  # an interrupted run's: its files may be partial
            raise BenchError(f"tf: {assets_dir} is left from an earlier run; pick a new --out, or pass --assets "
                             f"{assets_dir} if its files are whole")
        try:
            write_synthetic(assets_dir, GPT2)
        except (ToolError, UsageError) as exc:  # too little disk space, a folder that cannot be made
            raise BenchError(f"tf: cannot write the synthetic weights ({exc}); pick another --out") from None
    try:
        cfg, tensors = assets.load_model(assets_dir / "model.safetensors")
        data = assets.load_data(assets_dir / "data", cfg.d_vocab)
    except assets.AssetError as exc:  # its message names the file and the fix
        raise BenchError(f"tf: {exc}") from None
    result = {"config": str(cfg), "runs": {}}
    long_prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.d_vocab, 512)]
    for fp_model in ("fma", "nofma"):
        fixture = ROOT / "tests" / "fixtures" / f"tf_oracle_gpt2_{fp_model}.json"
        oracle = json.loads((ROOT / "tests" / "fixtures" / f"tf_oracle_gpt2_generate_{fp_model}.json").read_text())
        # the model before this one frees its arenas now, not when Numba's pending frees next flush
        gc.collect()
        cuda.current_context().deallocations.clear()
        free_before = cuda.current_context().get_memory_info()[0]
        m = TFModel(cfg, tensors, fp_model)
        r = result["runs"][fp_model] = time_tf(m, data, fixture)
        r["gpu_memory_mib"] = round((free_before - cuda.current_context().get_memory_info()[0]) / 2**20)
        save(result)
        if not args.training_only:
            r["generate"] = time_generation(m, oracle["prompt"], oracle["generate"], oracle["tokens"])
            r["generate_long"] = time_generation(m, long_prompt, GENERATE)
            save(result)
        del m
    try:
        import torch
        import transformers

        model = bench_peers.load_model(assets_dir / "model.safetensors", cfg)
        oracle = json.loads((ROOT / "tests" / "fixtures" / "tf_oracle_gpt2_generate_fma.json").read_text())
        peers = result["pytorch"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        parts = args.peers.split(",")
        peers["training"] = bench_peers.time_training(model, data, 64, parts)
        save(result)
        if "generate" in parts:
            peers["generate"] = bench_peers.time_generate(model, oracle["prompt"], oracle["generate"])
    except ImportError as exc:  # keep our numbers
        result["pytorch"] = {"skipped": f"{exc}: torch and transformers are needed for the PyTorch peers"}
    if "llmc" in args.peers.split(","):
        try:
            peers_dir = shared_dir(args) / "anchors" / "peers"
        except BenchError as exc:
            result["llmc"] = {"skipped": str(exc)}
        else:
            result["llmc"] = time_llmc(peers_dir, assets_dir / "model.safetensors", assets_dir / "data",
                                       out_dir / "llmc_build")
        save(result)
    ours_vs_peers(result)
    return result


# (our figure, PyTorch's of the same work): tf.c's forward ends with the probabilities, PyTorch's
# forward with the logits, so each is set beside the other's same ending
LIKE_FOR_LIKE = (("forward_ms", "forward_probs_ms"), ("forward_logits_ms", "forward_ms"),
                 ("forward_backward_ms", "forward_backward_ms"))


def ours_vs_peers(result):
    """Speed-ups over the fastest PyTorch variant (TF32 off; TF32 on shown beside) of each workload."""
    peers = result.get("pytorch", {})
    for ours, theirs in LIKE_FOR_LIKE:
        timed = {name: v[theirs] for name, v in peers.get("training", {}).items() if theirs in v}
        best = min(((t, n) for n, t in timed.items() if "TF32 on" not in n), default=None)
        for r in result["runs"].values():
            if best and ours in r:
                r[f"vs_best_pytorch_{ours[:-3]}"] = {"peer": best[1], "peer_ms": best[0],
                                                    "speedup": round(best[0] / r[ours], 2)}
    gen = {n: v["s"] for n, v in peers.get("generate", {}).items() if "s" in v}
    for r in result["runs"].values():
        if gen and "generate" in r:
            ours = r["generate"]["decoder"]["s"]
            r["generate"]["vs_hf"] = {n: round(t / ours, 2) for n, t in gen.items()}


LLMC_NVCC_FLAGS = ["--threads=0", "-t=0", "--use_fast_math", "-std=c++17", "-O3",
                   "--generate-code", "arch=compute_90,code=[compute_90,sm_90]"]


def time_llmc(peers, safetensors, data, build):
    """llm.c's forward and forward + backward at B = 1, T = 64, TF32 off and on (bench_peers'
    docstring says how), or {"skipped": why}; each step's output is in build/NAME.log."""
    for need in (peers / "llmc" / "train_gpt2_fp32.cu", peers / "llmc_bench.cu", peers / "to_llmc_bin.py",
                 peers / "patch_llmc_rowguard.py"):
        if not need.is_file():
            return {"skipped": f"{need} is missing (llm.c needs the shared peers folder, anchors/peers/)"}
    (build / "rowguard").mkdir(parents=True, exist_ok=True)
    binary = build / "llmc_bench_rowguard"
    steps = [
        ("to_llmc_bin", [sys.executable, peers / "to_llmc_bin.py", safetensors, build / "gpt2_124M.bin",
                         "--tokens-out", build / "tokens.bin", "--data", data]),
        ("patch_llmc_rowguard", [sys.executable, peers / "patch_llmc_rowguard.py", peers / "llmc" / "train_gpt2_fp32.cu",
                                 build / "rowguard" / "train_gpt2_fp32.cu"]),
        ("nvcc", ["nvcc", *LLMC_NVCC_FLAGS, "-I", build / "rowguard", "-I", peers / "llmc", peers / "llmc_bench.cu",
                  "-lcublas", "-lcublasLt", "-o", binary]),
        ("llmc_bench", [binary, "-e", "gpt2_124M.bin", "-i", "tokens.bin", "-b", "1", "-t", "64", "-f", "2"]),
    ]
    for name, cmd in steps:
        try:
            _, stdout = timed([str(c) for c in cmd], build, name, cwd=build)
        except FileNotFoundError:
            return {"skipped": f"{name}: {cmd[0]} is not on PATH; run on a machine with the CUDA toolkit"}
        except BenchError as exc:
            return {"skipped": str(exc)}
    return bench_peers.parse_llmc(stdout.decode()) or {"skipped": f"llmc_bench printed no timings; see {build}"}


def tf_markdown(result):
    lines = [f"{result['config']}", "",
             "| fp model | checkpoints (validate) | after graph replays | graph = eager arenas | forward ms | "
             "logits ms (checked) | fwd+bwd ms | forward TFLOP/s | fwd+bwd TFLOP/s | GPU MiB | "
             "vs best PyTorch fwd / logits / fwd+bwd | vs tf.c fwd / fwd+bwd |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for fp_model, r in result["runs"].items():
        vs = [str(r.get(f"vs_best_pytorch_{w[:-3]}", {}).get("speedup", "")) for w, _ in LIKE_FOR_LIKE]
        cells = [r.get(c, "") for c in ("validate_checkpoints_match", "after_graph_replays_match",
                                         "graph_arenas_equal_eager", "forward_ms")]
        cells.append(f"{r.get('forward_logits_ms', '')} ({r.get('logits_replays_match', '')})")
        cells += [r.get(c, "") for c in ("forward_backward_ms", "forward_tflops", "forward_backward_tflops",
                                         "gpu_memory_mib")]
        cells += [" / ".join(vs), f"{r.get('speedup_vs_tf_c_forward', '')} / "
                                  f"{r.get('speedup_vs_tf_c_forward_backward', '')}"]
        lines.append(f"| {fp_model} | " + " | ".join(str(c) for c in cells) + " |")
        if "error" in r:
            lines.append(f"| {fp_model} | error: {r['error']} |")
    lines += ["", "| fp model | workload | path | s | tokens/s | decode ms/token | weight-stream floor ms/token | "
                  "= oracle | decoder = recompute | vs HF (their s / ours) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for fp_model, r in result["runs"].items():
        for key in ("generate", "generate_long"):
            g = r.get(key)
            if not g:
                continue
            for path in ("decoder", "recompute"):
                p = g[path]
                lines.append(f"| {fp_model} | {g['tokens']} after {g['prompt']} | {path} | {p['s']} | "
                             f"{p['tokens_per_s']} | {p.get('decode_ms_per_token', '')} | "
                             f"{p.get('weight_stream_floor_ms_per_token', '')} | "
                             f"{p.get('tokens_equal_oracle', '')} | {g['decoder_tokens_equal_recompute']} | "
                             f"{g.get('vs_hf', '') if path == 'decoder' else ''} |")
    peers = result.get("pytorch", {})
    lines += ["", f"PyTorch ({peers.get('torch', '')}, transformers {peers.get('transformers', '')}), same GPU, "
                  "weights and tokens (forward: the logits; + softmax: the probabilities, as tf.c's forward "
                  "ends):", "", "| variant | forward ms | forward + softmax ms | fwd+bwd ms | peak GPU MiB |",
              "| --- | --- | --- | --- | --- |"]
    for name, v in peers.get("training", {}).items():
        lines.append(f"| {name} | {v.get('forward_ms', v.get('error', ''))} | {v.get('forward_probs_ms', '')} | "
                     f"{v.get('forward_backward_ms', '')} | {v.get('peak_gpu_memory_mib', '')} |")
    for name, v in peers.get("generate", {}).items():
        lines.append(f"| {name}: {v.get('tokens', '')} tokens | {v.get('s', v.get('error', ''))} s "
                     f"(first calls {v.get('first_calls_s', '')}) | | | |")
    if "skipped" in peers:
        lines.append(f"| skipped: {peers['skipped']} | | | | |")
    llmc = result.get("llmc", {})
    for name, v in llmc.items():  # llm.c's forward ends with its loss (probabilities and cross-entropy)
        if name != "skipped":
            lines.append(f"| {name} | | {v.get('forward_ms', '')} | {v.get('forward_backward_ms', '')} | |")
    if "skipped" in llmc:
        lines.append(f"| llm.c skipped: {llmc['skipped']} | | | | |")
    for fp_model, r in result["runs"].items():
        if "tf_c_seconds" in r:
            c = r["tf_c_seconds"]
            lines.append(f"\ntf.c {fp_model}: forward {c['forward']:.2f} s, backward {c['backward']:.2f} s on "
                         f"{c['cpu']} ({c['cores']} cores), {c['how']}, from the oracle fixture")
    return "\n".join(lines)


ENTRIES = {"microgpt": (bench_microgpt, microgpt_markdown), "tf": (bench_tf, tf_markdown)}


def run_entry(name, args, out_dir, command):
    """One entry: its JSON and Markdown in out_dir, saved after each program it times."""
    json_path, md_path = out_dir / f"bench_{name}.json", out_dir / f"bench_{name}.md"
    if json_path.exists() or md_path.exists():
        raise BenchError(f"{out_dir} already holds bench_{name} results; pass a new --out folder")
    run, markdown = ENTRIES[name]

    def save(result):  # after each program, so a run cut short still leaves what it measured
        result["command"] = command
        json_path.write_text(json.dumps(result, indent=1) + "\n")
        md_path.write_text(f"# bench {name}\n\n`{command}`\n\n{markdown(result)}\n")

    save(run(args, out_dir, save))
    print(md_path.read_text())


def parse_args(argv):
    parser = OneLineParser(prog="bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("entry", choices=sorted(ENTRIES) + ["all"], help="what to time ('all': every entry)")
    parser.add_argument("--out", type=path_arg, help="folder for the results (created; must not hold earlier results)")
    parser.add_argument("--shared", type=path_arg,
                        help="folder with seeds/, data/, anchors/ (default $MICROGPT_SHARED or ../shared)")
    parser.add_argument("--steps", type=positive_int, nargs="+", default=[1000], help="microgpt: training lengths")
    parser.add_argument("--assets", type=path_arg,
                        help="tf: folder with GPT-2-shaped assets (default: synthesize them into --out)")
    parser.add_argument("--repeat", type=positive_int, default=3, help="microgpt: runs per timing, the median is kept")
    parser.add_argument("--peers", default=",".join(PEER_PARTS),
                        help="tf: the PyTorch parts to time, comma-separated (default: %(default)s)")
    parser.add_argument("--training-only", action="store_true",
                        help="tf: time the forward and forward + backward only, not generation")
    parser.add_argument("--engines", nargs="+", default=["default"], choices=ENGINE_NAMES, metavar="ENGINE",
                        help=f"microgpt: engines to time, of {', '.join(ENGINE_NAMES)} ('default' passes no --engine)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.peers.split(",")) - set(PEER_PARTS))
    if unknown:  # else timed as nothing, silently
        parser.error(f"--peers: unknown parts {unknown}; pick from {','.join(PEER_PARTS)}")
    for flag, values in (("--steps", args.steps), ("--engines", args.engines)):
        if len(set(values)) < len(values):  # two equal --steps would divide by zero in the marginal rate
            parser.error(f"{flag} lists a value twice ({' '.join(map(str, values))}): give each once")
    return args


def main(argv=None):
    args = parsed(parse_args, argv, "bench")
    if args is None:
        return 2
    made = args.out is not None and not args.out.exists()
    if args.out is not None:  # made before any entry runs: a file in the way fails now, in one line
        try:
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            what = "it is a file, not a folder" if args.out.exists() else exc.strerror or exc
            print(f"bench: error: cannot make the --out folder {args.out} ({what}); pick another --out",
                  file=sys.stderr)
            return 1
    quiet()  # the ports' small grids are deliberate: no occupancy warnings in the logs
    out_dir = args.out or Path(tempfile.mkdtemp(prefix=f"bench_{args.entry}_"))
    command = shlex.join([sys.executable, "tools/bench.py", *(argv if argv is not None else sys.argv[1:])])
    status, measured = 0, False
    for name in sorted(ENTRIES) if args.entry == "all" else [args.entry]:
        try:  # one entry failing still leaves the others' numbers
            run_entry(name, args, out_dir, command)
            measured = True
        except BenchError as exc:
            print(f"bench: error: {exc}", file=sys.stderr)
            status = 1
    if made and not any(out_dir.iterdir()):  # nothing measured: leave no empty folder behind
        out_dir.rmdir()
    if measured:
        print(f"results in {out_dir}")
    return status


if __name__ == "__main__":
    sys.exit(main())
