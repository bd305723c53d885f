"""The cognition base: prior knowledge in a LanceDB table, embedded, seeded, retrieved, written back."""

from evoforge.cognition.embedder import Embedder
from evoforge.cognition.embeddings import make_embedder
from evoforge.cognition.entries import CognitionItem
from evoforge.cognition.errors import CognitionError
from evoforge.cognition.lexical import LexicalEmbedder
from evoforge.cognition.minilm import MiniLMEmbedder
from evoforge.cognition.onnx_embedder import OnnxEmbedder
from evoforge.cognition.openai_embedder import OpenAIEmbedder
from evoforge.cognition.seeding import read_seeds, task_seeds
from evoforge.cognition.store import CognitionBase
from evoforge.cognition.workspace import cognition_folder, open_base

__all__ = [
    "CognitionBase",
    "CognitionError",
    "CognitionItem",
    "Embedder",
    "LexicalEmbedder",
    "MiniLMEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "cognition_folder",
    "make_embedder",
    "open_base",
    "read_seeds",
    "task_seeds",
]
