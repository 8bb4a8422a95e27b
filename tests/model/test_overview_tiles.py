"""A long text's head map through the web API, on the default model: the overview (the T × T map
max-pooled) and the tiles of cells (/api/head's rows and keys), against `Run.head(l, h).weights`
and a float64 recomputation from the head's own q and k."""
from __future__ import annotations

import base64

import numpy as np
import pytest
from fastapi.testclient import TestClient

from studygroup.web.app import create_app

TEXT = " ".join(["Maria went to the library to study for the chemistry exam, and she brought the notes."] * 18)
LAYER, HEAD = 6, 4


@pytest.fixture(scope="module")
def client(model):
    with TestClient(create_app(model)) as c:
        yield c


@pytest.fixture(scope="module")
def silenced_head(model):
    """Run.head of the text with member 7 silenced: the reference the views must equal."""
    run = model.run(TEXT, record="none", silence_members=[7])
    return run.T, run.head(LAYER, HEAD)


def decoded(d):
    top = np.frombuffer(base64.b64decode(d["max"]), dtype="<f4").reshape(d["size"])
    codes = np.frombuffer(base64.b64decode(d["reasons"]), dtype="u1").reshape(d["size"])
    return top, codes


def pooled_max(w: np.ndarray, b: int) -> np.ndarray:
    """The largest value of every b × b block of w (partial blocks at the ends), in numpy."""
    R, K = w.shape
    return np.array([[w[i:i + b, j:j + b].max() for j in range(0, K, b)] for i in range(0, R, b)])


def weights64(h) -> np.ndarray:
    """softmax(q kᵀ / √d_k) per row over the visible keys, in float64 from the head's q, k, mask."""
    q, k, mask = (t.double().numpy() if t.dtype != bool else t.numpy() for t in (h.q, h.k, h.mask.cpu()))
    s = np.where(mask, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    e = np.exp(s - s.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_the_overview_of_the_whole_map_is_its_max_pool(client, silenced_head):
    T, h = silenced_head
    assert T > 300
    d = client.post("/api/overview", json={"text": TEXT, "layer": LAYER, "head": HEAD, "side": 64,
                                           "silence": {"members": [7]}}).json()
    b = d["block"]
    assert b == -(-T // 64) and d["size"] == [-(-T // b)] * 2 and d["rows_shown"] == [0, T]
    top, codes = decoded(d)
    W = h.weights.numpy()
    np.testing.assert_allclose(top, pooled_max(W, b), atol=1e-6)  # the largest weight, not the mean
    np.testing.assert_allclose(top, pooled_max(weights64(h), b), atol=1e-5)
    assert top.max() == W.max()  # the sharpest weight survives the pooling
    # a block is masked only when every cell is: the future above the diagonal's blocks
    visible = h.mask.cpu().numpy()
    any_visible = pooled_max(visible.astype(float), b) > 0
    assert ((codes == 0) == any_visible).all()
    assert (codes[~any_visible] == 1).all()  # whole blocks hidden here are the future's


def test_an_overview_of_a_window_at_one_cell_per_block_shows_the_silenced_member(client, silenced_head):
    T, h = silenced_head
    d = client.post("/api/overview", json={"text": TEXT, "layer": LAYER, "head": HEAD, "rows": [100, 300],
                                           "keys": [0, 200], "silence": {"members": [7]}}).json()
    assert d["block"] == 1 and d["size"] == [200, 200]
    top, codes = decoded(d)
    np.testing.assert_allclose(top, h.weights.numpy()[100:300, 0:200], atol=1e-6)
    assert (codes[:, 7] == 2).all() and (codes[:, 8] == 0).all()  # member 7's answer: silenced


def test_a_tile_of_cells_equals_the_runs_weights_at_those_indices(client, silenced_head):
    T, h = silenced_head
    for rows, keys in (([T - 256, T], [T - 256, T]), ([40, 296], [0, 256]), ([5, 60], [3, 90])):
        d = client.post("/api/head", json={"text": TEXT, "layer": LAYER, "head": HEAD, "rows": rows, "keys": keys,
                                           "silence": {"members": [7]}}).json()
        assert d["rows_shown"] == rows and d["keys_shown"] == keys
        ref = h.weights.numpy()[rows[0]:rows[1], keys[0]:keys[1]]
        np.testing.assert_allclose(np.array(d["weights"]), ref, atol=1e-6)
        np.testing.assert_allclose(np.array(d["weights"]), weights64(h)[rows[0]:rows[1], keys[0]:keys[1]], atol=1e-5)


def test_overview_refuses_bad_windows_in_one_line(client):
    r = client.post("/api/overview", json={"text": TEXT, "layer": LAYER, "head": HEAD, "rows": [5, 2]})
    assert r.status_code == 400 and '"rows": [A, B]' in r.json()["error"]
    r = client.post("/api/overview", json={"text": TEXT, "layer": 30, "head": HEAD})
    assert r.status_code == 400 and "layer 30 does not exist" in r.json()["error"]
    r = client.post("/api/overview", json={"text": TEXT, "layer": 1, "head": 1, "side": 600})
    assert r.status_code == 422
