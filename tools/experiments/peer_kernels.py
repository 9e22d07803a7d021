"""PyTorch's kernels for one forward and one forward + backward of tools/bench_peers.py's model
(eager, TF32 off), between cudaProfilerStart and cudaProfilerStop, so that ncu times each one:

    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \\
        --print-units base --log-file torch.csv python3 tools/experiments/peer_kernels.py ASSETS_DIR [T]
    python3 tools/ncu_summary.py torch.csv

The kernels of a CUDA graph are these same kernels (the graph removes the launch gaps), so this
says how long cuBLAS takes at each of tf_numba's matrix shapes.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench_peers import load_model, set_tf32, training_calls  # noqa: E402
from tf_numba import assets  # noqa: E402


def main(assets_dir, T=64):
    assets_dir, T = Path(assets_dir), int(T)
    cfg, _ = assets.load_model(assets_dir / "model.safetensors")
    tokens = assets.load_data(assets_dir / "data", cfg.d_vocab)
    model = load_model(assets_dir / "model.safetensors", cfg)
    set_tf32(False)
    logits, loss = training_calls(model, tokens, T)

    def step():
        model.zero_grad(set_to_none=False)
        loss().backward()

    for _ in range(3):
        with torch.no_grad():
            logits()
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    with torch.no_grad():
        logits()
    torch.cuda.synchronize()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("peer_kernels: one forward, then one forward + backward", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
