"""Fixtures of the experiments' fast tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread, as the chapters run under ``covbook run`` (COVBOOK_THREADS=1): the experiments'
    tensors are tiny here (threads only add overhead) and multi-threaded reductions can differ in the last bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
