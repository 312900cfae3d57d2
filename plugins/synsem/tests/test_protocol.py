import pytest
import torch
from icml_synsem import (
    CONDITIONS,
    SentenceReps,
    SynSemData,
    analyse_reps,
    centroid_ablation_profile,
    make_toy_data,
)
from icml_synsem.config import AnalysisOptions, ExtractionOptions


def test_planted_claims_on_tiny_llama(toy_profile):
    """Removing c_sem lowers paraphrase retrieval far more than its permuted control and more
    than removing c_syn; symmetrically for syntax twins. Sanity check on planted structure."""
    s = toy_profile.summary()
    assert s["sem_recall_none"] > 0.5 and s["syn_recall_none"] > 0.4
    assert s["sem_drop_sem"] > 0.35 and s["sem_drop_sem"] - s["sem_drop_sem_perm"] > 0.3
    assert s["sem_drop_sem"] > s["sem_drop_syn"] + 0.3
    assert s["syn_drop_syn"] > 0.3 and s["syn_drop_syn"] - s["syn_drop_syn_perm"] > 0.2
    assert s["syn_drop_syn"] > s["syn_drop_sem"] + 0.3
    assert s["explained_sem"] > 5 * s["explained_sem_perm"]
    assert s["explained_syn"] > 3 * s["explained_syn_perm"]
    assert s["ii_syn_to_sem"] > 0.8 and s["ii_sem_to_syn"] > 0.8  # decoupled by construction
    for name in CONDITIONS:  # every recall is a probability for every layer
        assert all(0 <= v <= 1 for v in toy_profile.semantic[name] + toy_profile.syntactic[name])


def test_context_syntax_plants_different_layer_profiles(toy):
    """With less syntax in the attention context, twin retrieval falls with depth while
    paraphrase retrieval does not: the two cross-layer profiles differ."""
    from icml_synsem import planted_llama

    _, tok, data, lex = toy
    model = planted_llama(lex, num_layers=4, context_syntax=0.5, seed=0)
    res = centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[1, 4]),
                                    AnalysisOptions(imbalance_resamples=0))
    sem, syn = res.semantic["none"], res.syntactic["none"]
    assert syn[0] - syn[1] > 0.2
    assert sem[1] >= sem[0] - 0.05
    with pytest.raises(ValueError, match="context_syntax"):
        planted_llama(lex, context_syntax=1.5)


def _gaussian_reps(n_groups=10, per=12, dim=256, syn_scale=0.7, noise=0.3, seed=0):
    """x = s_g + m_i + noise with the partners sharing exactly one of the two parts."""
    g = torch.Generator().manual_seed(seed)
    n = n_groups * per
    groups = [i % n_groups for i in range(n)]
    s = syn_scale * torch.randn(n_groups, dim, generator=g)
    m = torch.randn(n, dim, generator=g)

    def eps():
        return noise * torch.randn(n, dim, generator=g)

    other = [(gi + 1 + int(torch.randint(n_groups - 1, (1,), generator=g))) % n_groups
             for gi in groups]
    x = s[groups] + m + eps()
    twins = s[groups] + torch.randn(n, dim, generator=g) + eps()
    paras = s[other] + m + eps()
    trans = {f"l{j}": s[torch.randint(n_groups, (n,), generator=g)] + m + eps()
             for j in range(4)}
    reps = SentenceReps([1], x[None], twins[None], paras[None],
                        {k: v[None] for k, v in trans.items()})
    words = [f"w{i}" for i in range(n)]
    data = SynSemData(words, words, [f"T{gi}" for gi in groups], words,
                      {k: words for k in trans})
    return reps, data


def test_gaussian_planted_model_gives_known_recalls():
    reps, data = _gaussian_reps()
    res = analyse_reps(reps, data, AnalysisOptions(k=1, imbalance_resamples=10))
    sem, syn = res.semantic, res.syntactic
    assert sem["none"][0] > 0.9 and syn["none"][0] > 0.9
    assert sem["sem"][0] < 0.1 and sem["sem_perm"][0] > 0.85
    assert syn["syn"][0] < 0.7 and syn["syn_perm"][0] > 0.85
    # removing the semantic centroid leaves syntax retrieval intact, and vice versa
    assert syn["sem"][0] > 0.85 and sem["syn"][0] > 0.85
    assert res.imbalance["ii_syn_to_sem"][0] > 0.7


