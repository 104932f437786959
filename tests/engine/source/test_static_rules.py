"""Each anti-cheat rule of `engine/source/static.py` on its own: a tiny source that trips exactly that
rule, one near it that the rule leaves alone, and the registry's promise that every rule has a
rationale and samples here."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.source.static import RULES, Finding, check_candidate_source

CHEATS = Path(__file__).parents[2] / "cheats"

# rule -> [(a source that trips it, the construct of its first finding)]
TRIPS: dict[str, list[tuple[str, str]]] = {
    "banned-module": [
        ("import threading\n", "import threading"),
        ("import pydoc\n", "import pydoc"),
        ("from unittest import mock\n", "from unittest import"),
        ("import multiprocessing.pool as mp\n", "import multiprocessing.pool"),
        ("from concurrent.futures import ThreadPoolExecutor\n", "from concurrent.futures import"),
        ("from kernelcraft.engine.watch import guard\n", "from kernelcraft.engine.watch import"),
        ("import inspect\n", "import inspect"),
        ("import ctypes\n", "import ctypes"),
        ("from types import FunctionType\n", "from types import"),
    ],
    "reference-model": [
        ("from task import get_inputs\n", "from task import get_inputs"),
        ("from models import Model\n", "from models import Model"),
        ("class ModelNew(Model):\n    pass\n", "subclass of Model"),
        ("m = Model()\n", "Model"),
    ],
    "try-in-forward": [
        (
            "class ModelNew:\n    def forward(self, x):\n        try:\n            return f(x)\n"
            "        except Exception:\n            return x\n",
            "try/except in forward",
        ),
    ],
    "try-around-launch": [
        (
            "def run(x):\n    try:\n        kernel[(1,)](x)\n    except Exception:\n        pass\n",
            "try/except around a launch",
        ),
    ],
    "dynamic-builtin": [
        ("eval('1 + 1')\n", "eval"),
        ("__import__('os')\n", "__import__"),
        ("g = globals()\n", "globals"),
        ("d = vars(torch)\n", "vars"),
    ],
    "side-stream": [
        ("import torch\ns = torch.cuda.Stream()\n", "torch.cuda.Stream"),
        ("from torch import cuda\nwith cuda.stream(s):\n    pass\n", "cuda.stream"),
        ("import torch\ngetattr(torch.cuda, 'set_' + 'stream')(s)\n", "torch.cuda.set_stream"),
    ],
    "computed-torch-getattr": [
        ("import torch\nname = 'set_stream'\ngetattr(torch.cuda, name)(s)\n", "getattr(torch.cuda, ...)"),
    ],
    "process-exit": [
        ("import os\nos._exit(0)\n", "os._exit"),
        ("import sys\nsys.exit(1)\n", "sys.exit"),
        ("import os as o\no.abort()\n", "o.abort"),
        ("from os import kill\n", "from os import kill"),
    ],
    "environment": [
        ("import os\nos.environ.get('TOKEN')\n", "os.environ"),
        ("from os import getenv\n", "from os import getenv"),
    ],
    "interpreter-introspection": [
        ("import sys\nsys.modules['task']\n", "sys.modules"),
        ("from sys import modules\n", "from sys import modules"),
        ("from sys import _getframe\n", "from sys import _getframe"),
        ("import sys\nf = sys._getframe(1)\n", "sys._getframe"),
    ],
    "internal-module": [
        ("import torch\nwith torch._C._DisableTorchDispatch():\n    pass\n", "torch._C"),
        ("from torch._C import _DisableTorchDispatch\n", "from torch._C import _DisableTorchDispatch"),
        ("import torch.utils._python_dispatch as pd\n", "import torch.utils._python_dispatch"),
        ("from torch.utils import _python_dispatch\n", "from torch.utils import _python_dispatch"),
        ("from triton.runtime import interpreter\n", "from triton.runtime import interpreter"),
        ("import torch\nc = getattr(torch, '_' + 'C')\n", "getattr(..., '_C')"),
        ("import torch\nm = torch.overrides.TorchFunctionMode\n", "torch.overrides"),
    ],
    "introspection-attribute": [
        ("g = f.__globals__\n", ".__globals__"),
        ("c = f.__closure__\n", ".__closure__"),
        ("x = getattr(f, '__glob' + 'als__')\n", "getattr(..., '__globals__')"),
        ("subs = object.__subclasses__()\n", ".__subclasses__"),
        ("d = torch_module.__dict__\n", ".__dict__"),
    ],
    "computed-getattr": [
        ("x = getattr(obj, name)\n", "getattr(..., <computed>)"),
        ("ok = hasattr(obj, prefix + 'x')\n", "hasattr(..., <computed>)"),
    ],
    "module-patch": [
        ("import torch\ntorch.allclose = lambda *a, **k: True\n", "torch.allclose"),
        ("import torch\ndel torch.testing\n", "torch.testing"),
        ("import torch.nn as nn\nnn.Module.calls += 1\n", "nn.Module.calls"),
    ],
    "setattr-delattr": [
        ("import torch\nsetattr(torch, 'rand', None)\n", "setattr"),
        ("delattr(obj, 'weight')\n", "delattr"),
    ],
    "builtin-alias": [
        ("g = getattr\n", "getattr"),
        ("import functools\nf = functools.partial(getattr, obj)\n", "getattr"),
        ("def f(o, n, g=getattr):\n    return g(o, n)\n", "getattr"),
        ("fs = [setattr, delattr]\n", "setattr"),
    ],
    "dunder-attribute": [
        ("import torch\nimp = torch.__builtins__['x']\n", ".__builtins__"),
        ("b = len.__self__\n", ".__self__"),
        ("import torch\nl = torch.__loader__\n", ".__loader__"),
        ("r = (1).__reduce_ex__(2)\n", ".__reduce_ex__"),
        ("f = table['__import__']\n", "['__import__']"),
        ("f = getattr(print, '__se' + 'lf__')\n", ".__self__"),
        ("x.__class__ = Lazy\n", ".__class__"),
    ],
    "module-reach": [
        ("import torch\nm = torch.sys.modules\n", ".sys"),
        ("import os\nm = os.sys\n", ".sys"),
        ("import numpy as np\np = np.os.getpid()\n", ".os"),
        ("from torch import sys\n", "from torch import sys"),
        ("import sys\nm = sys\n", "sys"),
        ("import torch\nhelper(torch)\n", "torch"),
        ("import triton\nx = getattr(triton, 'o' + 's')\n", ".os"),
        ("import numpy as np\np = np.ctypeslib.as_array(q)\n", ".ctypeslib"),
    ],
    "string-evaluation": [
        ("import torch\nm = torch.hub.import_module('x')\n", ".import_module"),
        ("import typing\nh = typing.get_type_hints(f)\n", ".get_type_hints"),
        ("import torch\nobj = torch.load('x.pt', weights_only=False)\n", "torch.load"),
        ("import numpy as np\na = np.load('x.npy', allow_pickle=True)\n", "np.load"),
        ("import string\nv = string.Formatter().get_field('0.x', (f,), {})\n", ".get_field"),
        ("import logging.config\nlogging.config.dictConfig(c)\n", ".dictConfig"),
    ],
    "process-spawn": [
        ("import os\nos.system('true')\n", "os.system"),
        ("import os as o\npid = o.fork()\n", "o.fork"),
        ("from os import posix_spawn\n", "from os import posix_spawn"),
        ("import os\nf = getattr(os, 'exec' + 'v')\n", "os.execv"),
    ],
}

# rule -> sources near what it forbids that it allows (and so does every other rule)
NEAR: dict[str, list[str]] = {
    "banned-module": ["import threadpoolctl\n", "from triton.runtime import driver\n"],
    "reference-model": [
        "class Model:\n    pass\n\n\nclass ModelNew(Model):\n    pass\n",
        "from taskutils import helper\n",
    ],
    "try-in-forward": [
        "class ModelNew:\n    def helper(self, x):\n        try:\n            return f(x)\n"
        "        except Exception:\n            return x\n",
        "class Other:\n    def forward(self, x):\n        try:\n            return f(x)\n"
        "        except Exception:\n            return x\n",
    ],
    "try-around-launch": [
        "def load(p):\n    try:\n        return open(p)\n    except OSError:\n        return None\n",
    ],
    "dynamic-builtin": ["model.eval()\n", "compile_options = {}\n"],
    "side-stream": [
        "import torch\ns = torch.cuda.current_stream()\n",
        "import mylib\nmylib.Stream()\n",
        # the current stream made current: a no-op users write around launches
        "import torch\nwith torch.cuda.stream(torch.cuda.current_stream()):\n    pass\n",
    ],
    "computed-torch-getattr": [
        "import torch\ndt = getattr(torch, 'float' + '16')\n",
        "import torch\nw = getattr(self, name)\n",
    ],
    "process-exit": ["import os\nos.path.exists('x')\n", "from os import path\n"],
    "environment": ["import os\nn = os.cpu_count()\n"],
    "interpreter-introspection": ["import sys\nv = sys.version_info\n"],
    "internal-module": [
        "import torch\nx = torch.cuda.current_device()\n",
        "from triton.runtime import driver\n",
        "import torch\nt = torch.ops.aten.add\n",
    ],
    "introspection-attribute": ["d = self.__dict__\n", "n = f.__name__\n"],
    "computed-getattr": ["w = getattr(self, name)\n", "w = getattr(obj, 'weight')\n"],
    "module-patch": ["self.weight = None\n", "import torch\nx = torch.zeros(1)\nx.data = None\n"],
    "setattr-delattr": ["setattr(self, 'weight', None)\n"],
    "builtin-alias": ["w = getattr(self, 'weight')\n", "ok = hasattr(obj, 'weight')\n"],
    "dunder-attribute": [
        "class A:\n    def __init__(self):\n        super().__init__()\n",
        "import torch\nv = torch.__version__\nn = type(x).__name__\n",
        "d = {'__init__': 1}\nx = d['__init__']\n",
    ],
    "module-reach": [
        "import os\np = os.path.join('a', 'b')\n",
        "import torch\nx = torch.float16\ndt = getattr(torch, 'bfloat16')\n",
        "import sys\nv = sys.version_info\n",
    ],
    "process-spawn": ["import os\nn = os.cpu_count()\np = os.path.join('a', 'b')\n"],
    "string-evaluation": [
        "import triton.language as tl\nx = tl.load(p)\n",
        "import torch\ny = torch.compile(f)\n",
    ],
}


def findings(src: str) -> list[Finding]:
    return check_candidate_source(ast.parse(src))


@pytest.mark.parametrize(
    ("rule", "src", "construct"), [(r, s, c) for r, samples in TRIPS.items() for s, c in samples]
)
def test_each_rule_trips_on_its_construct_and_no_other_rule_does(rule: str, src: str, construct: str) -> None:
    found = findings(src)
    assert {f.rule for f in found} == {rule}, found
    assert found[0].construct == construct and found[0].line >= 1


@pytest.mark.parametrize(("rule", "src"), [(r, s) for r, samples in NEAR.items() for s in samples])
def test_each_rule_leaves_a_near_miss_alone(rule: str, src: str) -> None:
    assert findings(src) == []


def test_every_registered_rule_has_a_name_a_one_line_rationale_and_samples_here() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)), names
    for r in RULES:
        assert r.rationale and "\n" not in r.rationale and r.rationale.endswith("."), r
        assert r.failure_class is FailureClass.FORBIDDEN_CONSTRUCT
    assert set(TRIPS) == set(names), "every rule needs a tripping sample, and every sample a rule"
    assert set(NEAR) == set(names), "every rule needs a near miss"


def test_a_try_around_a_launch_in_forward_is_reported_by_both_try_rules_in_registry_order() -> None:
    found = findings((CHEATS / "try_except_fallback.py").read_text())
    assert [f.rule for f in found] == ["try-in-forward", "try-around-launch"]
    assert found[0].message == "try/except in forward can hide a fallback; let errors surface"
    assert found[0].line == found[1].line


def test_findings_on_one_line_put_imports_first_then_the_imported_names_in_order() -> None:
    assert [f.construct for f in findings("from os import environ, Model\n")] == [
        "from os import environ",
        "from os import Model",
    ]
    assert [f.construct for f in findings("import os; os.x = 1; import threading\n")] == [
        "import threading",
        "os.x",
    ]


@pytest.mark.parametrize(
    ("fixture", "rule", "line"),
    [
        ("calls_reference_static.py", "reference-model", 3),
        ("exit_fake_verdict_static.py", "process-exit", 24),
        ("patch_allclose_static.py", "module-patch", 25),
    ],
)
def test_the_static_cheat_fixtures_are_caught_by_the_rule_named_for_them(
    fixture: str, rule: str, line: int
) -> None:
    first = findings((CHEATS / fixture).read_text())[0]
    assert (first.rule, first.line) == (rule, line)


def test_the_honest_fixture_trips_no_rule() -> None:
    assert findings((CHEATS / "good.py").read_text()) == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="except* is Python 3.11+")
def test_a_try_star_in_forward_is_a_try_too() -> None:
    src = (
        "class ModelNew:\n    def forward(self, x):\n        try:\n            return kernel[(1,)](x)\n"
        "        except* Exception:\n            return x\n"
    )
    assert [f.rule for f in findings(src)] == ["try-in-forward", "try-around-launch"]


def test_the_check_follows_the_candidates_own_imports(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("import os\n\nimport inner  # noqa\n")
    (tmp_path / "inner.py").write_text("x = 1\nfrom kernelcraft.engine.watch import guard\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "clean.py").write_text("import torch\n")
    src = "import torch\nfrom pkg import clean\nimport helper\n"
    found = check_candidate_source(ast.parse(src), search_path=[str(tmp_path)])
    assert [(f.line, f.rule) for f in found] == [(3, "banned-module")]
    assert "helper" in found[0].message and "inner" in found[0].message


def test_an_installed_package_is_not_followed() -> None:
    assert check_candidate_source(ast.parse("import torch\nimport triton.language as tl\n")) == []
