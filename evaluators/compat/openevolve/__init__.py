"""A stand-in for the ``openevolve`` package so OpenEvolve evaluators run without it installed.

Only ``openevolve.evaluation_result.EvaluationResult`` is provided; the sandbox puts this folder's
parent on the child's PYTHONPATH after the task folder, so a real openevolve (or a task's own
module of that name) wins when present.
"""
