"""Adapters for the RAG frameworks users already have; each module needs its framework's extra:
`langchain` ([langchain]: langchain-core), `llamaindex` ([llamaindex]: llama-index-core),
`haystack` ([haystack]: haystack-ai). Each wraps any gate with `predict(texts, threshold=)`
-- a `RetrievalGate` -- and sends a question to retrieval or straight to the LLM."""
