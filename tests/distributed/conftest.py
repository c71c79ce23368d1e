"""Distributed training on CPU: 2 processes, gloo, 127.0.0.1 (marker `distributed`; part of the default
`-m "not slow"` run). The rank functions live in modules beside this file, importable in the children."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))   # fuse_all_model_testing: float64 judging

