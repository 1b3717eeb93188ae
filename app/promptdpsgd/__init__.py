"""PromptDPSGD (Duan et al. 2023): a soft prompt (a few trainable input embeddings in front
of a frozen model) learned on the private records with DP-SGD, and served like any prompt set.

:mod:`.artifact` is the stored output (:class:`SoftPrompt`).
"""
