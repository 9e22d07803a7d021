# call 6: main (ed57b1e; kernels as c025aa8): the whole GPU suite, each result as it comes (-v)
R=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > $OUT/gpu.txt 2>&1
PYTHONUNBUFFERED=1 MICROGPT_SHARED=$R/.carry timeout 285 python3 -m pytest -v -rfE --tb=short -p no:warnings -p xdist -n 15 --dist loadfile > $OUT/pytest_gpu.txt 2>&1
echo "rc $?" >> $OUT/pytest_gpu.txt
grep -E "FAILED|ERROR|passed|failed|^rc " $OUT/pytest_gpu.txt | grep -v "PASSED" | tail -30
grep -A40 "= FAILURES =" $OUT/pytest_gpu.txt | head -60
