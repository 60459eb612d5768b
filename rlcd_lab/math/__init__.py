"""The math floor beside the four modules the design's contract names at the package's top
(``rlcd_lab.scoring``, ``decomposition``, ``estimators``, ``metrics``): paired tests
(``stats``), the decision rule and cost model (``routing``), the verdict wording
(``verdicts``), the paper's claims (``paper``) and the scoring rules' names
(``rule_names``). Pure functions on arrays; nothing here loads a model."""
