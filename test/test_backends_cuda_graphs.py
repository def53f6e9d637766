import pytest
import torch

from flashdrive_ros.backends.cuda_graphs import GraphedStep

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _mlp_step(weight: torch.Tensor):
    def step(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ weight + bias)
    return step


def test_cpu_tensors_run_eagerly():
    torch.manual_seed(0)
    weight = torch.randn(8, 8)
    step = GraphedStep(_mlp_step(weight), enabled=True)
    x, b = torch.randn(3, 8), torch.randn(8)
    assert torch.equal(step(x, b), _mlp_step(weight)(x, b))
    assert step.captured_shapes == 0


@cuda
def test_graph_replay_equals_eager_for_fresh_inputs():
    torch.manual_seed(0)
    weight = torch.randn(64, 64, device="cuda")
    eager = _mlp_step(weight)
    graphed = GraphedStep(eager, enabled=True)
    for _ in range(3):
        x = torch.randn(5, 64, device="cuda")
        b = torch.randn(64, device="cuda")
        assert torch.equal(graphed(x, b).clone(), eager(x, b))
    assert graphed.captured_shapes == 1
    graphed(torch.randn(7, 64, device="cuda"), torch.randn(64, device="cuda"))
    assert graphed.captured_shapes == 2


@cuda
def test_graph_writes_in_place_state():
    state = torch.zeros(4, 16, device="cuda")

    def write_row(row: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        state.index_copy_(0, row, values)
        return state.sum(dim=1)

    graphed = GraphedStep(write_row, enabled=True)
    for i in range(4):
        values = torch.full((1, 16), float(i + 1), device="cuda")
        graphed(torch.tensor([i], device="cuda"), values)
    assert torch.equal(state[:, 0].cpu(), torch.tensor([1.0, 2.0, 3.0, 4.0]))
