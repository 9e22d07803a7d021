"""The plumbing both ports use, most of it CUDA's, the way llm.c keeps its shared `llmc/` headers.

- `devmath`: float32 device arithmetic whose bits are the same on the GPU and in Numba's CUDA
  simulator (separate roundings, fused multiply-add), and libdevice's functions with simulator
  stand-ins;
- `vector`: aligned vector loads from shared memory into registers (NVVM merges few neighbouring
  float32 loads from a Numba shared array by itself);
- `stream`: where launches go (the default stream, or a CUDA graph being recorded, with branches
  beside it) and recording a graph;
- `gpu`: whether kernels can run here, what a failing GPU raises, and the Numba warnings a user
  should not see;
- `asynccopy`: copies from global to shared memory that fly while a block computes (cp.async),
  and the addresses a kernel copying the same pattern each chunk takes once;
- `warp`: warp shuffles (`shfl_up`, `shfl_idx`) with simulator stand-ins, for scans by a block;
- `sharedmem`: dynamic shared memory past 48 KiB, and how much this GPU lets a block opt in to;
- `arrays`: where a device array lives (its address and byte range);
- `files`: whether an input path is a FIFO or a device (which a read would wait on, or never end);
- `options`: numbers on a command line, read as the C programs read them (ASCII digits, atof's forms);
- `simulator`: a fix for a race in Numba's CUDA simulator, installed when `devmath` (which every
  kernel module imports) is imported with the simulator on.

Importing the package imports no Numba, so that a program can check its environment first
(`gpu.simulator_flag_problem`).

Nothing here knows about microgpt.cu or tf.c.
"""
