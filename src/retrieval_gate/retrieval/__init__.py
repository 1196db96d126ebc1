"""Retrievers: BM25, dense MiniLM, and the questions' own contexts."""
