"""The classroom: the tutorials' helpers (``tutorial``), one check per exercise
(``exercises``: the notebooks call ``exercises.check_...``), student copies and notebook
pairing (``student``: ``python -m rlcd_lab.classroom.student``) and grader assignments
(``assignments``)."""
