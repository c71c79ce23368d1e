"""Compile each distinct kernel once: kernels of a graph whose code is the same up to names share one
compiled function.

ResNet's blocks repeat: of ResNet50's 49 kernels only 17 differ once the buffer names, the kernel's own
name and the provenance comments are set aside (BERT: 8 of 15). A codegen renders every kernel as
usual (each keeps its own source for reports and the editor), then compiles one representative per
group and binds the others' launchers to it. Parameters are matched by position, so two kernels are
the same only if their sources agree after renaming each parameter to its position: same types, same
uses, same constants (sizes included), hence the same compiled code.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable


def normalized(source: str, name: str, params: Iterable[str], comment_prefix: str) -> str:
    """`source` with its comment lines dropped, `name` spelled `__kernel__` and the i-th parameter `__p<i>__`."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(comment_prefix)]
    renames = {p: f"__p{i}__" for i, p in enumerate(params)}
    renames[name] = "__kernel__"
    # only the renamed words, longest first, as whole words: one callback per rename, not per word
    words = sorted((w for w in renames if w), key=len, reverse=True)
    if not words:
        return "\n".join(lines)
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b")
    return pattern.sub(lambda m: renames[m.group(0)], "\n".join(lines))


def representatives(kernels: dict[str, str]) -> dict[str, str]:
    """{kernel: the first kernel with the same normalized code} for kernels given as {name: normalized}."""
    first: dict[str, str] = {}
    return {name: first.setdefault(text, name) for name, text in kernels.items()}


def share(names: Iterable[str], key: Callable[[str], str]) -> dict[str, str]:
    """`representatives` of the kernels `names`, `key(name)` giving each one's normalized code."""
    return representatives({name: key(name) for name in names})
