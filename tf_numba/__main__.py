import sys

from cudakit.gpu import simulator_flag_problem

if simulator_flag_problem():  # checked before anything imports Numba
    print(f"tf_numba: error: {simulator_flag_problem()}", file=sys.stderr)
    sys.exit(2)

from .cli import main  # noqa: E402

sys.exit(main())
