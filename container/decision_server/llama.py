"""llama.cpp through llama-cpp-python's C API: one model, one multi-sequence context.

Why not `llama_cpp.Llama`: it owns a single-sequence context and evaluates one prompt at a
time. The engine needs a context that holds many sequences at once (a shared prefix copied
into each question's sequence, many suffixes in one decode), and control over which batch
positions produce outputs (logits, and the hidden state only where a caller asked for it).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import llama_cpp
import numpy as np

from . import ggml_backends

_backend_lock = threading.Lock()
_backend_ready = False


class LlamaError(RuntimeError):
    """llama.cpp refused a model, a context or a decode."""


def init_backend(cpu_variant: str | None = None) -> ggml_backends.LlamaBuild:
    """ggml's backends (the CPU variant for this CPU first), then llama.cpp's own start-up."""
    global _backend_ready
    with _backend_lock:
        # llama-cpp-python routes llama.cpp's log through this logger; its loading chatter
        # (hundreds of lines per context) is noise in a server log, errors are kept.
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        build = ggml_backends.load(cpu_variant)
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _backend_ready = True
        return build


class LlamaModel:
    """A loaded GGUF: weights, vocabulary, metadata and the chat template."""

    def __init__(self, path: Path, *, n_gpu_layers: int = 0) -> None:
        init_backend()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = -1 if n_gpu_layers < 0 else n_gpu_layers
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not model:
            raise LlamaError(f"llama.cpp could not load {path}")
        self.model = model
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        #: Width of the final hidden state (the vector the output head maps to logits).
        self.n_embd = llama_cpp.llama_model_n_embd_out(model)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(model)
        #: Recurrent/hybrid memory cannot share cells between sequences: copies go by state.
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))

    def close(self) -> None:
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None

    # --- vocabulary ---------------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Tokens of text as a chat handler tokenizes a rendered prompt: special tokens parsed,
        no BOS added (the chat template writes its own)."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        tokens = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, False, special)
        if count < 0:
            capacity = -count
            tokens = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, False, special)
        if count < 0:
            raise LlamaError("llama.cpp could not tokenize the text")
        return list(tokens[:count])

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes a token stands for (control tokens render as empty unless `special`)."""
        buffer = ctypes.create_string_buffer(64)
        size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[: max(size, 0)]

    def token_text(self, token: int) -> str:
        """The vocabulary entry of a token as written in the GGUF (e.g. `<|im_start|>`)."""
        if token < 0:
            return ""
        return llama_cpp.llama_vocab_get_text(self.vocab, token).decode("utf-8", "replace")

    def control_token_texts(self) -> list[str]:
        control = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
        return [
            self.token_text(token)
            for token in range(self.n_vocab)
            if llama_cpp.llama_vocab_get_attr(self.vocab, token) & control
        ]

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    @property
    def bos_token(self) -> int:
        return llama_cpp.llama_vocab_bos(self.vocab)

    @property
    def eos_token(self) -> int:
        return llama_cpp.llama_vocab_eos(self.vocab)

    def metadata(self, key: str) -> str | None:
        size = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), None, 0)
        if size < 0:
            return None
        buffer = ctypes.create_string_buffer(size + 1)
        llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buffer, size + 1)
        return buffer.value.decode("utf-8", "replace")

    @property
    def chat_template(self) -> str | None:
        template = llama_cpp.llama_model_chat_template(self.model, None)
        return template.decode("utf-8") if template else None


@dataclass(frozen=True, eq=False)
class SequenceState:
    """A sequence's KV cells from position `start` on, serialised by llama.cpp (`size` bytes of
    `data`), to be written back into a sequence later."""

    data: ctypes.Array
    size: int
    start: int


@dataclass(frozen=True)
class BatchToken:
    token: int
    position: int
    sequence: int
    output: bool


