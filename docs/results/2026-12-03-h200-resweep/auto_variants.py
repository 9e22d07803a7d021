"""Runs tools/experiments/tile_variants.py (fma) with the sweep's best tile for every shape of more
than one row where it beat tile_for's by 3 %: python3 auto_variants.py SWEEP.json (from the
repository's root, with the weights in /tmp/g). Kept as the record of how the variants were chosen."""
import json
import subprocess
import sys
d = json.load(open(sys.argv[1]))
specs = []
for s in d["shapes"]:
    if s["rows"] > 1 and s["best"] != s["chosen"] and s["us"][s["best"]] < 0.97 * s["us"][s["chosen"]]:
        specs.append(f'{s["kind"]}:{s["rows"]}x{s["cols"]}x{s["sum"]}={s["best"]}')
print("overrides:", specs, flush=True)
if specs:
    subprocess.run([sys.executable, "tools/experiments/tile_variants.py", "/tmp/g", "fma", *specs], timeout=200)
