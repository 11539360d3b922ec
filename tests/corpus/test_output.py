"""The files ``beamsearch decode`` reads and writes beside the corpus itself, under faults: links at
the names of the files beside the output (never followed: refused, or never opened), and the
option files it reads (only regular files, up to a size limit)."""

from __future__ import annotations

import json
import os

import pytest

from beamsearch import corpus
from beamsearch.cli import main
from beamsearch.corpus import Line, decode_corpus, partial_path
from beamsearch.corpus.output import open_beside, output_lock
from beamsearch.corpus.sidefile import SideFile

TEXTS = ["hello", "2024-01-02", "beam search", "x", "the end"]
VICTIM = b"a file the run must never write\n"


def lines():
    return [Line(i, t) for i, t in enumerate(TEXTS)]


def clean_run(tmp_path):
    """The output of an undisturbed run (the oracle for a run that goes on past a link)."""
    out = tmp_path / "clean" / "out.jsonl"
    out.parent.mkdir()
    decode_corpus(corpus.toy_model(), lines(), str(out), beam_size=2)
    return out.read_bytes()


def victim(tmp_path, name="victim.txt"):
    path = tmp_path / name
    path.write_bytes(VICTIM)
    return path


class CtrlC:
    """A step function that raises KeyboardInterrupt at its call number ``at_call`` (a Ctrl-C)."""

    def __init__(self, step, at_call):
        self.step, self.at_call, self.calls = step, at_call, 0

    def __call__(self, state, y_prev):
        self.calls += 1
        if self.calls == self.at_call:
            raise KeyboardInterrupt
        return self.step(state, y_prev)


# ---- links at the names beside the output ------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".lock", ".partial"])
@pytest.mark.parametrize("resume", [False, True])
def test_a_link_at_the_lock_or_side_file_is_refused_and_its_target_untouched(tmp_path, suffix, resume):
    target = victim(tmp_path)
    out = tmp_path / "out.jsonl"
    link = corpus.sibling(out, suffix)
    link.symlink_to(target)
    with pytest.raises(corpus.OutputError, match=f"output '{out}': {link} is a symbolic link; a file beside the "
                                                 r"output is never opened through one \(its target would be "
                                                 r"written\): remove the link$"):
        decode_corpus(corpus.toy_model(), lines(), str(out), resume=resume, beam_size=2)
    assert target.read_bytes() == VICTIM and link.is_symlink() and not out.exists()


@pytest.mark.parametrize("suffix", [".lock", ".partial"])
def test_a_dangling_link_is_refused_and_its_target_not_created(tmp_path, suffix):
    out, target = tmp_path / "out.jsonl", tmp_path / "elsewhere" / "created.txt"
    target.parent.mkdir()
    corpus.sibling(out, suffix).symlink_to(target)
    with pytest.raises(corpus.OutputError, match="is a symbolic link"):
        decode_corpus(corpus.toy_model(), lines(), str(out), beam_size=2)
    assert not target.exists() and not out.exists()


def test_a_link_at_the_old_temporary_name_is_never_opened(tmp_path):
    # the temporary file has a name of its own (O_EXCL): OUTPUT.tmp, a link, is neither followed nor removed
    target = victim(tmp_path)
    out = tmp_path / "out.jsonl"
    corpus.sibling(out, ".tmp").symlink_to(target)
    assert decode_corpus(corpus.toy_model(), lines(), str(out), beam_size=2) == (len(TEXTS), 0)
    assert out.read_bytes() == clean_run(tmp_path) and target.read_bytes() == VICTIM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean", "out.jsonl", "out.jsonl.tmp", "victim.txt"]


def test_a_link_in_place_of_the_side_file_is_refused_on_resume(tmp_path):
    """A killed run's side file replaced by a link to another file: the resume refuses it, the
    link's target is neither read as records nor written, and the real side file resumes."""
    target = victim(tmp_path)
    out = tmp_path / "out.jsonl"
    model = corpus.toy_model()
    model.step = CtrlC(model.step, at_call=4)
    with pytest.raises(corpus.Interrupted):
        decode_corpus(model, lines(), str(out), beam_size=2, max_rows=2)
    side = partial_path(out)
    kept = tmp_path / "kept.partial"
    side.rename(kept)
    side.symlink_to(kept)  # the side file's own content: refused all the same (it is a link)
    for resume in (True, False):
        with pytest.raises(corpus.OutputError, match="out.jsonl.partial is a symbolic link"):
            decode_corpus(corpus.toy_model(), lines(), str(out), resume=resume, beam_size=2, max_rows=2)
    side.unlink()
    side.symlink_to(target)
    with pytest.raises(corpus.OutputError, match="out.jsonl.partial is a symbolic link"):
        decode_corpus(corpus.toy_model(), lines(), str(out), resume=True, beam_size=2, max_rows=2)
    assert target.read_bytes() == VICTIM
    side.unlink()
    kept.rename(side)
    decode_corpus(corpus.toy_model(), lines(), str(out), resume=True, beam_size=2, max_rows=2)
    assert out.read_bytes() == clean_run(tmp_path) and target.read_bytes() == VICTIM