class LlamaContext:
    """A multi-sequence context over one model, with a unified KV cache.

    Unified KV: every sequence draws cells from one pool of `n_ctx`, so a prefix copied into
    another sequence (`copy_sequence`) shares its cells instead of duplicating them, and a
    prompt may use the whole context whatever the number of sequences.
    """

    def __init__(self, model: LlamaModel, *, n_ctx: int, n_batch: int, n_seq_max: int, threads: int,
                 flash_attn: Literal["auto", "on", "off"]) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.n_threads = threads
        params.n_threads_batch = threads
        # `auto` is llama.cpp's own: on wherever the device has the kernels. Flash attention skips
        # the cells a sequence may not see, so a batch of sequences in one unified KV cache costs
        # close to the sum of its parts (without it every token attends over every sequence's
        # cells, masked: measured 1.09x the ideal batch on 2 CPU threads, 1.04x with it), and on a
        # GPU it keeps the V cache untransposed, so copied sequences move in whole rows.
        params.flash_attn_type = {
            "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
            "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[flash_attn]
        params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE
        params.embeddings = False
        params.kv_unified = True
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model.model, params)
        if not ctx:
            raise LlamaError(f"llama.cpp could not create a context (n_ctx={n_ctx}, n_seq_max={n_seq_max})")
        self.ctx = ctx
        self.model = model
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
        self.n_batch = n_batch
        self.n_seq_max = n_seq_max
        self.memory = llama_cpp.llama_get_memory(ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._embeddings = False

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def decode(self, tokens: Sequence[BatchToken], *, embeddings: bool = False) -> None:
        """One llama_decode over `tokens` (at most n_batch). With `embeddings`, every token is an
        output and its final hidden state is kept as well as its logits."""
        if not tokens or len(tokens) > self.n_batch:
            raise ValueError(f"a batch holds 1..{self.n_batch} tokens, got {len(tokens)}")
        if embeddings != self._embeddings:
            llama_cpp.llama_set_embeddings(self.ctx, embeddings)
            self._embeddings = embeddings
        batch = self._batch
        for i, item in enumerate(tokens):
            batch.token[i] = item.token
            batch.pos[i] = item.position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = item.sequence
            batch.logits[i] = 1 if (embeddings or item.output) else 0
        batch.n_tokens = len(tokens)
        status = llama_cpp.llama_decode(self.ctx, batch)
        if status != 0:
            reason = "no room in the KV cache" if status == 1 else f"llama_decode returned {status}"
            raise LlamaError(f"decode of {len(tokens)} tokens failed: {reason}")

    def logits(self, index: int) -> np.ndarray:
        """The vocabulary logits of batch position `index` (a view into llama.cpp's buffer,
        valid until the next decode)."""
        pointer = llama_cpp.llama_get_logits_ith(self.ctx, index)
        if not pointer:
            raise LlamaError(f"no logits at batch position {index}")
        return np.ctypeslib.as_array(pointer, shape=(self.model.n_vocab,))

    def hidden_state(self, index: int) -> np.ndarray:
        """The final hidden state of batch position `index` (copied): what the output head reads."""
        pointer = llama_cpp.llama_get_embeddings_ith(self.ctx, index)
        if not pointer:
            raise LlamaError(f"no hidden state at batch position {index} (embeddings were off)")
        return np.ctypeslib.as_array(pointer, shape=(self.model.n_embd,)).copy()

    # --- sequences --------------------------------------------------------------------------------

    def copy_sequence(self, source: int, target: int, n_tokens: int, *, by_state: bool) -> None:
        """Make `target` hold the first `n_tokens` of `source`.

        KV memory shares the cells (no data moves); recurrent/hybrid memory has no cells to
        share, so the source's state is serialised and loaded into the target (`by_state`: the
        source must then hold exactly `n_tokens`)."""
        self.remove_sequence(target)
        if n_tokens == 0:
            return
        if not by_state:
            llama_cpp.llama_memory_seq_cp(self.memory, source, target, 0, n_tokens)
            return
        if not self.load_sequence(target, self.save_sequence(source, 0), n_tokens, prefix_source=source):
            raise LlamaError(f"could not copy the state of sequence {source} into {target}")

    def save_sequence(self, sequence: int, start: int) -> SequenceState:
        """Serialise the cells of `sequence` from position `start` on. The sequence gives up its
        cells before `start` first (so only the rest is written): it is about to be cleared."""
        if start > 0:
            llama_cpp.llama_memory_seq_rm(self.memory, sequence, 0, start)
        size = llama_cpp.llama_state_seq_get_size(self.ctx, sequence)
        data = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self.ctx, data, size, sequence)
        if written == 0:
            raise LlamaError(f"could not serialise sequence {sequence}")
        return SequenceState(data, written, start)

    def load_sequence(self, sequence: int, state: SequenceState, n_tokens: int, *, prefix_source: int) -> bool:
        """Make `sequence` hold the first `n_tokens` of a saved sequence: its first `state.start`
        shared from `prefix_source` (which holds them), the rest written back from `state` (a
        recurrent/hybrid state only whole: `n_tokens` is then all of it). False (and `sequence`
        left empty) where llama.cpp cannot read it back, e.g. no run of free cells that long."""
        self.remove_sequence(sequence)
        written = llama_cpp.llama_state_seq_set_data(self.ctx, state.data, state.size, sequence)
        # It must have written the sequence up to the tokens asked for, no fewer.
        if written == 0 or llama_cpp.llama_memory_seq_pos_max(self.memory, sequence) < n_tokens - 1:
            self.remove_sequence(sequence)
            return False
        if state.start > 0:
            llama_cpp.llama_memory_seq_cp(self.memory, prefix_source, sequence, 0, state.start)
        llama_cpp.llama_memory_seq_rm(self.memory, sequence, n_tokens, -1)
        return True

    def remove_sequence(self, sequence: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, sequence, -1, -1)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, False)