def test_subtract_and_pair_variants_run(toy):
    model, tok, data, _ = toy
    res = centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[2]),
                                    AnalysisOptions(ablation="subtract", syntax_match="pair",
                                                    leave_one_out=True, imbalance_resamples=0,
                                                    global_center=False))
    assert res.imbalance == {} and res.settings["ablation"] == "subtract"
    # the protocol's numbers equal the pieces computed directly from the representations
    from icml_synsem import (
        orthogonalize,
        recall_at_k,
        semantic_centroids,
        sentence_reps,
        subtract,
        syntactic_centroids,
    )

    reps = sentence_reps(model, tok, data, ExtractionOptions(layers=[2]))
    x, twins = reps.originals[0].double(), reps.twins[0].double()
    assert res.syntactic["none"][0] == pytest.approx(recall_at_k(x, twins, 3))
    c_sem = semantic_centroids([t[0].double() for t in reps.translations.values()])
    c_syn = orthogonalize(syntactic_centroids(x, data.templates, leave_one_out=True), c_sem)
    assert res.syntactic["syn"][0] == pytest.approx(recall_at_k(subtract(x, c_syn), twins, 3))


def test_deterministic(toy, toy_profile):
    model, tok, data, _ = toy
    again = centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[1, 2, 3]),
                                      AnalysisOptions(imbalance_resamples=30))
    assert again.rows() == toy_profile.rows()


def test_singleton_groups_are_dropped_and_counted(toy):
    model, tok, data, _ = toy
    templates = list(data.templates)
    templates[0] = "UNIQUE TEMPLATE"
    data2 = SynSemData(data.originals, data.twins, templates, data.paraphrases,
                       data.translations)
    res = centroid_ablation_profile(model, tok, data2, ExtractionOptions(layers=[1]),
                                    AnalysisOptions(imbalance_resamples=0))
    assert res.n_dropped == 1 and res.n_queries == len(data) - 1
    kept = centroid_ablation_profile(model, tok, data2, ExtractionOptions(layers=[1]),
                                     AnalysisOptions(imbalance_resamples=0, min_group_size=1))
    assert kept.n_dropped == 0
    with pytest.raises(ValueError, match="leave_one_out.* needs .*min_group_size >= 2"):
        centroid_ablation_profile(model, tok, data2, ExtractionOptions(layers=[1]),
                                  AnalysisOptions(leave_one_out=True, min_group_size=1))


def test_short_sentences_error_or_drop(toy):
    model, tok, data, _ = toy
    paras = list(data.paraphrases)
    paras[3] = paras[3].split()[0]  # one token
    data2 = SynSemData(data.originals, data.twins, data.templates, paras, data.translations)
    with pytest.raises(ValueError, match="fewer than last_n"):
        centroid_ablation_profile(model, tok, data2, ExtractionOptions(layers=[1]),
                                  AnalysisOptions(imbalance_resamples=0))
    res = centroid_ablation_profile(model, tok, data2,
                                    ExtractionOptions(layers=[1], drop_short=True),
                                    AnalysisOptions(imbalance_resamples=0))
    assert res.n_dropped >= 1 and res.n_queries == len(data) - res.n_dropped


def test_bad_protocol_arguments(toy):
    model, tok, data, _ = toy
    with pytest.raises(ValueError, match="syntax_match"):
        centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[1]),
                                  AnalysisOptions(syntax_match="both"))
    with pytest.raises(ValueError, match=r"analysis\.ablation"):
        centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[1]),
                                  AnalysisOptions(ablation="zero", imbalance_resamples=0))
    with pytest.raises(ValueError, match="out of range"):
        centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[9]))
    reps, gdata = _gaussian_reps()
    with pytest.raises(ValueError, match="the data has"):
        analyse_reps(reps, gdata.subset(range(5)))


