"""Plant each known pitfall into a copy of the package and check that the test suite kills it.

The pitfalls are those of the course chapter (seed 000, section 5) and of the batched search
(seed 001 and SPEC section 9). Each is one textual change to one module; the suite runs against
the changed copy (PYTHONPATH first), and must fail. Exit code 1 if any pitfall survives.

    python tools/pitfall_mutants.py            # all
    python tools/pitfall_mutants.py s03 s09    # some
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (id, pitfall, module, original text, planted text)
PITFALLS = [
    ("s01", "keeping the best K tokens of each hypothesis", "_engine.py",
     "grouped, start = _group(backend, cand, row_input)",
     "grouped, start = cand, np.arange(cand.shape[0])"),
    ("s02", "adding raw logits instead of log-probabilities", "_engine.py",
     "cand = backend.log_softmax(x, inplace=x is not logits)  # --> [k, V]", "cand = backend.copy(x)"),
    ("s03", "state rows not gathered by parent", "_engine.py",
     "new_state = select_state(new_state, _as_index(parent, device))", "pass"),
    ("s04", "an eos hypothesis that keeps going", "_engine.py",
     "keep = chosen.token != rule.eos", "keep = chosen.token >= 0"),
    ("s05", "dropping the live hypotheses at max_len", "_search.py",
     "mine_f, mine_l = np.flatnonzero(fin.rows.input == i), np.flatnonzero(live.rows.input == i)",
     "mine_f, mine_l = np.flatnonzero(fin.rows.input == i), np.flatnonzero(live.rows.input == -1)"),
    ("s06", "eos left out of the length", "_search.py",
     "self.scores = rows.logprob / penalty(self.lengths, alpha)",
     "self.scores = rows.logprob / penalty(self.lengths - int(finished), alpha)"),
    ("s07", "results ranked by logprob, not score", "_search.py",
     "scores = np.concatenate([fin.scores[mine_f], live.scores[mine_l]])",
     "scores = np.concatenate([fin.rows.logprob[mine_f], live.rows.logprob[mine_l]])"),
    ("s08", "ties to the highest index", "_backend.py",
     "    idx = np.sort(idx, axis=1)\n", "    idx = -np.sort(-idx, axis=1)\n"),
    ("s08t", "ties to the highest index, on torch", "_backend.py",
     "        idx, _ = torch.sort(idx, dim=1)\n", "        idx, _ = torch.sort(idx, dim=1, descending=True)\n"),
    ("s09", "keeping -inf candidates to fill the beam", "_engine.py",
     "g, rank = np.nonzero(np.isfinite(val) & (np.arange(m) < keep[:, None]))",
     "g, rank = np.nonzero((val == val) & (np.arange(m) < keep[:, None]))"),
    ("s11", "survivors finalized one step early", "_engine.py",
     "if live.input.shape[0] == 0 or step == max_steps:",
     "if live.input.shape[0] == 0 or step == max_steps - 1:"),
    ("s13", "a NamedTuple rebuilt as a tuple", "_state.py",
     "return type(state)._make(items)", "return tuple(items)"),
    ("s14", "lists not searched", "_state.py",
     "items = [select_state(item, idx) for item in state]\n    return items if",
     "items = list(state)\n    return items if"),
    ("s15", "greedy scored with length penalty 1", "_search.py",
     "length_penalty=0.0)[0]", "length_penalty=1.0)[0]"),
    ("s16", "the model called after every hypothesis finished", "_engine.py",
     "if live.input.shape[0] == 0 or step == max_steps:", "if step == max_steps:"),
    ("b01", "early stop bounded by the current score (seed 001)", "_rules.py",
     "reach = live.logprob / self.bound_divisor",
     "reach = live.logprob / self.penalty(np.asarray(step), self.alpha)"),
    ("b02", "n-gram blocking ignores the prompt", "_engine.py",
     'keep_prompt = any(getattr(p, "needs_history", False) for p in processors)', "keep_prompt = False"),
    ("b03", "top-k drops the values tied at the threshold", "_backend.py",
     "return np.where(x < threshold, NEG_INF, x)", "return np.where(x <= threshold, NEG_INF, x)"),
    ("b04", "an eos extension takes a beam slot in the batched search", "_rules.py",
     "    eos_competes = False\n", "    eos_competes = True\n"),
    ("b05", "GNMT penalty without the +5", "_penalties.py",
     "((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** alpha",
     "(np.asarray(length, dtype=np.float64) / 6.0) ** alpha"),
]


def run_one(pid: str, src: pathlib.Path, module: str, old: str, new: str) -> bool:
    """True when the suite fails (the pitfall is killed)."""
    with tempfile.TemporaryDirectory() as tmp:
        pkg = pathlib.Path(tmp) / "beamsearch"
        shutil.copytree(src, pkg)
        path = pkg / module
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{pid}: the text to replace occurs {text.count(old)} times in {module}")
        path.write_text(text.replace(old, new))
        env = dict(os.environ, PYTHONPATH=tmp, MUTANT_UNDER_TEST="pitfall")
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "tests"],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        return r.returncode != 0


def main(argv: list[str]) -> int:
    src = ROOT / "src" / "beamsearch"
    chosen = [p for p in PITFALLS if not argv or p[0] in argv]
    survived = []
    for pid, what, module, old, new in chosen:
        killed = run_one(pid, src, module, old, new)
        print(f"{pid}  {'killed  ' if killed else 'SURVIVED'}  {what}", flush=True)
        if not killed:
            survived.append(pid)
    print(f"{len(chosen) - len(survived)} of {len(chosen)} pitfalls killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
