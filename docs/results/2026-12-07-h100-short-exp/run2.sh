#!/bin/bash
# the softmax probe of HEAD (.carry/base) and the working tree, then test_tf_ordered on a GPU
R=$PWD
for tree in base main; do
  d=$R; [ $tree != main ] && d=$R/.carry/$tree
  echo "== $tree" >> $OUT/probe.txt
  (cd $d && PYTHONPATH=/tmp/site timeout 60 python3 tools/experiments/softmax_probe.py 64 2>&1 | grep "us a run\|same bits" >> $OUT/probe.txt)
done
cat $OUT/probe.txt
MICROGPT_SHARED=$R/.carry timeout 110 python3 -m pytest -q -rs -p no:warnings -p xdist -n 8 tests/tf/test_tf_ordered.py 2>&1 | tail -6 > $OUT/pytest_ordered.txt
tail -3 $OUT/pytest_ordered.txt
