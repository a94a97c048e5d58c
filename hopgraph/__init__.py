"""hopgraph: on-premises multi-granular Graph-RAG with open-weight models."""
__version__ = "0.1.0"
