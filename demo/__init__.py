"""The four demo models: generated training data, the build (fine-tune, export, held-out check) and the README's
requests. ``python -m demo --out models`` builds them (``demo.build``); ``python -m demo.check --models models``
scores built bundles; ``python3 -m demo.examples --url URL`` checks a running server (standard library only).

Run from the repository root: the package is not installed with bertserve.
"""
