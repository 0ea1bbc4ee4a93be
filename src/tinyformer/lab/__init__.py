"""The lab guide (docs/lab): pages filled from the runs' own reports, never from typed numbers."""
