#!/bin/bash
# one device call: the softmax probe of three trees (HEAD, slots, slots+expf_short), the GPU
# suite of the working tree, then the bench of the working tree if it was faster
R=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for tree in base slots main base slots main; do
  d=$R; [ $tree != main ] && d=$R/.carry/$tree
  echo "== $tree" >> $OUT/probe.txt
  (cd $d && PYTHONPATH=/tmp/site timeout 90 python3 tools/experiments/softmax_probe.py 64 2>&1 | grep -v Warn | grep "us a run\|same bits" >> $OUT/probe.txt)
done
cat $OUT/probe.txt
MICROGPT_SHARED=$R/.carry timeout 260 python3 -m pytest -q -rs -p no:warnings -p xdist -n 14 --dist loadfile --maxfail=3 tests/tf/test_tf_fp.py tests/tf/test_tf_ordered.py tests/tf/test_tf_sums.py tests/tf/test_tf_generate.py tests/tf/test_tf_branches.py 2>&1 | tail -12 > $OUT/pytest_tf.txt
tail -3 $OUT/pytest_tf.txt
python3 tools/tf_assets.py synth --preset gpt2 --out /tmp/g > /dev/null 2>&1
timeout 200 python3 tools/bench.py tf --assets /tmp/g --peers graph,compile --training-only --out $OUT/bench > $OUT/bench.log 2>&1
tail -30 $OUT/bench.log
