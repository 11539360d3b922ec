"""Make the docs' search pictures: docs/pictures/*.svg (static) and *.html (interactive).

    python tools/make_pictures.py             # both pictures (the dates one needs the zoo extra)

1. ``hand_example``: the course chapter's hand example (seed 000 section 3: eos, a, b with
   p(a) = .5, p(b) = .4 first, then p(b | a) = .7, p(eos | b) = .9), beam 2, two tokens, no
   length penalty. Greedy takes a (0.5) then b: "ab" (.35); the beam keeps b and finds "b<eos>"
   (.36).
2. ``dates``: the shipped seq2seq dates model on "march 3 '87", beam 5 with the greedy path
   overlaid: greedy commits to the century '19' (the first digit '1' has probability 0.6), the
   beam finds the likelier '2087-03-03'.
3. ``ctc_example``: docs/speech.md's CTC prefix beam search over four frames, beam 2: "a" and
   "ab" each take in their parent's extension (log-add), the empty prefix leaves the beam.
4. ``transducer_example``: docs/transducer.md's TDT beam search (a random RNN predictor and joint,
   five frames, durations 0-2, beam 3): candidates merged, cut, finished, the pool's n-best.
"""

from __future__ import annotations

import pathlib

import numpy as np

from beamsearch import beam_search, greedy_decode
from beamsearch.toy import HAND_EXAMPLE, TableModel
from beamsearch.viz import Trace, to_html, to_svg

OUT = pathlib.Path(__file__).resolve().parents[1] / "docs" / "pictures"


def write(name: str, trace: Trace, greedy: Trace, vocab: list[str], title: str) -> None:
    (OUT / f"{name}.svg").write_text(to_svg(trace, vocab=vocab, greedy=greedy))
    (OUT / f"{name}.html").write_text(to_html(trace, vocab=vocab, greedy=greedy, title=title))
    print(f"wrote {OUT / name}.svg and .html ({len(trace)} nodes)")


def hand_example() -> None:
    model = TableModel(HAND_EXAMPLE, vocab=3)
    trace, greedy = Trace(), Trace()
    best = beam_search(model.step, model.init_state(), 0, 0, 2, 2, 0.0, trace=trace)[0]
    g = greedy_decode(model.step, model.init_state(), 0, 0, 2, trace=greedy)
    assert best.tokens == [2, 0] and g.tokens == [1, 2]
    write("hand_example", trace, greedy, ["<eos>", "a", "b"], "Seed 000 hand example: beam 2 against greedy")


def dates(text: str = "march 3 '87") -> None:
    from beamsearch.zoo.dates import TARGET_VOCAB
    from beamsearch.zoo.translator import Translator

    translator = Translator.load("seq2seq")
    trace, greedy, found = translator.trace(text, beam_size=5, n_best=3)
    best, first = found[0], TARGET_VOCAB.decode(greedy.tokens(greedy.best(0)))
    print(f"{text!r}: beam 5 {best}, greedy {first}")
    write("dates", trace, greedy, TARGET_VOCAB.itos, f"{text!r}: beam 5 ({best}) against greedy ({first})")


def ctc_example() -> None:
    from beamsearch.speech import ctc_beam_search
    from beamsearch.speech.trace import CTCTrace
    from beamsearch.speech.trace_draw import ctc_html, ctc_svg

    probs = [[0.3, 0.6, 0.1], [0.3, 0.5, 0.2], [0.2, 0.1, 0.7], [0.6, 0.1, 0.3]]  # blank, "a", "b"
    trace = CTCTrace()
    best = ctc_beam_search(np.log([probs]), blank=0, beam_size=2, vocabulary=["-", "a", "b"], trace=trace)[0][0]
    assert best.text == "ab"
    (OUT / "ctc_example.svg").write_text(ctc_svg(trace, labels=["four frames, beam 2"]))
    (OUT / "ctc_example.html").write_text(ctc_html(trace, labels=["four frames, beam 2"],
                                                   title="A CTC prefix beam search over four frames, beam 2"))
    print(f"wrote {OUT / 'ctc_example'}.svg and .html ({len(trace.nodes)} nodes)")


def transducer_example() -> None:
    from beamsearch.speech import transducer_beam_search
    from beamsearch.speech.trace_draw import transducer_html, transducer_svg
    from beamsearch.speech.transducer_trace import TransducerTrace

    rng = np.random.default_rng(0)  # the model of docs/transducer.md's search picture
    frames, dim, vocab = 5, 8, 3
    enc = rng.normal(size=(1, frames, dim))
    w, e = rng.normal(size=(dim, dim)) * 0.5, rng.normal(size=(vocab, dim))
    a, b = rng.normal(size=(dim, vocab + 3)), rng.normal(size=(dim, vocab + 3))

    def predictor(h: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = np.tanh(h @ w + e[y])
        return h, h

    trace = TransducerTrace()
    best = transducer_beam_search(enc, predictor=predictor, joint=lambda x, p: x @ a + p @ b, blank=0,
                                  state=np.zeros((1, dim)), durations=[0, 1, 2], max_symbols_per_frame=2,
                                  beam_size=3, n_best=2, vocabulary=["-", "a", "b"], trace=trace)[0][0]
    label = [f"five frames, beam 3: {best.text!r}"]
    (OUT / "transducer_example.svg").write_text(transducer_svg(trace, labels=label))
    (OUT / "transducer_example.html").write_text(transducer_html(trace, labels=label,
                                                                 title="A TDT beam search over five frames, beam 3"))
    print(f"wrote {OUT / 'transducer_example'}.svg and .html ({len(trace.nodes)} nodes)")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    hand_example()
    ctc_example()
    transducer_example()
    try:
        dates()
    except ImportError as e:
        print(f"skipped the dates picture: {e.name} is not installed (pip install -e '.[zoo]')")


if __name__ == "__main__":
    main()
