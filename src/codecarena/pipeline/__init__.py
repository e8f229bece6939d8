"""The run: from what a user selected to rows in a run directory.

- `plan.py`: `RunPlan`, the run as one value (the plan that determines the rows, the run directory,
  the limits, the executor), made once and handed whole to everything below;
- `prepare.py`: `prepare(Selection)`, the one library call that checks and resolves a selection into a
  RunPlan;
- `resume.py`: what a run into a directory continues (the run already there, the rows it keeps);
- `row.py`: one row, a codec configuration x an utterance, each stage in a guarded worker;
- `execute.py`: `execute(plan, executor)`, the rows of a plan computed or resumed into its directory.
"""
