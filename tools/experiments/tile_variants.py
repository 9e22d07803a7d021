"""A recorded forward and training step with some shapes' tiles overridden, beside the step as on
main (before and after it, to show drift), each checked as bench.py checks it (bench_tf.time_tf:
validation 39/39 against the oracle fixture, the checkpoint sums after the replays, the replayed
arenas against an eager step). The sweep (tools/tf_matmul_sweep.py) times a product alone; a
tile change within a sweep's noise, or on a graph branch, is judged here by the step it lands in.

    python3 tools/experiments/tile_variants.py ASSETS_DIR fma|nofma KIND:ROWSxCOLSxSUM=TILE ...

TILE is a tf_matmul_sweep label (TMxTN/RTxCT/BK/ST[/q], or a name such as t_wide). For example,
nofma's three changes from docs/tf.md's lead (run on 2026-12-03: within noise of main,
docs/results/2026-12-03-h200-likeforlike/tile_variants_nofma.txt):

    python3 tools/experiments/tile_variants.py /tmp/g nofma tf_fc:64x2304x768=2x2/8x16/64/2/q \\
        tf_fc:64x3072x768=2x2/8x16/64/2/q tf_fc_back_din:64x768x768=2x2/8x16/64/4/q \\
        tf_fc_back_dweight:768x768x64=mid

Prints one line per run: main, the overrides, main again.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_tf import time_tf  # noqa: E402
from tf_matmul_sweep import CANDIDATES, tile_list  # noqa: E402

from tf_numba import assets  # noqa: E402
from tf_numba import matmul as M  # noqa: E402
from tf_numba.model import TFModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("validate_checkpoints_match", "after_graph_replays_match", "graph_arenas_equal_eager", "forward_ms",
        "forward_logits_ms", "forward_backward_ms", "error")


def overrides(specs):
    """{(kind, rows, cols, sum): tile} from KIND:ROWSxCOLSxSUM=TILE."""
    table = {}
    for spec in specs:
        shape, label = spec.split("=")
        kind, dims = shape.split(":")
        rows, cols, S = (int(x) for x in dims.split("x"))
        table[(kind, rows, cols, S)] = CANDIDATES[tile_list(label)[0]]  # the sweep's parse, which names it
    return table


def timed_runs(assets_dir, fp_model, runs):
    """For each (label, setup) of runs: setup(), then a fresh TFModel's recorded pass timed and
    checked (bench_tf.time_tf), printed as one line. ln_runs_probe.py runs its variants so too."""
    cfg, tensors = assets.load_model(assets_dir / "model.safetensors")
    data = assets.load_data(assets_dir / "data", cfg.d_vocab)
    fixture = ROOT / "tests" / "fixtures" / f"tf_oracle_gpt2_{fp_model}.json"
    for label, setup in runs:
        setup()
        m = TFModel(cfg, tensors, fp_model)
        r = time_tf(m, data, fixture)
        print(label, json.dumps({k: r.get(k) for k in KEYS}), flush=True)
        del m


def main(argv):
    assets_dir, fp_model, table = Path(argv[0]), argv[1], overrides(argv[2:])
    main_tile_for = M.tile_for

    def tile_for(name, n_rows, n_cols, sum_len, fused):
        return table.get((name, n_rows, n_cols, sum_len)) or main_tile_for(name, n_rows, n_cols, sum_len, fused)

    def choosing(choose):
        def setup():
            M.tile_for = choose  # launch.matmul asks matmul.tile_for at each launch
        return setup

    timed_runs(assets_dir, fp_model, [("main", choosing(main_tile_for)), ("overrides", choosing(tile_for)),
                                      ("main", choosing(main_tile_for))])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
