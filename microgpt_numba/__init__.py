"""microgpt_numba: a Numba-CUDA port of microgpt.cu (a 1-layer character GPT trained with Adam)."""
