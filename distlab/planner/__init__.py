"""Chapters 12-14: the planner (configuration, cost model, decision rules, search), its validation
against published runs, and the worked 7B plan."""
