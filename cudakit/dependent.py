"""Programmatic dependent launch (PDL, sm_90 on): a kernel that starts before the one before it
in its stream has finished, with one source for every GPU and the CUDA simulator.

A recorded pass is a chain of a few hundred kernels, each waiting for the last to finish: about
1.1 us a kernel on the H200 for a kernel that does nothing (tools/experiments/pdl_probe.py). A
dependent launch (cudakit.stream.launch while recording) lets the next kernel's blocks be placed
once every block of this one has called `wait_inputs()`. They may do what needs nothing of the
earlier kernels (copy weights into shared memory) until their own `wait_inputs()`, which returns
once every earlier kernel has finished and its writes are visible. So a kernel launched so must
call `wait_inputs()` before it reads or writes anything an earlier kernel writes or reads.

Without a dependent launch, or before sm_90, `wait_inputs()` does nothing and the launch waits as
any other: the same compiled kernel serves both, with the same bits.
"""
import functools

from numba import config

if config.ENABLE_CUDASIM:

    def wait_inputs():
        pass

    def supported():
        return False

else:
    from llvmlite import ir
    from numba import cuda, types
    from numba.cuda.extending import intrinsic

    @functools.cache
    def supported():
        """griddepcontrol exists from sm_90 (H100, H200)."""
        return cuda.get_current_device().compute_capability >= (9, 0)

    def _compiling_for_sm90():
        """Whether the kernel being compiled targets sm_90 on: Numba compiles for the current
        device, as its dispatcher names it (tools/ptx_check.py names one without a GPU)."""
        from numba.cuda import dispatcher

        return dispatcher.get_current_device().compute_capability >= (9, 0)

    def _griddepcontrol(op):
        @intrinsic
        def call(typingctx):
            def codegen(context, builder, signature, args):
                if _compiling_for_sm90():
                    fty = ir.FunctionType(ir.VoidType(), [])
                    builder.call(ir.InlineAsm(fty, f"griddepcontrol.{op};", "~{memory}", side_effect=True), [])
                return context.get_dummy_value()

            return types.void(), codegen

        return call

    _wait = _griddepcontrol("wait")
    _launch_dependents = _griddepcontrol("launch_dependents")

    @cuda.jit(device=True, inline="always")
    def wait_inputs():
        """Returns once the kernels before this one have finished and their writes are visible;
        then the next dependent kernel may be placed (once every block of this one is here)."""
        _wait()
        _launch_dependents()
