import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch: no cache entries, recompile counts or graph breaks of another test."""
    torch.compiler.reset()
    yield
    torch.compiler.reset()


class Recorder:
    """A compile_graph that keeps every graph it is given and runs it as captured."""

    def __init__(self):
        self.graphs = []
        self.boxed = True  # False: return a callable without the _boxed_call flag (make_backend adds it)

    def __call__(self, graph):
        self.graphs.append(graph)
        module = graph.graph_module

        def run(args):
            return module(*args)

        if self.boxed:
            run._boxed_call = True
        return run

    def kinds(self):
        return [g.kind for g in self.graphs]


@pytest.fixture
def recorder():
    return Recorder()
