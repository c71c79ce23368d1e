"""Finding compiled functions and torch.compile call sites with ast, and resolving call targets."""

from __future__ import annotations

import textwrap
from pathlib import Path

from fuse_all_lsp.pysource import scan_source
from fuse_all_lsp.resolve import CallResolver, module_file

DECORATED = textwrap.dedent("""\
    import torch
    import torch as th
    from torch import compile as tc


    @torch.compile
    def bare(x):
        return x.cos()


    @torch.compile(backend="fuse_all", mode="reduce-overhead")
    def called(x):
        return x.sin()


    @th.compile(backend="inductor")
    def aliased(x):
        return x.exp()


    @tc
    def imported(x):
        return x.relu()


    @staticmethod
    def plain(x):
        return x


    class Net(torch.nn.Module):
        @torch.compile
        def forward(self, x):
            def inner(y):
                return y
            return inner(x)
""")


def test_every_form_of_the_decorator_is_found():
    scan = scan_source(DECORATED)
    compiled = {f.qualname: f for f in scan.functions if f.compile_decorator}
    assert set(compiled) == {"bare", "called", "aliased", "imported", "Net.forward"}
    assert compiled["called"].backend == "fuse_all" and compiled["aliased"].backend == "inductor"
    assert compiled["bare"].backend is None
    called = compiled["called"]
    assert (called.first_line, called.def_line, called.last_line) == (11, 12, 13)
    assert DECORATED.splitlines()[called.name_line - 1][called.name_start : called.name_end] == "called"
    assert compiled["Net.forward"].class_name == "Net"
    assert [f.qualname for f in scan.functions_at(35)] == ["Net.forward.inner", "Net.forward"]
    assert scan.calls == [], "decorators are not call sites"


def test_columns_are_code_points_even_after_non_ascii_text():
    scan = scan_source("import torch\nπ = 1; opt = torch.compile(f)  # ü\n")
    call = scan.calls[0]
    assert "π = 1; opt = torch.compile(f)  # ü"[call.start : call.end] == "torch.compile(f)"


def test_call_sites_record_what_they_compile():
    source = textwrap.dedent("""\
        import torch
        from models import Net
        model = Net(4).eval()
        a = torch.compile(model, backend="fuse_all")
        b = torch.compile(Net(4))
        c = torch.compile(model.forward)
        d = torch.compile(
            model=model,
        )
    """)
    scan = scan_source(source)
    assert [(c.line, c.end_line, c.target, c.constructed, c.backend) for c in scan.calls] == [
        (4, 4, "model", None, "fuse_all"),
        (5, 5, None, "Net", None),
        (6, 6, "model.forward", None, None),
        (7, 9, "model", None, None),
    ]
    assert scan.constructions == {"model": "Net"}


def test_unparsable_source_gives_an_empty_scan():
    scan = scan_source("def broken(:\n")
    assert scan.functions == [] and scan.syntax_error


def test_call_targets_resolve_within_and_across_files(tmp_path: Path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(
        textwrap.dedent("""\
        import torch
        class Net(torch.nn.Module):
            def forward(self, x):
                return x.relu()
        def helper(x):
            return x + 1
    """)
    )
    main = tmp_path / "main.py"
    source = textwrap.dedent("""\
        import torch
        from pkg.models import Net, helper
        from pkg import models
        import pkg.models as m
        def local(x):
            return x
        class Here(torch.nn.Module):
            def forward(self, x):
                return x
        net = Net()
        torch.compile(net)
        torch.compile(Here())
        torch.compile(local)
        torch.compile(helper)
        torch.compile(models.helper)
        torch.compile(m.Net())
        torch.compile(unknown_thing)
    """)
    main.write_text(source)
    scan = scan_source(source)
    resolver = CallResolver(str(main), scan, [str(tmp_path)], lambda path: scan_source(Path(path).read_text()))
    resolved = [resolver.resolve(call) for call in scan.calls]
    described = [(Path(t.file).name, t.function.qualname) if t else None for t in resolved]
    assert described == [
        ("models.py", "Net.forward"),
        ("main.py", "Here.forward"),
        ("main.py", "local"),
        ("models.py", "helper"),
        ("models.py", "helper"),
        ("models.py", "Net.forward"),
        None,
    ]


def test_relative_imports_resolve_from_the_importing_file(tmp_path: Path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "main.py").write_text("")
    (tmp_path / "a" / "sibling.py").write_text("")
    importer = str(tmp_path / "a" / "b" / "main.py")
    assert module_file("..sibling", importer, []) == str(tmp_path / "a" / "sibling.py")
    assert module_file(".missing", importer, []) is None
