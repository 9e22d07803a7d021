"""Runs tf_numba's generation so that a profiler sees one prefill and a few decode steps alone:
the kernels compile and the graphs are recorded first, outside the profiled range, and then
one generation call of --tokens tokens runs between cudaProfilerStart and cudaProfilerStop.

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \\
        --print-units base --log-file decode.csv python3 tools/tf_decode_profile.py --assets A
    python3 tools/ncu_summary.py decode.csv

Exit status: 0 done; 1 assets that cannot be read, or no GPU; 2 a usage error.
"""
import sys

from tool_cli import OneLineParser, parsed, path_arg, positive_int

from cudakit.gpu import unavailable_reason  # noqa: E402  (tool_cli put the checkout on sys.path)
from tf_numba import assets  # noqa: E402
from tf_numba.fp import FP_MODELS
from tf_numba.generate import generate, prompt_size, tokens_problem
from tf_numba.model import TFModel


def main(argv=None):
    ap = OneLineParser(prog="tf_decode_profile.py", description=__doc__.splitlines()[0])
    ap.add_argument("--assets", type=path_arg, required=True, help="folder with model.safetensors and data")
    ap.add_argument("--fp-model", choices=FP_MODELS, default="fma")
    ap.add_argument("--tokens", type=positive_int, default=3, help="tokens of the profiled call (one prefill, "
                    "then a decode step per further token)")
    args = parsed(ap.parse_args, argv, "tf_decode_profile")
    if args is None:
        return 2
    try:
        cfg, tensors = assets.load_model(args.assets / "model.safetensors")
        data = assets.load_data(args.assets / "data", cfg.d_vocab)
    except assets.AssetError as exc:
        print(f"tf_decode_profile: error: {exc}", file=sys.stderr)
        return 1
    problem = tokens_problem(args.tokens, cfg.d_seq)
    if problem:  # else a traceback from the token buffer, as for a prompt past d_seq
        print(f"tf_decode_profile: error: {problem} (see tf_decode_profile.py --help)", file=sys.stderr)
        return 2
    reason = unavailable_reason()
    if reason is not None:  # else Numba's traceback of many lines at the first launch
        print(f"tf_decode_profile: error: {reason}; run it on a machine with an NVIDIA GPU and driver",
              file=sys.stderr)
        return 1
    from numba import cuda

    m = TFModel(cfg, tensors, args.fp_model)
    prompt = [int(t) for t in data[:prompt_size(len(data), cfg.d_seq, args.tokens)]]  # python -m tf_numba's
    for _ in range(2):  # compiles, then records the graphs
        generate(m, prompt, args.tokens)
    cuda.profile_start()
    tokens = generate(m, prompt, args.tokens)
    cuda.synchronize()
    cuda.profile_stop()
    print(f"tf_decode_profile: {args.fp_model}, prompt {len(prompt)}, tokens {tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
