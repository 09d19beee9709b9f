"""``envlayer bench``: figures a user can reproduce on their own setup.

One module per job: :mod:`.timing` (repeated runs, medians and spread), :mod:`.figures`
(one measured figure and its ratio to a baseline), :mod:`.machine` (the machine and
versions), :mod:`.target` (a backend with its options under the run's profile),
:mod:`.measure` (what is measured through envlayer), :mod:`.baselines` (the same work
without envlayer, in the same run), :mod:`.flood` (floods in a child interpreter, for
their peak memory), :mod:`.sweep` (the orphan sweep over stale sandboxes),
:mod:`.ledger` (everything a run creates, to remove it), :mod:`.runner` (the order of a
run and its cleanup on signals), :mod:`.report` (JSON, tables, the docs page),
:mod:`.plots` (PNG plots, matplotlib imported lazily) and :mod:`.command` (the CLI).
"""
