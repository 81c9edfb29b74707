"""``python -m taccl_py.profile``: the torchrun entry point of ``taccl profile run``.

``torchrun --nproc-per-node N -m taccl_py.profile -o measurements.csv --fit fitted.json``
runs one rank per process (rendezvous from torchrun's environment); rank 0
writes the CSV and the fit. Started without torchrun it spawns ``--nproc``
local processes itself, exactly like ``taccl profile run``.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Run ``taccl profile run`` with these arguments (errors: one line, exit 2)."""
    from taccl_py.cli.main import main as taccl_main

    taccl_main(["profile", "run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
