"""Times the same prefill rows on two kernel packages, each with its own runtime build, in one run:
the sides alternate (A B B A, then again), so that clock and thermal drift fall on both, and
each row prints both sides' medians (the range over the rounds) and B / A.

Usage: python3 bench/compare_prefill.py [--rounds N] BUILD_A PACKAGE_A BUILD_B PACKAGE_B
  BUILD_*: a build tree (or a copy of one) holding bench/aotinfer_bench_prefill and
  runtime/libaotinfer.so.0; each side runs its own, so packages of different kernel ABIs compare.
  The rows and their features come from the environment, as bench_prefill reads it
  (AOTINFER_BENCH_ONLY=paged:causal:4:4096:8,..., AOTINFER_BENCH_MASK=custom, AOTINFER_BENCH_KV=e4m3,
  AOTINFER_BENCH_WINDOW=..., ...). A row either side fails to run prints as missing."""
import os
import statistics
import subprocess
import sys


def parse_tables(text):
    """{row key: time in us} from bench_prefill's tables: each table's header names its columns
    ("time us" is one column); a row's key is its columns before the tile or split column."""
    times, header = {}, None
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["kv"] and "time" in words:
            header = words[:words.index("time")] + ["time"] + words[words.index("time") + 2:]
            continue
        if header is None or len(words) != len(header):
            header = None if not words else header
            continue
        end = next((i for i, name in enumerate(header) if name in ("tile", "split")), header.index("time"))
        try:
            times[" ".join(words[:end])] = float(words[header.index("time")])
        except ValueError:
            continue
    return times


def run_side(build, package):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [os.path.join(build, "runtime"), env.get("LD_LIBRARY_PATH")]))
    done = subprocess.run([os.path.join(build, "bench", "aotinfer_bench_prefill"), package, os.devnull], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.stderr.write(f"{build} on {package}: exit status {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return parse_tables(done.stdout)


def main(argv):
    rounds = 2
    if argv[:1] == ["--rounds"]:
        rounds, argv = int(argv[1]), argv[2:]
    if len(argv) != 4 or rounds < 1:
        sys.exit(__doc__)
    sides = {"A": (argv[0], argv[1]), "B": (argv[2], argv[3])}
    seen = {"A": [], "B": []}
    for _ in range(rounds):
        for name in ("A", "B", "B", "A"):
            seen[name].append(run_side(*sides[name]))
    keys = []
    for runs in seen.values():
        for times in runs:
            keys += [k for k in times if k not in keys]
    print(f"A: {' '.join(sides['A'])}\nB: {' '.join(sides['B'])}\n"
          f"{rounds * 2} runs a side, medians in us (the range over the runs)")
    print(f"{'row':<34} {'A':>17} {'B':>17} {'B / A':>7}")
    for key in keys:
        cells, middle = [], []
        for name in ("A", "B"):
            values = [times[key] for times in seen[name] if key in times]
            cells.append(f"{min(values):.1f}-{max(values):.1f}" if values else "missing")
            middle.append(statistics.median(values) if values else None)
        ratio = f"{middle[1] / middle[0]:.3f}" if None not in middle else ""
        print(f"{key:<34} {cells[0]:>17} {cells[1]:>17} {ratio:>7}")


if __name__ == "__main__":
    main(sys.argv[1:])
