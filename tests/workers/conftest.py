"""Fixtures for worker tests: a tiny model on disk and a KV store on the shared local Ray."""

import pytest

from tests.workers.tiny import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny_model")))


@pytest.fixture
def kv_store(ray_local):
    from verl_lite.kv import init_kv_store, shutdown_kv_store

    client = init_kv_store(num_storage_units=2)
    yield client
    shutdown_kv_store()
