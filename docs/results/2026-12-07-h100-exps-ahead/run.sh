#!/bin/bash
# softmax probe: HEAD (.carry/base), the working tree (exps ahead in every warp but thread 0's),
# .carry/quiet (not in the warps of thread 0's scheduler), then main again; then the whole GPU suite
R=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
for tree in base main quiet main; do
  d=$R; [ $tree != main ] && d=$R/.carry/$tree
  echo "== $tree" >> $OUT/probe.txt
  (cd $d && PYTHONPATH=/tmp/site timeout 50 python3 tools/experiments/softmax_probe.py 64 2>&1 | grep "us a run\|same bits" >> $OUT/probe.txt)
done
cat $OUT/probe.txt
MICROGPT_SHARED=$R/.carry timeout 280 python3 -m pytest -q -rs -p no:warnings -p xdist -n 14 --dist loadfile --maxfail=3 > $OUT/pytest_all.txt 2>&1
tail -4 $OUT/pytest_all.txt
