"""cgate's src/train.py run as `make train` runs it, after the row's cfg values and the seed (cfg.py seeds 0 at import).

cgate.run_reference passes this file's text to the reference's interpreter with -c, from the copy's root:
`SEED KEY=VALUE ...`.
"""
import ast
import random
import runpy
import sys

import numpy
import torch
from config import cfg

seed, *settings = sys.argv[1:]
for setting in settings:
    key, value = setting.split("=", 1)
    setattr(cfg, key, ast.literal_eval(value))
torch.manual_seed(int(seed))
numpy.random.seed(int(seed))
random.seed(int(seed))
sys.argv = ["src/train.py"]
runpy.run_path("src/train.py", run_name="__main__")
