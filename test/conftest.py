import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """torch on one intra-op thread for a module's tests; the previous count comes back."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
