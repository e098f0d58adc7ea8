"""Fixtures of the index tests."""

import pytest


@pytest.fixture(params=["memory", "wiredtiger"])
def backend(request) -> str:
    return request.param
