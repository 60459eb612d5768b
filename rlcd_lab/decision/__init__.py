"""The decision engine over the Reader: the Jev wire (``jev``), questions to prompts and
option codes (``questions``), the direct, cascade and reason phases (``answering``), time
budgets (``deadlines``) and the entry point (``decide``)."""
