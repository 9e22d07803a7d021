# call 1: the streaming rounds (.carry/patched = HEAD + tools/experiments/stream_rounds.patch)
# against main (HEAD), one process each, twice; the GPU suite on the patched tree; the head's
# length on the patched tree last
R=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > $OUT/gpu.txt 2>&1
probe() {  # tree, output, geometry...
  (cd $1 && PYTHONPATH=/tmp/site:$1 timeout 120 python3 tools/experiments/softmax_probe.py 64 ${@:3}) >> $OUT/$2 2>&1
}
for i in 1 2; do probe $R probe_main.txt; probe $R/.carry/patched probe_patched.txt; done
cat $OUT/probe_main.txt $OUT/probe_patched.txt
cd $R/.carry/patched && PYTHONPATH=/tmp/site:$PWD MICROGPT_SHARED=$R/.carry timeout 300 python3 -m pytest -q -rs -p no:warnings -p xdist -n 14 --dist loadfile --maxfail=3 > $OUT/pytest_gpu_patched.txt 2>&1
tail -3 $OUT/pytest_gpu_patched.txt
for g in 512/16/1024 512/16/3072; do probe $R/.carry/patched probe_patched_heads.txt $g; done
cat $OUT/probe_patched_heads.txt
