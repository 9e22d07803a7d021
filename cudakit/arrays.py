"""Where a device array lives: its address and byte range, on the GPU and in the simulator alike."""
import math

from numba import config


def is_device_array(x):
    return hasattr(x, "copy_to_host")


def _interface(view):
    # The simulator's device arrays wrap numpy arrays and expose only the host interface.
    return view.__array_interface__ if config.ENABLE_CUDASIM else view.__cuda_array_interface__


def address(view):
    return _interface(view)["data"][0]


def byte_bounds(view):
    """[first byte, one past the last byte) that the view can touch."""
    face = _interface(view)
    lo = hi = face["data"][0]
    itemsize = view.dtype.itemsize
    strides = face.get("strides") or [itemsize * math.prod(face["shape"][i + 1:]) for i in range(len(face["shape"]))]
    for n, stride in zip(face["shape"], strides):
        if n == 0:
            return lo, lo
        if stride < 0:
            lo += (n - 1) * stride
        else:
            hi += (n - 1) * stride
    return lo, hi + itemsize
