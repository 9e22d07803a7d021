# diagnosis of the one-pass softmax sum: the probe, then ncu of the sum's kernel and the softmax's launches.
# .carry/fwd_once.py (git-ignored) loads /tmp/g into a TFModel (its second argument the fp model) and runs
# training.run_step(m, data, 64) twice, eagerly, as in ../2026-12-03-h200-softmax/README.md. Run with
# one_pass.patch applied: its probe takes THREADS/PER/GROUPS (main's takes THREADS/PER/GROUPS/HEAD).
python3 tools/tf_assets.py synth --preset gpt2 --out /tmp/g > /dev/null 2>&1
for g in "" "64 1024/8/32" "64 512/8/16"; do timeout 60 python3 tools/experiments/softmax_probe.py $g 2>&1 | grep -v -i warn; done > $OUT/softmax_probe.txt
ncu --clock-control none --kernel-name regex:"tf_unembedding_softmax\b" --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats --page source --csv --print-source sass python3 .carry/fwd_once.py /tmp/g fma > /tmp/src.csv 2>/dev/null
python3 tools/ncu_source.py /tmp/src.csv --top 40 > $OUT/ncu_source_softmax.txt 2>&1
ncu --clock-control none --kernel-name regex:"tf_unembedding_(softmax|exps|scale)\b" --launch-skip 3 --launch-count 3 --section SpeedOfLight --section WarpStateStats python3 .carry/fwd_once.py /tmp/g fma > $OUT/ncu_softmax.txt 2>&1
cat $OUT/softmax_probe.txt; grep -E "Duration|^  tf_|==PROF" $OUT/ncu_softmax.txt | head -20; head -40 $OUT/ncu_source_softmax.txt
