"""File formats (stdlib only): atomic writes and compressed dumps (``io``), the run-folder
format (``rundir``) and the shipped assets (``assets``)."""
