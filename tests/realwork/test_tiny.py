"""A tiny suite the real-work tests run with pytest installed from local wheels."""


def test_adds():
    assert 40 + 2 == 42


def test_joins():
    assert "-".join(["a", "b"]) == "a-b"
