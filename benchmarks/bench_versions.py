"""Two versions of the engine side by side: the targets of the engine v2 issue, in one run.

    python benchmarks/bench_versions.py                 # this checkout against commit ec589ab (v1)
    python benchmarks/bench_versions.py --base REV      # against another revision
    python benchmarks/bench_versions.py --base REV --script bench_corpus.py -- --quick
        # each revision's own copy of a benchmark script, against its own package, one after the other

With ``--script``, each revision runs its own copy of the script (a script may have followed a
renamed keyword), base first, then this checkout, then the base again, so that a drift of the
machine's speed shows as a difference between the two base runs.

Each version's package is imported in its own subprocess (``PYTHONPATH`` = its ``src``); the
measurement code is this checkout's ``bench_search.search_per_step`` for both, so only the engine
differs. The older revision is checked out into a temporary git worktree.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

MEASURE = r"""
import sys
sys.path.insert(0, {bench!r})
from bench_search import NullModel, floor_per_step, search_per_step
import beamsearch
for backend, n, beam, v in [("torch", 1, 1, 1000), ("numpy", 1, 1, 1000), ("torch", 64, 4, 32000)]:
    x = NullModel(n * beam, v, backend).logits
    fl = floor_per_step(x, n, beam, backend, 10)
    s = search_per_step(n, beam, v, backend, 0, 64, 10 if n == 1 else 3)
    fl = min(fl, floor_per_step(x, n, beam, backend, 10))
    print(f"{{backend:<6}} N={{n:<3}} beam={{beam}} V={{v:<6}} search {{s*1e3:8.3f}} ms  floor {{fl*1e3:7.3f}} ms  "
          f"ratio {{s/fl:5.2f}}", flush=True)
for backend in ["numpy", "torch"]:
    a = search_per_step(64, 4, 1000, backend, 0, 64, 3)
    b = search_per_step(64, 4, 1000, backend, 0, 1024, 2)
    print(f"{{backend:<6}} N=64 beam=4 V=1000  T=64 {{a*1e3:.3f}} ms  T=1024 {{b*1e3:.3f}} ms  ratio {{b/a:.2f}}",
          flush=True)
"""


def measure(src: pathlib.Path, label: str) -> None:
    print(f"engine at {label}", flush=True)
    code = MEASURE.format(bench=str(ROOT / "benchmarks"))
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=str(src)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="ec589ab", help="the older revision (default: engine v1)")
    parser.add_argument("--script", help="a script of benchmarks/ to run in each revision (its own copy)")
    parser.add_argument("args", nargs="*", help="the script's arguments (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = pathlib.Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.base],
                       check=True)
        try:
            if args.script:
                for root, label in [(tree, f"{args.base} (base)"), (ROOT, "this checkout"),
                                    (tree, f"{args.base} (base, again)")]:
                    print(f"== {args.script} at {label}", flush=True)
                    subprocess.run([sys.executable, str(root / "benchmarks" / args.script), *args.args], check=True,
                                   env=dict(os.environ, PYTHONPATH=str(root / "src")), cwd=str(root))
                return
            measure(tree / "src", f"{args.base} (base)")
            measure(ROOT / "src", "this checkout")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
