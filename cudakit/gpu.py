"""Whether kernels can run here, and keeping Numba's advice to kernel writers off a user's terminal."""
import warnings

from numba import config


def unavailable_reason(simulator_ok=True):
    """None when kernels can run (a CUDA GPU, or the simulator when simulator_ok), else a short reason."""
    from numba import cuda

    if config.ENABLE_CUDASIM:
        return None if simulator_ok else "NUMBA_ENABLE_CUDASIM=1: kernels run in the CPU simulator"
    try:
        if cuda.is_available():
            return None
        return "no CUDA GPU or driver found"
    except Exception as exc:  # a half-installed driver raises instead of answering
        return f"CUDA is not usable ({exc})".replace("\n", " ")


def quiet():
    """Numba's performance warnings (a one-block grid, a host array copied to a kernel) are for
    whoever writes the kernels; the ports' one-block launches are deliberate. A program calls this
    before its first launch."""
    from numba.core.errors import NumbaWarning

    config.CUDA_LOW_OCCUPANCY_WARNINGS = False
    warnings.simplefilter("ignore", NumbaWarning)
    try:  # numba-cuda's own warning classes, which are not numba's subclasses
        from numba.cuda.core.errors import NumbaWarning as CudaNumbaWarning
        from numba.cuda.cudadrv.error import NvvmWarning
    except ImportError:
        return
    warnings.simplefilter("ignore", CudaNumbaWarning)
    warnings.simplefilter("ignore", NvvmWarning)
