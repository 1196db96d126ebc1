"""Adapters for the RAG frameworks users already have; each module needs its framework's extra:
`langchain` ([langchain]: langchain-core), `llamaindex` ([llamaindex]: llama-index-core),
`haystack` ([haystack]: haystack-ai). Each wraps any `Gate` (a `RetrievalGate` above all) and
sends a question to retrieval or straight to the LLM; a router (`gates.base.Router`) also to a
multi-step branch (`pricing.py`: which branch each strategy takes). With an answer gate (the
cascade), each also reads the direct branch's answer and escalates the unsure ones to retrieval
(`branches.Escalator`)."""
