"""Where a recorded forward's time goes inside the graph, kernel by kernel: tf_numba's recorded
forward (tf.c's, ending with the probabilities) and torch.compile's (mode="reduce-overhead", TF32
off, ending with softmax(logits)), on the same GPU, weights and tokens, both traced by
torch.profiler (CUPTI reports each kernel node of a replayed graph) in one process.

ncu times each kernel alone, its caches flushed and the launch serialised; here each kernel runs
where the graph puts it, so the sum of a replay's kernels against its span (first start to last
end) is what the kernel boundaries cost.

    python3 tools/experiments/graph_profile.py ASSETS_DIR [fma|nofma] [--replays N] [--first N]

Prints, for each program: the span of a replay, its kernels' summed time, the gaps, a table of
kernels and of kernel classes (count a replay, mean and total us a replay), and the first N
launches of a replay in order (the first layer's products apart: attn.c_proj and mlp.c_proj
share a kernel name).
"""
import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bench_peers  # noqa: E402
from numba import cuda  # noqa: E402

from cudakit.stream import Recorded  # noqa: E402
from tf_numba import assets  # noqa: E402
from tf_numba.forward import forward  # noqa: E402
from tf_numba.model import TFModel  # noqa: E402
from tf_numba.training import run_step  # noqa: E402

T = 64


def short(name):
    """A readable kernel name: the kernel's own name of a demangled `ns::module::name[abi:..](..)`
    (Numba's kernels carry the C loop's name, as matmul.py and kernels.py set it) or of a mangled
    `_ZN<len><name>...`, else the name up to its arguments."""
    if name.startswith("_ZN"):
        i, parts = 3, []
        while i < len(name) and name[i].isdigit():
            j = i
            while name[j].isdigit():
                j += 1
            n = int(name[i:j])
            parts.append(name[j:j + n])
            i = j + n
        if parts:
            return parts[-1]
    name = re.sub(r"\[abi:[^]]*\]", "", re.sub(r"\(.*", "", name))
    if name.startswith("tf_numba::"):
        return name.split("::")[-1]
    return name[:90]


# kernel classes: (class, pattern of the short name); the first that matches. PyTorch's GEMMs are
# told apart by their launches a replay: one is the unembedding (the tied lm_head), 12 or more the
# linear layers.
CLASSES = (("linear layers", r"^tf_fc"), ("unembedding", r"^tf_unembedding(_max)?$"),
           ("softmax", r"^tf_unembedding_|softmax"), ("layer norm", r"^tf_ln$|layer_norm"),
           ("attention", r"^tf_attn|fmha|scaled_dot_product"), ("embedding", r"embedding"),
           ("linear layers", r"splitK"), ("gelu", r"tanh"))


def kernel_class(name, per_replay):
    if re.search(r"gemm", name):
        return "unembedding" if per_replay < 2 else "linear layers"
    for label, pattern in CLASSES:
        if re.search(pattern, name):
            return label
    return "other"


def kernels_of(prof):
    """[(start_us, end_us, name)] of every GPU kernel the profiler saw, by start."""
    out = []
    for e in prof.events():
        if e.device_type.name == "CUDA" and not e.name.startswith("Memcpy") and not e.name.startswith("Memset"):
            out.append((e.time_range.start, e.time_range.end, e.name))
    return sorted(out)


def split_replays(ks, per_replay):
    return [ks[i:i + per_replay] for i in range(0, len(ks) - per_replay + 1, per_replay)]


def report(label, ks, per_replay, first=0):
    replays = split_replays(ks, per_replay)[1:]  # the first replay warms
    spans = [r[-1][1] - r[0][0] for r in replays]
    busy = [sum(e - s for s, e, _ in r) for r in replays]
    n = len(replays)
    print(f"\n## {label}: {per_replay} kernels a replay, {n} replays")
    print(f"span {sum(spans) / n:.1f} us, kernels {sum(busy) / n:.1f} us, gaps {(sum(spans) - sum(busy)) / n:.1f} us")
    by = defaultdict(lambda: [0, 0.0])
    for r in replays:
        for s, e, name in r:
            by[short(name)][0] += 1
            by[short(name)][1] += e - s
    print(f"{'kernel':<60} {'a replay':>8} {'mean us':>8} {'us a replay':>12}")
    classes = defaultdict(lambda: [0, 0.0])
    for name, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:60]:<60} {c / n:8.1f} {t / c:8.2f} {t / n:12.1f}")
        label = kernel_class(name, c / n)
        classes[label][0] += c
        classes[label][1] += t
    print(f"{'class':<60} {'a replay':>8} {'mean us':>8} {'us a replay':>12}")
    for label, (c, t) in sorted(classes.items(), key=lambda kv: -kv[1][1]):
        print(f"{label:<60} {c / n:8.1f} {t / c:8.2f} {t / n:12.1f}")
    if first:  # launch by launch, in the graph's order: the kernels of one name apart (each product)
        print(f"{'position':>8} {'kernel':<60} {'mean us':>8}")
        for i in range(min(first, per_replay)):
            print(f"{i:8d} {short(replays[0][i][2])[:60]:<60} {sum(r[i][1] - r[i][0] for r in replays) / n:8.2f}")


def check_count(ks, replays):
    if len(ks) % replays:
        print(f"warning: {len(ks)} kernels over {replays} replays: the split by replay is approximate")


def profiled(fn, replays):
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            fn()
        torch.cuda.synchronize()
    return kernels_of(prof)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("assets")
    p.add_argument("fp_model", nargs="?", default="fma")
    p.add_argument("--replays", type=int, default=21)
    p.add_argument("--first", type=int, default=12, help="list the first N launches of a replay in order")
    args = p.parse_args(argv)
    import torch

    assets_dir = Path(args.assets)
    cfg, tensors = assets.load_model(assets_dir / "model.safetensors")
    data = assets.load_data(assets_dir / "data", cfg.d_vocab)

    m = TFModel(cfg, tensors, args.fp_model)
    run_step(m, data, T)
    run_step(m, data, T)
    rec = Recorded(lambda: forward(m, T, last_only=False))
    rec()

    def ours():
        rec.launch()
        rec.sync()

    ks = profiled(ours, args.replays)
    check_count(ks, args.replays)
    report(f"tf_numba {args.fp_model}, recorded forward", ks, len(ks) // args.replays, args.first)
    cuda.synchronize()

    model = bench_peers.load_model(assets_dir / "model.safetensors", cfg)
    bench_peers.set_tf32(False)
    logits, _ = bench_peers.training_calls(model, data, T)
    cprobs = torch.compile(lambda: logits().softmax(dim=-1), mode="reduce-overhead")

    def theirs():
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            cprobs()

    for _ in range(5):
        theirs()
    ks = profiled(theirs, args.replays)
    check_count(ks, args.replays)
    report("torch.compile reduce-overhead, TF32 off, forward with softmax", ks, len(ks) // args.replays, args.first)
    return 0


if __name__ == "__main__":
    sys.exit(main())
