"""``python -m rlcd_lab.lm_eval_tasks [lm-eval arguments]``: lm-eval's own command line
with the ``rlcd`` model registered and this folder as ``--include_path`` (unless one is
given). Everything else, the arguments, output and exit status, is lm-eval's
(``python -m rlcd_lab.lm_eval_tasks run --help``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rlcd_lab.lm_eval_tasks import TASK_DIR, register


def main(argv: Sequence[str] | None = None) -> None:
    """Run lm-eval's command line on ``argv`` (default ``sys.argv[1:]``) after
    :func:`rlcd_lab.lm_eval_tasks.register`; adds ``--include_path TASK_DIR`` to a command
    (``run``, the default, ``ls`` or ``validate``) that names none."""
    from lm_eval.__main__ import cli_evaluate

    args = list(sys.argv[1:] if argv is None else argv)
    if (
        args
        and args[0] not in ("-h", "--help")
        and not any(a == "--include_path" or a.startswith("--include_path=") for a in args)
    ):
        args += ["--include_path", str(TASK_DIR)]
    register()
    sys.argv = ["lm-eval", *args]
    cli_evaluate()


if __name__ == "__main__":
    main()
