import numpy as np
import pytest
from icml_xspecmesh.dataset import CLASSES, make_primitive_dataset, primitive, random_pose
from icml_xspecmesh.meshio import export_mesh, from_trimesh, load_mesh, to_trimesh
from icml_xspecmesh.tokenizer import BOS, EOS, MeshTokenizer, triangulate_faces


def posed(name, seed):
    V, F = primitive(name)
    return random_pose(V, np.random.default_rng(seed)), F


@pytest.mark.parametrize("name", CLASSES)
def test_round_trip_equals_canonical_quantised_mesh(tok, name):
    V, F = posed(name, 1)
    Vq, Fq = tok.quantize(V, F)
    ids = tok.encode(V, F, label=CLASSES.index(name))
    assert ids[0] == BOS and ids[-1] == EOS and len(ids) == 3 + 9 * len(Fq)
    V2, F2 = tok.decode(ids)
    np.testing.assert_array_equal(F2, Fq)
    np.testing.assert_allclose(V2, tok.dequantize(Vq))
    assert tok.encode(V2, F2, label=CLASSES.index(name)) == ids  # decode is a fixed point


@pytest.mark.parametrize("name", CLASSES)
def test_encoding_is_invariant_to_vertex_face_and_corner_permutations(tok, name):
    V, F = posed(name, 2)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(V))
    inv = np.argsort(perm)
    V2 = V[perm]
    F2 = inv[F][rng.permutation(len(F))]
    F2 = np.stack([np.roll(f, int(rng.integers(3))) for f in F2])  # cyclic: orientation kept
    assert tok.encode(V2, F2, 0) == tok.encode(V, F, 0)


def test_orientation_is_kept(tok):
    V, F = posed("cube", 3)
    flipped = F[:, [0, 2, 1]]
    assert tok.encode(V, flipped) != tok.encode(V, F)
    Vd, Fd = tok.decode(tok.encode(V, F))
    assert to_trimesh(Vd, Fd).volume > 0  # outward normals survive the round trip


def test_canonical_order(tok):
    V, F = posed("icosahedron", 4)
    Vq, Fq = tok.quantize(V, F)
    zyx = Vq[:, [2, 1, 0]]
    assert all(tuple(a) < tuple(b) for a, b in zip(zyx[:-1], zyx[1:], strict=True))
    assert (Fq[:, 0] < Fq[:, 1]).all() and (Fq[:, 0] < Fq[:, 2]).all()
    assert all(tuple(a) < tuple(b) for a, b in zip(Fq[:-1], Fq[1:], strict=True))


def test_trimesh_file_round_trip(tok, tmp_path):
    V, F = posed("triangular_prism", 5)
    for suffix in (".obj", ".ply", ".stl"):
        path = export_mesh(V, F, tmp_path / f"m{suffix}")
        V2, F2 = load_mesh(path)
        assert tok.encode(V2, F2) == tok.encode(V, F), suffix
    assert tok.encode(*from_trimesh(to_trimesh(V, F))) == tok.encode(V, F)


def test_quads_triangulated(tok):
    V, _ = primitive("cube")
    quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
    F = triangulate_faces(quads)
    assert F.shape == (12, 3)
    assert to_trimesh(V, F).is_watertight


def test_dataset_deterministic_and_conditioned():
    a = make_primitive_dataset(30, seed=7)
    b = make_primitive_dataset(30, seed=7)
    assert a.sequences == b.sequences and a.labels == b.labels
    tok = a.tokenizer
    for s, c in zip(a.sequences, a.labels, strict=True):
        assert s[1] == tok.class_token(c) and tok.is_valid(s)
    assert make_primitive_dataset(30, seed=8).sequences != a.sequences


def test_validity_checks(tok):
    V, F = posed("tetrahedron", 6)
    ids = tok.encode(V, F, 0)
    assert tok.is_valid(ids)
    assert not tok.is_valid(ids[:-1])                  # no EOS
    assert not tok.is_valid(ids[:-2] + [EOS])           # partial face
    dup = ids[:2] + ids[2:11] * 2 + [EOS]
    assert not tok.is_valid(dup)                        # repeated face
    degenerate = ids[:2] + ids[2:5] * 3 + [EOS]
    assert not tok.is_valid(degenerate)                 # three equal corners
    assert not tok.is_valid(ids[:5] + [tok.class_token(1)] + ids[6:])  # class token in body


def test_bad_meshes_raise_clear_errors(tok):
    V, F = primitive("cube")
    with pytest.raises(ValueError, match="no faces"):
        tok.encode(V, np.zeros((0, 3), int))
    with pytest.raises(ValueError, match="triangulate"):
        tok.encode(V, [[0, 1, 3, 2]])
    bad = V.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        tok.encode(bad, F)
    with pytest.raises(ValueError, match="face indices"):
        tok.encode(V, F + 5)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        tok.encode(V[:, :2], F)
    with pytest.raises(ValueError, match="degenerate"):
        MeshTokenizer(n_bins=2).encode(np.array([[0, 0, 0], [1, 0, 0], [0.01, 0, 0]]),
                                       [[0, 1, 2]])


def test_bad_token_ids_raise(tok):
    V, F = posed("octahedron", 7)
    ids = tok.encode(V, F)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode(ids[:4] + [tok.vocab_size + 3] + ids[5:])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([-1] + ids)
    with pytest.raises(ValueError, match="multiple of 9"):
        tok.decode(ids[:-2] + [EOS])
    Vd, Fd = tok.decode(ids[:-2] + [EOS], strict=False)
    assert len(Fd) == (len(ids) - 2) // 9 - 1  # BOS, EOS, no class token
    with pytest.raises(ValueError, match="no complete face"):
        tok.decode([BOS, EOS])


def test_tokenizer_settings_validated():
    with pytest.raises(ValueError, match="vertex_order"):
        MeshTokenizer(vertex_order="zzx")
    with pytest.raises(ValueError, match="n_bins"):
        MeshTokenizer(n_bins=1)
    with pytest.raises(ValueError, match="class label"):
        MeshTokenizer(n_classes=2).class_token(2)
