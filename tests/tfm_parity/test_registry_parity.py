"""TFM parity: official/core/registry_test.py restated on lite_launcher.core.registry."""

import pytest

from lite_launcher.core import registry


def test_register():
    """Restates registry_test.RegistryTest.test_register: functions and classes registered
    under path keys and under a class key are found again by `lookup`."""
    collection = {}

    @registry.register(collection, "functions/first")
    def first():
        return 1

    @registry.register(collection, "classes/key_class")
    class KeyClass:
        pass

    @registry.register(collection, KeyClass)
    class ValueClass:
        pass

    assert registry.lookup(collection, "functions/first") is first
    assert registry.lookup(collection, "classes/key_class") is KeyClass
    assert registry.lookup(collection, KeyClass) is ValueClass


def test_register_hierarchy():
    """Restates registry_test.RegistryTest.test_register_hierarchy: path keys become nested
    dicts; a plain key and an object key sit at the top level."""
    collection = {}

    @registry.register(collection, "functions/nested")
    def nested():
        pass

    @registry.register(collection, "top")
    def top():
        pass

    @registry.register(collection, top)
    def keyed_by_a_function():
        pass

    assert collection == {"functions": {"nested": nested}, "top": top,
                          top: keyed_by_a_function}


def test_register_error():
    """Restates registry_test.RegistryTest.test_register_error: registering below an entry
    that is not a folder is a KeyError; looking up a missing key is a LookupError."""
    collection = {}
    registry.register(collection, "functions/leaf")(len)
    with pytest.raises(KeyError):
        registry.register(collection, "functions/leaf/below")(abs)
    with pytest.raises(LookupError):
        registry.lookup(collection, "non-exist")
