"""The bundle contract and task table every package shares (torch-free, imports no other package of ours).

``tasks``: what each task is (outputs, axes, pipeline defaults); ``bundle``: the bundle folder's files and
``bundle.json``; ``onnx_io``: padding rows into the graph's named inputs and opening a session;
``decoding`` and ``mask_probes``: the decoding rules training's evaluation and the service share;
``files``: JSON and tokenizer-file helpers.
"""