def test_a_link_made_after_the_check_is_not_followed_either(tmp_path):
    """The opens themselves use O_NOFOLLOW: a link put in place between the check and the open (a
    race the check cannot see) is refused there too."""
    target = victim(tmp_path)
    out = tmp_path / "out.jsonl"
    lock, side = corpus.sibling(out, ".lock"), partial_path(out)
    lock.symlink_to(target)
    with pytest.raises(corpus.OutputError, match=f"{lock} is a symbolic link"), output_lock(out):
        pass
    side.symlink_to(target)
    for opening in (lambda: SideFile.create(side, {}), lambda: SideFile.read(side),
                    lambda: open_beside(side, os.O_RDWR)):
        with pytest.raises(corpus.OutputError, match=f"output '{out}': {side} is a symbolic link"):
            opening()
    assert target.read_bytes() == VICTIM


def test_decode_refuses_a_link_beside_the_output_in_one_line(tmp_path, capsys):
    target = victim(tmp_path)
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    out = tmp_path / "out.jsonl"
    for suffix in (".lock", ".partial"):
        link = corpus.sibling(out, suffix)
        link.symlink_to(target)
        assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (f"beamsearch: error: --output '{out}': {link} is a symbolic link; a file beside the output is "
                       "never opened through one (its target would be written): remove the link\n")
        link.unlink()
    assert target.read_bytes() == VICTIM
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out)]) == 0
    assert json.loads(out.read_text())["input"] == "hello"


# ---- the files options name: regular files only, up to a size limit ---------------------------------

FLAGS = ["--catalogue", "--json-schema", "--grammar"]


def decode(tmp_path, *args, timeout=120):
    """``beamsearch decode`` of one line with the toy model, in a subprocess (a FIFO would block it:
    the timeout fails the test instead of hanging the suite)."""
    import subprocess
    import sys

    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    r = subprocess.run([sys.executable, "-m", "beamsearch", "decode", "--model", "_toy", "--input", str(src),
                        "--output", str(tmp_path / "out.jsonl"), *args], capture_output=True, text=True,
                       timeout=timeout)
    return r


@pytest.mark.parametrize("flag", FLAGS)
def test_a_device_or_fifo_given_for_a_file_option_is_refused_at_once(tmp_path, flag):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "a character device"), (str(fifo), "a FIFO"), (str(tmp_path), "a folder")):
        r = decode(tmp_path, flag, path)
        if kind == "a folder" and flag != "--catalogue":  # opened, then refused by the reader
            assert r.stderr == f"beamsearch: error: {flag} {path}: cannot read it: Is a directory\n"
        else:
            assert r.stderr == f"beamsearch: error: {flag} {path}: not a regular file ({kind}); give a file\n"
        assert r.returncode == 2 and not (tmp_path / "out.jsonl").exists()


def test_the_library_refuses_a_catalogue_that_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path in ("/dev/zero", str(tmp_path / "fifo")):
        with pytest.raises(ValueError, match=f"^catalogue {path}: not a regular file"):
            next(corpus.decode_records(corpus.toy_model(), [Line(0, "hello")], catalogue=path))


def test_file_options_are_read_up_to_their_documented_limits(tmp_path, capsys, monkeypatch):
    """The limits by hand: a file of exactly the limit is read, one byte more is refused naming
    its size and the limit (set small here; the real ones are 16 MiB and 1 GiB, as --help says)."""
    import beamsearch.cli.options as options
    import beamsearch.corpus.grammar as grammar
    from beamsearch.corpus.option_files import MAX_CATALOGUE_BYTES, MAX_GRAMMAR_BYTES

    assert (MAX_GRAMMAR_BYTES, MAX_CATALOGUE_BYTES) == (16 * 2**20, 2**30)
    from beamsearch.cli import parser

    decode_help = parser()._subparsers._group_actions[0].choices["decode"].format_help()
    help_text = " ".join(decode_help.split())
    assert help_text.count("a regular file of at most 16 MiB") == 2 and "a regular file of at most 1 GiB" in help_text

    monkeypatch.setattr(options, "MAX_GRAMMAR_BYTES", 64)
    monkeypatch.setattr(grammar, "MAX_CATALOGUE_BYTES", 64)
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    out = tmp_path / "out.jsonl"
    schema = tmp_path / "schema.json"
    catalogue = tmp_path / "catalogue.txt"
    for size, refused in ((64, False), (65, True)):
        schema.write_text('{"type": "string"}'.ljust(size))
        catalogue.write_text(("3 4\n" * 20)[:size - 1].ljust(size - 1) + "\n")
        for flag, path in (("--json-schema", schema), ("--catalogue", catalogue)):
            status = main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), flag, str(path)])
            err = capsys.readouterr().err
            if refused:
                assert status == 2
                assert err == f"beamsearch: error: {flag} {path}: 65 bytes, over the limit of 64 bytes\n"
            elif flag == "--json-schema":  # read whole and compiled: no JSON text is spelled by the toy's letters a-f
                assert status == 2 and "over the limit" not in err and "allows no output" in err, err
            else:
                assert "over the limit" not in err and status in (0, 1), err
            out.unlink(missing_ok=True)


def test_a_file_over_the_limit_names_the_limit_in_bytes_and_mib(tmp_path):
    from beamsearch.corpus.option_files import check_option_file, read_option_file

    path = tmp_path / "big"
    path.write_bytes(b" " * (2**20 + 1))
    message = f"^--grammar {path}: 1,048,577 bytes, over the limit of 1,048,576 bytes \\(1 MiB\\)$"
    with pytest.raises(ValueError, match=message):
        read_option_file(path, "--grammar", 2**20)
    with pytest.raises(ValueError, match=message):
        check_option_file(path, "--grammar", 2**20)
    assert read_option_file(path, "--grammar", 2**20 + 1) == b" " * (2**20 + 1)
    check_option_file(tmp_path / "missing", "catalogue", 10)  # its reader says why it cannot be read
