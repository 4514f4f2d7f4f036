"""Code that generates the project's data files and docs from sources.

Each module is the library half of a script in scripts/ (the script parses its flags, calls the
module and writes the file atomically); tests import the modules to check that the files in the
repository are what a fresh run would write.

  calibration        data/calibration.json: the roofline's efficiency constants, fitted on the
                     GPU profiles of data/profiling (scripts/calibrate.py).
  fidelity           docs/FIDELITY.md: the model against every published calibration point and
                     the profile tables (scripts/fidelity_report.py).
  grader_constants   data/grader_constants.json: the graders' normalising constants and the
                     simulator's probe fingerprint (scripts/grader_constants.py).
  trace_compaction   data/traces/*.npz, their licence files and PROVENANCE.txt, from the raw
                     traces (scripts/compact_traces.py).

Nothing here is imported by the environment; the modules import pandas and scipy only inside
the functions that need them.
"""
