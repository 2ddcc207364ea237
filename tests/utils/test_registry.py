"""The one registry helper: registration rules and the errors users see."""

import pytest

from verl_lite.utils.registry import Registry


def test_register_and_get_returns_the_object():
    reg = Registry("widget")

    @reg.register("a")
    def make_a():
        return 1

    assert reg.get("a") is make_a and "a" in reg and reg.names() == ["a"]


def test_registering_the_same_object_twice_is_harmless():
    reg = Registry("widget")

    def fn():
        pass

    reg.register("a")(fn)
    reg.register("a")(fn)
    assert reg.get("a") is fn and len(reg) == 1


def test_different_object_under_taken_name_is_an_error():
    reg = Registry("widget")
    reg.register("a")(lambda: 1)
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.register("a")(len)


def test_unknown_name_error_lists_known_names():
    reg = Registry("widget")
    reg.register("beta")(len)
    reg.register("alpha")(abs)
    with pytest.raises(KeyError, match="unknown widget 'gamma'; known: alpha, beta"):
        reg.get("gamma")


def test_empty_name_is_rejected():
    with pytest.raises(ValueError, match="non-empty string"):
        Registry("widget").register("")
