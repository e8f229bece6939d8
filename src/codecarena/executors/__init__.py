"""Executors: who runs the rows. `local` (this process, or a pool of local processes) and `ray`
(actors on a Ray cluster). Rows are independent; every executor produces the same rows."""
