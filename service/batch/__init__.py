"""Batch jobs: the OpenAI Batch API's files and batches, kept in ``data_dir`` (``store``), run in the background on
the models' spare capacity (``runner``), one input line at a time through the same route machinery as the online
request (the HTTP side: ``service.api.batch``, ``service.api.batch_lines``)."""
