"""Drawing: plotly figures (``plots``) and the HTML pages and PNGs they are written to
(``pages``), for the reports, the benchmarks and the dashboard alike."""
