"""The classroom: the tutorials' helpers (``tutorial``), one check per exercise
(``exercises``: the notebooks call ``exercises.check_...``), student copies and the
JupyterLab settings (``student``: ``python -m rlcd_lab.classroom.student``), JupyterLab's
contents manager for the tutorials (``jupyterlab``) and grader assignments
(``assignments``)."""
