"""`beamsearch decode --model hf:DIR --jsonl` with lines naming images and audio (``"image":
"a.png"``, ``"audio": "a.wav"``): a tiny random-weight LLaVA and Whisper saved with
save_pretrained together with their processors built here (nothing downloaded). Oracle: each
line alone, its file opened here with Pillow / soundfile and made into the model's inputs by the
processor, through beamsearch.hf (causal_lm / seq2seq_lm) + beam_search_batch."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
Image = pytest.importorskip("PIL.Image")
np = pytest.importorskip("numpy")

from beamsearch import beam_search_batch, hf  # noqa: E402
from beamsearch.cli import main  # noqa: E402
from hf_multimodal_zoo import build, llava  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]
SPECIAL = ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "<image>"]  # ids 0..4
SEARCH = dict(beam_size=3, n_best=2, max_steps=5, length_penalty="power", alpha=1.0)
FLAGS = ["--beam-size", "3", "--n-best", "2", "--max-steps", "5", "--max-rows", "6"]


def tokenizer(words):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(words)}
    inner = Tokenizer(models.WordLevel(vocab, unk_token=words[1]))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    image = {"extra_special_tokens": {"image_token": "<image>"}} if "<image>" in words else {}  # split out of words
    return transformers.PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", unk_token=words[1],
                                                bos_token="[BOS]", eos_token="[EOS]", **image)


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    return save_llava(tmp_path_factory.mktemp("llava"))


def save_llava(folder):
    """LLaVA (CLIP 16x16 images, 4 image tokens) and its processor saved in ``folder``: images
    resized and cropped to 16x16."""
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil  # Pillow's, no torchvision

    image = CLIPImageProcessorPil(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    processor = transformers.LlavaProcessor(image_processor=image, tokenizer=tokenizer(SPECIAL + WORDS), patch_size=8,
                                            vision_feature_select_strategy="default", num_additional_image_tokens=1)
    torch.manual_seed(0)
    llava(len(SPECIAL + WORDS), 4, eos_token_id=3, pad_token_id=0, bos_token_id=2).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    """Whisper (8 mel bins, 32 frames: 1 s of audio at 16 kHz) and its processor."""
    folder = tmp_path_factory.mktemp("whisper")
    features = transformers.WhisperFeatureExtractor(feature_size=8, sampling_rate=16000, hop_length=500, chunk_length=1,
                                                    n_fft=1000)
    words = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"] + [f"w{i}" for i in range(60)]  # the zoo Whisper's 64 ids
    transformers.WhisperProcessor(feature_extractor=features, tokenizer=tokenizer(words)).save_pretrained(folder)
    build("whisper")[0].save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def captioner_dir(tmp_path_factory):
    """A ViT + GPT-2 VisionEncoderDecoderModel (16x16 images) with a bare image processor (no
    processor class: AutoProcessor gives the image processor) and a tokenizer beside it."""
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    folder = tmp_path_factory.mktemp("captioner")
    ViTImageProcessorPil(size={"height": 16, "width": 16}).save_pretrained(folder)
    tokenizer(["[PAD]", "[UNK]", "[BOS]", "[EOS]"] + [f"w{i}" for i in range(60)]).save_pretrained(folder)
    build("vision_encoder_decoder")[0].save_pretrained(folder)
    return folder


def images(folder):
    """Three images of other sizes, a file that is not an image."""
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(20, 30), (16, 16), (40, 24)]):
        Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8")).save(folder / f"img{i}.png")
    (folder / "bad.png").write_bytes(b"not an image")


def decode(tmp_path, model_dir, lines, *flags):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    code = main(["decode", "--model", f"hf:{model_dir}", "--input", str(src), "--jsonl", "--output", str(out),
                 *flags])
    return code, [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()] if out.exists() else None


def alone(folder, text, image_path=None, audio=None):
    """One line through the processor (its file opened here) and beamsearch.hf alone."""
    processor = transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    if audio is not None:
        model = transformers.WhisperForConditionalGeneration.from_pretrained(folder, local_files_only=True).eval()
        inputs = processor(audio=audio, sampling_rate=16000, return_tensors="pt")
        dec = hf.seq2seq_lm(model, None, max_new_tokens=5, **inputs)
    else:
        model = transformers.LlavaForConditionalGeneration.from_pretrained(folder, local_files_only=True).eval()
        kwargs = {} if image_path is None else {"images": Image.open(image_path).convert("RGB")}
        inputs = dict(processor(text=text, return_tensors="pt", **kwargs))
        ids = inputs.pop("input_ids")
        dec = hf.causal_lm(model, ids, max_new_tokens=5, **{k: v for k, v in inputs.items() if k != "attention_mask"})
    hyps = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, **SEARCH)[0]
    return [(h.tokens, h.logprob, h.finished) for h in hyps]


def same(record, want):
    got = record["nbest"]
    assert [(h["tokens"], h["finished"]) for h in got] == [(w[0], w[2]) for w in want]
    # the line in a batch of 2 (images of other sizes, prompts of other lengths, padded) against alone
    assert all(abs(h["logprob"] - w[1]) < 1e-4 for h, w in zip(got, want, strict=True))


def test_decode_with_images_is_each_line_alone(llava_dir, tmp_path, monkeypatch):
    """Images of three sizes (the processor resizes them) beside a text-only line, two lines a
    batch (one cohort mixes an image line and a text line); files relative to the current directory."""
    images(tmp_path)
    monkeypatch.chdir(tmp_path)
    lines = [{"text": "<image> the cat", "image": "img0.png"}, {"text": "<image> a dog ran far", "image": "img1.png"},
             {"text": "the cat sat"}, {"text": "<image> on a mat", "image": str(tmp_path / "img2.png")}]
    code, records = decode(tmp_path, llava_dir, lines, *FLAGS)
    assert code == 0 and [r["index"] for r in records] == [0, 1, 2, 3]
    for line, record in zip(lines, records, strict=True):
        same(record, alone(llava_dir, line["text"], line.get("image") and tmp_path / line["image"]))


def test_unreadable_files_are_errors_of_their_lines(llava_dir, tmp_path, monkeypatch):
    images(tmp_path)
    monkeypatch.chdir(tmp_path)
    lines = [{"text": "<image> the", "image": "missing.png"}, {"text": "<image> mat", "image": "bad.png"},
             {"text": "<image> the cat", "image": "img0.png"}, {"text": "the", "audio": "a.wav"},
             {"text": "the", "image": 7}, {"image": "img1.png"}]
    code, records = decode(tmp_path, llava_dir, lines, *FLAGS)
    assert code == 1
    errors = [r.get("error") for r in records]
    assert errors[0] == "cannot read image 'missing.png': No such file or directory"
    assert errors[1].startswith("cannot read image 'bad.png': cannot identify image file")
    assert errors[2] is None
    assert errors[3] == "the model reads no audio files (it reads image files)"
    assert errors[4] == "image must be a file path (a non-empty string); got 7"
    assert records[5]["input"] == ""  # an image alone: its text is "", no prompt for a causal model
    assert errors[5] == "no text: the model's prompt is the line's text (with the processor's placeholder of the file)"
    same(records[2], alone(llava_dir, "<image> the cat", tmp_path / "img0.png"))


def interrupted_after(calls, step):
    """``step``, which raises KeyboardInterrupt (Ctrl-C) at its call number ``calls + 1``."""
    made = iter(range(calls))

    def stepped(self, state, y_prev):
        if next(made, None) is None:
            raise KeyboardInterrupt
        return step(self, state, y_prev)
    return stepped


def test_decode_with_images_resumes(llava_dir, tmp_path, monkeypatch):
    """A run interrupted after its first records, resumed: every line's record, each as alone."""
    from beamsearch import corpus

    images(tmp_path)
    monkeypatch.chdir(tmp_path)
    lines = [{"text": f"<image> {w}", "image": f"img{i % 3}.png"} for i, w in enumerate(["the", "cat", "dog", "mat"])]
    step = corpus.hf_folder.HFModel.step
    monkeypatch.setattr(corpus.hf_folder.HFModel, "step", interrupted_after(6, step))
    flags = ["--beam-size", "3", "--n-best", "2", "--max-steps", "5", "--max-rows", "3"]
    assert decode(tmp_path, llava_dir, lines, *flags)[0] == 130
    monkeypatch.setattr(corpus.hf_folder.HFModel, "step", step)
    out = tmp_path / "out.jsonl"
    done = [json.loads(x).get("index") for x in corpus.partial_path(out).read_text().splitlines()]
    assert 0 < len([i for i in done if isinstance(i, int) and not isinstance(i, bool)]) < 4  # some records, not all
    assert main(["decode", "--model", f"hf:{llava_dir}", "--input", str(tmp_path / "in.jsonl"), "--jsonl",
                 "--output", str(out), *flags, "--resume"]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    for line, record in zip(lines, records, strict=True):
        same(record, alone(llava_dir, line["text"], tmp_path / line["image"]))


def test_decode_with_audio_is_each_line_alone(whisper_dir, tmp_path):
    """Whisper reads audio files (read with soundfile; of other lengths: the processor pads them
    to its 1 s), no text; a file at another sampling rate and text beside audio are line errors."""
    soundfile = pytest.importorskip("soundfile")
    rng = np.random.default_rng(1)
    clips = [rng.standard_normal(n).astype("float32") * 0.3 for n in (16000, 9000)]
    for i, clip in enumerate(clips):
        soundfile.write(tmp_path / f"a{i}.wav", clip, 16000, subtype="FLOAT")
    soundfile.write(tmp_path / "fast.wav", clips[1], 8000, subtype="FLOAT")
    lines = [{"audio": str(tmp_path / "a0.wav")}, {"audio": str(tmp_path / "a1.wav")},
             {"audio": str(tmp_path / "fast.wav")}, {"text": "w1", "audio": str(tmp_path / "a0.wav")}, {"text": "w1"}]
    code, records = decode(tmp_path, whisper_dir, lines, *FLAGS)
    assert code == 1
    same(records[0], alone(whisper_dir, "", audio=clips[0]))
    same(records[1], alone(whisper_dir, "", audio=clips[1]))
    assert records[2]["error"] == (f"audio {str(tmp_path / 'fast.wav')!r} is sampled at 8000 Hz; the model's processor "
                                   "reads 16000 Hz: resample it")
    assert records[3]["error"] == "the model reads no text beside its audio: leave the text out; got 'w1'"
    assert records[4]["error"] == 'the model reads audio: name the line\'s file ("audio": path)'


def test_lines_are_batched_as_the_processor_pads_them():
    """Audio of two lengths, each through the feature extractor alone, then batched: the
    extractor's own batch of both (features padded at the end, their mask 0 there)."""
    from beamsearch.corpus.hf_media import batched

    extractor = transformers.Speech2TextFeatureExtractor(feature_size=8, num_mel_bins=8, sampling_rate=16000)
    rng = np.random.default_rng(0)
    clips = [rng.standard_normal(n).astype("float32") for n in (4000, 2500)]
    settings = dict(sampling_rate=16000, return_attention_mask=True, return_tensors="pt")
    want = extractor(clips, padding=True, **settings)
    got = batched([dict(extractor(clip, **settings)) for clip in clips], 0, left=False)
    assert set(got) == set(want) and got["input_features"].shape == (2, 23, 8)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=0)
    ids = batched([{"input_ids": torch.tensor([[5, 6, 7]])}, {"input_ids": torch.tensor([[8]])}], 0, left=True)
    assert ids["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]  # a causal model's prompts: padded on the left


def test_a_resume_is_refused_when_a_line_names_another_file(llava_dir, tmp_path, monkeypatch, capsys):
    """The input's fingerprint holds the files each line names: the same texts with another image
    are another input."""
    from beamsearch import corpus

    images(tmp_path)
    monkeypatch.chdir(tmp_path)
    lines = [{"text": "<image> the", "image": "img0.png"}, {"text": "<image> cat", "image": "img1.png"}]
    monkeypatch.setattr(corpus.hf_folder.HFModel, "step", interrupted_after(6, corpus.hf_folder.HFModel.step))
    flags = ["--beam-size", "3", "--max-steps", "5", "--max-rows", "3"]
    assert decode(tmp_path, llava_dir, lines, *flags)[0] == 130
    assert '"index": 0' in corpus.partial_path(tmp_path / "out.jsonl").read_text()  # line 0's record kept
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    lines[0]["image"] = "img2.png"
    capsys.readouterr()
    assert decode(tmp_path, llava_dir, lines, *flags, "--resume")[0] == 2
    assert "another input" in capsys.readouterr().err


def rescored(folder, text, image_path, tokens, entries=None):
    """The model's log-probability of ``tokens`` after the line (its image opened here, the
    processor's inputs): one forward without a cache, log-softmax over the vocabulary (a
    catalogue's ``entries``: over the tokens that continue one of them at each position, eos
    after a whole one)."""
    processor = transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    model = transformers.LlavaForConditionalGeneration.from_pretrained(folder, local_files_only=True).eval()
    inputs = processor(text=text, images=Image.open(image_path).convert("RGB"), return_tensors="pt")
    ids = torch.cat([inputs["input_ids"], torch.tensor([tokens])], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, pixel_values=inputs["pixel_values"]).logits
        logits = logits[0, inputs["input_ids"].shape[1] - 1: -1]
    logits = logits.double()
    for t in range(len(tokens) if entries is not None else 0):
        allowed = {e[t] for e in entries if len(e) > t and e[:t] == tokens[:t]} | \
            ({3} if tokens[:t] in entries else set())
        logits[t, [v for v in range(logits.shape[1]) if v not in allowed]] = float("-inf")
    return float(torch.log_softmax(logits, -1).gather(1, torch.tensor([tokens]).T).sum())


ENTRIES = [[6, 7], [9], [10, 11, 12]]
MODES = {"greedy": [], "constrained": ["--beam-size", "2", "--constraints", "cat"],
         "diverse": ["--beam-size", "4", "--num-groups", "2", "--diversity-penalty", "0.5"],
         "exact": ["--node-budget", "200"], "transformers": ["--beam-size", "2"],
         "stochastic": ["--k", "3", "--seed", "0"],
         "catalogue": ["--beam-size", "3", "--catalogue", "entries.txt"]}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_decodes_image_lines(mode, llava_dir, tmp_path, monkeypatch):
    """Each search mode on lines with images of other sizes: every output's logprob is its
    teacher-forced rescoring after its own line and image; a constrained output holds its
    phrase, a catalogue's outputs are its entries. The folder sets no num_beams: beam modes are
    given a width, as generate would need. (A sample that holds the image placeholder itself
    cannot be rescored this way, the model counting it as an image's place: those are skipped.)"""
    images(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "entries.txt").write_text("".join(" ".join(map(str, e)) + "\n" for e in ENTRIES))
    lines = [{"text": "<image> the cat", "image": "img0.png"}, {"text": "<image> a dog ran far", "image": "img2.png"}]
    name = "beam" if mode == "catalogue" else mode
    n_best = [] if mode == "stochastic" else ["--n-best", "1" if mode == "greedy" else "2"]
    code, records = decode(tmp_path, llava_dir, lines, "--mode", name, "--max-steps", "5", *n_best, *MODES[mode])
    assert code == 0, records
    for line, record in zip(lines, records, strict=True):
        assert record["nbest"]
        placeholder = transformers.AutoTokenizer.from_pretrained(llava_dir).convert_tokens_to_ids("<image>")
        checked = [h for h in record["nbest"] if placeholder not in h["tokens"]]
        assert checked
        for h in checked:
            want = rescored(llava_dir, line["text"], line["image"], h["tokens"],
                            ENTRIES if mode == "catalogue" else None)
            assert h["logprob"] == pytest.approx(want, abs=1e-4)
            if mode == "constrained" and h["finished"]:
                assert 6 in h["tokens"]
            if mode == "catalogue":
                assert h["finished"] and h["tokens"][:-1] in ENTRIES and h["tokens"][-1] == 3


def test_a_captioner_reads_images_alone(captioner_dir, tmp_path):
    """A vision encoder-decoder: each line an image alone (its processor resizes images of other
    sizes), decoded as alone through seq2seq_lm; text beside the image is a line error."""
    images(tmp_path)
    lines = [{"image": str(tmp_path / f"img{i}.png")} for i in range(3)] + \
        [{"text": "w1", "image": str(tmp_path / "img0.png")}]
    code, records = decode(tmp_path, captioner_dir, lines, *FLAGS)
    assert code == 1
    processor = transformers.AutoImageProcessor.from_pretrained(captioner_dir, local_files_only=True)
    model = transformers.VisionEncoderDecoderModel.from_pretrained(captioner_dir, local_files_only=True).eval()
    for line, record in zip(lines[:3], records, strict=False):
        pixels = processor(Image.open(line["image"]).convert("RGB"), return_tensors="pt")["pixel_values"]
        dec = hf.seq2seq_lm(model, None, max_new_tokens=5, pixel_values=pixels)
        hyps = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, **SEARCH)[0]
        same(record, [(h.tokens, h.logprob, h.finished) for h in hyps])
    assert records[3]["error"] == "the model reads no text beside its image: leave the text out; got 'w1'"
