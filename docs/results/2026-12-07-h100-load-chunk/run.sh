#!/bin/bash
# one call: softmax probe of HEAD (.carry/base) and the working tree (load_chunk.patch); the whole
# GPU suite of the working tree; then its bench in what time is left
R=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
(python3 tools/tf_assets.py synth --preset gpt2 --out /tmp/g > /dev/null 2>&1 &)
for tree in base main; do
  d=$R; [ $tree != main ] && d=$R/.carry/$tree
  echo "== $tree" >> $OUT/probe.txt
  (cd $d && PYTHONPATH=/tmp/site timeout 60 python3 tools/experiments/softmax_probe.py 64 2>&1 | grep "us a run\|same bits" >> $OUT/probe.txt)
done
cat $OUT/probe.txt
MICROGPT_SHARED=$R/.carry timeout 270 python3 -m pytest -q -rs -p no:warnings -p xdist -n 14 --dist loadfile --maxfail=3 > $OUT/pytest_all.txt 2>&1
tail -4 $OUT/pytest_all.txt
left=$((575 - SECONDS))
echo "bench gets $left s" > $OUT/bench.log
timeout $left python3 tools/bench.py tf --assets /tmp/g --peers graph,compile --training-only --out $OUT/bench >> $OUT/bench.log 2>&1
tail -30 $OUT/bench.log
