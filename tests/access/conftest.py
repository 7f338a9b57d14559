"""Stores made by a test, closed after it (the store tests' fixture)."""

from tests.store.conftest import make_store  # noqa: F401
