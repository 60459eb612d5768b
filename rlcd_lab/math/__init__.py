"""The math floor: proper scores and Proposition 1 (``scoring``, ``decomposition``), the
surrogate losses' estimators (``estimators``), metrics and temperature scaling
(``metrics``), paired tests (``stats``), the decision rule and cost model (``routing``),
the verdict wording (``verdicts``) and the paper's claims (``paper``). Pure functions on
arrays and tensors; nothing here loads a model."""
