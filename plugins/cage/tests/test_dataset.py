"""Generation: nine balanced questions per image, byte-identical per seed, gold answers and
chains that agree with the SCM, exports, and bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from icml_cage.config import SceneConfig
from icml_cage.dataset import CageBenchmark, check_image, generate_benchmark, png_bytes
from icml_cage.sft_export import export_sft
from PIL import Image


def test_counts_and_balanced_rungs() -> None:
    bench = generate_benchmark(12, seed=0)
    assert len(bench) == 9 * 12 and len(bench.images) == 12
    assert Counter(it.rung for it in bench) == {"association": 36, "intervention": 36,
                                                "counterfactual": 36}
    assert Counter(it.family for it in bench) == {"domino": 36, "lamp": 36, "ramp": 36}
    assert all(len(it.gold_chain) >= 2 and it.answer in ("yes", "no") for it in bench)
    assert {it.answer for it in bench} == {"yes", "no"}


def test_same_seed_gives_byte_identical_images_and_items() -> None:
    a, b, c = (generate_benchmark(6, seed=s) for s in (3, 3, 4))
    assert [png_bytes(a.images[k]) for k in a.images] == [png_bytes(b.images[k]) for k in b.images]
    assert [it.to_json() for it in a] == [it.to_json() for it in b]
    assert [it.to_json() for it in a] != [it.to_json() for it in c]


def test_gold_answers_follow_the_scm() -> None:
    for it in generate_benchmark(30, seed=1):
        scm, f = it.model, it.model.factual()
        last = len(scm.nodes) - 1
        assert it.gold_chain[-1] == it.effect and it.gold_chain[0] == it.cause
        assert scm.path(scm.index(it.cause), scm.index(it.effect)) == it.gold_chain
        if it.template == "observe_effect":
            assert it.answer == ("yes" if f[last] else "no")
        if it.template == "abduce_hidden":  # what happened shows the covered part
            assert it.answer == ("yes" if scm.exogenous[scm.hidden] else "no")
        assert scm.hidden is not None and f[0]  # every scene shows a run with a covered part


def test_save_load_round_trip_and_sft_export(tmp_path: Path) -> None:
    bench = generate_benchmark(3, seed=0)
    bench.save(tmp_path / "b")
    back = CageBenchmark.load(tmp_path / "b")
    assert [it.to_json() for it in back] == [it.to_json() for it in bench]
    assert all(png_bytes(back.images[k]) == png_bytes(bench.images[k]) for k in bench.images)
    path = export_sft(bench, tmp_path / "sft")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == len(bench)
    first = rows[0]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert first["messages"][1]["content"][0]["text"].startswith("CHAIN: ")
    assert (tmp_path / "sft" / first["images"][0]).is_file()


def test_to_hf_dataset() -> None:
    datasets = pytest.importorskip("datasets")
    ds = generate_benchmark(2, seed=0).to_hf()
    assert isinstance(ds, datasets.Dataset) and len(ds) == 18
    assert ds[0]["image"].size == (128, 128) and isinstance(ds[0]["gold_chain"], list)


def test_bad_input_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scene family 'volcano'"):
        generate_benchmark(2, scenes=SceneConfig(families=["volcano"]))
    with pytest.raises(ValueError, match="n_images must be >= 1"):
        generate_benchmark(0)
    with pytest.raises(ValueError, match="size must be >= 32"):
        generate_benchmark(1, scenes=SceneConfig(size=8))
    with pytest.raises(ValueError, match="is 16x16 pixels"):
        check_image(Image.new("RGB", (16, 16)))
    with pytest.raises(ValueError, match="has mode 'CMYK'"):
        check_image(Image.new("CMYK", (64, 64)))
    assert check_image(Image.new("L", (64, 64))).mode == "RGB"
    with pytest.raises(FileNotFoundError, match="CageBenchmark.save"):
        CageBenchmark.load(tmp_path)


def test_nine_distinct_questions_per_image() -> None:
    bench = generate_benchmark(60, seed=0)
    by_image: dict[str, list[str]] = {}
    for it in bench:
        by_image.setdefault(it.image_id, []).append(it.question)
    assert all(len(set(qs)) == 9 for qs in by_image.values())


NEGATIONS = {"no", "not", "off", "dark", "silent", "upright", "held"}


def test_off_phrases_negate_and_enablers_name_the_drawn_object() -> None:
    import random

    from icml_cage.scenes import FAMILIES

    drawn = {"fuse": "fuse", "wire": "wire", "lamp": "bulb", "ramp": "ramp", "gate": "gate",
             "bell": "clapper"}
    rng = random.Random(0)
    for family in FAMILIES.values():
        for _ in range(20):
            nodes = family.build(rng)
            for i, node in enumerate(nodes):
                # the False phrase must read as the negation ("stops nothing" did not)
                assert NEGATIONS & set(node.off.split()), (node.name, node.off)
                if i:
                    obj = drawn.get(node.name, "domino")
                    assert obj in node.enabler and obj in node.enabler_off, node
                    covered = family.cover_node(node, i)
                    assert covered.enabler and covered.enabler_off


def test_custom_family_with_a_two_node_chain_is_explained() -> None:
    from icml_cage.scenes import Family
    from icml_cage.scm import Node

    def draw(scm, size):
        return Image.new("RGB", (size, size))

    pair = Family("pair", lambda rng: [Node("a", "on", "off"), Node("b", "on", "off", "u", "no u")],
                  draw, coverable=lambda nodes: [1])
    with pytest.raises(ValueError, match="at least 3 nodes"):
        generate_benchmark(1, scenes=SceneConfig(families=[pair]))
    nothing = Family("bare", lambda rng: [Node(f"x{i}", "on", "off", "u", "no u")
                                          for i in range(3)], draw, coverable=lambda nodes: [])
    with pytest.raises(ValueError, match="no enabler a cover may hide"):
        generate_benchmark(1, scenes=SceneConfig(families=[nothing]))
    with pytest.raises(TypeError, match="Family"):
        generate_benchmark(1, scenes=SceneConfig(families=[lambda rng, size: None]))
