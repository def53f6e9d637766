import itertools
import os
import tempfile

import pytest
import torch
from helpers.speculative import tiny_target
from helpers.streaming import make_vlm
from helpers.tiny_model import PROMPT_CORPUS, tiny_parts

from flashdrive_ros.ros.harness.loopback import DOMAIN_ID_COUNT, DOMAIN_ID_ENV, DOMAIN_ID_FIRST


def pytest_configure(config):
    """Inductor's compiled kernels on disk, one folder per CPU capability: a kernel built
    under one (AVX512) and loaded under another (ATEN_CPU_CAPABILITY=avx2) computes NaN or
    crashes the process."""
    capability = torch.backends.cpu.get_cpu_capability().lower()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), f"flashdrive_inductor_{capability}"))


def _worker_domains():
    """The DDS domain ids of this test process, cycled: a slice of loopback's range per
    pytest-xdist worker, so that no two workers share one."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = DOMAIN_ID_COUNT // workers
    return itertools.cycle(range(DOMAIN_ID_FIRST + index * size,
                                 DOMAIN_ID_FIRST + (index + 1) * size))


_DOMAINS = _worker_domains()


def _own_domain():
    previous = os.environ.get(DOMAIN_ID_ENV)
    domain = next(_DOMAINS)
    os.environ[DOMAIN_ID_ENV] = str(domain)
    yield domain
    if previous is None:
        os.environ.pop(DOMAIN_ID_ENV)
    else:
        os.environ[DOMAIN_ID_ENV] = previous


@pytest.fixture(scope="module", autouse=True)
def module_domain():
    """Loopback graphs of a module's fixtures on a DDS domain of their own (the tests' own on
    another each): a node or process left over from an earlier test cannot meet them."""
    yield from _own_domain()


@pytest.fixture(autouse=True)
def test_domain(module_domain):
    """The test's DDS domain id, its own (loopback_domain_id() and child processes)."""
    yield from _own_domain()


@pytest.fixture()
def in_process_compile():
    """Inductor compiles in the test process: no pool of compile workers left to shut down at
    the process's exit."""
    import torch._inductor.config

    with torch._inductor.config.patch(compile_threads=1):
        yield


@pytest.fixture(scope="module")
def one_thread():
    """torch on one intra-op thread for a module's tests; the previous count comes back."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture()
def client_node():
    """A node on a loopback context, spun on a thread of its own."""
    import threading

    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from flashdrive_ros.ros.harness.loopback import local_context

    context = local_context()
    node = Node("test_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    yield node
    executor.shutdown()
    node.destroy_node()
    context.shutdown()
    spinner.join(timeout=5.0)


@pytest.fixture(scope="module")
def parts():
    """The tiny model, its tokenizer (prompt corpus) and drafter: random weights, seed 0."""
    return tiny_parts(PROMPT_CORPUS)


@pytest.fixture(scope="module")
def target():
    """The speculative decoding tests' tiny target (backbone and lm_head)."""
    return tiny_target()


@pytest.fixture(scope="module")
def tiny_vlm():
    """(4-layer tiny VLM, its config) for the streaming prefill tests."""
    return make_vlm(4)
