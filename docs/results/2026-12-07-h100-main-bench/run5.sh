# call 5: main (c025aa8): the GPU suite, the bench beside PyTorch, then the forward's graph profile
R=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > $OUT/gpu.txt 2>&1
git log -1 --format=%h > $OUT/commit.txt 2>&1
MICROGPT_SHARED=$R/.carry timeout 260 python3 -m pytest -q -rs -p no:warnings -p xdist -n 14 --dist loadfile --maxfail=3 > $OUT/pytest_gpu.txt 2>&1
tail -3 $OUT/pytest_gpu.txt
python3 tools/tf_assets.py synth --preset gpt2 --out /tmp/g > /dev/null 2>&1
timeout 250 python3 tools/bench.py tf --assets /tmp/g --peers graph,compile --training-only --out $OUT/bench > $OUT/bench_stdout.txt 2>&1
tail -30 $OUT/bench_stdout.txt
timeout 60 python3 tools/experiments/graph_profile.py /tmp/g fma --first 12 > $OUT/graph_profile_fma.txt 2>&1
tail -40 $OUT/graph_profile_fma.txt
