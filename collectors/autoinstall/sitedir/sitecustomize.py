"""Python runs this at start-up when ``c4 run`` put its directory first on ``PYTHONPATH``.

With ``C4_COLLECT=1`` it arranges for the c4 collector to hook torch.distributed as soon as the
program imports it (see ``collectors.autoinstall``). Then it runs any other ``sitecustomize``
that this one shadows, so that a site's own start-up hook keeps working.
"""

from __future__ import annotations

import os
import sys


def _enable_collector() -> None:
    try:
        try:
            from collectors.autoinstall import enable
        except ImportError:
            # c4 is not installed in this interpreter: use the copy c4 run came from, searched
            # last so that it cannot shadow the program's own modules.
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
                os.path.abspath(__file__)))))
            sys.path.append(root)
            from collectors.autoinstall import enable
        enable()
    except Exception as exc:  # never stop the program from starting
        sys.stderr.write(f"c4: collector not installed: {exc}\n")


def _chain_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
        if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write(f"c4: the site's own sitecustomize failed: {exc}\n")


if os.environ.get("C4_COLLECT") == "1":
    _enable_collector()
_chain_shadowed_sitecustomize()
