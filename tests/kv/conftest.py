"""KV store fixtures: one store per test module on the shared local Ray, one partition per test."""

import pytest

from tests.conftest import start_local_ray
from verl_lite.kv import init_kv_store, shutdown_kv_store


@pytest.fixture(scope="module")
def kv_client():
    """A client (named ``test-driver``) of a store with 2 index actors that lives for the test module."""
    start_local_ray()
    shutdown_kv_store()  # a store left behind by an earlier failure must not fail this module
    client = init_kv_store(num_storage_units=2, client_name="test-driver")
    client.stats()  # answered once both index actors run: their start-up objects are gone before tests measure
    yield client
    shutdown_kv_store()


@pytest.fixture
def partition(kv_client, request):
    """A partition name unique to the test, emptied afterwards."""
    name = request.node.name
    yield name
    kv_client.kv_clear(None, name)
