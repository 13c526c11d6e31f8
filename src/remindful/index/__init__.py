"""Vector indexes: the ``VectorIndex`` protocol, Chroma embedded/server backends and an in-memory fake.

Importing this package does not import chromadb: the Chroma backends import it on first use.
"""

from remindful.index.base import Scalar, VectorIndex
from remindful.index.chroma import ChromaEmbeddedIndex, ChromaServerIndex
from remindful.index.memory import InMemoryIndex

__all__ = ["ChromaEmbeddedIndex", "ChromaServerIndex", "InMemoryIndex", "Scalar", "VectorIndex"]
