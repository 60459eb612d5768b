"""Language models: the tiny Llama and its tokenizer (``model``), the checkpoint format
(``checkpoint``: ``rlcd.json``, checksums, atomic saves), pretrained models converted
offline (``pretrained``) and ``load_checkpoint`` for every kind (``loading``)."""
