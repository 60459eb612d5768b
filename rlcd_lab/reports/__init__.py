"""Reading runs and writing about them: eval dumps and paired statistics (``results``),
the mechanism's measurements (``mechanism``), tables and the report (``report``), figures
(``plots``), HTML pages (``pages``) and the difficulty map (``difficulty``)."""
