"""Dynamic shared memory past 48 KiB, which CUDA lets a kernel use only once it opts in.

A block's static shared arrays may hold 48 KiB; a kernel may ask for more (227 KiB on the H200)
as dynamic shared memory (`cuda.shared.array(0, dtype)`, its size given at launch), once its
function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES is raised. Numba has no option for
that attribute, so `opt_in` sets it on the compiled function, the way Numba sets a carveout.
"""
import functools

from numba import config, cuda

STATIC_LIMIT = 48 * 1024  # bytes a launch may ask for without opting in
H200_OPTIN = 227 * 1024  # bytes an H100 or H200 block may opt in to
_opted = {}  # (kernel, argument types) -> the bytes opted in to


@functools.cache
def optin_bytes():
    """The shared memory a block may opt in to on this GPU: 227 KiB on an H100 or H200, 99 KiB on
    an RTX 4090. The simulator gets the H200's, so that it stages as that GPU does."""
    return H200_OPTIN if config.ENABLE_CUDASIM else cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN


def opt_in(kernel, args, nbytes):
    """Compiles kernel for args (if it is not yet) and lets its launches ask for nbytes of dynamic
    shared memory. Nothing to do at or under STATIC_LIMIT, or in the simulator."""
    if config.ENABLE_CUDASIM or nbytes <= STATIC_LIMIT:
        return
    types = tuple(kernel.typeof_pyval(a) for a in args)
    key = (kernel, types)
    if _opted.get(key, 0) >= nbytes:
        return
    from numba.cuda.cudadrv.driver import binding, driver

    cufunc = kernel.compile(types)._codelibrary.get_cufunc()
    driver.cuKernelSetAttribute(binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                nbytes, cufunc.handle, cufunc.device.id)
    _opted[key] = nbytes
