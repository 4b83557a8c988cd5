"""Stands in for pymetis where the GPU machine has none: importing it fails, as it does there
(tests/test_scripts.py puts this folder first on PYTHONPATH for gpu_check's rehearsal)."""
raise ImportError("pymetis is blocked: the GPU machine's image has no pymetis")
