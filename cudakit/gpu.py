"""Whether kernels can run here, what a failing GPU raises, and keeping Numba's advice to kernel
writers off a user's terminal."""
import importlib
import os
import warnings


def simulator_flag_problem():
    """Numba reads NUMBA_ENABLE_CUDASIM as an integer when it is imported, and a value that is not
    one (`yes`) gets a warning of many lines and the GPU. Before Numba is imported: the one-line
    problem, or None."""
    value = os.environ.get("NUMBA_ENABLE_CUDASIM")
    try:
        value is None or int(value)
    except ValueError:
        return f"NUMBA_ENABLE_CUDASIM={value!r} is not an integer: set it to 1 for Numba's CPU simulator, or unset it"
    return None


def unavailable_reason(simulator_ok=True):
    """None when kernels can run (a CUDA GPU, or the simulator when simulator_ok), else a short reason."""
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        return None if simulator_ok else "NUMBA_ENABLE_CUDASIM=1: kernels run in the CPU simulator"
    try:
        if cuda.is_available():
            return None
        return "no CUDA GPU or driver found"
    except Exception as exc:  # a half-installed driver raises instead of answering
        return f"CUDA is not usable ({exc})".replace("\n", " ")


def cuda_errors():
    """The exceptions a failing GPU, driver or toolkit raises (those this Numba has), for a
    program to report in one line."""
    errors = []
    for module, names in (("numba.cuda.cudadrv.error", ("CudaDriverError", "CudaRuntimeError", "CudaSupportError",
                                                         "NvvmError", "NvvmSupportError", "NvrtcError",
                                                         "NvrtcSupportError", "CCSupportError")),
                          ("numba.cuda.cudadrv.driver", ("LinkerError",)),
                          ("cuda.core._utils.cuda_utils", ("CUDAError",))):
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        errors += [getattr(found, name) for name in names if isinstance(getattr(found, name, None), type)]
    return tuple(errors)


def run_failed(exc):
    """cuda_errors()'s exception as one line that says what to check."""
    detail = " ".join(str(exc).split())
    return (f"the GPU run failed ({type(exc).__name__}: {detail}); check that the NVIDIA driver and the CUDA "
            "toolkit wheels work (nvidia-smi, pip install 'numba-cuda[cu13]')")


STDOUT_CLOSED = "stdout is closed: run with an open stdout (a terminal, a pipe, or > FILE)"


def quiet():
    """Numba's performance warnings (a one-block grid, a host array copied to a kernel) are for
    whoever writes the kernels; the ports' one-block launches are deliberate. A program calls this
    before its first launch."""
    from numba import config
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
