"""Reading runs and writing about them: eval dumps and paired statistics (``results``),
the mechanism's measurements (``mechanism``), tables and the report (``report``) and the
difficulty map (``difficulty``); figures and pages are :mod:`rlcd_lab.drawing`'s."""
