"""JupyterLab's contents manager for the tutorials (:class:`TutorialContentsManager`):
jupytext's, with the kernel's ``language_info`` in every text notebook it opens, so a
tutorial opens unmodified.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

KERNEL = "python3"
"""The kernelspec name the tutorials' headers give."""


def language_info() -> dict[str, Any]:
    """The ``language_info`` that ipykernel's Python kernel reports in its
    ``kernel_info_reply`` on this interpreter (a copy)."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


class TutorialContentsManager(build_async_jupytext_contents_manager_class(AsyncLargeFileManager)):
    """jupytext's contents manager (text files as notebooks) that gives a text notebook of
    the :data:`KERNEL` kernel without ``language_info`` the kernel's (:func:`language_info`).

    JupyterLab writes the ``kernelspec`` and ``language_info`` that the kernel reports into the
    notebook it opens, and a notebook whose metadata changes is marked modified. A tutorial
    (``notebooks/NN_*.py``) carries the ``python3`` kernelspec in its header but no
    ``language_info``: that holds the Python version (``3.11.7``), which differs between
    machines, and jupytext leaves it out of the ``.py`` it saves. :class:`TutorialContentsManager`
    adds it when it reads a text notebook of the ``python3`` kernel (:func:`language_info`,
    the same dict the kernel reports, since the server and the kernel run on this
    environment's Python), so a tutorial opens unmodified; saving still writes the ``.py``
    without it. :func:`rlcd_lab.classroom.student.set_contents_manager` makes it the
    contents manager of the virtual environment's JupyterLab (``make app``).
    """

    async def get(self, path: str, content: bool = True, type=None, format=None, **kwargs):  # noqa: A002
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model["type"] != "notebook" or not content or path.endswith(".ipynb"):
            return model
        metadata = model["content"]["metadata"]
        if metadata.get("kernelspec", {}).get("name") == KERNEL:
            metadata.setdefault("language_info", language_info())
        return model
