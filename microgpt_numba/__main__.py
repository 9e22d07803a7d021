import sys

# Loading a cached kernel makes Numba import its array-math lowering, which probes for BLAS by
# importing scipy.linalg (0.5 s on the H200 image) although no kernel here calls BLAS (np.dot and
# the like). In this process nothing else uses scipy, so the probe is answered "absent" up front;
# imported as a library, microgpt_numba leaves sys.modules alone.
sys.modules.setdefault("scipy", None)

from cudakit.gpu import simulator_flag_problem  # noqa: E402

if simulator_flag_problem():  # checked before anything imports Numba
    print(f"microgpt_numba: error: {simulator_flag_problem()}", file=sys.stderr)
    sys.exit(2)

from .cli import main  # noqa: E402

sys.exit(main())
