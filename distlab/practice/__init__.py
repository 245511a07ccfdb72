"""The practice questions, one module each, named after its page in docs/practice/: each applies the planner and
the chapters' formulas to a scenario whose inputs are named constants; everything else is computed."""
