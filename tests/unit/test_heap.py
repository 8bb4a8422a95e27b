"""heap: glibc is told once how to map large blocks and when to trim, and trimmed after every pass
but a short one, even a failed one, and after every layer of a long pass."""
import pytest

from studygroup.model import heap


class FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


@pytest.fixture
def libc(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(heap, "_LIBC", fake)
    return fake


def test_large_blocks_get_their_own_mappings(libc):
    heap.use_own_mappings_for_large_blocks()
    assert libc.calls == [("mallopt", heap.M_MMAP_THRESHOLD, heap.MMAP_THRESHOLD),
                          ("mallopt", heap.M_TRIM_THRESHOLD, heap.TRIM_THRESHOLD)]


def test_every_pass_but_a_short_one_is_trimmed_after_it_returns_or_raises(libc):
    @heap.then_return_freed_memory(lambda x, fail=False: x)
    def forward(x, fail=False):
        assert libc.calls == []  # not before the pass
        if fail:
            raise ValueError("boom")
        return x * 2

    big = heap.SMALL_PASS + 1
    assert forward(big) == 2 * big and libc.calls == [("malloc_trim", 0)]
    libc.calls.clear()
    with pytest.raises(ValueError, match="boom"):
        forward(big, fail=True)
    assert libc.calls == [("malloc_trim", 0)]
    libc.calls.clear()
    assert forward(heap.SMALL_PASS) == 2 * heap.SMALL_PASS and libc.calls == []  # a short pass: its blocks kept


def test_without_glibc_nothing_is_called(monkeypatch):
    monkeypatch.setattr(heap, "_LIBC", None)
    heap.use_own_mappings_for_large_blocks()
    heap.return_freed_memory()  # no error


def test_the_model_pass_is_trimmed_unless_short(libc, tiny_model, monkeypatch):
    import studygroup

    model = studygroup.load(tiny_model.path)
    libc.calls.clear()
    model.run("the tin", record="none")
    assert libc.calls == []  # a short pass
    monkeypatch.setattr(heap, "SMALL_PASS", 8)
    model.run("the tin", record="none")
    assert libc.calls == [("malloc_trim", 0)]


def test_a_long_pass_is_trimmed_after_every_layer(libc, tiny_model, monkeypatch):
    import studygroup

    model = studygroup.load(tiny_model.path)
    monkeypatch.setattr(heap, "SMALL_PASS", 8)
    libc.calls.clear()
    model.run("the tin", record="none")  # not long: once, after it
    assert libc.calls.count(("malloc_trim", 0)) == 1
    monkeypatch.setattr(heap, "MMAP_THRESHOLD", 64)  # its residual stream now a "large block"
    libc.calls.clear()
    model.run("the tin", record="none")
    assert libc.calls.count(("malloc_trim", 0)) == model.config.n_layers + 1
