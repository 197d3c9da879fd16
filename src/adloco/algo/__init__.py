"""The algorithmic parts of AdLoCo, free of any training loop.

Each module holds one idea that the training engine (``adloco.engine``) calls at
a fixed point of a round: gradient statistics at the round's start parameters
(running sums in ``accumulate``, estimators in ``estimators``, one trainer's
round in ``stats``, with the exact per-sample reference in ``exact``), what the
batch test may act on (``trust``), the adaptive batch tests (their registry in
``batch_tests``, what each supplies in ``batch_test_base``, one module each:
``no_test``, ``norm_test``, ``augmented_inner_product_test``, ``inner_product_test``),
the switch policy (``switch``), trainer merging and slot allocation (``merge``),
the outer step (``outer``) and the token-based inner learning-rate schedule
(``schedule``). The maths and the departures from the
authors' code are in ``docs/algorithms.md``. Submodules are not imported here,
so that importing a pure-Python one (``schedule``, ``switch``) does not load torch.
"""
