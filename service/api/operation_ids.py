"""Every route's OpenAPI operationId, chosen here once: short, stable names that generated clients make their
functions of (openapi-python-client: ``text_classification``; @hey-api/openapi-ts: ``textClassification``).

FastAPI would make them from the function name, path and method (``text_classification_v1_text_classification_post``),
so they changed with any path. A route that is not in the table is a start-up error, not a generated name.
"""

from __future__ import annotations

from fastapi.routing import APIRoute

OPERATION_IDS: dict[str, str] = {  # the route's name (its function's, or InferenceRoute.operation) -> operationId
    "list_models": "listModels",
    "retrieve_model": "retrieveModel",
    "repository_index": "repositoryIndex",
    "load_model": "loadModel",
    "unload_model": "unloadModel",
    "text_classification": "textClassification",
    "question_answering": "questionAnswering",
    "token_classification": "tokenClassification",
    "fill_mask": "fillMask",
    "zero_shot_classification": "zeroShotClassification",
    "sentence_similarity": "sentenceSimilarity",
    "similarity": "similarity",
    "rerank": "rerank",
    "tei_rerank": "teiRerank",
    "rerank_v2": "rerankV2",
    "embed_v1": "embedV1",
    "embed_v2": "embedV2",
    "classify": "classify",
    "cohere_tokenize": "cohereTokenize",
    "cohere_detokenize": "cohereDetokenize",
    "embeddings": "createEmbeddings",
    "create_file": "createFile",
    "list_files": "listFiles",
    "retrieve_file": "retrieveFile",
    "file_content": "retrieveFileContent",
    "delete_file": "deleteFile",
    "create_batch": "createBatch",
    "retrieve_batch": "retrieveBatch",
    "cancel_batch": "cancelBatch",
    "list_batches": "listBatches",
    "create_dataset": "createDataset",
    "dataset_usage": "datasetUsage",
    "list_datasets": "listDatasets",
    "retrieve_dataset": "retrieveDataset",
    "delete_dataset": "deleteDataset",
    "dataset_part": "datasetPart",
    "create_embed_job": "createEmbedJob",
    "list_embed_jobs": "listEmbedJobs",
    "retrieve_embed_job": "retrieveEmbedJob",
    "cancel_embed_job": "cancelEmbedJob",
    "tokenize": "tokenize",
    "decode": "decode",
    "info": "info",
    "embed": "embed",
    "embed_all": "embedAll",
    "embed_sparse": "embedSparse",
    "predict": "predict",
    "server_live": "serverLive",
    "server_ready": "serverReady",
    "server_metadata": "serverMetadata",
    "model_metadata": "modelMetadata",
    "model_version_metadata": "modelVersionMetadata",
    "model_ready": "modelReady",
    "model_version_ready": "modelVersionReady",
    "every_model_statistics": "modelStatisticsAll",
    "model_statistics": "modelStatistics",
    "model_version_statistics": "modelVersionStatistics",
    "model_config": "modelConfig",
    "model_version_config": "modelVersionConfig",
    "logging_settings": "logSettings",
    "update_logging": "updateLogSettings",
    "trace_settings": "traceSettings",
    "update_trace_settings": "updateTraceSettings",
    "model_trace_settings": "modelTraceSettings",
    "update_model_trace_settings": "updateModelTraceSettings",
    "system_status": "systemSharedMemoryStatus",
    "system_region_status": "systemSharedMemoryRegionStatus",
    "system_register": "systemSharedMemoryRegister",
    "system_unregister_all": "systemSharedMemoryUnregisterAll",
    "system_unregister": "systemSharedMemoryUnregister",
    "cuda_regions_status": "cudaSharedMemoryStatus",
    "cuda_region_status": "cudaSharedMemoryRegionStatus",
    "cuda_register": "cudaSharedMemoryRegister",
    "cuda_unregister_all": "cudaSharedMemoryUnregisterAll",
    "cuda_unregister": "cudaSharedMemoryUnregister",
    "infer": "modelInfer",
    "infer_version": "modelVersionInfer",
    "hf_inference": "hfInference",
    "hf_inference_default": "hfInferenceDefault",
    "root": "root",
    "live": "live",
    "ready": "ready",
    "metrics": "metrics",
}


class UnnamedOperation(LookupError):
    """A route added without an operationId in OPERATION_IDS."""


def operation_id(route: APIRoute) -> str:
    """FastAPI's ``generate_unique_id_function``: the route's id from the table (a route left out of the document,
    such as /docs, keeps its name)."""
    if not route.include_in_schema:
        return route.name
    try:
        return OPERATION_IDS[route.name]
    except KeyError:
        raise UnnamedOperation(f"route {route.name!r} ({route.path}) has no operationId in OPERATION_IDS") from None