def test_data_validation_and_round_trip(tmp_path):
    data, _ = make_toy_data(n_templates=4, per_template=2, n_languages=2, seed=3)
    with pytest.raises(ValueError, match="paraphrases has 7 entries but there are 8"):
        SynSemData(data.originals, data.twins, data.templates, data.paraphrases[:7],
                   data.translations)
    with pytest.raises(ValueError, match=r"twins\[2\] is empty"):
        SynSemData(data.originals, data.twins[:2] + [""] + data.twins[3:], data.templates,
                   data.paraphrases, data.translations)
    with pytest.raises(ValueError, match="translations is empty"):
        SynSemData(data.originals, data.twins, data.templates, data.paraphrases, {})
    from icml_synsem import load_synsem_dir

    data.save(tmp_path)
    back = load_synsem_dir(tmp_path)
    assert back == data
    # originals only in one of the two sets are dropped, partners stay aligned
    sem = tmp_path / "semantics" / "original_sentences_semantics.txt"
    lines = sem.read_text().splitlines()
    sem.write_text("\n".join(["an extra sentence"] + lines[1:]) + "\n")
    part = load_synsem_dir(tmp_path)
    assert part == data.subset(range(1, len(data)))
    (tmp_path / "semantics" / "t1.txt").write_text("too short\n")
    with pytest.raises(ValueError, match="different line counts"):
        load_synsem_dir(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        load_synsem_dir(tmp_path / "nowhere")


def test_generator_structure():
    from icml_synsem.generate import Lexicon

    data, lex = make_toy_data(n_templates=5, per_template=3, n_languages=2, seed=1)
    assert isinstance(lex, Lexicon) and len(data) == 15 and data.languages == ["t1", "t2"]
    for i in range(len(data)):
        orig = [lex.parse(w) for w in data.originals[i].split()]
        twin = [lex.parse(w) for w in data.twins[i].split()]
        para = [lex.parse(w) for w in data.paraphrases[i].split()]
        assert [p for p, _, _ in orig] == data.templates[i].split() == [p for p, _, _ in twin]
        assert {c for _, c, _ in orig}.isdisjoint({c for _, c, _ in twin})
        assert sorted(c for _, c, _ in para) == sorted(c for _, c, _ in orig)
        assert " ".join(p for p, _, _ in para) != data.templates[i]
        for lang in data.languages:
            tr = [lex.parse(w) for w in data.translations[lang][i].split()]
            assert {la for _, _, la in tr} == {lang}
            assert sorted(c for _, c, _ in tr) == sorted(c for _, c, _ in orig)
    again, _ = make_toy_data(n_templates=5, per_template=3, n_languages=2, seed=1)
    assert again == data
    with pytest.raises(ValueError, match="distinct templates"):
        make_toy_data(n_templates=100, length=2, n_pos=3)


def test_intervals_are_the_core_bootstrap_of_the_hits():
    """The 95% intervals are icml.stats.mean_ci over the queries' 0/1 hits (seed + 1), the same
    draws for every condition, and each interval holds its point estimate."""
    from icml_synsem.protocol import center_sets
    from icml_synsem.retrieval import recall_hits

    from icml import stats

    reps, data = _gaussian_reps()
    res = analyse_reps(reps, data, AnalysisOptions(k=1, imbalance_resamples=0, n_boot=500), seed=3)
    x, twins, paras, trans = center_sets(reps.originals[0].double(), reps.twins[0].double(),
                                         reps.paraphrases[0].double(),
                                         [v[0].double() for v in reps.translations.values()],
                                         "official")
    want = stats.mean_ci(recall_hits(x, paras, 1), n_boot=500, seed=4)
    assert res.semantic_ci["none"][0] == (want.lo, want.hi)
    assert res.semantic["none"][0] == pytest.approx(want.value)
    for vals, cis in ((res.semantic, res.semantic_ci), (res.syntactic, res.syntactic_ci)):
        for cond, (lo, hi) in ((c, cis[c][0]) for c in cis):
            assert lo <= vals[cond][0] <= hi
    with pytest.raises(ValueError, match="n_boot"):
        analyse_reps(reps, data, AnalysisOptions(k=1, imbalance_resamples=0, n_boot=50))
